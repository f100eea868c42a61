package mcp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// sessionlessVersion is the first protocol revision without MCP sessions
// (SEP-2567): its requests carry no session id, and the SDK serves them only
// in stateless mode.
const sessionlessVersion = "2026-07-28"

// Handler serves MCP over streamable HTTP. Authentication is the caller's
// to wrap around it; the bearer token of a request is the one its
// Blendplane calls carry.
//
// Clients of revisions up to 2025-11-25 get MCP sessions (stateful mode):
// one Session per MCP session, opened by the token of its first request,
// closed after idle without requests (and its Blendplane session with it).
// These sessions live in this process's memory only: their Blendplane
// sessions are negotiated ephemeral, and the control plane that serves this
// handler closes them when it starts again.
//
// Clients of the sessionless revision (2026-07-28 and later, told by the
// Mcp-Protocol-Version header) are served in stateless mode: every request
// is a temporary MCP session, so the Blendplane session is kept per bearer
// token instead, made on first use and closed after idle. The server may
// not send such a client requests: it asks for an approval through an input
// request in the call's result, and the client retries the call with the
// answer (multi round-trip requests).
func (b *Backend) Handler(idle time.Duration) http.Handler {
	// The SDK asks for a server on every request, but uses the one it gets
	// only to start a session (a request without a session id); for the
	// others it reads the server's protocol versions. Those get one server
	// made once, never run: before, every request built a whole Session.
	versions := b.newSession("", true).Server()
	held := &heldSessions{made: map[[32]byte][]madeServer{}}
	stateful := sdk.NewStreamableHTTPHandler(func(r *http.Request) *sdk.Server {
		if r.Header.Get("Mcp-Session-Id") != "" {
			return versions
		}
		srv := b.newSession(bearerOf(r), true).Server()
		held.add(r, srv)
		return srv
	}, &sdk.StreamableHTTPOptions{SessionTimeout: idle, Logger: b.sdkLog})
	byToken := &sessionsByToken{b: b, idle: idle, sessions: map[[32]byte]*tokenSession{}}
	stateless := sdk.NewStreamableHTTPHandler(byToken.server, &sdk.StreamableHTTPOptions{Stateless: true, Logger: b.sdkLog})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && batch(r) {
			// JSON-RPC batches left MCP in 2025-06-18, but the SDK still
			// answers them: one 4 MB body of 90,000 pings cost 117 MB.
			refuse(w, http.StatusBadRequest, "JSON-RPC batches are not supported: send one message per request")
			return
		}
		if v := r.Header.Get("Mcp-Protocol-Version"); v >= sessionlessVersion {
			defer byToken.hold(r)()
			stateless.ServeHTTP(w, r)
			return
		}
		if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" && held.live(r) >= maxSessionsPerToken {
			refuse(w, http.StatusTooManyRequests, fmt.Sprintf("this token holds %d MCP sessions already, the most at once: end one (DELETE) or let one idle out", maxSessionsPerToken))
			return
		}
		stateful.ServeHTTP(w, r)
	})
}

// refuse answers a request the SDK never sees with a JSON-RPC error
// (invalid request) and the HTTP status code.
func refuse(w http.ResponseWriter, code int, message string) {
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": nil, "error": map[string]any{"code": -32600, "message": message}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(body)
}

// maxSessionsPerToken bounds the MCP sessions one bearer token holds: each
// is an SDK session and a server kept until it idles out (20,000
// initializes with one token held 600 MB).
const maxSessionsPerToken = 64

// heldSessions are the servers made for new MCP sessions, by token.
type heldSessions struct {
	mu   sync.Mutex
	made map[[32]byte][]madeServer
}

type madeServer struct {
	srv  *sdk.Server
	at   time.Time
	body io.ReadCloser // of the request it was made for
}

