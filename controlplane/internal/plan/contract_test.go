package plan

import "testing"

func TestCheckContract(t *testing.T) {
	schema := map[string]any{"type": "object"}
	reg, err := NewRegistry([]ToolDef{
		{Name: "object.create", Safety: SafetySafeWrite, InputSchema: schema, Mode: "headless_safe", Rollback: "compensation"},
		{Name: "python.exec", Safety: SafetyDestructive, InputSchema: schema, Mode: "unsafe_ops", Rollback: "none", Determinism: "nondeterministic"},
		{Name: "ui.highlight", Safety: SafetyReadOnly, InputSchema: schema, Mode: "ui_assisted", Rollback: "none"},
		{Name: "scene.get_summary", Safety: SafetyReadOnly, InputSchema: schema, Mode: "headless_safe", Rollback: "none"},
	})
	if err != nil {
		t.Fatal(err)
	}
	call := func(tool string) []Operation { return []Operation{{ID: "a", Tool: tool, Safety: SafetyDestructive}} }
	base := map[string]bool{"object.create": true, "scene.get_summary": true}
	unsafe := map[string]bool{"object.create": true, "scene.get_summary": true, "python.exec": true}
	cases := []struct {
		tool   string
		c      Contract
		reason string
	}{
		{"object.create", Contract{Callable: base}, ""},
		{"ui.highlight", Contract{Callable: unsafe}, ReasonCapabilityMissing},
		{"python.exec", Contract{Callable: base}, ReasonPolicyRefused},
		{"python.exec", Contract{Callable: unsafe}, ReasonNondeterministic},
		{"python.exec", Contract{Callable: unsafe, Nondeterministic: true}, ""},
		{"python.exec", Contract{Callable: unsafe, Nondeterministic: true, Atomic: true}, ReasonContractViolation},
		{"scene.get_summary", Contract{Callable: base, Atomic: true}, ""},
		{"object.create", Contract{Callable: map[string]bool{}}, ReasonContractViolation},
	}
	for _, tc := range cases {
		err := CheckContract(call(tc.tool), reg, tc.c)
		got := ""
		if err != nil {
			got = err.(*Error).Reason
		}
		if got != tc.reason {
			t.Errorf("%s with %+v: %q, want %q (%v)", tc.tool, tc.c, got, tc.reason, err)
		}
	}
}

func TestSandboxPaths(t *testing.T) {
	schema := map[string]any{"type": "object", "properties": map[string]any{
		"output": map[string]any{"type": "string", SandboxPathKeyword: true},
		"note":   map[string]any{"type": "string"},
	}}
	reg, err := NewRegistry([]ToolDef{{Name: "scene.export", Safety: SafetySafeWrite, InputSchema: schema, Mode: "headless_safe", Rollback: "not_needed"}})
	if err != nil {
		t.Fatal(err)
	}
	c := Contract{Callable: map[string]bool{"scene.export": true}}
	for out, ok := range map[string]bool{"a.obj": true, "..": false, "../a.obj": false, "/etc/passwd": false, "sub/a.obj": false, `a\\b`: false, "": false} {
		err := CheckContract([]Operation{{ID: "e", Tool: "scene.export", Args: map[string]any{"output": out, "note": "../fine"}}}, reg, c)
		if ok != (err == nil) {
			t.Errorf("output %q: %v", out, err)
		}
		if err != nil && err.(*Error).Reason != ReasonPolicyRefused {
			t.Errorf("output %q: reason %s", out, err.(*Error).Reason)
		}
	}
}
