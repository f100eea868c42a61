package executor

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

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

// TestWaitingPlansHoldNoRequest: a plan queued behind a running one keeps
// only its ref; its request is read from the store when it starts.
func TestWaitingPlansHoldNoRequest(t *testing.T) {
	e := New(Config{OperationTimeout: time.Minute, AgentRetryWindow: time.Second}, nil, fleet.New(time.Second, 0, nil), nil, slog.New(slog.DiscardHandler))
	e.queues["s1"] = &queue{running: true} // a plan of s1 is running
	ref := store.PlanRef{Owner: "alice", RequestID: "r2"}
	e.Enqueue("s1", ref, &Work{Request: &cpv1.SubmitPlanRequest{}})
	if q := e.queues["s1"]; len(q.pending) != 1 || q.pending[0].ref != ref || q.pending[0].work != nil {
		t.Fatalf("queue %+v: want r2 without its work", q.pending)
	}
}

// TestNextBatch: a batch holds at most batchSize operations and batchBytes
// of args (but always one), and stops before a distributed operation.
func TestNextBatch(t *testing.T) {
	small, _ := structpb.NewStruct(map[string]any{"type": "cube"})
	big, _ := structpb.NewStruct(map[string]any{"code": strings.Repeat("x", batchBytes/3)})
	huge, _ := structpb.NewStruct(map[string]any{"code": strings.Repeat("x", batchBytes+1)})
	render, _ := structpb.NewStruct(map[string]any{"frame_start": 1.0, "frame_end": 24.0, "distribute": true})
	mk := func(args ...*structpb.Struct) ([]*cpv1.Operation, []int) {
		ops := make([]*cpv1.Operation, len(args))
		sched := make([]int, len(args))
		for i, a := range args {
			ops[i] = &cpv1.Operation{OperationId: fmt.Sprint("op", i), ToolName: "object.create", Args: a}
			sched[i] = i
		}
		return ops, sched
	}
	many := make([]*structpb.Struct, batchSize+5)
	for i := range many {
		many[i] = small
	}
	ops, sched := mk(many...)
	if got := len(nextBatch(ops, sched, true)); got != batchSize {
		t.Errorf("%d small operations: a batch of %d, want %d", len(ops), got, batchSize)
	}
	ops, sched = mk(big, big, big, big, small)
	if got := len(nextBatch(ops, sched, true)); got != 2 {
		t.Errorf("args of a third of the budget each: a batch of %d, want 2", got)
	}
	ops, sched = mk(huge, small)
	if got := len(nextBatch(ops, sched, true)); got != 1 {
		t.Errorf("one operation over the budget: a batch of %d, want it alone", got)
	}
	ops, sched = mk(small, small, render, small)
	ops[2].ToolName = "render.animation"
	if got := len(nextBatch(ops, sched, true)); got != 2 {
		t.Errorf("before a distributed render: a batch of %d, want 2", got)
	}
	if got := len(nextBatch(ops, sched, false)); got != 4 {
		t.Errorf("without distribution: a batch of %d, want 4", got)
	}
}

// TestPlanOfAClosedSessionNeverRuns: a plan queued in a session that was
// closed before it ran (CloseSession, or a restart that closed an ephemeral
// session) ends CANCELLED with NOT_RUN receipts, without a call to any
// agent (here there is none, so a call would end the plan FAILED).
func TestPlanOfAClosedSessionNeverRuns(t *testing.T) {
	// Resumed, the executor reads the plan's request from the store; queued
	// by Submit, it runs from the request Submit hands it.
	for _, handed := range []bool{false, true} {
		t.Run(fmt.Sprint("handed=", handed), func(t *testing.T) { closedSessionPlan(t, handed) })
	}
}

// sessionStore is a store holding alice's open session s1 on agent-1.
func sessionStore(t *testing.T) *store.Store {
	st, err := store.Open(filepath.Join(t.TempDir(), "cp.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.PutSession(store.Session{Owner: "alice", Info: &cpv1.Session{SessionId: "s1", State: cpv1.Session_STATE_OPEN, Epoch: 1,
		AgentId: "agent-1", Contract: &cpv1.SessionContract{SessionId: "s1", ToolRegistryRef: &cpv1.ToolRegistryRef{Fingerprint: "f"}}}},
		&cpv1.ToolRegistry{Fingerprint: "f"}); err != nil {
		t.Fatal(err)
	}
	return st
}

// ended waits for a plan to end and returns it with its receipts.
func ended(t *testing.T, st *store.Store, ref store.PlanRef, within time.Duration) (*cpv1.Plan, []*cpv1.Receipt) {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(10 * time.Millisecond) {
		p, err := st.PlanState(ref)
		if err != nil {
			t.Fatal(err)
		}
		rs, err := st.Receipts(ref, 1, 100)
		if err != nil {
			t.Fatal(err)
		}
		if store.IsTerminal(p.GetState()) {
			return p, rs
		}
		if time.Now().After(deadline) {
			t.Fatalf("the plan is still %v after %s: %d receipts: %v", p.GetState(), within, len(rs), rs[:min(len(rs), 3)])
		}
	}
}

