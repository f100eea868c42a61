package toolregistry

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

func registry(t *testing.T) *cpv1.ToolRegistry {
	t.Helper()
	schema := func(m map[string]any) *structpb.Struct {
		s, err := structpb.NewStruct(m)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	safeWrite := cpv1.SafetyLevel_SAFETY_LEVEL_SAFE_WRITE
	return &cpv1.ToolRegistry{Version: Version, Tools: []*cpv1.ToolDefinition{
		{Name: "object.rename", Version: "1", Description: "Rename an object <exactly>.", SafetyLevel: safeWrite,
			InputSchema: schema(map[string]any{"type": "object", "additionalProperties": false, "required": []any{"name", "new_name"},
				"properties": map[string]any{"name": map[string]any{"type": "string", "maxLength": 63}, "new_name": map[string]any{"type": "string"}}}),
			DeterminismClass: "deterministic", RollbackMethod: "compensation", SafetyMode: "headless_safe", IdempotenceClass: "keyed", BlenderVersions: ">=3.4"},
		{Name: "camera.create", Version: "2", Description: "Add a camera & aim it.", SafetyLevel: safeWrite,
			InputSchema: schema(map[string]any{"type": "object", "properties": map[string]any{"lens": map[string]any{"type": "number", "minimum": 1, "maximum": 5000.5},
				"location": map[string]any{"type": "array", "items": map[string]any{"type": "number"}, "minItems": 3, "maxItems": 3}}}),
			DeterminismClass: "deterministic", RollbackMethod: "compensation", SafetyMode: "headless_safe", IdempotenceClass: "keyed", BlenderVersions: ">=3.4,<5.0"},
		{Name: "scene.get_summary", Version: "1", Description: "Read the scene.", SafetyLevel: cpv1.SafetyLevel_SAFETY_LEVEL_READ_ONLY,
			InputSchema:      schema(map[string]any{"type": "object", "properties": map[string]any{}}),
			DeterminismClass: "deterministic", RollbackMethod: "none", SafetyMode: "headless_safe", IdempotenceClass: "read_only", BlenderVersions: ">=3.4"},
	}}
}

// The fingerprint of agentd's registries before the control plane checked
// them, computed from the bridge's tool list: an agent and a control plane of
// different releases must agree on it, and sessions in a store name
// registries by it.
const golden = "6a56cdb35b5a1acae4e40b38f5c19a16ba89782b1fa1877538da176605673c21"

func TestFingerprint(t *testing.T) {
	r := registry(t)
	fp, err := Fingerprint(r)
	if err != nil || fp != golden {
		t.Fatalf("fingerprint %s, %v; want %s", fp, err, golden)
	}
	// The order the tools come in does not matter.
	r.Tools[0], r.Tools[2] = r.Tools[2], r.Tools[0]
	if again, _ := Fingerprint(r); again != fp {
		t.Fatalf("reordered: %s, want %s", again, fp)
	}
	r.Fingerprint = fp
	if err := Check(r); err != nil {
		t.Fatal(err)
	}
}

// Any change to what a tool declares changes the fingerprint: a registry
// sent under another's fingerprint is caught.
func TestCheckRefusesAnotherRegistry(t *testing.T) {
	for name, change := range map[string]func(r *cpv1.ToolRegistry){
		"schema": func(r *cpv1.ToolRegistry) {
			r.Tools[0].InputSchema.Fields["additionalProperties"] = structpb.NewBoolValue(true)
		},
		"safety":      func(r *cpv1.ToolRegistry) { r.Tools[0].SafetyLevel = cpv1.SafetyLevel_SAFETY_LEVEL_READ_ONLY },
		"mode":        func(r *cpv1.ToolRegistry) { r.Tools[1].SafetyMode = "unsafe_ops" },
		"rollback":    func(r *cpv1.ToolRegistry) { r.Tools[1].RollbackMethod = "none" },
		"determinism": func(r *cpv1.ToolRegistry) { r.Tools[2].DeterminismClass = "seeded" },
		"idempotence": func(r *cpv1.ToolRegistry) { r.Tools[2].IdempotenceClass = "idempotent" },
		"versions":    func(r *cpv1.ToolRegistry) { r.Tools[2].BlenderVersions = ">=4.0" },
		"description": func(r *cpv1.ToolRegistry) { r.Tools[2].Description += " " },
		"version":     func(r *cpv1.ToolRegistry) { r.Tools[2].Version = "9" },
		"name":        func(r *cpv1.ToolRegistry) { r.Tools[2].Name = "scene.summary" },
		"a tool more": func(r *cpv1.ToolRegistry) { r.Tools = append(r.Tools, proto.Clone(r.Tools[0]).(*cpv1.ToolDefinition)) },
		"a tool less": func(r *cpv1.ToolRegistry) { r.Tools = r.Tools[1:] },
		"format":      func(r *cpv1.ToolRegistry) { r.Version = "tool_registry_v2" },
	} {
		r := registry(t)
		r.Fingerprint = golden
		change(r)
		if err := Check(r); err == nil || !strings.Contains(err.Error(), "its tools give the fingerprint") {
			t.Errorf("%s changed: %v", name, err)
		}
	}
}

func TestSafetyLevelNames(t *testing.T) {
	for _, name := range []string{"read_only", "safe_write", "destructive"} {
		if got := SafetyLevelName(SafetyLevel(name)); got != name {
			t.Errorf("%s: %s", name, got)
		}
	}
	if SafetyLevel("dangerous") != cpv1.SafetyLevel_SAFETY_LEVEL_UNSPECIFIED || SafetyLevelName(cpv1.SafetyLevel_SAFETY_LEVEL_UNSPECIFIED) != "" {
		t.Error("an unknown level")
	}
}
