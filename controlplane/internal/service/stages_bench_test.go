package service

import (
	"fmt"
	"testing"

	"buf.build/go/protovalidate"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

func chain100k() *cpv1.SubmitPlanRequest {
	req := &cpv1.SubmitPlanRequest{SessionId: "s-1", RequestId: "r"}
	for i := range 100_000 {
		args, _ := structpb.NewStruct(map[string]any{"type": "cube", "name": fmt.Sprintf("C%06d", i)})
		op := &cpv1.Operation{OperationId: fmt.Sprintf("op%06d", i), ToolName: "object.create", Args: args,
			SafetyLevel: cpv1.SafetyLevel_SAFETY_LEVEL_SAFE_WRITE}
		if i > 0 {
			op.DependsOn = []string{fmt.Sprintf("op%06d", i-1)}
		}
		req.Operations = append(req.Operations, op)
	}
	return req
}

func BenchmarkStages100k(b *testing.B) {
	raw, _ := proto.Marshal(chain100k())
	v, _ := protovalidate.New()
	b.Run("unmarshal", func(b *testing.B) {
		for b.Loop() {
			m := &cpv1.SubmitPlanRequest{}
			if err := proto.Unmarshal(raw, m); err != nil {
				b.Fatal(err)
			}
		}
	})
	m := &cpv1.SubmitPlanRequest{}
	proto.Unmarshal(raw, m)
	b.Run("protovalidate", func(b *testing.B) {
		for b.Loop() {
			if err := v.Validate(m); err != nil {
				b.Fatal(err)
			}
		}
	})
}
