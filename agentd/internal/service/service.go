// Package service is agentd's gRPC face: AgentService, converting wire types
// to the sessions package and mapping its errors to gRPC codes.
package service

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/blendplane/blendplane/agentd/internal/journal"
	"github.com/blendplane/blendplane/agentd/internal/sessions"
	agentv1 "github.com/blendplane/blendplane/gen/blendplane/agent/v1"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// Server implements AgentService.
type Server struct {
	agentv1.UnimplementedAgentServiceServer
	agentID   string
	hostname  string
	sessions  *sessions.Manager
	resources func() *cpv1.Resources
}

var _ agentv1.AgentServiceServer = (*Server)(nil)

// New returns the service.
func New(agentID, hostname string, m *sessions.Manager, resources func() *cpv1.Resources) *Server {
	return &Server{agentID: agentID, hostname: hostname, sessions: m, resources: resources}
}

// Describe returns the agent's identity and runtimes.
func (s *Server) Describe(ctx context.Context, _ *agentv1.DescribeRequest) (*agentv1.DescribeResponse, error) {
	return &agentv1.DescribeResponse{
		AgentId: s.agentID, Hostname: s.hostname,
		Runtimes: s.sessions.Runtimes(), SessionCount: int32(s.sessions.Count()), Resources: s.resources(),
	}, nil
}

// OpenSession starts a session's Blender.
func (s *Server) OpenSession(ctx context.Context, req *agentv1.OpenSessionRequest) (*agentv1.OpenSessionResponse, error) {
	prof, hash, err := s.sessions.Open(ctx, req.GetSessionId(), req.GetRuntimeId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &agentv1.OpenSessionResponse{BlenderProfile: prof, BaselineSceneHash: hash}, nil
}

// Execute runs a batch of operations and streams their receipts, and the
// progress of long operations in between.
func (s *Server) Execute(req *agentv1.ExecuteRequest, stream grpc.ServerStreamingServer[agentv1.ExecuteResponse]) error {
	ops := make([]sessions.Operation, len(req.GetOperations()))
	for i, o := range req.GetOperations() {
		ops[i] = sessions.Operation{
			OperationID: o.GetOperationId(), MCPCallID: o.GetMcpCallId(), Tool: o.GetToolName(),
			Args: o.GetArgs().AsMap(), Safety: o.GetSafetyLevel(), IdempotencyKey: o.GetIdempotencyKey(),
			Budget: time.Duration(o.GetTimeBudgetMs()) * time.Millisecond,
			Verify: o.GetVerify(),
		}
	}
	// Receipts come from the journal's committer goroutine, progress from
	// the running call: one stream, so sends take turns.
	var mu sync.Mutex
	send := func(resp *agentv1.ExecuteResponse) error {
		mu.Lock()
		defer mu.Unlock()
		return stream.Send(resp)
	}
	err := s.sessions.Execute(stream.Context(), req.GetSessionId(), req.GetRequestId(), ops,
		func(r *cpv1.Receipt) error {
			return send(&agentv1.ExecuteResponse{Event: &agentv1.ExecuteResponse_Receipt{Receipt: r}})
		},
		func(p *cpv1.Progress) {
			send(&agentv1.ExecuteResponse{Event: &agentv1.ExecuteResponse_Progress{Progress: p}}) // best effort
		})
	return toStatus(err)
}

// Rollback undoes committed operations and streams ROLLED_BACK receipts.
func (s *Server) Rollback(req *agentv1.RollbackRequest, stream grpc.ServerStreamingServer[agentv1.RollbackResponse]) error {
	err := s.sessions.Rollback(stream.Context(), req.GetSessionId(), req.GetRequestId(), req.GetIdempotencyKeys(), func(r *cpv1.Receipt) error {
		return stream.Send(&agentv1.RollbackResponse{Receipt: r})
	})
	return toStatus(err)
}

// Cancel interrupts a plan's running batch.
func (s *Server) Cancel(ctx context.Context, req *agentv1.CancelRequest) (*agentv1.CancelResponse, error) {
	interrupted, err := s.sessions.Cancel(req.GetSessionId(), req.GetRequestId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &agentv1.CancelResponse{Interrupted: interrupted}, nil
}

// CloseSession stops a session's Blender.
func (s *Server) CloseSession(ctx context.Context, req *agentv1.CloseSessionRequest) (*agentv1.CloseSessionResponse, error) {
	if err := s.sessions.Close(req.GetSessionId()); err != nil {
		return nil, toStatus(err)
	}
	return &agentv1.CloseSessionResponse{}, nil
}

// toStatus maps the sessions package's errors to gRPC codes.
func toStatus(err error) error {
	switch {
	case err == nil:
		return nil
	case status.Code(err) != codes.Unknown:
		return err // already a status (a failed stream send)
	case errors.Is(err, sessions.ErrNotFound), errors.Is(err, journal.ErrSessionNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, sessions.ErrUnknownRuntime):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, sessions.ErrBroken):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}
