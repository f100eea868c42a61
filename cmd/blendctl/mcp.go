package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/blendplane/blendplane/cmd/internal/flagenv"
	"github.com/blendplane/blendplane/mcp"
)

// mcp serves MCP over stdio: stdout carries the protocol only, logs go to
// stderr. The session is closed when the host disconnects.
func (c *cli) mcp(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	var flags flagenv.Strings
	fs.Var(&flags, "flag", "feature flag to negotiate (repeatable): unsafe_ops, nondeterministic_tools")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error (to stderr)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	s := mcp.NewBackend(c.conn, mcp.Options{FeatureFlags: flags, Logger: log}).NewSession("")
	err := s.Server().Run(ctx, &sdk.StdioTransport{})
	closeCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.Close(closeCtx)
	if ctx.Err() != nil {
		return nil // stopped by a signal
	}
	return err
}
