package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/planjson"
)

// planFile is the planner output schema of seed 000, as a file.
type planFile struct {
	RequestID  string               `json:"request_id"`
	Operations []planjson.Operation `json:"operations"`
}

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
		return nil, fmt.Errorf("%s: %w", path, err)
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
			DependsOn: o.DependsOn, SafetyLevel: level,
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
