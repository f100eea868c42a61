package auth

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestScopes(t *testing.T) {
	if !slices.IsSorted(Scopes) || len(slices.Compact(slices.Clone(Scopes))) != len(Scopes) {
		t.Fatalf("Scopes %q is not sorted and unique", Scopes)
	}
	want := []string{ScopePlans, ScopeUnsafe, ScopeApprove, ScopeAdmin, ScopeAgent}
	slices.Sort(want)
	if !slices.Equal(Scopes, want) {
		t.Fatalf("Scopes = %q, want %q", Scopes, want)
	}
	for _, s := range Scopes {
		if !ValidScope(s) {
			t.Errorf("ValidScope(%q) = false", s)
		}
	}
	for _, s := range []string{"", "Admin", "admin ", "plan", "*", "plans,admin"} {
		if ValidScope(s) {
			t.Errorf("ValidScope(%q) = true", s)
		}
	}
}

func TestPrincipalHas(t *testing.T) {
	tests := []struct {
		name   string
		scopes []string
		has    []string
		hasNot []string
	}{
		{"none", nil, nil, Scopes},
		{"plans", []string{ScopePlans}, []string{ScopePlans}, []string{ScopeUnsafe, ScopeApprove, ScopeAdmin, ScopeAgent}},
		{"plans and unsafe", []string{ScopePlans, ScopeUnsafe}, []string{ScopePlans, ScopeUnsafe}, []string{ScopeApprove, ScopeAdmin, ScopeAgent}},
		// An admin token must not pose as an agent daemon.
		{"admin", []string{ScopeAdmin}, []string{ScopeAdmin, ScopePlans, ScopeUnsafe, ScopeApprove}, []string{ScopeAgent}},
		{"agent", []string{ScopeAgent}, []string{ScopeAgent}, []string{ScopePlans, ScopeUnsafe, ScopeApprove, ScopeAdmin}},
		{"admin and agent", []string{ScopeAgent, ScopeAdmin}, Scopes, nil},
		{"unknown scopes are never held", []string{"bogus", ""}, nil, []string{"bogus", "", ScopePlans}},
		{"admin holds no unknown scope", []string{ScopeAdmin}, nil, []string{"bogus", "ADMIN", ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Principal{Name: "p", Scopes: tt.scopes}
			for _, s := range tt.has {
				if !p.Has(s) {
					t.Errorf("Has(%q) = false", s)
				}
			}
			for _, s := range tt.hasNot {
				if p.Has(s) {
					t.Errorf("Has(%q) = true", s)
				}
			}
		})
	}
}

func TestPrincipalAdmin(t *testing.T) {
	for _, tt := range []struct {
		scopes []string
		want   bool
	}{
		{nil, false},
		{[]string{ScopePlans, ScopeApprove, ScopeUnsafe, ScopeAgent}, false},
		{[]string{ScopeAdmin}, true},
		{[]string{ScopePlans, ScopeAdmin}, true},
		{[]string{"Admin"}, false},
	} {
		if got := (Principal{Scopes: tt.scopes}).Admin(); got != tt.want {
			t.Errorf("Admin() of %q = %v, want %v", tt.scopes, got, tt.want)
		}
	}
}

// nameRule is ValidName's rule as the brief states it, for the test and
// the fuzzer to hold the hand-written check against.
var nameRule = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

func TestValidName(t *testing.T) {
	valid := []string{"a", "0", "admin", "ci-bot", "render_farm.01", "a..b", "a-", strings.Repeat("x", 63), "9" + strings.Repeat("_", 62)}
	invalid := []string{"", strings.Repeat("x", 64), ".", "..", ".hidden", "-a", "_a", "Admin", "a/b", "a b", "a\x00", "é", "a\n", "a:b", "tab\t", "a+b"}
	for _, n := range valid {
		if !ValidName(n) {
			t.Errorf("ValidName(%q) = false", n)
		}
		if !nameRule.MatchString(n) {
			t.Errorf("test case %q does not match the rule", n)
		}
	}
	for _, n := range invalid {
		if ValidName(n) {
			t.Errorf("ValidName(%q) = true", n)
		}
		if nameRule.MatchString(n) {
			t.Errorf("test case %q matches the rule", n)
		}
	}
}