func closedSessionPlan(t *testing.T, handed bool) {
	st := sessionStore(t)
	ref := store.PlanRef{Owner: "alice", RequestID: "r1"}
	args, _ := structpb.NewStruct(map[string]any{"type": "cube"})
	req := &cpv1.SubmitPlanRequest{SessionId: "s1", RequestId: ref.RequestID, Operations: []*cpv1.Operation{
		{OperationId: "a", ToolName: "object.create", Args: args}, {OperationId: "b", ToolName: "object.create", Args: args}}}
	// The handed schedule differs from the stored one (Submit hands what it
	// stores) only so that the receipts' order tells which one ran.
	work := &Work{Request: req, Schedule: []int{1, 0}}
	if _, err := st.CreatePlan(store.NewPlan{Owner: ref.Owner, Plan: &cpv1.Plan{RequestId: ref.RequestID, SessionId: "s1", State: cpv1.Plan_STATE_PENDING},
		Request: req, Schedule: []int{0, 1}, Digest: "d"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CloseSession("s1", time.Now()); err != nil {
		t.Fatal(err)
	}
	e := New(Config{OperationTimeout: time.Minute, AgentRetryWindow: 100 * time.Millisecond}, st, fleet.New(time.Second, 0, nil), nil, slog.New(slog.DiscardHandler))
	defer e.Stop()
	if handed {
		e.Enqueue("s1", ref, work)
	} else if err := e.Resume(); err != nil {
		t.Fatal(err)
	}
	p, rs := ended(t, st, ref, 10*time.Second)
	first, second := "a", "b" // the stored schedule
	if handed {
		first, second = "b", "a"
	}
	if p.GetState() != cpv1.Plan_STATE_CANCELLED || len(rs) != 2 || rs[0].GetOperationId() != first || rs[1].GetOperationId() != second ||
		rs[0].GetStatus() != cpv1.Receipt_STATUS_NOT_RUN || rs[1].GetStatus() != cpv1.Receipt_STATUS_NOT_RUN {
		t.Fatalf("plan %v, receipts %v: want CANCELLED, NOT_RUN for %s then %s", p, rs, first, second)
	}
}

// TestTransportFailures: an agent's refusal becomes the failure contract a
// client can act on, code by code; only what no code explains is INTERNAL.
func TestTransportFailures(t *testing.T) {
	op := &cpv1.Operation{OperationId: "a", ToolName: "object.create"}
	for code, want := range map[codes.Code]string{
		codes.DeadlineExceeded:   "TOOL_TIMEOUT",
		codes.InvalidArgument:    "AGENT_REFUSED",
		codes.ResourceExhausted:  "RESOURCE_EXHAUSTED",
		codes.FailedPrecondition: "SESSION_LOST",
		codes.NotFound:           "SESSION_LOST",
		codes.Unavailable:        "AGENT_UNAVAILABLE",
		codes.Internal:           "INTERNAL",
	} {
		r := transportFailure("r1", op, nil, status.Error(code, "refused"))
		if r.GetError().GetErrorCode() != want || r.GetError().GetRetryHint() == "" || r.GetStatus() != cpv1.Receipt_STATUS_FAILED {
			t.Errorf("%s: %v, want %s", code, r.GetError(), want)
		}
	}
}

// TestPanickingRunFailsThePlan: a plan whose run panics (here a schedule
// naming an operation its request lacks, which no caller hands) ends
// FAILED with INTERNAL; the panic ended the control plane.
func TestPanickingRunFailsThePlan(t *testing.T) {
	st := sessionStore(t)
	ref := store.PlanRef{Owner: "alice", RequestID: "r1"}
	req := &cpv1.SubmitPlanRequest{SessionId: "s1", RequestId: ref.RequestID, Operations: []*cpv1.Operation{{OperationId: "a", ToolName: "object.create"}}}
	if _, err := st.CreatePlan(store.NewPlan{Owner: ref.Owner, Plan: &cpv1.Plan{RequestId: ref.RequestID, SessionId: "s1", State: cpv1.Plan_STATE_PENDING},
		Request: req, Schedule: []int{0}, Digest: "d"}); err != nil {
		t.Fatal(err)
	}
	e := New(Config{OperationTimeout: time.Minute, AgentRetryWindow: 100 * time.Millisecond}, st, fleet.New(time.Second, 0, nil), nil, slog.New(slog.DiscardHandler))
	defer e.Stop()
	e.Enqueue("s1", ref, &Work{Request: req, Schedule: []int{7}})
	if p, _ := ended(t, st, ref, 10*time.Second); p.GetState() != cpv1.Plan_STATE_FAILED || p.GetFailure().GetErrorCode() != "INTERNAL" {
		t.Fatalf("plan %v", p)
	}
}
