package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/blendplane/blendplane/controlplane/internal/contract"
	"github.com/blendplane/blendplane/controlplane/internal/executor"
	"github.com/blendplane/blendplane/controlplane/internal/macro"
	"github.com/blendplane/blendplane/controlplane/internal/plan"
	"github.com/blendplane/blendplane/controlplane/internal/store"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// Submit checks a plan against its session's registry and contract and
// queues it, or refuses it whole. The same plan submitted again under the
// same request id returns the stored plan and runs nothing again.
func (a *App) Submit(ctx context.Context, who Principal, req *cpv1.SubmitPlanRequest) (*cpv1.Plan, error) {
	sess, err := a.session(who, req.GetSessionId())
	if err != nil {
		return nil, err
	}
	if sess.Closed() {
		return nil, fmt.Errorf("%w: session %s was closed; negotiate a new one", store.ErrSessionClosed, req.GetSessionId())
	}
	if sess.Broken() {
		return nil, fmt.Errorf("%w: session %s lost its agent and could not be rebuilt exactly elsewhere; negotiate a new one", store.ErrSessionBroken, req.GetSessionId())
	}
	limits := sess.Info.GetContract().GetLimits()
	// The transport refused requests over this server's own limit already:
	// only a contract that tightened it needs a measure (proto.Size walks
	// the whole plan: 40 ms for 100,000 operations).
	if max := limits.GetMaxPayloadBytes(); max < a.cfg.MaxPayloadBytes {
		if size := int64(proto.Size(req)); size > max {
			return nil, &plan.Error{Reason: plan.ReasonContractViolation,
				Message:    fmt.Sprintf("the request is %d bytes; the session's contract allows %d: split the plan", size, max),
				Violations: []plan.Violation{{Field: "operations", Description: fmt.Sprintf("%d bytes, at most %d", size, max)}}}
		}
	}
	fp := sess.RegistryFingerprint()
	reg, err := a.registries.get(fp, func() (*cpv1.ToolRegistry, error) { return a.store.Registry(fp) })
	if err != nil {
		return nil, err
	}
	sent := toPlanOperations(req.GetOperations()) // what a refusal names (macros.Blame)
	ops, err := a.macros.ExpandPlan(sent)
	if err != nil {
		return nil, err
	}
	if n, max := len(ops), int(limits.GetMaxOperationsPerPlan()); n > max {
		return nil, &plan.Error{Reason: plan.ReasonContractViolation,
			Message:    fmt.Sprintf("the plan has %d operations (macros expanded); the session's contract allows %d: split it", n, max),
			Violations: []plan.Violation{{Field: "operations", Description: fmt.Sprintf("%d operations, at most %d", n, max)}}}
	}
	sched, err := plan.Check(ops, reg)
	if err != nil {
		return nil, a.macros.Blame(sent, err)
	}
	capabilities := sess.Info.GetContract().GetCapabilities()
	callable := make(map[string]bool, len(capabilities.GetTools()))
	for _, t := range capabilities.GetTools() {
		callable[t] = true
	}
	gate := plan.Contract{Callable: callable, Atomic: req.GetAtomic(),
		Nondeterministic: slices.Contains(capabilities.GetFeatureFlags(), contract.FlagNondeterministic)}
	if err := plan.CheckContract(ops, reg, gate); err != nil {
		return nil, a.macros.Blame(sent, err)
	}
	if err := distributedRanges(ops); err != nil {
		return nil, a.macros.Blame(sent, err)
	}
	g, err := a.decide(who, req.GetSessionId(), req.GetRequestId(), ops, reg)
	if err != nil {
		return nil, a.macros.Blame(sent, err)
	}
	if len(ops) != len(req.GetOperations()) || macroUsed(req.GetOperations()) {
		// Store and run the expanded plan: receipts show each step.
		req = proto.Clone(req).(*cpv1.SubmitPlanRequest)
		req.Operations = fromPlanOperations(ops)
	}
	p := &cpv1.Plan{
		RequestId:           req.GetRequestId(),
		SessionId:           req.GetSessionId(),
		Owner:               who.Name,
		State:               cpv1.Plan_STATE_PENDING,
		Atomic:              req.GetAtomic(),
		RegistryFingerprint: fp,
		CreateTime:          timestamppb.Now(),
	}
	p.UpdateTime = p.CreateTime
	if req.GetValidateOnly() {
		p.State = cpv1.Plan_STATE_VALIDATED
		p.Schedule = scheduleIDs(req.GetOperations(), sched)
		return p, nil
	}
	g.hashInputs(ops)
	ref := store.PlanRef{Owner: who.Name, RequestID: req.GetRequestId()}
	digest := planDigest(req.GetSessionId(), ops, req.GetAtomic())
	existing, err := a.store.CreatePlan(store.NewPlan{Owner: who.Name, Plan: p, Request: req, Schedule: sched, Digest: digest,
		Policy: g.ops, Approval: g.approval})
	switch {
	case errors.Is(err, store.ErrPlanExists) && existing == digest:
		// The same plan again: no new side effects, answer with the stored one.
		return a.store.Plan(ref)
	case errors.Is(err, store.ErrPlanExists):
		return nil, fmt.Errorf("%w: request_id %q was already used for a different plan; use a new request_id",
			ErrIdempotencyConflict, req.GetRequestId())
	case err != nil:
		return nil, err
	}
	// A plan that needs approval takes its place in the session's queue
	// too: it is previewed at its turn and waits there (executor.Config's
	// AwaitApproval).
	a.exec.Enqueue(req.GetSessionId(), ref, &executor.Work{Request: req, Schedule: sched})
	if g.approval != nil {
		a.log.Info("plan awaits approval", "request_id", req.GetRequestId(), "owner", who.Name, "session_id", req.GetSessionId(),
			"approval_id", g.approval.GetApprovalId(), "operations", len(g.approval.GetDecisions()))
	} else {
		a.log.Info("plan accepted", "request_id", req.GetRequestId(), "owner", who.Name, "session_id", req.GetSessionId(), "operations", len(ops))
	}
	p.Schedule = scheduleIDs(req.GetOperations(), sched)
	return p, nil
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
			MCPCallID: o.GetMcpCallId(),
		}
	}
	return ops
}

