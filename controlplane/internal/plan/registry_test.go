package plan

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestNewRegistryRefuses(t *testing.T) {
	schema := map[string]any{"type": "object"}
	secret := filepath.Join(t.TempDir(), "secret.json")
	if err := os.WriteFile(secret, []byte(`{"type": "object"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		defs []ToolDef
		want string
	}{
		{"empty name", []ToolDef{{Safety: SafetyReadOnly, InputSchema: schema}}, "tool 0 has no name"},
		{"twice", []ToolDef{{Name: "a", Safety: SafetyReadOnly, InputSchema: schema}, {Name: "a", Safety: SafetyReadOnly, InputSchema: schema}}, `tool "a" is defined twice`},
		{"no safety", []ToolDef{{Name: "a", Safety: SafetyUnspecified, InputSchema: schema}}, `tool "a": safety level unspecified`},
		{"no schema", []ToolDef{{Name: "a", Safety: SafetyReadOnly, InputSchema: nil}}, `tool "a" has no input schema`},
		{"bad schema", []ToolDef{{Name: "a", Safety: SafetyReadOnly, InputSchema: map[string]any{"type": 7.0}}}, `tool "a": input schema`},
		{"bad pattern", []ToolDef{{Name: "a", Safety: SafetyReadOnly, InputSchema: map[string]any{"pattern": "("}}}, `tool "a": input schema`},
		// Schemas come from agents: nothing may be loaded from the control
		// plane's disk or the network.
		{"file ref", []ToolDef{{Name: "a", Safety: SafetyReadOnly, InputSchema: map[string]any{"$ref": "file://" + secret}}}, `tool "a": input schema`},
		{"http ref", []ToolDef{{Name: "a", Safety: SafetyReadOnly, InputSchema: map[string]any{"$ref": "http://127.0.0.1:1/s.json"}}}, `tool "a": input schema`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewRegistry(tt.defs)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestRegistryLookup(t *testing.T) {
	reg := testRegistry(t)
	def, ok := reg.Lookup("object.delete")
	if !ok || def.Name != "object.delete" || def.Safety != SafetyDestructive {
		t.Fatalf("Lookup = %+v, %v", def, ok)
	}
	if _, ok := reg.Lookup("object.explode"); ok {
		t.Fatal("found an unknown tool")
	}
	if want := []string{"object.create", "object.delete", "object.select", "scene.export", "scene.inspect"}; !slices.Equal(reg.Names(), want) {
		t.Fatalf("Names = %v", reg.Names())
	}
	var none *Registry
	if _, ok := none.Lookup("a"); ok || none.Names() != nil {
		t.Fatal("nil registry is not empty")
	}
}

// TestRegistrySchemasAreIsolated: two tools with the same "$id" and
// internal references each validate against their own schema.
func TestRegistrySchemasAreIsolated(t *testing.T) {
	mk := func(typ string) map[string]any {
		return map[string]any{
			"$id":        "https://example.com/args.json",
			"$defs":      map[string]any{"v": map[string]any{"type": typ}},
			"type":       "object",
			"properties": map[string]any{"v": map[string]any{"$ref": "#/$defs/v"}},
		}
	}
	reg, err := NewRegistry([]ToolDef{{Name: "num", Safety: SafetyReadOnly, InputSchema: mk("number")}, {Name: "str", Safety: SafetyReadOnly, InputSchema: mk("string")}})
	if err != nil {
		t.Fatal(err)
	}
	ok := []Operation{
		{ID: "a", Tool: "num", Args: map[string]any{"v": 1.0}, Safety: SafetyReadOnly},
		{ID: "b", Tool: "str", Args: map[string]any{"v": "x"}, Safety: SafetyReadOnly},
	}
	if _, err := Check(ok, reg); err != nil {
		t.Fatal(err)
	}
	ok[1].Args["v"] = 2.0
	_, err = Check(ok, reg)
	if pe := asPlanError(t, err); pe.Reason != ReasonSchemaInvalid || pe.Violations[0].Field != "operations[1].args.v" {
		t.Fatalf("got %s %+v", pe.Reason, pe.Violations)
	}
}

func TestSafetyLevel(t *testing.T) {
	for _, s := range []SafetyLevel{SafetyReadOnly, SafetySafeWrite, SafetyDestructive} {
		got, err := ParseSafetyLevel(s.String())
		if err != nil || got != s || !s.Valid() {
			t.Fatalf("%d: ParseSafetyLevel(%q) = %v, %v", s, s.String(), got, err)
		}
	}
	for _, s := range []string{"", "READ_ONLY", "unspecified", "SAFETY_LEVEL_DESTRUCTIVE"} {
		if _, err := ParseSafetyLevel(s); err == nil {
			t.Fatalf("ParseSafetyLevel(%q) succeeded", s)
		}
	}
	if SafetyUnspecified.Valid() || SafetyLevel(4).Valid() || SafetyLevel(4).String() != "SafetyLevel(4)" {
		t.Fatal("invalid levels")
	}
	if !(SafetyReadOnly < SafetySafeWrite && SafetySafeWrite < SafetyDestructive) {
		t.Fatal("levels are not ordered")
	}
}

// TestRegistryConcurrentUse: one Registry serves every plan of an agent.
// Run with -race.
func TestRegistryConcurrentUse(t *testing.T) {
	reg := testRegistry(t)
	done := make(chan error)
	for g := range 8 {
		go func() {
			ops := chain(200 + g)
			ops[len(ops)-1].Args["kind"] = "BLOB"
			_, err := Check(ops, reg)
			if pe, ok := err.(*Error); !ok || pe.Reason != ReasonSchemaInvalid {
				done <- err
				return
			}
			done <- nil
		}()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Errorf("got %v, want SCHEMA_INVALID", err)
		}
	}
}
