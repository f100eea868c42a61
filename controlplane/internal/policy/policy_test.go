package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/blendplane/blendplane/controlplane/internal/plan"
)

func TestDefaults(t *testing.T) {
	var p *Policy
	for _, c := range []struct {
		in   Input
		want Mode
	}{
		{Input{Tool: "scene.get_summary", Safety: plan.SafetyReadOnly}, Allow},
		{Input{Tool: "object.create", Safety: plan.SafetySafeWrite, Args: map[string]any{"name": "A"}}, Allow},
		{Input{Tool: "object.delete", Safety: plan.SafetyDestructive, Args: map[string]any{"name": "A"}}, RequireApproval},
		{Input{Tool: "python.exec", Safety: plan.SafetyDestructive, Unsafe: true, Args: map[string]any{"code": "x"}}, RequireApproval},
		// An unsafe_ops tool needs approval whatever its level says.
		{Input{Tool: "python.exec", Safety: plan.SafetyReadOnly, Unsafe: true}, RequireApproval},
	} {
		d, err := p.Decide(c.in, nil)
		if err != nil || d.Mode != c.want || d.Rule != RuleDefault || d.Mode != Allow && d.Reason == "" {
			t.Errorf("%s: %+v %v, want %s", c.in.Tool, d, err, c.want)
		}
	}
}

const studioPolicy = `
rules:
  - name: tmp-deletes
    tools: [object.delete]
    args: {name: "tmp_*"}
    decision: allow
  - name: export-naming
    tools: [scene.export]
    args: {path: "!shot_*"}
    decision: deny
    reason: exports are named shot_*
  - name: interns-read-only
    principals: ["intern-*"]
    safety: [safe_write, destructive]
    decision: deny
  - name: code-review
    unsafe: true
    decision: require_approval
    reason: code needs a second pair of eyes
`

func TestFileRules(t *testing.T) {
	p, err := Parse([]byte(studioPolicy))
	if err != nil {
		t.Fatal(err)
	}
	del := func(name string) Input {
		return Input{Principal: "ana", Tool: "object.delete", Safety: plan.SafetyDestructive, Args: map[string]any{"name": name}}
	}
	export := func(path string) Input {
		return Input{Principal: "ana", Tool: "scene.export", Safety: plan.SafetySafeWrite, Args: map[string]any{"path": path}}
	}
	for _, c := range []struct {
		what string
		in   Input
		mode Mode
		rule string
	}{
		{"tmp delete", del("tmp_box"), Allow, "tmp-deletes"},
		{"other delete", del("Hero"), RequireApproval, RuleDefault},
		{"export outside the scheme", export("final.glb"), Deny, "export-naming"},
		{"export in the scheme", export("shot_010.glb"), Allow, RuleDefault},
		{"export without a path", Input{Principal: "ana", Tool: "scene.export", Safety: plan.SafetySafeWrite}, Allow, RuleDefault},
		{"intern write", Input{Principal: "intern-7", Tool: "object.create", Safety: plan.SafetySafeWrite}, Deny, "interns-read-only"},
		{"intern read", Input{Principal: "intern-7", Tool: "scene.get_summary", Safety: plan.SafetyReadOnly}, Allow, RuleDefault},
		{"code", Input{Principal: "ana", Tool: "python.exec", Safety: plan.SafetyDestructive, Unsafe: true}, RequireApproval, "code-review"},
	} {
		d, err := p.Decide(c.in, nil)
		if err != nil || d.Mode != c.mode || d.Rule != c.rule {
			t.Errorf("%s: %+v %v, want %s by %s", c.what, d, err, c.mode, c.rule)
		}
		if d.Mode == Deny && d.Reason == "" {
			t.Errorf("%s: a deny without a reason", c.what)
		}
	}
}

func TestPersistedRules(t *testing.T) {
	p, err := Parse([]byte(studioPolicy))
	if err != nil {
		t.Fatal(err)
	}
	var asked []string
	persisted := func(principal, tool, target string) (string, error) {
		asked = append(asked, principal+" "+tool+" "+target)
		if principal == "ana" && target == "name=Hero" {
			return "rule-7", nil
		}
		return "", nil
	}
	d, _ := p.Decide(Input{Principal: "ana", Tool: "object.delete", Safety: plan.SafetyDestructive, Args: map[string]any{"name": "Hero"}}, persisted)
	if d.Mode != Allow || d.Rule != "rule-7" || d.Target != "name=Hero" {
		t.Errorf("a persisted rule: %+v", d)
	}
	d, _ = p.Decide(Input{Principal: "ana", Tool: "object.delete", Safety: plan.SafetyDestructive, Args: map[string]any{"name": "Villain"}}, persisted)
	if d.Mode != RequireApproval {
		t.Errorf("another target: %+v", d)
	}
	d, _ = p.Decide(Input{Principal: "bo", Tool: "object.delete", Safety: plan.SafetyDestructive, Args: map[string]any{"name": "Hero"}}, persisted)
	if d.Mode != RequireApproval {
		t.Errorf("another principal: %+v", d)
	}
	// A deny is never lifted, and an allow needs no lookup.
	asked = nil
	p.Decide(Input{Principal: "ana", Tool: "scene.export", Safety: plan.SafetySafeWrite, Args: map[string]any{"path": "x.glb"}}, persisted)
	p.Decide(Input{Principal: "ana", Tool: "object.create", Safety: plan.SafetySafeWrite}, persisted)
	if len(asked) != 0 {
		t.Errorf("persisted rules consulted for a deny or an allow: %v", asked)
	}
}