func fromPlanOperations(ops []plan.Operation) []*cpv1.Operation {
	out := make([]*cpv1.Operation, len(ops))
	for i, o := range ops {
		args, _ := structpb.NewStruct(o.Args) // args came from a Struct or a macro's JSON values
		out[i] = &cpv1.Operation{OperationId: o.ID, ToolName: o.Tool, Args: args, DependsOn: o.DependsOn,
			SafetyLevel: cpv1.SafetyLevel(o.Safety), Verify: o.Verify, McpCallId: o.MCPCallID}
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

// distributedRanges refuses a render.animation to distribute
// (executor.Distributed) without both ends of its range: the control plane
// splits the range it is given, and an end left to the scene is known only
// on an agent. Checked with the plan, so that nothing before it runs.
func distributedRanges(ops []plan.Operation) error {
	var e *plan.Error
	for i, op := range ops {
		if op.Tool != "render.animation" || op.Args["distribute"] != true {
			continue
		}
		missing := false
		for _, end := range []string{"frame_start", "frame_end"} {
			if _, ok := op.Args[end]; !ok {
				if e == nil {
					e = &plan.Error{Reason: plan.ReasonSchemaInvalid,
						Message: "a render.animation with distribute: true needs frame_start and frame_end (the control plane splits the range it is given); add them"}
				}
				e.Violations = append(e.Violations, plan.Violation{Field: fmt.Sprintf("operations[%d].args.%s", i, end),
					Description: fmt.Sprintf("operation %q: required with distribute: true", op.ID)})
				missing = true
			}
		}
		if missing {
			e.Repair = append(e.Repair, plan.RepairStep{OperationID: op.ID, Action: plan.ActionReplaceArgs})
		}
	}
	if e == nil {
		return nil
	}
	return e
}
