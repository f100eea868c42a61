// Package service is the gRPC face of the control plane: it converts between
// the wire types and the domain packages (plan, store, fleet, executor) and
// maps their errors to gRPC statuses, nothing more.
package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/blendplane/blendplane/controlplane/internal/contract"
	"github.com/blendplane/blendplane/controlplane/internal/executor"
	"github.com/blendplane/blendplane/controlplane/internal/fleet"
	"github.com/blendplane/blendplane/controlplane/internal/macro"
	"github.com/blendplane/blendplane/controlplane/internal/plan"
	"github.com/blendplane/blendplane/controlplane/internal/store"
	agentv1 "github.com/blendplane/blendplane/gen/blendplane/agent/v1"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// Limits are the session limits the control plane enforces and reports.
type Limits struct {
	MaxOperationsPerPlan int
	MaxPayloadBytes      int64
	// OpenSessionTimeout bounds starting a session's Blender on the agent.
	OpenSessionTimeout time.Duration
	// Tool time budgets: the default, and the most a contract may ask for.
	DefaultToolTimeBudget, MaxToolTimeBudget time.Duration
}

// Server implements ControlPlaneService.
type Server struct {
	cpv1.UnimplementedControlPlaneServiceServer

	limits Limits
	store  *store.Store
	fleet  *fleet.Fleet
	exec   *executor.Executor
	log    *slog.Logger

	macros *macro.Registry

	mu         sync.Mutex
	registries map[string]*plan.Registry // compiled, by fingerprint
}

var _ cpv1.ControlPlaneServiceServer = (*Server)(nil)

// New returns the service.
func New(limits Limits, st *store.Store, fl *fleet.Fleet, ex *executor.Executor, log *slog.Logger) *Server {
	return &Server{limits: limits, store: st, fleet: fl, exec: ex, log: log, macros: macro.Default(),
		registries: map[string]*plan.Registry{}}
}

// Negotiate agrees on a session contract (seed 003), places the session on
// a runtime that satisfies it and opens it there.
func (s *Server) Negotiate(ctx context.Context, req *cpv1.NegotiateRequest) (*cpv1.NegotiateResponse, error) {
	macros := s.macroRef()
	if err := contract.CheckRequest(req, macros); err != nil {
		return nil, toStatus(err)
	}
	var misfit *contract.Violation
	place, err := s.fleet.Place(func(rt *cpv1.Runtime) bool {
		v := contract.Fits(req, rt)
		if v != nil && misfit == nil {
			misfit = v
		}
		return v == nil
	})
	if errors.Is(err, fleet.ErrNoFit) && misfit != nil {
		return nil, toStatus(misfit)
	}
	if err != nil {
		return nil, toStatus(err)
	}
	c, err := contract.Build(req, contract.Offer{
		Runtime: place.Runtime, Resources: place.Resources,
		MaxOperationsPerPlan: int32(s.limits.MaxOperationsPerPlan), MaxPayloadBytes: s.limits.MaxPayloadBytes,
		MaxToolTimeBudgetMs: s.limits.MaxToolTimeBudget.Milliseconds(), DefaultToolBudgetMs: s.limits.DefaultToolTimeBudget.Milliseconds(),
		MacroRegistry: macros,
	})
	if err != nil {
		return nil, toStatus(err)
	}
	agent, err := s.fleet.Client(place.Address)
	if err != nil {
		return nil, toStatus(err)
	}
	sessionID := executor.NewID("s")
	octx, cancel := context.WithTimeout(ctx, s.limits.OpenSessionTimeout)
	defer cancel()
	opened, err := agent.OpenSession(octx, &agentv1.OpenSessionRequest{SessionId: sessionID, RuntimeId: place.Runtime.GetRuntimeId()})
	if err != nil {
		return nil, toStatus(fmt.Errorf("%w: open session on agent %s: %s", ErrAgentUnavailable, place.AgentID, status.Convert(err).Message()))
	}
	c.SessionId, c.AgentId = sessionID, place.AgentID
	c.BlenderProfile = opened.GetBlenderProfile()
	c.BaselineSceneHash = opened.GetBaselineSceneHash()
	contract.Seal(c)
	c.CreateTime = timestamppb.Now()
	err = s.store.PutSession(store.Session{
		Contract:     c,
		AgentAddress: place.Address,
		RuntimeID:    place.Runtime.GetRuntimeId(),
		Registry:     place.Runtime.GetRegistry(),
	})
	if err != nil {
		// Do not leave a Blender running for a session nobody can reach.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		agent.CloseSession(cctx, &agentv1.CloseSessionRequest{SessionId: sessionID})
		return nil, toStatus(err)
	}
	s.log.Info("session negotiated", "session_id", sessionID, "agent_id", place.AgentID,
		"runtime_id", place.Runtime.GetRuntimeId(), "client", req.GetHostProfile().GetClientName(),
		"feature_flags", c.GetCapabilities().GetFeatureFlags())
	return &cpv1.NegotiateResponse{Contract: c}, nil
}

