package sessions

import (
	"strings"
	"testing"

	"github.com/blendplane/blendplane/agentd/internal/blender"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// TestToolFailureHints: a tool's refusal becomes the failure contract with
// the hint and repair its code calls for: an import's missing file is an
// upload to do first, a datablock's a creation, a sandbox refusal names
// what the sandbox takes (the generic "fix the args" said nothing about a
// binary USD, which the message says to export as .usda).
func TestToolFailureHints(t *testing.T) {
	for _, c := range []struct {
		tool, code string
		hint       string
		action     cpv1.RepairStep_Action
	}{
		{"scene.import", blender.CodeNotFound, "upload the file", cpv1.RepairStep_ACTION_INSERT_PRECONDITION},
		{"object.delete", blender.CodeNotFound, "create the missing datablock", cpv1.RepairStep_ACTION_INSERT_PRECONDITION},
		{"scene.import", blender.CodePolicyRefused, "plain names in the session's output directory", cpv1.RepairStep_ACTION_REPLACE_ARGS},
		{"scene.import", blender.CodePolicyRefused, "export .usda", cpv1.RepairStep_ACTION_REPLACE_ARGS},
		{"render.still", blender.CodeInternalError, "retry", cpv1.RepairStep_ACTION_RETRY},
		{"object.rename", blender.CodeInvalidInput, "fix the operation's args", cpv1.RepairStep_ACTION_REPLACE_ARGS},
	} {
		f := toolFailure(Operation{OperationID: "op", Tool: c.tool}, &blender.ToolError{Code: c.code, Message: "m"})
		if !strings.Contains(f.GetRetryHint(), c.hint) || f.GetMinimalRepairPlan()[0].GetAction() != c.action ||
			f.GetErrorCode() != strings.ToUpper(c.code) || f.GetMessage() != "m" {
			t.Errorf("%s %s: %v, want a hint with %q and %s", c.tool, c.code, f, c.hint, c.action)
		}
	}
}
