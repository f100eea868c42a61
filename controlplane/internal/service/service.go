// Package service is the gRPC face of the control plane: each handler
// checks its request (protovalidate, in an interceptor), calls the
// application layer (package app), maps its errors to gRPC statuses and
// responds, nothing more.
package service

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/blendplane/blendplane/controlplane/internal/app"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// Server implements ControlPlaneService.
type Server struct {
	cpv1.UnimplementedControlPlaneServiceServer
	app *app.App
	// authOff: --allow-insecure-local, every call is app.Anonymous.
	authOff bool
}

var _ cpv1.ControlPlaneServiceServer = (*Server)(nil)

// New returns the service; authOff says that it runs without tokens.
func New(a *app.App, authOff bool) *Server { return &Server{app: a, authOff: authOff} }

// Negotiate agrees on a session contract and places the session.
func (s *Server) Negotiate(ctx context.Context, req *cpv1.NegotiateRequest) (*cpv1.NegotiateResponse, error) {
	c, err := s.app.Negotiate(ctx, caller(ctx), req)
	if err != nil {
		return nil, toStatus(err)
	}
	return &cpv1.NegotiateResponse{Contract: c}, nil
}

// SubmitPlan checks a plan and queues it, or refuses it whole.
func (s *Server) SubmitPlan(ctx context.Context, req *cpv1.SubmitPlanRequest) (*cpv1.SubmitPlanResponse, error) {
	p, err := s.app.Submit(ctx, caller(ctx), req)
	if err != nil {
		return nil, toStatus(err)
	}
	return &cpv1.SubmitPlanResponse{Plan: p}, nil
}

// StreamReceipts sends stored receipts from the cursor, then live ones, and
// returns when the plan is terminal and every receipt was sent.
func (s *Server) StreamReceipts(req *cpv1.StreamReceiptsRequest, stream grpc.ServerStreamingServer[cpv1.StreamReceiptsResponse]) error {
	ctx := stream.Context()
	return toStatus(s.app.Receipts(ctx, caller(ctx), req.GetOwner(), req.GetRequestId(), req.GetStartSequence(), stream.Send))
}

