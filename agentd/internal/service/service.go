// Package service is agentd's gRPC face: AgentService, converting wire types
// to the sessions package and mapping its errors to gRPC codes.
package service

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/blendplane/blendplane/agentd/internal/journal"
	"github.com/blendplane/blendplane/agentd/internal/sessions"
	agentv1 "github.com/blendplane/blendplane/gen/blendplane/agent/v1"
)

// Server implements AgentService.
type Server struct {
	agentv1.UnimplementedAgentServiceServer
	agentID  string
	hostname string
	sessions *sessions.Manager
}

var _ agentv1.AgentServiceServer = (*Server)(nil)

// New returns the service.
func New(agentID, hostname string, m *sessions.Manager) *Server {
	return &Server{agentID: agentID, hostname: hostname, sessions: m}
}

// Describe returns the agent's identity and runtimes.
func (s *Server) Describe(ctx context.Context, _ *agentv1.DescribeRequest) (*agentv1.DescribeResponse, error) {
	return &agentv1.DescribeResponse{
		AgentId: s.agentID, Hostname: s.hostname,
		Runtimes: s.sessions.Runtimes(), SessionCount: int32(s.sessions.Count()),
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

// Execute runs one operation.
func (s *Server) Execute(ctx context.Context, req *agentv1.ExecuteRequest) (*agentv1.ExecuteResponse, error) {
	r, err := s.sessions.Execute(ctx, sessions.Operation{
		SessionID: req.GetSessionId(), RequestID: req.GetRequestId(), OperationID: req.GetOperationId(),
		MCPCallID: req.GetMcpCallId(), Tool: req.GetToolName(), Args: req.GetArgs().AsMap(),
		Safety: req.GetSafetyLevel(), IdempotencyKey: req.GetIdempotencyKey(),
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return &agentv1.ExecuteResponse{Receipt: r}, nil
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
