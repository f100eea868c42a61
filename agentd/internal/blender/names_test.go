package blender

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// namePattern is the pattern of every datablock-name schema (bridge/schema.py
// NAME_PATTERN); file-name patterns start with its character class.
const namePattern = `^[^\x00-\x1f\x7f]+$`

// compileToolSchemas compiles every tool's input schema with the JSON-Schema
// library the control plane validates args with (Go's RE2 for patterns).
func compileToolSchemas(t *testing.T, p *Process) map[string]*jsonschema.Schema {
	t.Helper()
	out := map[string]*jsonschema.Schema{}
	for _, tool := range p.Tools() {
		c := jsonschema.NewCompiler()
		c.DefaultDraft(jsonschema.Draft2020)
		loc := "urn:test:" + tool.Name
		if err := c.AddResource(loc, tool.InputSchema); err != nil {
			t.Fatal(err)
		}
		s, err := c.Compile(loc)
		if err != nil {
			t.Fatalf("%s: %v", tool.Name, err)
		}
		out[tool.Name] = s
	}
	return out
}

// goValid reports whether args pass the Go library's check of tool's schema.
func goValid(t *testing.T, schemas map[string]*jsonschema.Schema, tool string, args map[string]any) bool {
	t.Helper()
	b, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return schemas[tool].Validate(v) == nil
}

// TestNameSchemasRefuseControlCharacters: every schema that takes a
// datablock name or a sandbox file name refuses control characters, with a
// pattern that means the same to the bridge's checker (Python re, where "$"
// would also match before a final newline) and to the Go library the control
// plane uses; names are at most 63 UTF-8 bytes (x-max-bytes); check_name
// refuses control characters too.
func TestNameSchemasRefuseControlCharacters(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		schemas := compileToolSchemas(t, p)

		// Structure: every name property (maxLength 63) carries the pattern
		// and x-max-bytes; every sandbox path the control-character class.
		names := 0
		for _, tool := range p.Tools() {
			for prop, raw := range tool.InputSchema["properties"].(map[string]any) {
				s := raw.(map[string]any)
				if items, ok := s["items"].(map[string]any); ok && s["type"] == "array" {
					s = items
				}
				if s["maxLength"] == 63.0 {
					names++
					if s["pattern"] != namePattern || s["x-max-bytes"] != 63.0 {
						t.Errorf("%s.%s: name schema %v lacks the pattern or x-max-bytes", tool.Name, prop, s)
					}
				}
				if pat, _ := s["pattern"].(string); s["x-sandbox-path"] == true && !strings.HasPrefix(pat, `^[^\x00-\x1f\x7f]*`) {
					t.Errorf("%s.%s: file-name pattern %v admits control characters", tool.Name, prop, s["pattern"])
				}
			}
		}
		if names < 20 {
			t.Errorf("only %d name properties found", names)
		}

		cases := []struct {
			tool string
			args func(name string) map[string]any
		}{
			{"object.create", func(n string) map[string]any { return kv{"type": "cube", "name": n} }},
			{"object.rename", func(n string) map[string]any { return kv{"name": "Light", "new_name": n} }},
			{"object.set_parent", func(n string) map[string]any { return kv{"name": "Light", "parent": n} }},
			{"camera.look_at", func(n string) map[string]any { return kv{"name": "Camera", "target": n} }},
			{"object.select", func(n string) map[string]any { return kv{"names": []any{n}} }},
			{"material.create", func(n string) map[string]any { return kv{"name": n} }},
			{"collection.create", func(n string) map[string]any { return kv{"name": n} }},
			{"render.still", func(n string) map[string]any { return kv{"output": n + ".png"} }},
			{"render.animation", func(n string) map[string]any { return kv{"output_prefix": n} }},
			{"scene.export", func(n string) map[string]any { return kv{"format": "obj", "output": n + ".obj"} }},
			{"scene.import", func(n string) map[string]any { return kv{"format": "obj", "input": n + ".obj"} }},
		}
		for _, c := range cases {
			if !goValid(t, schemas, c.tool, c.args("Cube é🧊 ~")) {
				t.Errorf("%s: the Go library refuses a plain name", c.tool)
			}
			for _, bad := range []string{"a\nb", "Cube\n", "\tx", "a\x00b", "a\x1fb", "a\x7fb", "x\n\tmtllib\t../../evil"} {
				args := c.args(bad)
				if goValid(t, schemas, c.tool, args) {
					t.Errorf("%s %q: the Go library accepts it", c.tool, bad)
				}
				wantToolError(t, p, c.tool, args, CodeInvalidInput)
			}
		}
		// 63 characters of two bytes each: within maxLength, over 63 bytes.
		long := strings.Repeat("é", 63)
		te := wantToolError(t, p, "object.create", kv{"type": "cube", "name": long}, CodeInvalidInput)
		if !strings.Contains(te.Message, "63 bytes") {
			t.Errorf("63 é: %s", te.Message)
		}
		wantToolError(t, p, "camera.look_at", kv{"name": "Camera", "target": long}, CodeInvalidInput)
		mustExecute(t, p, "object.create", kv{"type": "cube", "name": strings.Repeat("é", 31) + "x"}) // 63 bytes
	})
}
