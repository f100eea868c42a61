package main

import (
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc"

	"github.com/blendplane/blendplane/internal/transport"
)

// dialOptions are how blendctl reaches the control plane: its bearer token
// on every call, over TLS with the control plane's CA unless it is on
// loopback.
func dialOptions(addr, token, tokenFile, caFile string) ([]grpc.DialOption, error) {
	if token == "" && tokenFile != "" {
		raw, err := os.ReadFile(tokenFile)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		token = strings.TrimSpace(string(raw))
	}
	creds, err := transport.ClientCreds(addr, caFile)
	if err != nil {
		return nil, err
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(transport.Bearer(token)))
	}
	return opts, nil
}
