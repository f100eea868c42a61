// Package toolregistry is a tool registry's fingerprint, which agentd
// computes when it builds a registry from its Blender and the control plane
// checks when an agent registers one: the control plane keeps registries,
// and compiles them once, by fingerprint, so a registry sent under another's
// fingerprint would stand in for it in every session of every agent that
// has it.
package toolregistry

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// Version is the format of the registries agentd builds (ToolRegistry.version).
const Version = "tool_registry_v1"

// tool is a tool's canonical form: its fields in this order, the schema's
// object keys sorted (encoding/json's), the safety level as the bridge
// names it.
type tool struct {
	Name             string         `json:"name"`
	Version          string         `json:"version"`
	Description      string         `json:"description"`
	SafetyLevel      string         `json:"safety_level"`
	InputSchema      map[string]any `json:"input_schema"`
	DeterminismClass string         `json:"determinism_class"`
	RollbackMethod   string         `json:"rollback_method"`
	SafetyMode       string         `json:"safety_mode"`
	IdempotenceClass string         `json:"idempotence_class"`
	BlenderVersions  string         `json:"blender_versions"`
}

// Fingerprint is the SHA-256, in hex, of the registry's canonical JSON:
// {"version": ..., "tools": [...]}, the tools sorted by name (the registry's
// own fingerprint field left out).
func Fingerprint(r *cpv1.ToolRegistry) (string, error) {
	tools := make([]tool, 0, len(r.GetTools()))
	for _, t := range r.GetTools() {
		tools = append(tools, tool{Name: t.GetName(), Version: t.GetVersion(), Description: t.GetDescription(),
			SafetyLevel: SafetyLevelName(t.GetSafetyLevel()), InputSchema: t.GetInputSchema().AsMap(),
			DeterminismClass: t.GetDeterminismClass(), RollbackMethod: t.GetRollbackMethod(), SafetyMode: t.GetSafetyMode(),
			IdempotenceClass: t.GetIdempotenceClass(), BlenderVersions: t.GetBlenderVersions()})
	}
	slices.SortFunc(tools, func(a, b tool) int { return strings.Compare(a.Name, b.Name) })
	raw, err := json.Marshal(struct {
		Version string `json:"version"`
		Tools   []tool `json:"tools"`
	}{r.GetVersion(), tools})
	if err != nil {
		return "", fmt.Errorf("registry fingerprint: %w", err)
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:]), nil
}

// Check says whether the registry's fingerprint is the one its tools give.
func Check(r *cpv1.ToolRegistry) error {
	fp, err := Fingerprint(r)
	if err != nil {
		return err
	}
	if fp != r.GetFingerprint() {
		return fmt.Errorf("registry %s: its tools give the fingerprint %s", r.GetFingerprint(), fp)
	}
	return nil
}

// SafetyLevelName is a safety level as the bridge's tools declare it
// ("read_only", "safe_write", "destructive"; "" for none).
func SafetyLevelName(l cpv1.SafetyLevel) string {
	switch l {
	case cpv1.SafetyLevel_SAFETY_LEVEL_READ_ONLY:
		return "read_only"
	case cpv1.SafetyLevel_SAFETY_LEVEL_SAFE_WRITE:
		return "safe_write"
	case cpv1.SafetyLevel_SAFETY_LEVEL_DESTRUCTIVE:
		return "destructive"
	}
	return ""
}

// SafetyLevel is the safety level a tool declares by name (SafetyLevelName's
// inverse; UNSPECIFIED for any other name).
func SafetyLevel(name string) cpv1.SafetyLevel {
	for _, l := range []cpv1.SafetyLevel{cpv1.SafetyLevel_SAFETY_LEVEL_READ_ONLY, cpv1.SafetyLevel_SAFETY_LEVEL_SAFE_WRITE,
		cpv1.SafetyLevel_SAFETY_LEVEL_DESTRUCTIVE} {
		if SafetyLevelName(l) == name {
			return l
		}
	}
	return cpv1.SafetyLevel_SAFETY_LEVEL_UNSPECIFIED
}
