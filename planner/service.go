package planner

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	plannerv1 "github.com/blendplane/blendplane/gen/blendplane/planner/v1"
)

// Service is PlannerService on a Runtime. The control plane's interceptors
// have authenticated the caller and checked the request before it runs.
type Service struct {
	plannerv1.UnimplementedPlannerServiceServer
	rt *Runtime
}

// NewService serves rt.
func NewService(rt *Runtime) *Service { return &Service{rt: rt} }

// ErrorTypes are seed 002's names of the error classes.
var ErrorTypes = map[plannerv1.RunError_Type]string{
	plannerv1.RunError_TYPE_VALIDATION:     "ValidationError",
	plannerv1.RunError_TYPE_AUTH:           "AuthError",
	plannerv1.RunError_TYPE_POLICY:         "PolicyError",
	plannerv1.RunError_TYPE_TOOL_EXECUTION: "ToolExecutionError",
	plannerv1.RunError_TYPE_MODEL:          "ModelError",
}

func (s *Service) Run(ctx context.Context, req *plannerv1.RunRequest) (*plannerv1.RunResponse, error) {
	sub := newSubscriber()
	run, err := s.rt.start(s.rt.opts.Caller(ctx), req.GetPrompt(), req.GetThreadId(), sub)
	if err != nil {
		return nil, toStatus(err)
	}
	defer s.rt.unsubscribe(run.GetRunId(), sub)
	rested, err := waitRest(ctx, sub)
	if err != nil {
		return nil, toStatus(err)
	}
	return &plannerv1.RunResponse{Run: rested}, nil
}

func (s *Service) StreamRun(req *plannerv1.StreamRunRequest, stream plannerv1.PlannerService_StreamRunServer) error {
	ctx := stream.Context()
	sub := newSubscriber()
	run, err := s.rt.start(s.rt.opts.Caller(ctx), req.GetPrompt(), req.GetThreadId(), sub)
	if err != nil {
		return toStatus(err)
	}
	defer s.rt.unsubscribe(run.GetRunId(), sub)
	if err := stream.Send(&plannerv1.StreamRunResponse{Event: &plannerv1.StreamRunResponse_Status{Status: &plannerv1.StatusEvent{
		State: run.GetState(), RunId: run.GetRunId(), ThreadId: run.GetThreadId()}}}); err != nil {
		return err
	}
	for {
		ev, err := sub.next(ctx)
		if err != nil {
			return toStatus(err)
		}
		if err := stream.Send(ev); err != nil {
			return err
		}
		if ev.GetResult() != nil {
			return nil
		}
	}
}

// waitRest returns the run when it next rests.
func waitRest(ctx context.Context, sub *subscriber) (*plannerv1.Run, error) {
	for {
		ev, err := sub.next(ctx)
		if err != nil {
			return nil, err
		}
		if ev.GetResult() != nil {
			return ev.GetResult(), nil
		}
	}
}

