// Package transport is how Blendplane's programs reach a control plane:
// plain gRPC on loopback, where nobody else can read the wire, TLS with the
// control plane's CA anywhere else, and a bearer token on every call.
package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Loopback reports whether a host:port is on the loopback interface.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ClientCreds are the transport credentials to reach the control plane at
// addr: TLS trusting the CA in caFile (<its data dir>/ca.pem) when one is
// given, plain on loopback otherwise; beyond loopback without a CA, an
// error saying so, so that no token ever crosses a network in the clear.
func ClientCreds(addr, caFile string) (credentials.TransportCredentials, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("%q is not HOST:PORT (the control plane's gRPC address, its --listen: 127.0.0.1:7400 by default)", addr)
	}
	switch {
	case caFile != "":
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca-file %s holds no certificate", caFile)
		}
		return credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}), nil
	case Loopback(addr):
		return insecure.NewCredentials(), nil
	default:
		return nil, fmt.Errorf("%s is not on loopback, so the control plane serves TLS: give its CA certificate with --ca-file (<its data dir>/ca.pem)", addr)
	}
}

// Bearer sends a token with every call. It allows a plain transport, which
// ClientCreds gives only on loopback.
type Bearer string

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (b Bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (Bearer) RequireTransportSecurity() bool { return false }
