package executor

import (
	"log/slog"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/blendplane/blendplane/controlplane/internal/fleet"
	"github.com/blendplane/blendplane/controlplane/internal/store"
	agentv1 "github.com/blendplane/blendplane/gen/blendplane/agent/v1"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// lyingAgent runs an atomic plan's first operation, fails its second, and
// answers the rollback with what an undo cannot say.
type lyingAgent struct {
	agentv1.UnimplementedAgentServiceServer
	undo  *agentv1.RollbackResponse
	rerun cpv1.Receipt_Status // what it answers for operation a, if set, instead of SUCCEEDED
	asked map[string]int
}

func (l *lyingAgent) Execute(req *agentv1.ExecuteRequest, s grpc.ServerStreamingServer[agentv1.ExecuteResponse]) error {
	for _, op := range req.GetOperations() {
		l.asked[op.GetOperationId()]++
		st := cpv1.Receipt_STATUS_SUCCEEDED
		if op.GetOperationId() == "b" {
			st = cpv1.Receipt_STATUS_FAILED
		}
		if l.rerun != cpv1.Receipt_STATUS_UNSPECIFIED && op.GetOperationId() == "a" {
			st = l.rerun
		}
		r := &cpv1.Receipt{OperationId: op.GetOperationId(), IdempotencyKey: op.GetIdempotencyKey(), Status: st}
		if st == cpv1.Receipt_STATUS_FAILED {
			r.Error = &cpv1.Failure{ErrorCode: "INVALID_INPUT"}
		}
		if err := s.Send(&agentv1.ExecuteResponse{Event: &agentv1.ExecuteResponse_Receipt{Receipt: r}}); err != nil {
			return err
		}
		if st != cpv1.Receipt_STATUS_SUCCEEDED {
			return nil
		}
	}
	return nil
}

func (l *lyingAgent) Rollback(req *agentv1.RollbackRequest, s grpc.ServerStreamingServer[agentv1.RollbackResponse]) error {
	return s.Send(l.undo)
}

// TestLyingAgent: an agent whose answers no honest agent gives (a rollback
// that says SUCCEEDED, an empty one, an operation answered ROLLED_BACK)
// ends the plan with a failure; it crashed the control plane (past the
// schedule, or a nil receipt) or asked the operation again forever.
func TestLyingAgent(t *testing.T) {
	for name, agent := range map[string]*lyingAgent{
		"undo says succeeded": {undo: &agentv1.RollbackResponse{Receipt: &cpv1.Receipt{Status: cpv1.Receipt_STATUS_SUCCEEDED}}},
		"undo says not run":   {undo: &agentv1.RollbackResponse{Receipt: &cpv1.Receipt{Status: cpv1.Receipt_STATUS_NOT_RUN}}},
		"empty undo":          {undo: &agentv1.RollbackResponse{}},
		"run says rolled back": {rerun: cpv1.Receipt_STATUS_ROLLED_BACK,
			undo: &agentv1.RollbackResponse{Receipt: &cpv1.Receipt{Status: cpv1.Receipt_STATUS_ROLLED_BACK}}},
	} {
		t.Run(name, func(t *testing.T) { lyingPlan(t, agent) })
	}
}

func lyingPlan(t *testing.T, agent *lyingAgent) {
	agent.asked = map[string]int{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	agentv1.RegisterAgentServiceServer(srv, agent)
	go srv.Serve(lis)
	defer srv.Stop()

	st := sessionStore(t)
	fl := fleet.New(time.Second, 0, nil)
	if err := fl.Register(&cpv1.RegisterAgentRequest{AgentId: "agent-1", Address: lis.Addr().String(), Runtimes: []*cpv1.Runtime{{RuntimeId: "rt"}}}, "agent"); err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	ref := store.PlanRef{Owner: "alice", RequestID: "r1"}
	args, _ := structpb.NewStruct(map[string]any{"type": "cube"})
	req := &cpv1.SubmitPlanRequest{SessionId: "s1", RequestId: ref.RequestID, Atomic: true, Operations: []*cpv1.Operation{
		{OperationId: "a", ToolName: "object.create", Args: args}, {OperationId: "b", ToolName: "object.create", Args: args, DependsOn: []string{"a"}}}}
	if _, err := st.CreatePlan(store.NewPlan{Owner: ref.Owner, Plan: &cpv1.Plan{RequestId: ref.RequestID, SessionId: "s1", State: cpv1.Plan_STATE_PENDING, Atomic: true},
		Request: req, Schedule: []int{0, 1}, Digest: "d"}); err != nil {
		t.Fatal(err)
	}
	e := New(Config{OperationTimeout: time.Minute, AgentRetryWindow: time.Second}, st, fl, nil, slog.New(slog.DiscardHandler))
	defer e.Stop()
	e.Enqueue("s1", ref, &Work{Request: req, Schedule: []int{0, 1}})
	if p, rs := ended(t, st, ref, 20*time.Second); p.GetState() != cpv1.Plan_STATE_FAILED || agent.asked["a"] != 1 {
		t.Fatalf("plan %v, receipts %v, operations asked %v", p, rs, agent.asked)
	}
}
