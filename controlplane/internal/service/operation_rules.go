package service

import (
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// operationValid is protovalidate's verdict on an Operation's rules (the
// proto's buf.validate options), worked out by hand at a twentieth of the
// cost: a 100,000-operation plan spent a third of a CPU-second in
// protovalidate's CEL programs and regular expressions. It only ever says
// "valid"; false means "ask protovalidate", which then names the
// violations. So it may be stricter than the rules, never looser:
// TestOperationRulesUnchanged fails when the proto's rules change, and
// TestOperationValidAgrees holds it to protovalidate over many operations.
func operationValid(op *cpv1.Operation) bool {
	if !idValid(op.GetOperationId()) {
		return false
	}
	// min_len 1, max_len 128 in code points; 1–128 bytes are 1–128 code points.
	if n := len(op.GetToolName()); n < 1 || n > 128 {
		return false
	}
	deps := op.GetDependsOn()
	for i, d := range deps {
		if !idValid(d) {
			return false
		}
		if len(deps) > 16 { // unique: long lists are left to protovalidate
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
	if m := op.GetMcpCallId(); m != "" && !idValid(m) {
		return false
	}
	return true
}

// idValid is the pattern ^[a-zA-Z0-9_.:-]{1,128}$ of the API's ids.
func idValid(s string) bool {
	if len(s) < 1 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}
