package plan

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

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
	for out, ok := range map[string]bool{
		"a.obj": true, "..": false, "../a.obj": false, "/etc/passwd": false, "sub/a.obj": false, `a\\b`: false, `a\b`: false, "": false,
		// Control characters (U+0000 to U+001F, U+007F) are refused;
		// spaces, other dots, C1 controls and non-ASCII are plain.
		"a\x00.obj": false, "a\n.obj": false, "a\r": false, "\t": false, "a\x1f.obj": false, "a\x7f.obj": false,
		"a b.obj": true, "...": true, ".hidden": true, "a\u0085.obj": true, "é🧊.obj": true,
	} {
		err := CheckContract([]Operation{{ID: "e", Tool: "scene.export", Args: map[string]any{"output": out, "note": "../fine"}}}, reg, c)
		if ok != (err == nil) {
			t.Errorf("output %q: %v", out, err)
		}
		if err != nil {
			pe := err.(*Error)
			if pe.Reason != ReasonPolicyRefused || len(pe.Violations) != 1 || pe.Violations[0].Field != "operations[0].args.output" ||
				!slices.Equal(pe.Repair, []RepairStep{{"e", ActionReplaceArgs}}) {
				t.Errorf("output %q: %s %q %q", out, pe.Reason, pe.Violations, pe.Repair)
			}
		}
	}
}

// TestPlainFileNameMatchesBridge holds isPlainFileName to the bridge's
// sandbox.is_plain_name, which it must match exactly, on every code point
// below U+0100 alone and inside a name, and on a few odd names.
func TestPlainFileNameMatchesBridge(t *testing.T) {
	bridge, err := filepath.Abs("../../../agentd/internal/blender/bridge")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(bridge, "sandbox.py")); err != nil {
		t.Skipf("no bridge: %v", err)
	}
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	names := []string{"", ".", "..", "...", ". ", " ..", "a/b", `a\b`, "é🧊.obj", "\u2028", "\ufeff", "\U0010ffff",
		"evil\u202egnp.exe", "\u061c", "\u200e", "\u200f", "\u202a", "\u2066x", "\u2069", "\u2065", "\u206a", "\u202f"}
	for r := rune(0); r < 0x100; r++ {
		names = append(names, string(r), "a"+string(r)+".obj")
	}
	in, err := json.Marshal(names)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, "-c", `import json, sys; sys.path.insert(0, sys.argv[1]); import sandbox
print(json.dumps([sandbox.is_plain_name(n) for n in json.load(sys.stdin)]))`, bridge)
	cmd.Stdin = bytes.NewReader(in)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python: %v", err)
	}
	var want []bool
	if err := json.Unmarshal(out, &want); err != nil || len(want) != len(names) {
		t.Fatalf("python said %s (%v)", out, err)
	}
	for k, name := range names {
		if got := isPlainFileName(name); got != want[k] {
			t.Errorf("%q: isPlainFileName = %v, sandbox.is_plain_name = %v", name, got, want[k])
		}
	}
}