// SubmitPlan checks a plan and queues it, or refuses it whole.
func (s *Server) SubmitPlan(ctx context.Context, req *cpv1.SubmitPlanRequest) (*cpv1.SubmitPlanResponse, error) {
	sess, err := s.store.Session(req.GetSessionId())
	if err != nil {
		return nil, toStatus(err)
	}
	limits := sess.Contract.GetLimits()
	if size := int64(proto.Size(req)); size > limits.GetMaxPayloadBytes() {
		return nil, toStatus(&plan.Error{Reason: plan.ReasonContractViolation,
			Message:    fmt.Sprintf("the request is %d bytes; the session's contract allows %d: split the plan", size, limits.GetMaxPayloadBytes()),
			Violations: []plan.Violation{{Field: "operations", Description: fmt.Sprintf("%d bytes, at most %d", size, limits.GetMaxPayloadBytes())}}})
	}
	reg, err := s.registry(sess.Registry)
	if err != nil {
		return nil, toStatus(err)
	}
	ops, err := s.macros.ExpandPlan(toPlanOperations(req.GetOperations()))
	if err != nil {
		return nil, toStatus(err)
	}
	if n, max := len(ops), int(limits.GetMaxOperationsPerPlan()); n > max {
		return nil, toStatus(&plan.Error{Reason: plan.ReasonContractViolation,
			Message:    fmt.Sprintf("the plan has %d operations (macros expanded); the session's contract allows %d: split it", n, max),
			Violations: []plan.Violation{{Field: "operations", Description: fmt.Sprintf("%d operations, at most %d", n, max)}}})
	}
	sched, err := plan.Check(ops, reg)
	if err != nil {
		return nil, toStatus(err)
	}
	callable := map[string]bool{}
	for _, t := range sess.Contract.GetCapabilities().GetTools() {
		callable[t] = true
	}
	gate := plan.Contract{Callable: callable, Atomic: req.GetAtomic(),
		Nondeterministic: slices.Contains(sess.Contract.GetCapabilities().GetFeatureFlags(), contract.FlagNondeterministic)}
	if err := plan.CheckContract(ops, reg, gate); err != nil {
		return nil, toStatus(err)
	}
	if len(ops) != len(req.GetOperations()) || macroUsed(req.GetOperations()) {
		// Store and run the expanded plan: receipts show each step.
		req = proto.Clone(req).(*cpv1.SubmitPlanRequest)
		req.Operations = fromPlanOperations(ops)
	}
	p := &cpv1.Plan{
		RequestId:           req.GetRequestId(),
		SessionId:           req.GetSessionId(),
		State:               cpv1.Plan_STATE_PENDING,
		Atomic:              req.GetAtomic(),
		RegistryFingerprint: sess.Registry.GetFingerprint(),
		CreateTime:          timestamppb.Now(),
	}
	p.UpdateTime = p.CreateTime
	if req.GetValidateOnly() {
		p.State = cpv1.Plan_STATE_VALIDATED
		p.Schedule = scheduleIDs(req.GetOperations(), sched)
		return &cpv1.SubmitPlanResponse{Plan: p}, nil
	}
	digest := planDigest(req.GetSessionId(), ops, req.GetAtomic())
	existing, err := s.store.CreatePlan(store.NewPlan{Plan: p, Request: req, Schedule: sched, Digest: digest})
	switch {
	case errors.Is(err, store.ErrPlanExists) && existing == digest:
		// The same plan again: no new side effects, answer with the stored one.
		stored, err := s.store.Plan(req.GetRequestId())
		if err != nil {
			return nil, toStatus(err)
		}
		return &cpv1.SubmitPlanResponse{Plan: stored}, nil
	case errors.Is(err, store.ErrPlanExists):
		return nil, toStatus(fmt.Errorf("%w: request_id %q was already used for a different plan; use a new request_id",
			ErrIdempotencyConflict, req.GetRequestId()))
	case err != nil:
		return nil, toStatus(err)
	}
	s.exec.Enqueue(req.GetSessionId(), req.GetRequestId())
	s.log.Info("plan accepted", "request_id", req.GetRequestId(), "session_id", req.GetSessionId(), "operations", len(ops))
	p.Schedule = scheduleIDs(req.GetOperations(), sched)
	return &cpv1.SubmitPlanResponse{Plan: p}, nil
}

