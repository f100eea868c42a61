package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/blendplane/blendplane/controlplane/internal/auth"
	"github.com/blendplane/blendplane/controlplane/internal/store"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// Principal is who calls: a token's name and scopes.
type Principal = auth.Principal

// Anonymous is every caller when authentication is off
// (--allow-insecure-local): one principal that may do everything.
var Anonymous = Principal{Name: store.LegacyOwner, Scopes: []string{auth.ScopeAdmin, auth.ScopeAgent}}

// AdminTokenName is the token the first start writes to admin.token.
const AdminTokenName = "admin"

var (
	// ErrUnauthenticated: no token, or one that is unknown, expired or
	// revoked.
	ErrUnauthenticated = errors.New("unauthenticated")
)

// ScopeError is a call outside the caller's scopes.
type ScopeError struct {
	// Scope is the one the call needs.
	Scope string
	// Action says what was refused, e.g. "negotiate unsafe_ops".
	Action string
}

func (e *ScopeError) Error() string {
	return fmt.Sprintf("permission denied: %s needs the %s scope", e.Action, e.Scope)
}

// Require refuses a principal without scope.
func Require(who Principal, scope, action string) error {
	if who.Has(scope) {
		return nil
	}
	return &ScopeError{Scope: scope, Action: action}
}

// Authenticate finds the principal of a bearer secret.
func (a *App) Authenticate(ctx context.Context, secret string) (Principal, error) {
	return principalOf(a.store.TokenByHash(auth.HashSecret(secret)))
}

// Principal is the principal named name, as long as its token is valid: a
// trusted component of the control plane (the planner) acting for a
// principal it authenticated earlier. Revoking or expiring the token stops
// it too.
func (a *App) Principal(ctx context.Context, name string) (Principal, error) {
	return principalOf(a.store.Token(name))
}

func principalOf(t *cpv1.Token, err error) (Principal, error) {
	switch {
	case errors.Is(err, store.ErrTokenNotFound):
		return Principal{}, fmt.Errorf("%w: unknown token", ErrUnauthenticated)
	case err != nil:
		return Principal{}, err
	case t.GetRevokeTime() != nil:
		return Principal{}, fmt.Errorf("%w: token %q was revoked", ErrUnauthenticated, t.GetName())
	case t.GetExpireTime() != nil && !time.Now().Before(t.GetExpireTime().AsTime()):
		return Principal{}, fmt.Errorf("%w: token %q expired at %s", ErrUnauthenticated, t.GetName(), t.GetExpireTime().AsTime().UTC().Format(time.RFC3339))
	}
	return Principal{Name: t.GetName(), Scopes: t.GetScopes()}, nil
}

// CreateToken makes a token for a new principal and returns it with its
// secret, which is shown this once.
func (a *App) CreateToken(ctx context.Context, who Principal, name string, scopes []string, ttl time.Duration) (*cpv1.Token, string, error) {
	if !auth.ValidName(name) {
		return nil, "", badField("name", fmt.Sprintf("%q is not a principal name (lower-case letters, digits, '_', '.', '-'; at most 63)", name))
	}
	if name == store.LegacyOwner {
		return nil, "", badField("name", fmt.Sprintf("%q is reserved", name))
	}
	for _, s := range scopes {
		if !auth.ValidScope(s) {
			return nil, "", badField("scopes", fmt.Sprintf("unknown scope %q; scopes: %s", s, strings.Join(auth.Scopes, ", ")))
		}
	}
	secret, err := auth.NewSecret()
	if err != nil {
		return nil, "", err
	}
	now := time.Now()
	t := &cpv1.Token{Name: name, Scopes: scopes, CreateTime: timestamppb.New(now), CreatedBy: who.Name}
	if ttl > 0 {
		t.ExpireTime = timestamppb.New(now.Add(ttl))
	}
	if err := a.store.PutToken(t, auth.HashSecret(secret)); err != nil {
		return nil, "", err
	}
	expires := "never"
	if t.ExpireTime != nil {
		expires = t.ExpireTime.AsTime().UTC().Format(time.RFC3339)
	}
	a.log.Info("token created", "name", name, "scopes", scopes, "by", who.Name, "expires", expires)
	return t, secret, nil
}

