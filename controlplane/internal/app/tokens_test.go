package app

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/blendplane/blendplane/controlplane/internal/auth"
	"github.com/blendplane/blendplane/controlplane/internal/blob"
	"github.com/blendplane/blendplane/controlplane/internal/executor"
	"github.com/blendplane/blendplane/controlplane/internal/fleet"
	"github.com/blendplane/blendplane/controlplane/internal/plan"
	"github.com/blendplane/blendplane/controlplane/internal/store"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// newTestApp is an App on a real store in a temporary directory, with no
// agents.
func newTestApp(t *testing.T) *App {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "controlplane.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	fl := fleet.New(time.Second, 0, nil)
	t.Cleanup(fl.Close)
	return New(Config{}, st, nil, fl, nil, executor.Config{}, slog.New(slog.DiscardHandler))
}

// withBlobs gives a a blob store of its own.
func withBlobs(t *testing.T, a *App) *blob.Store {
	t.Helper()
	blobs, err := blob.Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	a.blobs = blobs
	return blobs
}

// openSession stores an open session id of owner on agentID ("": none).
func openSession(t *testing.T, a *App, id, owner, agentID string) {
	t.Helper()
	err := a.store.PutSession(store.Session{Owner: owner, Info: &cpv1.Session{SessionId: id, State: cpv1.Session_STATE_OPEN, AgentId: agentID,
		Contract: &cpv1.SessionContract{SessionId: id, ToolRegistryRef: &cpv1.ToolRegistryRef{Fingerprint: "f"}}}},
		&cpv1.ToolRegistry{Fingerprint: "f"})
	if err != nil {
		t.Fatal(err)
	}
}

// registerAgent adds agent id, at addr, to a's fleet.
func registerAgent(t *testing.T, a *App, id, addr string) {
	t.Helper()
	if err := a.fleet.Register(&cpv1.RegisterAgentRequest{AgentId: id, Address: addr, Runtimes: []*cpv1.Runtime{{RuntimeId: "rt"}}}, "agent"); err != nil {
		t.Fatal(err)
	}
}

// TestAuthenticate: a token authenticates as its principal until it is
// revoked or expires; anything else is ErrUnauthenticated. A revoked
// principal's open sessions are closed; another's stay open.
func TestAuthenticate(t *testing.T) {
	a, ctx := newTestApp(t), context.Background()
	admin := Principal{Name: "root", Scopes: []string{auth.ScopeAdmin}}
	_, alice, err := a.CreateToken(ctx, admin, "alice", []string{auth.ScopePlans}, 0)
	if err != nil {
		t.Fatal(err)
	}
	openSession(t, a, "s-alice", "alice", "")
	openSession(t, a, "s-bob", "bob", "")
	_, brief, err := a.CreateToken(ctx, admin, "brief", []string{auth.ScopePlans}, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	who, err := a.Authenticate(ctx, alice)
	if err != nil || who.Name != "alice" || !who.Has(auth.ScopePlans) || who.Has(auth.ScopeUnsafe) {
		t.Fatalf("alice: %v %v", who, err)
	}
	time.Sleep(5 * time.Millisecond)
	unknown, _ := auth.NewSecret()
	if _, err := a.RevokeToken(ctx, admin, "alice"); err != nil {
		t.Fatal(err)
	}
	for name, secret := range map[string]string{"revoked": alice, "expired": brief, "unknown": unknown} {
		if _, err := a.Authenticate(ctx, secret); !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("%s token: %v, want ErrUnauthenticated", name, err)
		}
	}
	for id, closed := range map[string]bool{"s-alice": true, "s-bob": false} {
		if s, err := a.store.Session(id); err != nil || s.Closed() != closed {
			t.Errorf("%s after alice's token was revoked: closed %v (%v), want %v", id, s.Closed(), err, closed)
		}
	}
}

// TestCreateTokenRefuses: bad names, reserved names, unknown scopes and
// names used before are refused, and nothing is stored.
func TestCreateTokenRefuses(t *testing.T) {
	a, ctx := newTestApp(t), context.Background()
	admin := Principal{Name: "root", Scopes: []string{auth.ScopeAdmin}}
	if _, _, err := a.CreateToken(ctx, admin, "ana", []string{auth.ScopePlans}, 0); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		scopes []string
		want   string
	}{
		{"Ana", []string{auth.ScopePlans}, "principal name"},
		{"", []string{auth.ScopePlans}, "principal name"},
		{store.LegacyOwner, []string{auth.ScopePlans}, "reserved"},
		{"bo", []string{"root"}, "unknown scope"},
	} {
		_, _, err := a.CreateToken(ctx, admin, tc.name, tc.scopes, 0)
		var pe *plan.Error
		if !errors.As(err, &pe) || pe.Reason != plan.ReasonSchemaInvalid || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CreateToken(%q, %v) = %v, want a field error with %q", tc.name, tc.scopes, err, tc.want)
		}
	}
	if _, _, err := a.CreateToken(ctx, admin, "ana", []string{auth.ScopePlans}, 0); !errors.Is(err, store.ErrTokenExists) {
		t.Errorf("a name used before: %v", err)
	}
	list, _, err := a.Tokens(ctx, 0, "")
	if err != nil || len(list) != 1 {
		t.Fatalf("tokens after refusals: %v %v", list, err)
	}
}

// TestEnsureAdminToken: the first start writes an admin secret (0600) that
// authenticates; later starts leave it alone.
func TestEnsureAdminToken(t *testing.T) {
	a, ctx := newTestApp(t), context.Background()
	path := filepath.Join(t.TempDir(), "admin.token")
	created, err := a.EnsureAdminToken(path)
	if err != nil || !created {
		t.Fatalf("first start: %v %v", created, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("admin.token: %v %v", fi, err)
	}
	raw, _ := os.ReadFile(path)
	who, err := a.Authenticate(ctx, strings.TrimSpace(string(raw)))
	if err != nil || !who.Admin() || who.Name != AdminTokenName {
		t.Fatalf("the admin secret: %v %v", who, err)
	}
	if created, err := a.EnsureAdminToken(path); err != nil || created {
		t.Fatalf("second start: %v %v", created, err)
	}
	if again, _ := os.ReadFile(path); string(again) != string(raw) {
		t.Fatal("a second start rewrote admin.token")
	}
}

// TestExpiredTokenClosesSessions: once a principal's token expired, its open
// sessions are closed, as after a revocation (their waiting plans end with
// them); another principal's stay open; a second look changes nothing.
func TestExpiredTokenClosesSessions(t *testing.T) {
	a, ctx := newTestApp(t), context.Background()
	if _, _, err := a.CreateToken(ctx, Principal{Name: "admin"}, "temp", []string{auth.ScopePlans}, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.CreateToken(ctx, Principal{Name: "admin"}, "lasting", []string{auth.ScopePlans}, time.Hour); err != nil {
		t.Fatal(err)
	}
	openSession(t, a, "s-temp", "temp", "")
	openSession(t, a, "s-lasting", "lasting", "")
	time.Sleep(5 * time.Millisecond)
	done := map[string]bool{}
	a.closeExpired(done)
	a.closeExpired(done)
	for id, closed := range map[string]bool{"s-temp": true, "s-lasting": false} {
		sess, err := a.store.Session(id)
		if err != nil || sess.Closed() != closed {
			t.Errorf("session %s: closed %v, want %v (%v)", id, sess.Closed(), closed, err)
		}
	}
	if !done["temp"] || done["lasting"] {
		t.Errorf("tokens handled: %v", done)
	}
}
