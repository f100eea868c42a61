package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
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
		return usageErr(err)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	s := mcp.NewBackend(c.conn, mcp.Options{FeatureFlags: flags, Logger: log}).NewSession("")
	err := s.Server().Run(ctx, stdioTransport(os.Stdin, os.Stdout))
	closeCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.Close(closeCtx)
	if ctx.Err() != nil {
		return nil // stopped by a signal
	}
	return err
}

// stdioTransport is the SDK's transport over in and out, behind a check of
// each line the host sends. The SDK ends the connection (and blendctl with
// it) on the first line it cannot read as a JSON-RPC message; here such a
// line is answered with a JSON-RPC error instead (-32700 not JSON, -32600
// not a message; id null, as the line's id is not to be trusted) and
// dropped, and the server reads on. Batches are refused the same way: the
// SDK serves them only under the 2025-03-26 protocol and ends the
// connection on one under later versions, or on a malformed one. A line
// over the SDK's limit still ends it.
func stdioTransport(in io.Reader, out io.Writer) sdk.Transport {
	w := &lockedWriter{w: out}
	pr, pw := io.Pipe()
	go func() {
		sc := bufio.NewScanner(in)
		sc.Buffer(nil, sdk.DefaultMaxLineLength)
		for sc.Scan() {
			line := bytes.TrimSpace(sc.Bytes())
			if len(line) == 0 {
				continue
			}
			if e := checkLine(line); e != nil {
				b, _ := json.Marshal(struct {
					JSONRPC string         `json:"jsonrpc"`
					ID      any            `json:"id"`
					Error   *jsonrpc.Error `json:"error"`
				}{"2.0", nil, e})
				if _, err := w.Write(append(b, '\n')); err != nil {
					pw.CloseWithError(err)
					return
				}
				continue
			}
			if _, err := pw.Write(append(line, '\n')); err != nil {
				return // the server has stopped reading
			}
		}
		pw.CloseWithError(sc.Err()) // nil: EOF, the host hung up
	}()
	return &sdk.IOTransport{Reader: pr, Writer: w}
}

// checkLine is the JSON-RPC error for a line the SDK would not read, or
// nil.
func checkLine(line []byte) *jsonrpc.Error {
	switch {
	case !json.Valid(line):
		return &jsonrpc.Error{Code: jsonrpc.CodeParseError, Message: "Parse error: the line is not JSON"}
	case line[0] == '[':
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "Invalid Request: batches are not supported; send one message per line"}
	}
	if _, err := jsonrpc.DecodeMessage(line); err != nil {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "Invalid Request: " + err.Error()}
	}
	return nil
}

// lockedWriter writes each line whole: the SDK's messages and the
// filter's errors share stdout.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) Close() error { return nil } // stdout is not ours to close (nor is it for the SDK's StdioTransport)