// StreamReceipts sends stored receipts from the cursor, then live ones, and
// returns when the plan is terminal and every receipt was sent.
func (s *Server) StreamReceipts(req *cpv1.StreamReceiptsRequest, stream grpc.ServerStreamingServer[cpv1.StreamReceiptsResponse]) error {
	const page = 512
	id := req.GetRequestId()
	cursor := max(req.GetStartSequence(), 1)
	var lastProgress *cpv1.Progress
	wantProgress := false
	if st, err := s.store.PlanState(id); err == nil {
		if sess, err := s.store.Session(st.GetSessionId()); err == nil {
			wantProgress = slices.Contains(sess.Contract.GetCapabilities().GetFeatureFlags(), contract.FlagProgressEvents)
		}
	}
	for {
		st, err := s.store.PlanState(id)
		if err != nil {
			return toStatus(err)
		}
		var wake <-chan struct{}
		if !store.IsTerminal(st.GetState()) {
			// Watch before reading, then read the state again, so no commit
			// can fall between the read and the wait.
			wake = s.store.Watch(id)
			if st, err = s.store.PlanState(id); err != nil {
				return toStatus(err)
			}
		}
		receipts, err := s.store.Receipts(id, cursor, page)
		if err != nil {
			return toStatus(err)
		}
		for _, r := range receipts {
			if err := stream.Send(&cpv1.StreamReceiptsResponse{Event: &cpv1.StreamReceiptsResponse_Receipt{Receipt: r}}); err != nil {
				return err
			}
			cursor = r.GetSequence() + 1
		}
		if len(receipts) == page {
			continue
		}
		if pg := s.store.Progress(id); wantProgress && pg != nil && pg != lastProgress {
			lastProgress = pg
			if err := stream.Send(&cpv1.StreamReceiptsResponse{Event: &cpv1.StreamReceiptsResponse_Progress{Progress: pg}}); err != nil {
				return err
			}
		}
		if store.IsTerminal(st.GetState()) && cursor > st.GetReceiptCount() {
			return nil
		}
		if wake == nil {
			continue
		}
		select {
		case <-wake:
		case <-stream.Context().Done():
			return toStatus(stream.Context().Err())
		}
	}
}

