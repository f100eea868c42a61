package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

func TestReadPlan(t *testing.T) {
	req, err := readPlan(filepath.Join("..", "..", "examples", "plans", "hello.json"))
	if err != nil {
		t.Fatal(err)
	}
	if req.GetRequestId() != "hello-1" || len(req.GetOperations()) != 8 {
		t.Fatalf("hello.json: %v", req)
	}
	if got := req.GetOperations()[6].GetSafetyLevel(); got != cpv1.SafetyLevel_SAFETY_LEVEL_READ_ONLY {
		t.Fatalf("summary safety level %v", got)
	}
	for _, tc := range []struct{ name, body, want string }{
		{"unknown field", `{"request_id":"r","operations":[],"extra":1}`, "unknown field"},
		{"bad safety", `{"request_id":"r","operations":[{"operation_id":"a","tool_name":"t","args":{},"depends_on":[],"safety_level":"yolo"}]}`, "safety_level"},
		{"api enum name", `{"request_id":"r","operations":[{"operation_id":"a","tool_name":"t","args":{},"depends_on":[],"safety_level":"SAFETY_LEVEL_DESTRUCTIVE"}]}`, ""},
		{"verify", `{"request_id":"r","operations":[{"operation_id":"a","tool_name":"t","args":{},"safety_level":"safe_write","verify":true}]}`, ""},
		{"a flag in the file", `{"request_id":"r","atomic":true,"operations":[]}`, `unknown field "atomic": it is a flag of blendctl submit, --atomic`},
		{"syntax", "{\n  \"request_id\": \"r\",\n  \"operations\": [}\n}", "p.json: not JSON (invalid character '}' looking for beginning of value, at line 3, column 18)"},
		{"empty", "  \n", "empty: a plan file is one JSON object"},
		{"cut", `{"request_id": "r", "operations": [`, "p.json: not JSON (it ends early"},
		{"type", "{\"request_id\": 7}", "p.json: request_id: a string is expected, not a JSON number (line 1, column 16)"},
	} {
		path := filepath.Join(t.TempDir(), "p.json")
		os.WriteFile(path, []byte(tc.body), 0o644)
		req, err := readPlan(path)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
		if tc.name == "verify" && !req.GetOperations()[0].GetVerify() {
			t.Errorf("verify: %v", req)
		}
	}
}