// add records a server made for r. The SDK asks twice for a request that
// starts a session (first for the versions, then for the server it runs):
// both share r's body, and the one kept is the last.
func (h *heldSessions) add(r *http.Request, srv *sdk.Server) {
	key := sha256.Sum256([]byte(bearerOf(r)))
	h.mu.Lock()
	defer h.mu.Unlock()
	list := h.made[key]
	if n := len(list); n > 0 && list[n-1].body == r.Body {
		list[n-1].srv = srv
		return
	}
	h.made[key] = append(list, madeServer{srv, time.Now(), r.Body})
}

// startGrace is how long a server made for a new session counts before its
// session has started (a variable for the tests).
var startGrace = 5 * time.Second

// live counts r's token's servers that hold a session, or were made in the
// last seconds (a session starts after its server is made, in the same
// request; the SDK also makes servers it never runs), and forgets the
// others.
func (h *heldSessions) live(r *http.Request) int {
	key := sha256.Sum256([]byte(bearerOf(r)))
	h.mu.Lock()
	defer h.mu.Unlock()
	kept := h.made[key][:0]
	for _, m := range h.made[key] {
		if time.Since(m.at) < startGrace || hasSession(m.srv) {
			kept = append(kept, m)
		}
	}
	if len(kept) == 0 {
		delete(h.made, key)
	} else {
		h.made[key] = kept
	}
	return len(kept)
}

func hasSession(srv *sdk.Server) bool {
	for range srv.Sessions() {
		return true
	}
	return false
}

// batch reports whether r's body is a JSON array (a JSON-RPC batch),
// leaving the body to be read whole after.
func batch(r *http.Request) bool {
	head := make([]byte, 0, 64)
	buf := make([]byte, 1)
	for len(head) < cap(head) {
		n, err := r.Body.Read(buf)
		head = append(head, buf[:n]...)
		if n == 1 && !strings.ContainsRune(" \t\r\n", rune(buf[0])) || err != nil {
			break
		}
	}
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), r.Body), r.Body}
	trimmed := bytes.TrimLeft(head, " \t\r\n")
	return len(trimmed) > 0 && trimmed[0] == '['
}

func bearerOf(r *http.Request) string {
	token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return strings.TrimSpace(token)
}

// sessionsByToken keeps the Sessions of sessionless clients, one per bearer
// token, each closed after idle without requests.
type sessionsByToken struct {
	b    *Backend
	idle time.Duration

	mu       sync.Mutex
	sessions map[[32]byte]*tokenSession
}

type tokenSession struct {
	s        *Session
	used     time.Time // when its last request ended
	inFlight int       // its requests being served: a long plan.wait is not idle
}

// hold marks a request of r's token as being served, until the function it
// returns is called; the token's Session is made on first use.
func (t *sessionsByToken) hold(r *http.Request) (release func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ts := t.session(r)
	ts.inFlight++
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		ts.inFlight--
		ts.used = time.Now()
	}
}

func (t *sessionsByToken) server(r *http.Request) *sdk.Server {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.session(r).s.Server()
}

// session is r's token's Session. The caller holds t.mu.
func (t *sessionsByToken) session(r *http.Request) *tokenSession {
	token := bearerOf(r)
	key := sha256.Sum256([]byte(token))
	ts, ok := t.sessions[key]
	if !ok {
		ts = &tokenSession{s: t.b.newSession(token, true), used: time.Now()}
		t.sessions[key] = ts
		if len(t.sessions) == 1 {
			go t.reap()
		}
	}
	return ts
}

// reap closes the sessions idle (no request being served) for longer than
// t.idle, until none is left.
func (t *sessionsByToken) reap() {
	for {
		time.Sleep(min(t.idle/2, time.Minute))
		t.mu.Lock()
		var idle []*Session
		for key, ts := range t.sessions {
			if ts.inFlight == 0 && time.Since(ts.used) > t.idle {
				idle = append(idle, ts.s)
				delete(t.sessions, key)
			}
		}
		left := len(t.sessions)
		t.mu.Unlock()
		for _, s := range idle {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			s.Close(ctx)
			cancel()
		}
		if left == 0 {
			return
		}
	}
}