// GetPlan returns a plan with its state and schedule.
func (s *Server) GetPlan(ctx context.Context, req *cpv1.GetPlanRequest) (*cpv1.GetPlanResponse, error) {
	p, err := s.app.Plan(ctx, caller(ctx), req.GetOwner(), req.GetRequestId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &cpv1.GetPlanResponse{Plan: p}, nil
}

// CancelPlan stops a plan; a plan already terminal is returned as it is.
func (s *Server) CancelPlan(ctx context.Context, req *cpv1.CancelPlanRequest) (*cpv1.CancelPlanResponse, error) {
	p, err := s.app.Cancel(ctx, caller(ctx), req.GetOwner(), req.GetRequestId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &cpv1.CancelPlanResponse{Plan: p}, nil
}

// ListTools lists a session's tool registry, or a runtime's.
func (s *Server) ListTools(ctx context.Context, req *cpv1.ListToolsRequest) (*cpv1.ListToolsResponse, error) {
	reg, err := s.app.Tools(ctx, caller(ctx), req.GetSessionId(), req.GetRuntimeId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &cpv1.ListToolsResponse{
		RegistryRef: &cpv1.ToolRegistryRef{Version: reg.GetVersion(), Fingerprint: reg.GetFingerprint()},
		Tools:       reg.GetTools(),
	}, nil
}

// ListMacros lists the macro registry.
func (s *Server) ListMacros(ctx context.Context, _ *cpv1.ListMacrosRequest) (*cpv1.ListMacrosResponse, error) {
	resp, err := s.app.Macros(ctx)
	return resp, toStatus(err)
}

// ListAgents lists the registered agents, a page at a time.
func (s *Server) ListAgents(ctx context.Context, req *cpv1.ListAgentsRequest) (*cpv1.ListAgentsResponse, error) {
	agents, next, err := s.app.Agents(ctx, req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, toStatus(err)
	}
	return &cpv1.ListAgentsResponse{Agents: agents, NextPageToken: next}, nil
}

// RegisterAgent records an agent's registration or heartbeat.
func (s *Server) RegisterAgent(ctx context.Context, req *cpv1.RegisterAgentRequest) (*cpv1.RegisterAgentResponse, error) {
	resp, err := s.app.RegisterAgent(ctx, caller(ctx), req)
	return resp, toStatus(err)
}

// CreateToken makes a bearer token and returns its secret, once.
func (s *Server) CreateToken(ctx context.Context, req *cpv1.CreateTokenRequest) (*cpv1.CreateTokenResponse, error) {
	t, secret, err := s.app.CreateToken(ctx, caller(ctx), req.GetName(), req.GetScopes(), req.GetTtl().AsDuration())
	if err != nil {
		return nil, toStatus(err)
	}
	return &cpv1.CreateTokenResponse{Token: t, Secret: secret}, nil
}

// ListTokens lists the tokens without their secrets.
func (s *Server) ListTokens(ctx context.Context, req *cpv1.ListTokensRequest) (*cpv1.ListTokensResponse, error) {
	list, next, err := s.app.Tokens(ctx, req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, toStatus(err)
	}
	return &cpv1.ListTokensResponse{Tokens: list, NextPageToken: next}, nil
}

// RevokeToken revokes a token.
func (s *Server) RevokeToken(ctx context.Context, req *cpv1.RevokeTokenRequest) (*cpv1.RevokeTokenResponse, error) {
	t, err := s.app.RevokeToken(ctx, caller(ctx), req.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	return &cpv1.RevokeTokenResponse{Token: t}, nil
}

// ListApprovals pages through approvals, newest first (AIP-158).
func (s *Server) ListApprovals(ctx context.Context, req *cpv1.ListApprovalsRequest) (*cpv1.ListApprovalsResponse, error) {
	list, next, err := s.app.Approvals(ctx, caller(ctx), req.GetState(), req.GetRequestId(), req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, toStatus(err)
	}
	return &cpv1.ListApprovalsResponse{Approvals: list, NextPageToken: next}, nil
}

// ResolveApproval rejects or approves a plan that waits for approval.
func (s *Server) ResolveApproval(ctx context.Context, req *cpv1.ResolveApprovalRequest) (*cpv1.ResolveApprovalResponse, error) {
	ap, rules, err := s.app.ResolveApproval(ctx, caller(ctx), req.GetApprovalId(), req.GetDecision())
	if err != nil {
		return nil, toStatus(err)
	}
	return &cpv1.ResolveApprovalResponse{Approval: ap, Rules: rules}, nil
}

// ListPolicyRules pages through the persisted always-allow rules.
func (s *Server) ListPolicyRules(ctx context.Context, req *cpv1.ListPolicyRulesRequest) (*cpv1.ListPolicyRulesResponse, error) {
	list, next, err := s.app.PolicyRules(ctx, req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, toStatus(err)
	}
	return &cpv1.ListPolicyRulesResponse{Rules: list, NextPageToken: next}, nil
}

// DeletePolicyRule removes a persisted rule.
func (s *Server) DeletePolicyRule(ctx context.Context, req *cpv1.DeletePolicyRuleRequest) (*cpv1.DeletePolicyRuleResponse, error) {
	r, err := s.app.DeletePolicyRule(ctx, caller(ctx), req.GetRuleId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &cpv1.DeletePolicyRuleResponse{Rule: r}, nil
}

// ListAuditRecords pages through the audit log (AIP-158).
func (s *Server) ListAuditRecords(ctx context.Context, req *cpv1.ListAuditRecordsRequest) (*cpv1.ListAuditRecordsResponse, error) {
	records, next, err := s.app.AuditRecords(ctx, caller(ctx), app.AuditQuery{
		Owner: req.GetOwner(), RequestID: req.GetRequestId(), OperationID: req.GetOperationId(), MutationID: req.GetBlenderMutationId(),
	}, req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, toStatus(err)
	}
	return &cpv1.ListAuditRecordsResponse{AuditRecords: records, NextPageToken: next}, nil
}

// ListPlans pages through a session's plans, newest first (AIP-158).
func (s *Server) ListPlans(ctx context.Context, req *cpv1.ListPlansRequest) (*cpv1.ListPlansResponse, error) {
	list, next, err := s.app.Plans(ctx, caller(ctx), req.GetSessionId(), req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, toStatus(err)
	}
	return &cpv1.ListPlansResponse{Plans: list, NextPageToken: next}, nil
}

// GetCaller says who the caller is.
func (s *Server) GetCaller(ctx context.Context, _ *cpv1.GetCallerRequest) (*cpv1.GetCallerResponse, error) {
	who := caller(ctx)
	return &cpv1.GetCallerResponse{Principal: who.Name, Scopes: who.HeldScopes(), AuthDisabled: s.authOff}, nil
}

// GetSession returns a session with its state.
func (s *Server) GetSession(ctx context.Context, req *cpv1.GetSessionRequest) (*cpv1.GetSessionResponse, error) {
	sess, err := s.app.Session(ctx, caller(ctx), req.GetSessionId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &cpv1.GetSessionResponse{Session: sess}, nil
}

// ListSessions pages through the caller's sessions (AIP-158).
func (s *Server) ListSessions(ctx context.Context, req *cpv1.ListSessionsRequest) (*cpv1.ListSessionsResponse, error) {
	list, next, err := s.app.Sessions(ctx, caller(ctx), req.GetPageSize(), req.GetPageToken(), req.GetState(), req.GetAllPrincipals())
	if err != nil {
		return nil, toStatus(err)
	}
	return &cpv1.ListSessionsResponse{Sessions: list, NextPageToken: next}, nil
}

// CloseSession closes a session.
func (s *Server) CloseSession(ctx context.Context, req *cpv1.CloseSessionRequest) (*cpv1.CloseSessionResponse, error) {
	sess, err := s.app.CloseSession(ctx, caller(ctx), req.GetSessionId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &cpv1.CloseSessionResponse{Session: sess}, nil
}

// UploadArtifact stores a client's file in a session: a header first, then
// chunks.
func (s *Server) UploadArtifact(stream grpc.ClientStreamingServer[cpv1.UploadArtifactRequest, cpv1.UploadArtifactResponse]) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return schemaError("header", "an upload without messages: the first must be its header")
	}
	if err != nil {
		return toStatus(err)
	}
	header := first.GetHeader()
	if header == nil {
		return schemaError("header", "the first message of an upload must be its header")
	}
	art, err := s.app.Upload(ctx, caller(ctx), header, func() ([]byte, error) {
		m, err := stream.Recv()
		if err != nil {
			return nil, err // io.EOF ends the content
		}
		if m.GetHeader() != nil {
			return nil, schemaError("header", "an upload has one header, in its first message")
		}
		return m.GetChunk(), nil
	})
	if err != nil {
		return toStatus(err)
	}
	return stream.SendAndClose(&cpv1.UploadArtifactResponse{Artifact: art})
}

// DownloadArtifact streams an artifact: its description, then chunks.
func (s *Server) DownloadArtifact(req *cpv1.DownloadArtifactRequest, stream grpc.ServerStreamingServer[cpv1.DownloadArtifactResponse]) error {
	ctx := stream.Context()
	return toStatus(s.app.Download(ctx, caller(ctx), req.GetSessionId(), req.GetName(), req.GetSha256(), stream.Send))
}

// ListArtifacts lists a session's artifacts (AIP-158).
func (s *Server) ListArtifacts(ctx context.Context, req *cpv1.ListArtifactsRequest) (*cpv1.ListArtifactsResponse, error) {
	list, next, err := s.app.Artifacts(ctx, caller(ctx), req.GetSessionId(), req.GetRequestId(), req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, toStatus(err)
	}
	return &cpv1.ListArtifactsResponse{Artifacts: list, NextPageToken: next}, nil
}

// schemaError is a malformed request the interceptor cannot see (the order
// of a stream's messages).
func schemaError(field, desc string) error {
	return fieldStatus(codes.InvalidArgument, "SCHEMA_INVALID", field, desc)
}
