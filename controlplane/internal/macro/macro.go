// Package macro owns the macro registry: named, versioned sub-plans built
// from registry tools (three-point lighting, a turntable camera, a product
// shot). A plan operation whose tool_name is a macro's name is expanded,
// before validation, into the macro's steps with ids "<operation_id>:<step>".
// Expansion is a pure function of the args, so the same plan always expands
// to the same operations, and the registry is addressed by a fingerprint.
package macro

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Version of the macro registry as a whole.
const Version = "macro_registry_v1"

// Prefix marks macro names in plans.
const Prefix = "macro."

// Step is one operation of an expansion.
type Step struct {
	ID        string // unique within the macro
	Tool      string
	Args      map[string]any
	DependsOn []string // step ids
}

// Macro is a named, versioned, deterministic sub-plan.
type Macro struct {
	Name        string
	Version     string
	Description string
	Schema      map[string]any
	Example     map[string]any
	Tools       []string
	expand      func(args map[string]any) []Step
	compiled    *jsonschema.Schema
}

// Registry is the set of macros.
type Registry struct {
	byName      map[string]*Macro
	names       []string
	fingerprint string
}

// Default returns the built-in macro registry.
func Default() *Registry {
	r, err := New(builtin())
	if err != nil {
		panic(err) // the built-in macros are fixed at compile time; tests hold them valid
	}
	return r
}

// New compiles a registry.
func New(macros []*Macro) (*Registry, error) {
	r := &Registry{byName: map[string]*Macro{}}
	h := sha256.New()
	sort.Slice(macros, func(i, j int) bool { return macros[i].Name < macros[j].Name })
	for _, m := range macros {
		if !strings.HasPrefix(m.Name, Prefix) {
			return nil, fmt.Errorf("macro %s: name must start with %q", m.Name, Prefix)
		}
		c := jsonschema.NewCompiler()
		if err := c.AddResource(m.Name, m.Schema); err != nil {
			return nil, fmt.Errorf("macro %s schema: %w", m.Name, err)
		}
		compiled, err := c.Compile(m.Name)
		if err != nil {
			return nil, fmt.Errorf("macro %s schema: %w", m.Name, err)
		}
		m.compiled = compiled
		r.byName[m.Name] = m
		r.names = append(r.names, m.Name)
		raw, _ := json.Marshal([]any{m.Name, m.Version, m.Description, m.Schema, m.Tools, m.expand(withDefaults(m.Schema, m.Example))})
		fmt.Fprintf(h, "%d:", len(raw))
		h.Write(raw)
	}
	r.fingerprint = hex.EncodeToString(h.Sum(nil))
	return r, nil
}

// Fingerprint addresses this registry's exact content.
func (r *Registry) Fingerprint() string { return r.fingerprint }

// List returns the macros by name.
func (r *Registry) List() []*Macro {
	out := make([]*Macro, len(r.names))
	for i, n := range r.names {
		out[i] = r.byName[n]
	}
	return out
}

// Lookup finds a macro by name.
func (r *Registry) Lookup(name string) (*Macro, bool) {
	m, ok := r.byName[name]
	return m, ok
}

// Fingerprint of one macro.
func (m *Macro) Fingerprint() string {
	raw, _ := json.Marshal([]any{m.Name, m.Version, m.Schema, m.Tools})
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])
}

// Expand validates args against the macro's schema and returns its steps.
func (m *Macro) Expand(args map[string]any) ([]Step, error) {
	if err := m.compiled.Validate(args); err != nil {
		return nil, err
	}
	return m.expand(withDefaults(m.Schema, args)), nil
}

// withDefaults fills in the schema's top-level defaults, as JSON values
// (a default written as a Go int is a float64 here, as an argument that
// came as JSON is: the expansions and the plan's checks read those).
func withDefaults(schema, args map[string]any) map[string]any {
	out := map[string]any{}
	props, _ := schema["properties"].(map[string]any)
	for k, p := range props {
		if d, ok := p.(map[string]any)["default"]; ok {
			out[k] = asJSON(d)
		}
	}
	for k, v := range args {
		out[k] = v
	}
	return out
}

// asJSON is v as encoding/json would decode it.
func asJSON(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("a macro default that is not JSON: %v", err)) // a programming error in builtin.go
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return out
}

func num(args map[string]any, key string) float64 {
	v, _ := args[key].(float64)
	return v
}

func str(args map[string]any, key string) string {
	v, _ := args[key].(string)
	return v
}

// round keeps generated coordinates short and exactly reproducible (and
// never -0, which would canonicalise differently).
func round(x float64) float64 {
	if r := math.Round(x*1e4) / 1e4; r != 0 {
		return r
	}
	return 0
}

func vec(x, y, z float64) []any { return []any{round(x), round(y), round(z)} }
