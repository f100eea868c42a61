package service

import (
	"github.com/blendplane/blendplane/controlplane/internal/plan"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// operationValid is protovalidate's verdict on an Operation's rules (the
// proto's buf.validate options), worked out by hand: 40 ns an operation
// against protovalidate's 3.1–3.3 µs (side by side), whose CEL programs and
// regular expressions took a third of a CPU-second of a 100,000-operation
// plan. It only ever says
// "valid"; false means "ask protovalidate", which then names the
// violations. So it may be stricter than the rules, never looser:
// TestOperationRulesUnchanged fails when the proto's rules change, and
// TestOperationValidAgrees holds it to protovalidate over many operations.
func operationValid(op *cpv1.Operation) bool {
	if !plan.ValidOperationID(op.GetOperationId()) {
		return false
	}
	// min_len 1, max_len 128 in code points; 1–128 bytes are 1–128 code points.
	if n := len(op.GetToolName()); n < 1 || n > 128 {
		return false
	}
	deps := op.GetDependsOn()
	if len(deps) > 16 { // unique: long lists are left to protovalidate
		return false
	}
	for i, d := range deps {
		if !plan.ValidOperationID(d) {
			return false
		}
		for _, e := range deps[:i] {
			if d == e {
				return false
			}
		}
	}
	s := op.GetSafetyLevel()
	if _, defined := cpv1.SafetyLevel_name[int32(s)]; !defined || s == cpv1.SafetyLevel_SAFETY_LEVEL_UNSPECIFIED {
		return false
	}
	if m := op.GetMcpCallId(); m != "" && !plan.ValidOperationID(m) {
		return false
	}
	return true
}