// GetPlan returns a plan with its state and schedule.
func (s *Server) GetPlan(ctx context.Context, req *cpv1.GetPlanRequest) (*cpv1.GetPlanResponse, error) {
	p, err := s.store.Plan(req.GetRequestId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &cpv1.GetPlanResponse{Plan: p}, nil
}

// ListAgents lists the registered agents.
func (s *Server) ListAgents(ctx context.Context, req *cpv1.ListAgentsRequest) (*cpv1.ListAgentsResponse, error) {
	return &cpv1.ListAgentsResponse{Agents: s.fleet.List()}, nil
}

// RegisterAgent records an agent's registration or heartbeat.
func (s *Server) RegisterAgent(ctx context.Context, req *cpv1.RegisterAgentRequest) (*cpv1.RegisterAgentResponse, error) {
	s.fleet.Register(req)
	// Compile new registries now, not on the first plan that needs them.
	for _, rt := range req.GetRuntimes() {
		s.mu.Lock()
		_, known := s.registries[rt.GetRegistry().GetFingerprint()]
		s.mu.Unlock()
		if !known {
			go s.registry(rt.GetRegistry())
		}
	}
	return &cpv1.RegisterAgentResponse{HeartbeatIntervalSeconds: int32(s.fleet.Heartbeat() / time.Second)}, nil
}

// registry compiles a session's tool registry once per fingerprint.
func (s *Server) registry(r *cpv1.ToolRegistry) (*plan.Registry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if reg, ok := s.registries[r.GetFingerprint()]; ok {
		return reg, nil
	}
	defs := make([]plan.ToolDef, 0, len(r.GetTools()))
	for _, t := range r.GetTools() {
		defs = append(defs, plan.ToolDef{Name: t.GetName(), Safety: plan.SafetyLevel(t.GetSafetyLevel()),
			InputSchema: t.GetInputSchema().AsMap(), Mode: t.GetSafetyMode(), Rollback: t.GetRollbackMethod(),
			Determinism: t.GetDeterminismClass()})
	}
	reg, err := plan.NewRegistry(defs)
	if err != nil {
		return nil, fmt.Errorf("compile tool registry %s: %w", r.GetFingerprint(), err)
	}
	s.registries[r.GetFingerprint()] = reg
	return reg, nil
}

func toPlanOperations(in []*cpv1.Operation) []plan.Operation {
	ops := make([]plan.Operation, len(in))
	for i, o := range in {
		ops[i] = plan.Operation{
			ID:        o.GetOperationId(),
			Tool:      o.GetToolName(),
			Args:      o.GetArgs().AsMap(),
			DependsOn: o.GetDependsOn(),
			Safety:    plan.SafetyLevel(o.GetSafetyLevel()),
			Verify:    o.GetVerify(),
		}
	}
	return ops
}

func fromPlanOperations(ops []plan.Operation) []*cpv1.Operation {
	out := make([]*cpv1.Operation, len(ops))
	for i, o := range ops {
		args, _ := structpb.NewStruct(o.Args) // args came from a Struct or a macro's JSON values
		out[i] = &cpv1.Operation{OperationId: o.ID, ToolName: o.Tool, Args: args, DependsOn: o.DependsOn,
			SafetyLevel: cpv1.SafetyLevel(o.Safety), Verify: o.Verify}
	}
	return out
}

func macroUsed(ops []*cpv1.Operation) bool {
	for _, o := range ops {
		if strings.HasPrefix(o.GetToolName(), macro.Prefix) {
			return true
		}
	}
	return false
}

func scheduleIDs(ops []*cpv1.Operation, sched []int) []string {
	ids := make([]string, len(sched))
	for i, idx := range sched {
		ids[i] = ops[idx].GetOperationId()
	}
	return ids
}

// planDigest binds a plan's content to its session: the same request id in
// another session is a different plan.
func planDigest(sessionID string, ops []plan.Operation, atomic bool) string {
	h := sha256.Sum256([]byte(sessionID + "\x00" + plan.Digest(ops, atomic)))
	return hex.EncodeToString(h[:])
}