func (s *Service) GetRun(ctx context.Context, req *plannerv1.GetRunRequest) (*plannerv1.GetRunResponse, error) {
	run, err := s.rt.ownRun(ctx, req.GetRunId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &plannerv1.GetRunResponse{Run: run}, nil
}

func (s *Service) GetThread(ctx context.Context, req *plannerv1.GetThreadRequest) (*plannerv1.GetThreadResponse, error) {
	t, err := s.rt.st.thread(req.GetThreadId())
	if errors.Is(err, errNotFound) || err == nil && t.GetPrincipal() != s.rt.opts.Caller(ctx) {
		return nil, toStatus(&Error{Type: plannerv1.RunError_TYPE_VALIDATION, Code: codes.NotFound, Msg: "no thread " + req.GetThreadId() + " of yours"})
	}
	if err != nil {
		return nil, toStatus(err)
	}
	return &plannerv1.GetThreadResponse{Thread: t}, nil
}

func (s *Service) ListPendingApprovals(ctx context.Context, _ *plannerv1.ListPendingApprovalsRequest) (*plannerv1.ListPendingApprovalsResponse, error) {
	who := s.rt.opts.Caller(ctx)
	var out []*plannerv1.PendingApproval
	err := s.rt.st.runs(func(run *plannerv1.Run) error {
		if run.GetPrincipal() != who || run.GetState() != plannerv1.Run_STATE_AWAITING_CONFIRMATION {
			return nil
		}
		for _, a := range run.GetActions() {
			if a.GetState() == plannerv1.Action_STATE_AWAITING_CONFIRMATION {
				out = append(out, &plannerv1.PendingApproval{ApprovalId: a.GetApprovalId(), RunId: run.GetRunId(), ThreadId: run.GetThreadId(),
					ActionId: a.GetActionId(), Tool: a.GetTool(), RequestId: a.GetRequestId()})
			}
		}
		return nil
	})
	if err != nil {
		return nil, toStatus(err)
	}
	// The control plane's approval: the reasons and the preview.
	for _, p := range out {
		resp, err := s.rt.cp.ListApprovals(s.rt.as(ctx, who), &cpv1.ListApprovalsRequest{RequestId: p.GetRequestId()})
		if err != nil {
			return nil, toStatus(err)
		}
		if len(resp.GetApprovals()) > 0 {
			p.Approval = resp.GetApprovals()[0]
		}
	}
	return &plannerv1.ListPendingApprovalsResponse{Approvals: out}, nil
}

func (s *Service) ResolveApproval(ctx context.Context, req *plannerv1.ResolveApprovalRequest) (*plannerv1.ResolveApprovalResponse, error) {
	runID, err := s.rt.st.runOfApproval(req.GetApprovalId())
	if errors.Is(err, errNotFound) {
		return nil, toStatus(&Error{Type: plannerv1.RunError_TYPE_VALIDATION, Code: codes.NotFound, Msg: "no run waits for approval " + req.GetApprovalId()})
	}
	if err != nil {
		return nil, toStatus(err)
	}
	sub := s.rt.subscribe(runID)
	defer s.rt.unsubscribe(runID, sub)
	// The decision is the control plane's, taken as the caller's: its
	// approve scope, its rules. The run follows its plan and resumes.
	if _, err := s.rt.cp.ResolveApproval(s.rt.as(ctx, s.rt.opts.Caller(ctx)), &cpv1.ResolveApprovalRequest{ApprovalId: req.GetApprovalId(), Decision: req.GetDecision()}); err != nil {
		return nil, err
	}
	run, err := waitRest(ctx, sub)
	if err != nil {
		return nil, toStatus(err)
	}
	if who := s.rt.opts.Caller(ctx); run.GetPrincipal() != who {
		// An approver deciding another principal's run learns how it
		// ended, not what is in it: GetRun refuses it that run.
		run = &plannerv1.Run{RunId: run.GetRunId(), Principal: run.GetPrincipal(), State: run.GetState(), UpdateTime: run.GetUpdateTime()}
	}
	return &plannerv1.ResolveApprovalResponse{Run: run}, nil
}

func (s *Service) ListActionAudit(ctx context.Context, req *plannerv1.ListActionAuditRequest) (*plannerv1.ListActionAuditResponse, error) {
	who := s.rt.opts.Caller(ctx)
	entries, err := s.rt.st.audit(func(e *plannerv1.ActionAudit) bool {
		return e.GetPrincipal() == who && (req.GetRunId() == "" || e.GetRunId() == req.GetRunId())
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return &plannerv1.ListActionAuditResponse{Entries: entries}, nil
}

// ownRun is one of the caller's runs.
func (r *Runtime) ownRun(ctx context.Context, id string) (*plannerv1.Run, error) {
	run, _, err := r.st.run(id)
	if errors.Is(err, errNotFound) || err == nil && run.GetPrincipal() != r.opts.Caller(ctx) {
		return nil, &Error{Type: plannerv1.RunError_TYPE_VALIDATION, Code: codes.NotFound, Msg: "no run " + id + " of yours"}
	}
	return run, err
}

// toStatus maps the runtime's errors to gRPC statuses, with seed 002's
// class as the ErrorInfo reason.
func toStatus(err error) error {
	var e *Error
	switch {
	case errors.As(err, &e):
		st, _ := status.New(e.Code, e.Msg).WithDetails(&errdetails.ErrorInfo{Reason: ErrorTypes[e.Type], Domain: "planner.blendplane"})
		return st.Err()
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "cancelled")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "deadline exceeded")
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codes.Internal, "planner: "+strings.TrimSpace(err.Error()))
}
