package service

import (
	"slices"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"buf.build/go/protovalidate"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/blendplane/blendplane/gen/blendplane/agent/v1"
	"github.com/blendplane/blendplane/internal/wireid"
)

// Validator is protovalidate, except that it does not run the operations
// of an ExecuteRequest through protovalidate when operationValid passes
// them all: its CEL programs and regular expressions took 2.4–3 µs an
// operation, about 1 ms of agentd's CPU before the first operation of a
// 400-operation batch could start (Validator: 0.04 ms). A request with any operation
// operationValid does not pass goes through protovalidate whole, which
// names its violations as before. A request its Codec could not decode is
// refused here, as a violation of the whole message.
type Validator struct {
	protovalidate.Validator
	Codec Codec
}

// Validate checks msg against its rules.
func (v Validator) Validate(msg proto.Message, options ...protovalidate.ValidationOption) error {
	if err := v.Codec.failure(msg); err != nil {
		return &protovalidate.ValidationError{Violations: []*protovalidate.Violation{{Proto: &validate.Violation{
			RuleId: proto.String("decode"), Message: proto.String(err.Error())}}}}
	}
	req, ok := msg.(*agentv1.ExecuteRequest)
	ops := req.GetOperations()
	if !ok || len(ops) < 2 || slices.ContainsFunc(ops[1:], notValid) {
		return v.Validator.Validate(msg, options...)
	}
	// The request with its first operation only, briefly: ExecuteRequest
	// has no rule that looks at two operations at once.
	req.Operations = ops[:1]
	defer func() { req.Operations = ops }()
	return v.Validator.Validate(req, options...)
}

func notValid(op *agentv1.OperationCall) bool { return !operationValid(op) }

// operationValid is protovalidate's verdict on an OperationCall's rules
// (agent.proto's buf.validate options), worked out by hand. It only ever
// says "valid"; false means "ask protovalidate". So it may be stricter than
// the rules, never looser: TestOperationRulesUnchanged fails when the
// proto's rules change, and TestOperationValidAgrees holds it to
// protovalidate.
func operationValid(op *agentv1.OperationCall) bool {
	// min_len 1, max_len 128 in code points; 1–128 bytes are 1–128 code
	// points (strings decode as valid UTF-8).
	n := len(op.GetToolName())
	return wireid.Valid(op.GetOperationId()) && n >= 1 && n <= 128 && validKey(op.GetIdempotencyKey()) &&
		wireid.Valid(op.GetMcpCallId()) && op.GetTimeBudgetMs() >= 0
}

// validKey matches ^[0-9a-f]{64}$.
func validKey(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
