package mcp

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/blendplane/blendplane/internal/logbuf"
	"github.com/blendplane/blendplane/internal/panicguard"
)

// A tool whose handler panics answers the call with an error, logged with
// its stack, and the server goes on: through the SDK's own dispatch, which
// recovers nothing.
func TestGuardedPanics(t *testing.T) {
	var logged logbuf.Buffer
	server := sdk.NewServer(&sdk.Implementation{Name: "guarded", Version: "1"}, nil)
	server.AddReceivingMiddleware(guarded(slog.New(slog.NewTextHandler(&logged, nil))))
	sdk.AddTool(server, &sdk.Tool{Name: "bug"}, func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
		var counts map[string]int
		counts["calls"]++
		return nil, nil, nil
	})
	sdk.AddTool(server, &sdk.Tool{Name: "fine"}, func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "fine"}}}, nil, nil
	})
	ctx := context.Background()
	clientEnd, serverEnd := sdk.NewInMemoryTransports()
	if _, err := server.Connect(ctx, serverEnd, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, clientEnd, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	_, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "bug"})
	if err == nil || !strings.Contains(err.Error(), "a bug, logged by the server") || strings.Contains(err.Error(), "nil map") {
		t.Fatalf("a panicking tool: %v", err)
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "fine"})
	if err != nil || res.IsError {
		t.Fatalf("after the panic: %v %v", res, err)
	}
	log := logged.String()
	for _, want := range []string{panicguard.Msg, `call="mcp tools/call"`, "assignment to entry in nil map", "guard_test.go"} {
		if !strings.Contains(log, want) {
			t.Errorf("the log lacks %q:\n%s", want, log)
		}
	}
}

// TestResultsArePrivate: lists and reads answer for the caller's own
// session, so they may be cached by its client only (the SDK's default,
// absent a decision, is "public").
func TestResultsArePrivate(t *testing.T) {
	ctx := context.Background()
	s := NewBackend(nil, Options{Logger: slog.New(slog.DiscardHandler)}).NewSession("")
	clientEnd, serverEnd := sdk.NewInMemoryTransports()
	if _, err := s.Server().Connect(ctx, serverEnd, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, clientEnd, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	prompts, err := cs.ListPrompts(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if prompts.CacheScope != "private" {
		t.Errorf("prompts/list cacheScope %q, want private", prompts.CacheScope)
	}
}
