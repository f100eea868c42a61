// Package policy owns the policy gate of seed 002: for each operation of a
// plan, given who submits it, the tool, its safety level and its normalized
// args, it decides allow, require_approval (with a reason) or deny (with a
// reason).
//
// A decision comes from, in order:
//
//  1. the rules of the policy file (--policy), first match wins;
//  2. when that (or 3) asks for approval: a persisted "always allow" rule
//     for the same principal, tool and target (made by
//     DECISION_APPROVE_AND_ALWAYS_ALLOW) allows it instead; a deny is never
//     lifted this way;
//  3. the defaults: read-only and safe writes are allowed; destructive
//     operations and unsafe_ops tools need approval.
//
// Args are checked against the tool's schema before the policy sees them
// (plan.Check), so malformed args are refused before any approval step.
package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/blendplane/blendplane/controlplane/internal/plan"
)

// Mode is what a decision lets happen.
type Mode string

const (
	Allow           Mode = "allow"
	RequireApproval Mode = "require_approval"
	Deny            Mode = "deny"
)

// RuleDefault names the built-in defaults as the rule that decided.
const RuleDefault = "default"

// Input is one operation as the policy sees it.
type Input struct {
	Principal string
	Tool      string
	// Safety is the tool's level (not the operation's declaration, which
	// may only be higher).
	Safety plan.SafetyLevel
	// Unsafe: the tool runs arbitrary code (safety mode unsafe_ops).
	Unsafe bool
	// Args are the operation's args, as checked against the tool's schema.
	Args map[string]any
}

// Decision is the policy's verdict on one operation.
type Decision struct {
	Mode   Mode
	Reason string
	// Rule is the rule that decided: a file rule's name, a persisted
	// rule's id or RuleDefault.
	Rule string
	// Target is what the operation acts on (Target).
	Target string
}

// Rule is one rule of a policy file. Every field given must match; an
// empty list or map matches anything.
type Rule struct {
	// Name identifies the rule in decisions and audit records.
	Name string `yaml:"name" json:"name"`
	// Principals are token names or path.Match globs ("ci-*").
	Principals []string `yaml:"principals" json:"principals"`
	// Tools are tool names or globs ("object.*").
	Tools []string `yaml:"tools" json:"tools"`
	// Safety are safety levels: read_only, safe_write, destructive.
	Safety []string `yaml:"safety" json:"safety"`
	// Unsafe, when set, matches only tools that are (true) or are not
	// (false) unsafe_ops tools.
	Unsafe *bool `yaml:"unsafe" json:"unsafe"`
	// Args maps an argument (a dotted path into the args) to a glob its
	// value must match, as text; a leading "!" means must not match. A
	// missing argument never matches (nor does its negation).
	Args map[string]string `yaml:"args" json:"args"`
	// Decision is allow, require_approval or deny.
	Decision Mode `yaml:"decision" json:"decision"`
	// Reason is shown with require_approval and deny.
	Reason string `yaml:"reason" json:"reason"`
}

// File is a policy file: YAML or JSON (JSON is YAML).
type File struct {
	Rules []Rule `yaml:"rules" json:"rules"`
}

// Policy decides. The zero Policy has only the defaults.
type Policy struct {
	rules []Rule
}

// Load reads a policy file. Unknown fields, bad decisions, safety levels or
// globs are errors that name the rule.
func Load(file string) (*Policy, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	p, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("policy: %s: %w", file, err)
	}
	return p, nil
}

// Parse reads a policy file's content (see Load).
func Parse(data []byte) (*Policy, error) {
	var f File
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	names := map[string]bool{}
	for i, r := range f.Rules {
		where := fmt.Sprintf("rule %d", i+1)
		if r.Name != "" {
			where += " (" + r.Name + ")"
		} else {
			f.Rules[i].Name = fmt.Sprintf("rule-%d", i+1)
		}
		if names[f.Rules[i].Name] {
			return nil, fmt.Errorf("%s: the name is used twice", where)
		}
		names[f.Rules[i].Name] = true
		switch r.Decision {
		case Allow, RequireApproval, Deny:
		default:
			return nil, fmt.Errorf("%s: decision %q: want allow, require_approval or deny", where, r.Decision)
		}
		for _, s := range r.Safety {
			if _, err := plan.ParseSafetyLevel(s); err != nil {
				return nil, fmt.Errorf("%s: %w", where, err)
			}
		}
		globs := slices.Concat(r.Principals, r.Tools)
		for _, g := range r.Args {
			globs = append(globs, strings.TrimPrefix(g, "!"))
		}
		for _, g := range globs {
			if _, err := path.Match(g, ""); err != nil {
				return nil, fmt.Errorf("%s: pattern %q: %w", where, g, err)
			}
		}
	}
	return &Policy{rules: f.Rules}, nil
}

