package auth

import "slices"

// Scopes a token may hold (DESIGN.md, "Identity and trust").
const (
	// ScopePlans: the principal's own sessions, plans and artifacts.
	ScopePlans = "plans"
	// ScopeUnsafe: may negotiate unsafe_ops tools.
	ScopeUnsafe = "unsafe"
	// ScopeApprove: may resolve approvals.
	ScopeApprove = "approve"
	// ScopeAdmin: everything but ScopeAgent, including tokens and every
	// principal's audit records.
	ScopeAdmin = "admin"
	// ScopeAgent: agent registration and heartbeats only.
	ScopeAgent = "agent"
)

// Scopes lists every scope, sorted.
var Scopes = []string{ScopeAdmin, ScopeAgent, ScopeApprove, ScopePlans, ScopeUnsafe}

// ValidScope reports whether s is one of [Scopes].
func ValidScope(s string) bool {
	_, found := slices.BinarySearch(Scopes, s)
	return found
}

// Principal is who makes a call: a token's name and its scopes.
type Principal struct {
	Name   string
	Scopes []string
}

// Has reports whether p may act with scope. An admin has every scope except
// ScopeAgent: an agent's registration binds an agent id to its principal and
// gets a certificate signed, so a leaked admin token must not also be able
// to pose as an agent daemon; a principal that is both holds both scopes.
// Unknown scopes are never held, even if listed.
func (p Principal) Has(scope string) bool {
	if !ValidScope(scope) {
		return false
	}
	if slices.Contains(p.Scopes, scope) {
		return true
	}
	return scope != ScopeAgent && p.Admin()
}

// HeldScopes lists the scopes p holds (see Has), sorted.
func (p Principal) HeldScopes() []string {
	var held []string
	for _, s := range Scopes {
		if p.Has(s) {
			held = append(held, s)
		}
	}
	return held
}

// Admin reports whether p holds ScopeAdmin.
func (p Principal) Admin() bool {
	return slices.Contains(p.Scopes, ScopeAdmin)
}

// maxNameLen is the longest principal or token name.
const maxNameLen = 63

// ValidName reports whether name may name a principal or a token:
// ^[a-z0-9][a-z0-9_.-]{0,62}$. Names are parts of storage keys and audit
// records, so they never hold a "/", upper case (two names that differ only
// in case would confuse people) or anything that needs quoting, and never
// start with "." (no "." or "..").
func ValidName(name string) bool {
	if len(name) == 0 || len(name) > maxNameLen {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case i > 0 && (c == '_' || c == '.' || c == '-'):
		default:
			return false
		}
	}
	return true
}