// Tokens lists the tokens (never their secrets), by name, a page at a time.
func (a *App) Tokens(ctx context.Context, size int32, token string) ([]*cpv1.Token, string, error) {
	after, err := decodeNamePageToken(token, "tokens")
	if err != nil {
		return nil, "", badPageToken(err)
	}
	list, next, err := a.store.ListTokens(after, pageSize(size))
	if err != nil {
		return nil, "", err
	}
	return list, encodeNamePageToken("tokens", next), nil
}

// RevokeToken revokes a token: calls with it fail from the next one on.
func (a *App) RevokeToken(ctx context.Context, who Principal, name string) (*cpv1.Token, error) {
	t, err := a.store.RevokeToken(name, who.Name, time.Now())
	if err != nil {
		return nil, err
	}
	a.log.Info("token revoked", "name", name, "by", who.Name)
	a.closeSessionsOf(name, who.Name, "its principal's token was revoked")
	return t, nil
}

// closeExpired closes the sessions of principals whose tokens expired
// since it last looked (at start: all expired ones), as a revocation does:
// their plans, those waiting for approval too, end. (An expired token's
// sessions stayed open, and an approver could still run its plans.)
func (a *App) closeExpired(done map[string]bool) {
	now := time.Now()
	for after := ""; ; {
		page, next, err := a.store.ListTokens(after, 1000)
		if err != nil {
			a.log.Warn("listing tokens for their expiry", "err", err)
			return
		}
		for _, t := range page {
			if exp := t.GetExpireTime(); exp != nil && !exp.AsTime().After(now) && t.GetRevokeTime() == nil && !done[t.GetName()] {
				done[t.GetName()] = true
				a.closeSessionsOf(t.GetName(), t.GetName(), "its principal's token expired")
			}
		}
		if next == "" {
			return
		}
		after = next
	}
}

// closeSessionsOf closes the open sessions of a principal whose token was
// revoked or expired (a principal has one), for why: nothing can use them
// any more but an admin, and they held Blenders and files on their agents.
// Their plans end, cancelled by by (the audit names who), and their agents
// release them in the background; plans, receipts, audit and artifacts
// stay.
func (a *App) closeSessionsOf(owner, by, why string) {
	closed, err := a.closeWhere(func(s store.Session) bool { return s.Owner == owner }, why)
	if err != nil {
		a.log.Warn("closing a revoked principal's sessions", "principal", owner, "err", err)
	}
	if len(closed) == 0 || a.bg == nil {
		return // not started: the releases wait for releaseLoop
	}
	a.stopped.Add(1)
	go func() {
		defer a.stopped.Done()
		for _, s := range closed {
			a.endClosed(a.bg, by, s.Info.GetSessionId())
		}
	}()
}

// EnsureAdminToken creates the admin token on a control plane's first start
// and writes its secret to path (mode 0600). A control plane that has one
// already leaves the file alone.
func (a *App) EnsureAdminToken(path string) (bool, error) {
	if _, err := a.store.Token(AdminTokenName); err == nil {
		return false, nil
	} else if !errors.Is(err, store.ErrTokenNotFound) {
		return false, err
	}
	secret, err := auth.NewSecret()
	if err != nil {
		return false, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".admin-token-")
	if err != nil {
		return false, err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return false, err
	}
	if _, err := tmp.WriteString(secret + "\n"); err != nil {
		tmp.Close()
		return false, err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return false, err
	}
	if err := tmp.Close(); err != nil {
		return false, err
	}
	// The file first, then the token: a crash between leaves a file
	// without a token, which the next start replaces.
	if err := os.Rename(tmp.Name(), path); err != nil {
		return false, err
	}
	t := &cpv1.Token{Name: AdminTokenName, Scopes: []string{auth.ScopeAdmin}, CreateTime: timestamppb.Now(), CreatedBy: "controlplane"}
	if err := a.store.PutToken(t, auth.HashSecret(secret)); err != nil {
		return false, err
	}
	return true, nil
}