// Persisted finds a persisted always-allow rule for a principal, tool and
// target; it returns the rule's id, or "" when there is none.
type Persisted func(principal, tool, target string) (ruleID string, err error)

// Decide returns the decision for one operation.
func (p *Policy) Decide(in Input, persisted Persisted) (Decision, error) {
	d := Decision{Target: Target(in.Tool, in.Args)}
	matched := false
	if p != nil {
		for _, r := range p.rules {
			if r.matches(in) {
				d.Mode, d.Reason, d.Rule, matched = r.Decision, r.Reason, r.Name, true
				break
			}
		}
	}
	if !matched {
		d.Rule = RuleDefault
		switch {
		case in.Unsafe:
			d.Mode, d.Reason = RequireApproval, in.Tool+" runs arbitrary code (unsafe_ops)"
		case in.Safety >= plan.SafetyDestructive:
			d.Mode, d.Reason = RequireApproval, in.Tool+" is destructive"
		default:
			d.Mode = Allow
		}
	}
	if d.Mode == RequireApproval && d.Reason == "" {
		d.Reason = "rule " + d.Rule + " asks for approval"
	}
	if d.Mode == Deny && d.Reason == "" {
		d.Reason = "rule " + d.Rule + " denies it"
	}
	if d.Mode == RequireApproval && persisted != nil {
		id, err := persisted(in.Principal, in.Tool, d.Target)
		if err != nil {
			return Decision{}, err
		}
		if id != "" {
			d.Mode, d.Reason, d.Rule = Allow, "always allowed by an earlier approval", id
		}
	}
	return d, nil
}

func (r Rule) matches(in Input) bool {
	if len(r.Principals) > 0 && !anyGlob(r.Principals, in.Principal) ||
		len(r.Tools) > 0 && !anyGlob(r.Tools, in.Tool) ||
		r.Unsafe != nil && *r.Unsafe != in.Unsafe {
		return false
	}
	if len(r.Safety) > 0 && !slices.ContainsFunc(r.Safety, func(s string) bool {
		l, err := plan.ParseSafetyLevel(s)
		return err == nil && l == in.Safety
	}) {
		return false
	}
	for key, glob := range r.Args {
		v, ok := lookup(in.Args, key)
		if !ok {
			return false
		}
		neg := strings.HasPrefix(glob, "!")
		if ok, _ := path.Match(strings.TrimPrefix(glob, "!"), v); ok == neg {
			return false
		}
	}
	return true
}

func anyGlob(globs []string, s string) bool {
	return slices.ContainsFunc(globs, func(g string) bool {
		ok, _ := path.Match(g, s)
		return ok
	})
}

// lookup returns the value at a dotted path of args as text: strings as
// they are, anything else as canonical JSON.
func lookup(args map[string]any, key string) (string, bool) {
	var v any = args
	for _, k := range strings.Split(key, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return "", false
		}
		if v, ok = m[k]; !ok {
			return "", false
		}
	}
	if s, ok := v.(string); ok {
		return s, true
	}
	b, err := plan.CanonicalJSON(v)
	return string(b), err == nil
}

// targetArgs are the args that name what a tool acts on, in order of
// preference.
var targetArgs = []string{"name", "object", "target", "path", "file", "filename"}

// Target is what an operation acts on, which an always-allow rule is bound
// to: every one of targetArgs the args hold as a string, in that order
// ("name=Cube"; modifier.remove's "name=Subdivision,object=Cube", where the
// name alone would have allowed that modifier's removal from every
// object), else "args=<sha256 of the canonical args>" (python.exec: its
// code).
func Target(tool string, args map[string]any) string {
	var parts []string
	for _, k := range targetArgs {
		if s, ok := args[k].(string); ok {
			if strings.ContainsAny(s, `,="\`) {
				s = strconv.Quote(s) // so that no two targets read the same
			}
			parts = append(parts, k+"="+s)
		}
	}
	if len(parts) > 0 {
		return strings.Join(parts, ",")
	}
	return "args=" + InputHash(args)
}

// InputHash is the hex sha256 of the canonical JSON of args (seed 002's
// inputHash).
func InputHash(args map[string]any) string {
	if args == nil {
		args = map[string]any{}
	}
	b, _ := plan.CanonicalJSON(args) // args that passed plan.Check canonicalize
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}
