package service

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/blendplane/blendplane/controlplane/internal/plan"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// TestUnmarshalPlanAsProto: the parallel decoding of a large plan gives what
// proto.Unmarshal gives, unknown fields and the fields after the operations
// included, and fails where it fails.
func TestUnmarshalPlanAsProto(t *testing.T) {
	req := &cpv1.SubmitPlanRequest{SessionId: "s-1", RequestId: "r", Atomic: true, PreviewRender: true}
	for i := range 3*plan.MinOperationShare + 5 {
		args, _ := structpb.NewStruct(map[string]any{"name": fmt.Sprintf("C%d", i), "location": []any{1.0, 2.0, float64(i)}})
		req.Operations = append(req.Operations, &cpv1.Operation{OperationId: fmt.Sprintf("op%d", i), ToolName: "object.create",
			Args: args, DependsOn: []string{"a", "b"}, SafetyLevel: cpv1.SafetyLevel_SAFETY_LEVEL_SAFE_WRITE})
	}
	raw, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	// An unknown field between operations, as a newer client might send.
	raw = protowire.AppendTag(raw, 99, protowire.BytesType)
	raw = protowire.AppendString(raw, "from the future")
	more, _ := proto.Marshal(&cpv1.SubmitPlanRequest{Operations: req.Operations[:1], ValidateOnly: true})
	raw = append(raw, more...)

	want, got := &cpv1.SubmitPlanRequest{}, &cpv1.SubmitPlanRequest{}
	if err := proto.Unmarshal(raw, want); err != nil {
		t.Fatal(err)
	}
	if err := unmarshalPlan(raw, got); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, want) || len(got.GetOperations()) != len(req.GetOperations())+1 || !got.GetValidateOnly() {
		t.Fatalf("decoded %d operations, want %d (equal: %v)", len(got.GetOperations()), len(want.GetOperations()), proto.Equal(got, want))
	}
	if a, b := got.ProtoReflect().GetUnknown(), want.ProtoReflect().GetUnknown(); string(a) != string(b) || len(a) == 0 {
		t.Fatalf("unknown fields %q, want %q", a, b)
	}

	// Invalid UTF-8 in one operation's id: refused, naming the operation.
	bad := proto.Clone(req).(*cpv1.SubmitPlanRequest)
	bad.Operations[2*plan.MinOperationShare].OperationId = "ok"
	raw, _ = proto.Marshal(bad)
	i := strings.Index(string(raw), "\x0a\x02ok") // operation_id is field 1: tag 0x0a, length 2
	raw[i+2] = 0xff
	if err := proto.Unmarshal(raw, &cpv1.SubmitPlanRequest{}); err == nil {
		t.Fatal("proto.Unmarshal took invalid UTF-8")
	}
	if err := unmarshalPlan(raw, &cpv1.SubmitPlanRequest{}); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("operations[%d]", 2*plan.MinOperationShare)) {
		t.Fatalf("invalid UTF-8: %v", err)
	}
	// A truncated request.
	if err := unmarshalPlan(raw[:len(raw)/2], &cpv1.SubmitPlanRequest{}); err == nil {
		t.Fatal("a truncated request decoded")
	}
}

// TestUnmarshalPlanDepth: an operation decoded on its own is held to the
// nesting limit it has inside its request, so that a plan proto.Unmarshal
// refuses for depth is refused by unmarshalPlan too, and one nesting level
// less is decoded by both.
func TestUnmarshalPlanDepth(t *testing.T) {
	plan := func(n int) []byte { // an operation whose args nest n lists
		v := structpb.NewNullValue()
		for range n {
			v = structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{v}})
		}
		raw, _ := proto.Marshal(&cpv1.SubmitPlanRequest{Operations: []*cpv1.Operation{{Args: &structpb.Struct{Fields: map[string]*structpb.Value{"a": v}}}}})
		return raw
	}
	lo, hi := 1, 10000 // proto.Unmarshal decodes plan(lo), refuses plan(hi)
	for hi-lo > 1 {
		if mid := (lo + hi) / 2; proto.Unmarshal(plan(mid), &cpv1.SubmitPlanRequest{}) == nil {
			lo = mid
		} else {
			hi = mid
		}
	}
	if err := unmarshalPlan(plan(lo), &cpv1.SubmitPlanRequest{}); err != nil {
		t.Fatalf("%d lists deep, which proto.Unmarshal decodes: %v", lo, err)
	}
	if err := unmarshalPlan(plan(hi), &cpv1.SubmitPlanRequest{}); err == nil {
		t.Fatalf("%d lists deep, which proto.Unmarshal refuses, decoded", hi)
	}
}
