package app

import (
	"context"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/blendplane/blendplane/controlplane/internal/store"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// TestDistributeFrameBounds: a distributed render's frame range is checked
// here, whatever the agent's schema allowed: numbers that overflowed an
// int64 passed the frame limit and then sized a slice negatively.
func TestDistributeFrameBounds(t *testing.T) {
	a := newTestApp(t)
	openSession(t, a, "s", "alice", "")
	for _, r := range [][2]float64{{-1e19, 1e19}, {-1, 3}, {1.5, 3}, {1, 2e6}} {
		args, _ := structpb.NewStruct(map[string]any{"output_prefix": "f", "frame_start": r[0], "frame_end": r[1], "distribute": true})
		op := &cpv1.Operation{OperationId: "anim", ToolName: "render.animation", Args: args}
		got := a.distribute(context.Background(), store.PlanRef{Owner: "alice", RequestID: "r"}, "s", op)
		if got.GetError().GetErrorCode() != "INVALID_INPUT" {
			t.Errorf("frames %v to %v: %v", r[0], r[1], got.GetError())
		}
	}
}
