package planjson

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
		// A misspelt field or level is refused, not dropped (it would run
		// another plan than the one meant).
		`{"operations": [{"operation_id": "a", "tool_name": "t", "args": {}}], "atomc": true}`:                 `the plan: unknown field "atomc"`,
		`{"operations": [{"operation_id": "a", "tool_name": "t", "args": {}, "dependson": ["b"]}]}`:            `the plan: unknown field "dependson"`,
		`{"operations": [{"operation_id": "a", "tool_name": "t", "args": {}, "safety_level": "safe-write"}]}`:  `operations[0].safety_level: "safe-write" is not one of read_only, safe_write, destructive`,
		`{"operations": [{"operation_id": "a", "tool_name": "t", "args": {}, "safety_level": "unspecified"}]}`: `operations[0].safety_level: "unspecified" is not one of`,
		`{"operations": [{"operation_id": "a", "tool_name": "t", "args": {}}]} {"operations": []}`:             "the plan: one JSON value is expected",
	} {
		_, _, err := Plan(json.RawMessage(raw), destructive)
		if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "Go value") || strings.Contains(err.Error(), "struct {") {
			t.Errorf("Plan(%s): %v, want %q", raw, err, want)
		}
	}
	ops, atomic, err := Plan(json.RawMessage(`{"operations": [{"operation_id": "a", "tool_name": "t", "args": {"k": 1, "any_key": true}, "safety_level": "Safe_Write"}], "atomic": true}`), destructive)
	if err != nil || !atomic || ops[0].GetSafetyLevel() != cpv1.SafetyLevel_SAFETY_LEVEL_SAFE_WRITE || len(ops[0].GetArgs().GetFields()) != 2 {
		t.Errorf("a good plan: %v %v %v", ops, atomic, err)
	}
	if _, err := Args(json.RawMessage(`[1]`)); err == nil || err.Error() != "arguments: an object is expected, not a JSON array (line 1, column 1)" {
		t.Errorf("Args([1]): %v", err)
	}
}

// TestRefusalOfATransport: a call no control plane answered (connection
// refused, its deadline passed) is recoverable, under a code of the
// contract, with a hint to call again; an answer keeps its reason.
func TestRefusalOfATransport(t *testing.T) {
	for err, want := range map[error]string{
		status.Error(codes.Unavailable, "connection error: connection refused"): "CONTROL_PLANE_UNAVAILABLE true",
		status.Error(codes.DeadlineExceeded, "context deadline exceeded"):       "DEADLINE_EXCEEDED true",
		status.Error(codes.Internal, "boom"):                                    "Internal false",
	} {
		got := Refusal(err)
		if s := fmt.Sprint(got["error_code"], " ", got["recoverable"]); s != want || (want != "Internal false" && got["retry_hint"] == "") {
			t.Errorf("%v: %v, want %s with a retry hint", err, got, want)
		}
	}
	st, _ := status.New(codes.Unavailable, "no agent").WithDetails(&errdetails.ErrorInfo{Reason: "NO_AGENT_AVAILABLE"})
	if got := Refusal(st.Err()); got["error_code"] != "NO_AGENT_AVAILABLE" {
		t.Errorf("an answer's reason: %v", got)
	}
}
