package main

import (
	"bytes"
	"fmt"
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
var submitFlags = map[string]string{"atomic": "--atomic", "validate_only": "--validate-only", "session_id": "--session",
	"preview_render": "--preview-render"}

// readPlan reads a plan file. safety_level may be the seed's name
// ("safe_write") or the API's ("SAFETY_LEVEL_SAFE_WRITE"). Everything else
// is checked by the control plane, which names the offending operation.
func readPlan(path string) (*cpv1.SubmitPlanRequest, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f planFile
	if err := planjson.DecodeStrict(raw, &f); err != nil {
		return nil, planFileError(path, raw, err)
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
		level, err := planjson.ParseSafety(o.SafetyLevel)
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

// planFileError says what is wrong with a plan file, and where, with a
// flag for a field the file does not take.
func planFileError(path string, raw []byte, err error) error {
	e := planjson.JSONError(raw, path, err)
	if !strings.HasPrefix(e.Error(), path) { // named after the field at fault
		e = fmt.Errorf("%s: %w", path, e)
	}
	if name, ok := planjson.UnknownField(err); ok {
		if flag := submitFlags[name]; flag != "" {
			return fmt.Errorf("%w: it is a flag of blendctl submit, %s", e, flag)
		}
		return fmt.Errorf("%w (a plan file has request_id and operations; an operation has operation_id, tool_name, args, depends_on, safety_level and verify)", e)
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return fmt.Errorf(`%w: a plan file is one JSON object, {"request_id": ..., "operations": [...]}`, e)
	}
	return e
}