func TestTarget(t *testing.T) {
	if got := Target("object.delete", map[string]any{"name": "Cube"}); got != "name=Cube" {
		t.Errorf("object.delete: %q", got)
	}
	// A modifier's name with its object: the name alone would let an
	// always-allow rule remove that modifier from every object.
	cube := Target("modifier.remove", map[string]any{"object": "Cube", "name": "Subdivision"})
	if cube != "name=Subdivision,object=Cube" || cube == Target("modifier.remove", map[string]any{"object": "Hero", "name": "Subdivision"}) {
		t.Errorf("modifier.remove: %q", cube)
	}
	// Names may hold the separators: no two args read as the same target.
	x := Target("modifier.remove", map[string]any{"name": "A,object=B", "object": "C"})
	y := Target("modifier.remove", map[string]any{"name": "A", "object": "B,object=C"})
	if x == y || x != `name="A,object=B",object=C` {
		t.Errorf("targets of names with separators: %q and %q", x, y)
	}
	a := Target("python.exec", map[string]any{"code": "print(1)"})
	b := Target("python.exec", map[string]any{"code": "print(2)"})
	if !strings.HasPrefix(a, "args=") || a == b || a != Target("python.exec", map[string]any{"code": "print(1)"}) {
		t.Errorf("python.exec targets: %q %q", a, b)
	}
	if InputHash(nil) != InputHash(map[string]any{}) || InputHash(map[string]any{"a": 1.0, "b": 2.0}) != InputHash(map[string]any{"b": 2.0, "a": 1.0}) {
		t.Error("InputHash is not canonical")
	}
}

func TestParseErrors(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"rules:\n  - decision: maybe\n", `decision "maybe"`},
		{"rules:\n  - decision: allow\n    safety: [risky]\n", `"risky"`},
		{"rules:\n  - decision: allow\n    tools: [\"[\"]\n", "pattern"},
		{"rules:\n  - decision: allow\n    tool: [x]\n", "field tool not found"},
		{"rules:\n  - {name: a, decision: allow}\n  - {name: a, decision: deny}\n", "used twice"},
		{"{\"rules\": [{\"decision\": \"nope\"}]}", `decision "nope"`},
	} {
		_, err := Parse([]byte(c.text))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error with %q", c.text, err, c.want)
		}
	}
}

func TestLoadJSONAndYAML(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"p.yaml": studioPolicy,
		"p.json": `{"rules": [{"name": "tmp-deletes", "tools": ["object.delete"], "args": {"name": "tmp_*"}, "decision": "allow"}]}`,
	} {
		file := filepath.Join(dir, name)
		os.WriteFile(file, []byte(text), 0o600)
		p, err := Load(file)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		d, _ := p.Decide(Input{Tool: "object.delete", Safety: plan.SafetyDestructive, Args: map[string]any{"name": "tmp_1"}}, nil)
		if d.Mode != Allow || d.Rule != "tmp-deletes" {
			t.Errorf("%s: %+v", name, d)
		}
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("a missing policy file loaded")
	}
}

// TestDocumentedPolicy: the example in docs/POLICY.md parses and decides as
// its comments say.
func TestDocumentedPolicy(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "POLICY.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(doc), "```yaml\n")
	example, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("no yaml example in docs/POLICY.md")
	}
	p, err := Parse([]byte(example))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		in   Input
		mode Mode
	}{
		{Input{Principal: "ana", Tool: "object.delete", Safety: plan.SafetyDestructive, Args: map[string]any{"name": "tmp_1"}}, Allow},
		{Input{Principal: "ana", Tool: "scene.export", Safety: plan.SafetySafeWrite, Args: map[string]any{"format": "obj", "output": "x.obj"}}, Deny},
		{Input{Principal: "intern-2", Tool: "object.create", Safety: plan.SafetySafeWrite}, Deny},
		{Input{Principal: "lead", Tool: "python.exec", Safety: plan.SafetyDestructive, Unsafe: true}, RequireApproval},
		{Input{Principal: "ana", Tool: "render.still", Safety: plan.SafetySafeWrite, Args: map[string]any{"output": "a.png", "samples": 128.0}}, RequireApproval},
		{Input{Principal: "ana", Tool: "render.still", Safety: plan.SafetySafeWrite, Args: map[string]any{"output": "a.png", "samples": 64.0}}, Allow},
	} {
		if d, err := p.Decide(c.in, nil); err != nil || d.Mode != c.mode {
			t.Errorf("%s %v: %+v %v, want %s", c.in.Tool, c.in.Args, d, err, c.mode)
		}
	}
}
