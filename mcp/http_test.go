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
