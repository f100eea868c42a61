package planjson

import (
	"encoding/json"
	"strings"
	"testing"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// TestBadJSON: what is wrong with a plan or a call's arguments is said in
// JSON's terms, naming the field, never Go's types.
func TestBadJSON(t *testing.T) {
	destructive := func(string) cpv1.SafetyLevel { return cpv1.SafetyLevel_SAFETY_LEVEL_DESTRUCTIVE }
	for raw, want := range map[string]string{
		`"notanobject"`:                      "the plan: an object is expected, not a JSON string",
		`{"operations": {}}`:                 "operations: an array is expected, not a JSON object",
		`{"operations": [{"tool_name": 7}]}`: "operations.tool_name: a string is expected, not a JSON number",
		`{"operations": [{"args": []}]}`:     "operations.args: an object is expected, not a JSON array",
		`{"atomic": "yes"}`:                  "atomic: true or false is expected, not a JSON string",
		`{"operations": [`:                   "the plan: not JSON",
	} {
		_, _, err := Plan(json.RawMessage(raw), destructive)
		if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "Go value") || strings.Contains(err.Error(), "struct {") {
			t.Errorf("Plan(%s): %v, want %q", raw, err, want)
		}
	}
	if _, err := Args(json.RawMessage(`[1]`)); err == nil || err.Error() != "arguments: an object is expected, not a JSON array" {
		t.Errorf("Args([1]): %v", err)
	}
}
