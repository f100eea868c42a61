package executor

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/blendplane/blendplane/controlplane/internal/fleet"
	"github.com/blendplane/blendplane/controlplane/internal/store"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// TestCancelOfAnEndedPlanLeavesNoMark: cancelling plans that already ended
// leaves nothing behind in the executor (the marks of plans that will
// never run again were kept forever).
func TestCancelOfAnEndedPlanLeavesNoMark(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "cp.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	e := New(Config{OperationTimeout: time.Minute, AgentRetryWindow: time.Second}, st, fleet.New(time.Second, 0, nil), nil, slog.New(slog.DiscardHandler))
	defer e.Stop()
	for i, state := range []cpv1.Plan_State{cpv1.Plan_STATE_SUCCEEDED, cpv1.Plan_STATE_FAILED, cpv1.Plan_STATE_CANCELLED} {
		ref := store.PlanRef{Owner: "alice", RequestID: state.String()}
		p := &cpv1.Plan{RequestId: ref.RequestID, SessionId: "s1", State: cpv1.Plan_STATE_PENDING}
		if _, err := st.CreatePlan(store.NewPlan{Owner: ref.Owner, Plan: p, Request: &cpv1.SubmitPlanRequest{}, Digest: "d"}); err != nil {
			t.Fatal(err)
		}
		p.State = state
		if err := st.Commit(ref, p, nil); err != nil {
			t.Fatal(err)
		}
		for j := 0; j < 3; j++ {
			if err := e.Cancel(context.Background(), ref); err != nil {
				t.Fatalf("cancel %d: %v", i, err)
			}
		}
	}
	if n := e.Pending(); n != 0 {
		t.Fatalf("%d cancel marks left for ended plans", n)
	}
}
