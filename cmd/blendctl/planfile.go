package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/planjson"
)

// planFile is the planner output schema of seed 000, as a file; an
// operation may also ask for verify (the API's per-operation check).
type planFile struct {
	RequestID  string          `json:"request_id"`
	Operations []fileOperation `json:"operations"`
}

type fileOperation struct {
	planjson.Operation
	Verify bool `json:"verify"`
}

// submitFlags are the request's fields that blendctl takes as flags, not
// from the file.
var submitFlags = map[string]string{"atomic": "--atomic", "validate_only": "--validate-only", "session_id": "--session"}

// readPlan reads a plan file. safety_level may be the seed's name
// ("safe_write") or the API's ("SAFETY_LEVEL_SAFE_WRITE"). Everything else
// is checked by the control plane, which names the offending operation.
func readPlan(path string) (*cpv1.SubmitPlanRequest, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var f planFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: %s", path, jsonProblem(raw, err))
	}
	req := &cpv1.SubmitPlanRequest{RequestId: f.RequestID}
	for i, o := range f.Operations {
		args, err := structpb.NewStruct(o.Args)
		if err != nil {
			return nil, fmt.Errorf("%s: operations[%d].args: %w", path, i, err)
		}
		if o.Args == nil {
			args = nil // let the server say args are required
		}
		level, err := parseSafety(o.SafetyLevel)
		if err != nil {
			return nil, fmt.Errorf("%s: operations[%d] (%q).safety_level: %w", path, i, o.OperationID, err)
		}
		req.Operations = append(req.Operations, &cpv1.Operation{
			OperationId: o.OperationID, ToolName: o.ToolName, Args: args,
			DependsOn: o.DependsOn, SafetyLevel: level, Verify: o.Verify,
		})
	}
	return req, nil
}

func parseSafety(s string) (cpv1.SafetyLevel, error) {
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SAFETY_LEVEL_") {
		name = "SAFETY_LEVEL_" + name
	}
	v, ok := cpv1.SafetyLevel_value[name]
	if !ok || v == 0 {
		return 0, fmt.Errorf("%q is not one of read_only, safe_write, destructive", s)
	}
	return cpv1.SafetyLevel(v), nil
}

// jsonProblem says what is wrong with a plan file, and where: line and
// column rather than a byte offset, a flag for a field the file does not
// take.
func jsonProblem(raw []byte, err error) string {
	at := func(offset int64) string {
		before := raw[:min(int(offset), len(raw))]
		line := bytes.Count(before, []byte("\n")) + 1
		// The offset is past the byte at fault: its column is the last read.
		return fmt.Sprintf("line %d, column %d", line, len(before)-bytes.LastIndexByte(before, '\n')-1)
	}
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF) && len(bytes.TrimSpace(raw)) == 0:
		return `empty: a plan file is one JSON object, {"request_id": ..., "operations": [...]}`
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the JSON ends early (a missing } or ])"
	case errors.As(err, &syntax):
		return at(syntax.Offset) + ": " + syntax.Error()
	case errors.As(err, &typ):
		return fmt.Sprintf("%s: %s is a JSON %s, which %s cannot be", at(typ.Offset), typ.Field, typ.Value, typ.Type)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if flag := submitFlags[strings.Trim(name, `"`)]; flag != "" {
			return fmt.Sprintf("unknown field %s: it is a flag of blendctl submit, %s", name, flag)
		}
		return "unknown field " + name + ` (a plan file has request_id and operations; an operation has operation_id, tool_name, args, depends_on, safety_level and verify)`
	}
	return err.Error()
}
