package mcp

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestTokenSessionHeldWhileServed: a sessionless client's session (one per
// bearer token) is not closed for idleness while one of its requests is
// being served (a long plan.wait), and is once it has been idle after it.
func TestTokenSessionHeldWhileServed(t *testing.T) {
	byToken := &sessionsByToken{b: NewBackend(nil, Options{}), idle: 40 * time.Millisecond, sessions: map[[32]byte]*tokenSession{}}
	r := httptest.NewRequest("POST", "/mcp", nil)
	r.Header.Set("Authorization", "Bearer t1")
	live := func() int {
		byToken.mu.Lock()
		defer byToken.mu.Unlock()
		return len(byToken.sessions)
	}
	release := byToken.hold(r)
	time.Sleep(10 * byToken.idle) // the reaper looks every idle/2
	if live() != 1 {
		t.Fatal("the session was reaped while a request was being served")
	}
	release()
	for deadline := time.Now().Add(10 * time.Second); live() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the session was not reaped once idle")
		}
	}
}

// TestBatchRefused: a JSON-RPC batch (an array body) is refused before the
// SDK reads it; a single message's body reaches it whole.
func TestBatchRefused(t *testing.T) {
	h := NewBackend(nil, Options{}).Handler(time.Minute)
	for body, batched := range map[string]bool{
		"  \n[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]": true,
		"[]": true,
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`: false,
	} {
		r := httptest.NewRequest("POST", "/mcp", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Accept", "application/json, text/event-stream")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		refused := w.Code == 400 && strings.Contains(w.Body.String(), "batches are not supported")
		if refused != batched {
			t.Errorf("%.40q: %d %.200s", body, w.Code, w.Body.String())
		}
	}
}

// TestSessionsPerToken: a token holds maxSessionsPerToken MCP sessions at
// most; the next initialize is refused (429) until one ends; another
// token's are not counted.
func TestSessionsPerToken(t *testing.T) {
	defer func(g time.Duration) { startGrace = g }(startGrace)
	h := NewBackend(nil, Options{}).Handler(time.Minute)
	initialize := func(token string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Accept", "application/json, text/event-stream")
		r.Header.Set("Authorization", "Bearer "+token)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	var ids []string
	for i := range maxSessionsPerToken {
		w := initialize("t1")
		if w.Code != 200 || w.Header().Get("Mcp-Session-Id") == "" {
			t.Fatalf("initialize %d: %d %s", i, w.Code, w.Body.String())
		}
		ids = append(ids, w.Header().Get("Mcp-Session-Id"))
	}
	if w := initialize("t1"); w.Code != 429 {
		t.Fatalf("an initialize past the limit: %d %s", w.Code, w.Body.String())
	}
	// (With the grace, each of those counted once, not twice though the SDK
	// made two servers for each.) The sessions below start one after the
	// other: no grace.
	startGrace = 0
	if w := initialize("t2"); w.Code != 200 {
		t.Fatalf("another token's: %d %s", w.Code, w.Body.String())
	}
	r := httptest.NewRequest("DELETE", "/mcp", nil)
	r.Header.Set("Mcp-Session-Id", ids[0])
	r.Header.Set("Authorization", "Bearer t1")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 204 {
		t.Fatalf("DELETE: %d %s", w.Code, w.Body.String())
	}
	if w := initialize("t1"); w.Code != 200 {
		t.Fatalf("an initialize once a session ended: %d %s", w.Code, w.Body.String())
	}
	if w := initialize("t1"); w.Code != 429 {
		t.Fatalf("an initialize past the limit again: %d %s", w.Code, w.Body.String())
	}
}
