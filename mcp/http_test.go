package mcp

import (
	"net/http/httptest"
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
