package app

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/blendplane/blendplane/controlplane/internal/auth"
	"github.com/blendplane/blendplane/controlplane/internal/plan"
	"github.com/blendplane/blendplane/controlplane/internal/policy"
	"github.com/blendplane/blendplane/controlplane/internal/store"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// gate is what the policy decided for a plan that may run (nothing denied):
// per operation for the audit, and the approval it must wait for, if any.
type gate struct {
	ops      map[string]store.OpPolicy
	approval *cpv1.Approval // nil: nothing needs approval
}

// decide runs the policy over a checked plan. A denied operation refuses
// the whole plan (POLICY_BLOCKED, FAILED_PRECONDITION), naming each one,
// with a repair plan that drops them.
func (a *App) decide(who Principal, sessionID, requestID string, ops []plan.Operation, reg *plan.Registry) (gate, error) {
	g := gate{ops: make(map[string]store.OpPolicy, len(ops))}
	var denied *plan.Error
	var waits []*cpv1.PolicyDecision
	for i, op := range ops {
		def, _ := reg.Lookup(op.Tool) // plan.Check found every tool
		d, err := a.cfg.Policy.Decide(policy.Input{Principal: who.Name, Tool: op.Tool, Safety: def.Safety,
			Unsafe: def.Mode == "unsafe_ops", Args: op.Args}, a.store.RuleFor)
		if err != nil {
			return gate{}, err
		}
		switch d.Mode {
		case policy.Deny:
			if denied == nil {
				denied = &plan.Error{Reason: plan.ReasonPolicyBlocked, Precondition: true}
			}
			denied.Violations = append(denied.Violations, plan.Violation{Field: fmt.Sprintf("operations[%d]", i),
				Description: fmt.Sprintf("operation %q: %s is denied by policy rule %s: %s", op.ID, op.Tool, d.Rule, d.Reason)})
			denied.Repair = append(denied.Repair, plan.RepairStep{OperationID: op.ID, Action: plan.ActionDrop})
		case policy.RequireApproval:
			waits = append(waits, &cpv1.PolicyDecision{OperationId: op.ID, ToolName: op.Tool,
				Mode: cpv1.PolicyDecision_MODE_REQUIRE_APPROVAL, Reason: d.Reason, Rule: d.Rule, Target: d.Target})
		}
		g.ops[op.ID] = store.OpPolicy{Decision: string(d.Mode), Rule: d.Rule}
	}
	if denied != nil {
		denied.Message = fmt.Sprintf("the policy denies %d of the plan's operations; nothing ran: drop them (or ask an admin about the rule)",
			len(denied.Violations))
		return gate{}, denied
	}
	if len(waits) > 0 {
		now := timestamppb.Now()
		g.approval = &cpv1.Approval{RequestId: requestID, SessionId: sessionID, RequestedBy: who.Name,
			State: cpv1.Approval_STATE_PENDING, Decisions: waits, CreateTime: now,
			Preview: &cpv1.Preview{State: cpv1.Preview_STATE_PENDING}}
	}
	return g, nil
}

// hashInputs records each operation's input hash for its audit record; a
// validate-only plan, which stores nothing, skips it.
func (g gate) hashInputs(ops []plan.Operation) {
	for _, op := range ops {
		p := g.ops[op.ID]
		p.InputHash = policy.InputHash(op.Args)
		g.ops[op.ID] = p
	}
}

// mayApprove: who sees every approval and may resolve them.
func mayApprove(who Principal) bool { return who.Has(auth.ScopeApprove) }

// Approvals lists approvals, newest first: every one for principals that
// may approve, the caller's own plans' otherwise.
func (a *App) Approvals(ctx context.Context, who Principal, st cpv1.Approval_State, requestID string, size int32, token string) ([]*cpv1.Approval, string, error) {
	f := store.ApprovalFilter{State: st, RequestID: requestID}
	if !mayApprove(who) {
		f.Owner = who.Name
	}
	query := fmt.Sprintf("%s/%d/%s", f.Owner, f.State, f.RequestID)
	before, err := decodePageToken(token, "approvals", query)
	if err != nil {
		return nil, "", badPageToken(err)
	}
	list, next, err := a.store.Approvals(f, before, pageSize(size))
	if err != nil {
		return nil, "", err
	}
	return list, encodePageToken("approvals", next, query), nil
}

// ResolveApproval rejects or approves a waiting plan. An approved plan runs
// at once (it waited at its turn in its session's queue); "always allow"
// persists one rule per operation that needed approval (its principal,
// tool and target).
func (a *App) ResolveApproval(ctx context.Context, who Principal, id string, decision cpv1.Decision) (*cpv1.Approval, []*cpv1.PolicyRule, error) {
	pending, err := a.store.Approval(id)
	if err != nil {
		return nil, nil, err
	}
	res := store.Resolution{ApprovalID: id, Decision: decision, By: who.Name}
	if decision == cpv1.Decision_DECISION_APPROVE_AND_ALWAYS_ALLOW {
		now := timestamppb.Now()
		for _, d := range pending.GetDecisions() {
			res.Rules = append(res.Rules, &cpv1.PolicyRule{Principal: pending.GetRequestedBy(), ToolName: d.GetToolName(),
				Target: d.GetTarget(), CreatedBy: who.Name, ApprovalId: id, CreateTime: now})
		}
	}
	ap, ref, err := a.store.Resolve(res)
	if err != nil {
		return nil, nil, err
	}
	a.log.Info("approval resolved", "approval_id", id, "request_id", ref.RequestID, "owner", ref.Owner,
		"decision", strings.ToLower(strings.TrimPrefix(decision.String(), "DECISION_")), "by", who.Name, "rules", len(res.Rules))
	return ap, res.Rules, nil
}

// PolicyRules lists the rules persisted by "always allow", oldest first.
func (a *App) PolicyRules(ctx context.Context, size int32, token string) ([]*cpv1.PolicyRule, string, error) {
	after, err := decodePageToken(token, "rules", "")
	if err != nil {
		return nil, "", badPageToken(err)
	}
	list, next, err := a.store.Rules(after, pageSize(size))
	if err != nil {
		return nil, "", err
	}
	return list, encodePageToken("rules", next, ""), nil
}

// DeletePolicyRule removes a persisted rule: the next such operation needs
// approval again.
func (a *App) DeletePolicyRule(ctx context.Context, who Principal, id string) (*cpv1.PolicyRule, error) {
	r, err := a.store.DeleteRule(id, who.Name)
	if err != nil {
		return nil, err
	}
	a.log.Info("policy rule deleted", "rule_id", id, "by", who.Name)
	return r, nil
}

// cancelPlan cancels a plan: one waiting for approval ends at once (its
// approval cancelled), any other through the executor.
func (a *App) cancelPlan(ctx context.Context, by string, ref store.PlanRef) error {
	if _, err := a.store.CancelAwaiting(ref, by); err != nil {
		return err
	}
	return a.exec.Cancel(ctx, ref)
}
