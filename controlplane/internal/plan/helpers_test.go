package plan

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
)

// nameSchema is the bridge's schema of a datablock name (bridge/schema.py's
// NAME): at most 63 characters and 63 UTF-8 bytes, no control characters.
const nameSchema = `{"type": "string", "minLength": 1, "maxLength": 63, "x-max-bytes": 63, "pattern": "^[^\\x00-\\x1f\\x7f]+$"}`

// objectCreateSchema is close to what agentd reports for object.create.
const objectCreateSchema = `{
	"$schema": "https://json-schema.org/draft/2020-12/schema",
	"type": "object",
	"additionalProperties": false,
	"required": ["name", "kind"],
	"properties": {
		"name": ` + nameSchema + `,
		"kind": {"enum": ["MESH", "LIGHT", "CAMERA", "EMPTY"]},
		"location": {"type": "array", "items": {"type": "number"}, "minItems": 3, "maxItems": 3},
		"rotation_euler": {"type": "array", "items": {"type": "number"}, "minItems": 3, "maxItems": 3},
		"scale": {"type": "array", "items": {"type": "number", "exclusiveMinimum": 0}, "minItems": 3, "maxItems": 3},
		"collection": ` + nameSchema + `,
		"mesh": {
			"type": "object",
			"additionalProperties": false,
			"properties": {"primitive": {"enum": ["cube", "plane", "uv_sphere"]}, "size": {"type": "number", "exclusiveMinimum": 0}}
		}
	}
}`

func decodeJSON(tb testing.TB, s string) map[string]any {
	tb.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		tb.Fatalf("decode %s: %v", s, err)
	}
	return m
}

// testRegistry has one tool per safety level, object.select with names in
// an array, and scene.export with a sandbox file name.
func testRegistry(tb testing.TB) *Registry {
	tb.Helper()
	reg, err := NewRegistry([]ToolDef{
		{Name: "object.create", Safety: SafetySafeWrite, InputSchema: decodeJSON(tb, objectCreateSchema)},
		{Name: "object.delete", Safety: SafetyDestructive, InputSchema: decodeJSON(tb, `{
			"type": "object", "additionalProperties": false, "required": ["name"],
			"properties": {"name": {"type": "string", "minLength": 1}}}`)},
		{Name: "object.select", Safety: SafetySafeWrite, InputSchema: decodeJSON(tb, `{
			"type": "object", "additionalProperties": false,
			"properties": {"names": {"type": "array", "items": `+nameSchema+`}, "active": `+nameSchema+`}}`)},
		{Name: "scene.export", Safety: SafetySafeWrite, InputSchema: decodeJSON(tb, `{
			"type": "object", "additionalProperties": false, "required": ["output"],
			"properties": {"output": {"type": "string", "minLength": 1, "x-sandbox-path": true}}}`)},
		{Name: "scene.inspect", Safety: SafetyReadOnly, InputSchema: decodeJSON(tb, `{"type": "object"}`)},
	})
	if err != nil {
		tb.Fatal(err)
	}
	return reg
}

// op builds a scene.inspect operation, the tool that accepts any args.
func op(id string, deps ...string) Operation {
	return Operation{ID: id, Tool: "scene.inspect", DependsOn: deps, Safety: SafetyReadOnly}
}

// chain builds n object.create operations, each depending on the previous.
func chain(n int) []Operation {
	ops := make([]Operation, n)
	for i := range ops {
		ops[i] = Operation{
			ID:   fmt.Sprintf("op-%06d", i),
			Tool: "object.create",
			Args: map[string]any{
				"name":     fmt.Sprintf("Cube.%06d", i),
				"kind":     "MESH",
				"location": []any{float64(i), 0.0, 1.5},
			},
			Safety: SafetySafeWrite,
		}
		if i > 0 {
			ops[i].DependsOn = []string{ops[i-1].ID}
		}
	}
	return ops
}

// checkSchedule fails unless schedule is a permutation of ops in which
// every operation comes after its dependencies.
func checkSchedule(tb testing.TB, ops []Operation, schedule []int) {
	tb.Helper()
	if len(schedule) != len(ops) {
		tb.Fatalf("schedule has %d entries, plan %d operations", len(schedule), len(ops))
	}
	at := make(map[string]int, len(ops))
	for p, i := range schedule {
		if i < 0 || i >= len(ops) {
			tb.Fatalf("schedule[%d] = %d is out of range", p, i)
		}
		if _, dup := at[ops[i].ID]; dup {
			tb.Fatalf("operation %q scheduled twice", ops[i].ID)
		}
		at[ops[i].ID] = p
	}
	for p, i := range schedule {
		for _, d := range ops[i].DependsOn {
			if q, ok := at[d]; !ok || q >= p {
				tb.Fatalf("operation %q at %d runs before its dependency %q", ops[i].ID, p, d)
			}
		}
	}
}

func asPlanError(tb testing.TB, err error) *Error {
	tb.Helper()
	var pe *Error
	if !errors.As(err, &pe) {
		tb.Fatalf("error %v (%T) is not a *plan.Error", err, err)
	}
	return pe
}

func scheduleIDs(ops []Operation, schedule []int) []string {
	ids := make([]string, len(schedule))
	for p, i := range schedule {
		ids[p] = ops[i].ID
	}
	return ids
}
