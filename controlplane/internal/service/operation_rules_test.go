package service

import (
	"math/rand/v2"
	"strings"
	"testing"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/blendplane/blendplane/controlplane/internal/plan"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// operationRules are the rules of Operation that operationValid works out
// by hand, as the proto states them (its fields' buf.validate options).
var operationRules = map[string]string{
	"operation_id": `string:{pattern:"` + plan.OperationIDPattern + `"}`,
	"tool_name":    `string:{min_len:1 max_len:128}`,
	"args":         `ignore:IGNORE_ALWAYS`,
	"depends_on":   `repeated:{unique:true items:{string:{pattern:"` + plan.OperationIDPattern + `"}}}`,
	"safety_level": `enum:{defined_only:true not_in:0}`,
	"mcp_call_id":  `ignore:IGNORE_IF_ZERO_VALUE string:{pattern:"` + plan.OperationIDPattern + `"}`,
}

// TestOperationRulesUnchanged: Operation's rules are still the ones
// operationValid was written for. A change to them must change it too.
func TestOperationRulesUnchanged(t *testing.T) {
	md := (&cpv1.Operation{}).ProtoReflect().Descriptor()
	if proto.HasExtension(md.Options(), validate.E_Message) {
		t.Errorf("Operation has message rules now; operationValid knows none")
	}
	if md.Oneofs().Len() != 0 {
		t.Errorf("Operation has oneofs now; operationValid knows none")
	}
	got := map[string]string{}
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if !proto.HasExtension(fd.Options(), validate.E_Field) {
			continue
		}
		rules := proto.GetExtension(fd.Options(), validate.E_Field).(*validate.FieldRules)
		got[string(fd.Name())] = normalizeText(prototext.MarshalOptions{}.Format(rules))
	}
	for name, want := range operationRules {
		if got[name] != normalizeText(want) {
			t.Errorf("Operation.%s rules %q, operationValid was written for %q", name, got[name], want)
		}
		delete(got, name)
	}
	for name, rules := range got {
		t.Errorf("Operation.%s has rules %q now; operationValid knows none", name, rules)
	}
}

// normalizeText drops prototext's whitespace, which it varies on purpose.
func normalizeText(s string) string { return strings.Join(strings.Fields(s), "") }

// TestOperationValidAgrees: over operations built from good and bad parts,
// whatever operationValid passes protovalidate passes too, and the good
// ones do pass it (else the fast path would never be taken).
func TestOperationValidAgrees(t *testing.T) {
	val, err := NewValidation(nil)
	if err != nil {
		t.Fatal(err)
	}
	good := &cpv1.Operation{OperationId: "op-1", ToolName: "object.create", Args: &structpb.Struct{},
		DependsOn: []string{"a", "b.c:d_e-F9"}, SafetyLevel: cpv1.SafetyLevel_SAFETY_LEVEL_SAFE_WRITE, McpCallId: "call_1"}
	if !operationValid(good) {
		t.Fatalf("operationValid refuses a valid operation %v", good)
	}
	ids := []string{"a", "op-1", "A.b:c_d-9", strings.Repeat("x", 128), strings.Repeat("x", 129), "", "bad id",
		"é", "a\n", "a/b", "a$", "\x00", "ok\u00e9"}
	tools := []string{"object.create", "", "x", strings.Repeat("t", 128), strings.Repeat("t", 129),
		strings.Repeat("é", 64), strings.Repeat("é", 65), strings.Repeat("é", 128), strings.Repeat("é", 129)}
	levels := []cpv1.SafetyLevel{-1, 0, 1, 2, 3, 4, 5, 6, 99}
	rng := rand.New(rand.NewPCG(1, 2))
	// Mostly the first four (good), so that many operations are valid
	// but for one part.
	pick := func(xs []string) string {
		if rng.IntN(5) > 0 {
			return xs[rng.IntN(4)]
		}
		return xs[rng.IntN(len(xs))]
	}
	passed, agreedValid := 0, 0
	for n := 0; n < 20000; n++ {
		op := &cpv1.Operation{OperationId: pick(ids), ToolName: pick(tools), Args: &structpb.Struct{},
			SafetyLevel: levels[2+rng.IntN(4)], Verify: rng.IntN(2) == 0}
		if rng.IntN(5) == 0 {
			op.SafetyLevel = levels[rng.IntN(len(levels))]
		}
		for range rng.IntN(4) + 16*rng.IntN(2) {
			op.DependsOn = append(op.DependsOn, pick(ids))
		}
		if rng.IntN(2) == 0 {
			op.McpCallId = pick(ids)
		}
		vs, err := val.validate(op, "")
		if err != nil {
			t.Fatal(err)
		}
		if operationValid(op) {
			passed++
			if len(vs) != 0 {
				t.Fatalf("operationValid passes %v; protovalidate: %v", op, vs)
			}
		}
		if len(vs) == 0 {
			agreedValid++
		}
	}
	if passed == 0 || passed < agreedValid/2 {
		t.Fatalf("operationValid passed %d of the %d operations protovalidate passes", passed, agreedValid)
	}
	t.Logf("operationValid passed %d, protovalidate %d, of 20000", passed, agreedValid)
}
