package store

import (
	"errors"
	"fmt"
	"testing"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// waiting stores a plan that waits for approval and returns its approval id.
func waiting(t *testing.T, s *Store, owner, id string) string {
	t.Helper()
	p := testPlan(owner, id)
	p.Policy = map[string]OpPolicy{"a": {Decision: "require_approval", InputHash: "h-a"}, "b": {Decision: "allow", InputHash: "h-b"}}
	p.Approval = &cpv1.Approval{RequestId: id, SessionId: "s1", RequestedBy: owner, State: cpv1.Approval_STATE_PENDING,
		Decisions: []*cpv1.PolicyDecision{{OperationId: "a", ToolName: "object.create", Target: "name=A"}}}
	if _, err := s.CreatePlan(p); err != nil {
		t.Fatal(err)
	}
	if p.Plan.GetState() != cpv1.Plan_STATE_AWAITING_APPROVAL || p.Plan.GetApprovalId() == "" {
		t.Fatalf("stored plan: %v", p.Plan)
	}
	return p.Plan.GetApprovalId()
}

func TestApprovalLifecycle(t *testing.T) {
	s, path := openTest(t)
	rejected := waiting(t, s, "alice", "r1")
	approved := waiting(t, s, "alice", "r2")
	cancelled := waiting(t, s, "bob", "r3")

	// Pending approvals survive a reopen, newest first, filtered.
	s.Close()
	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close() })
	s = s2
	list, _, err := s.Approvals(ApprovalFilter{State: cpv1.Approval_STATE_PENDING}, 0, 10)
	if err != nil || len(list) != 3 || list[0].GetApprovalId() != cancelled || list[2].GetApprovalId() != rejected {
		t.Fatalf("pending approvals after a reopen: %v %v", list, err)
	}
	if list, _, _ := s.Approvals(ApprovalFilter{Owner: "bob"}, 0, 10); len(list) != 1 || list[0].GetApprovalId() != cancelled {
		t.Fatalf("bob's approvals: %v", list)
	}
	page, next, _ := s.Approvals(ApprovalFilter{}, 0, 2)
	rest, last, _ := s.Approvals(ApprovalFilter{}, next, 2)
	if len(page) != 2 || next == 0 || len(rest) != 1 || last != 0 || rest[0].GetApprovalId() != rejected {
		t.Fatalf("paging: %v %d %v %d", page, next, rest, last)
	}
	if active, _ := s.ActivePlans(); len(active) != 3 {
		t.Fatalf("waiting plans are active: %v", active)
	}

	// Reject: the plan fails APPROVAL_REJECTED and leaves the queue.
	if _, ref, err := s.Resolve(Resolution{ApprovalID: rejected, Decision: cpv1.Decision_DECISION_REJECT, By: "lead"}); err != nil || ref.RequestID != "r1" {
		t.Fatal(err)
	}
	if p, _ := s.PlanState(PlanRef{"alice", "r1"}); p.GetState() != cpv1.Plan_STATE_FAILED || p.GetFailure().GetErrorCode() != ErrorApprovalRejected {
		t.Fatalf("rejected plan: %v", p)
	}
	if _, _, err := s.Resolve(Resolution{ApprovalID: rejected, Decision: cpv1.Decision_DECISION_APPROVE_ONCE, By: "lead"}); !errors.Is(err, ErrApprovalResolved) {
		t.Fatalf("resolving twice: %v", err)
	}

	// Always allow: the plan is pending again and the rule persisted, once.
	rule := &cpv1.PolicyRule{Principal: "alice", ToolName: "object.create", Target: "name=A", CreatedBy: "lead"}
	a, _, err := s.Resolve(Resolution{ApprovalID: approved, Decision: cpv1.Decision_DECISION_APPROVE_AND_ALWAYS_ALLOW, By: "lead",
		Rules: []*cpv1.PolicyRule{rule}})
	if err != nil || a.GetState() != cpv1.Approval_STATE_APPROVED || a.GetResolvedBy() != "lead" || rule.GetRuleId() == "" {
		t.Fatalf("approve: %v %v %v", a, rule, err)
	}
	if p, _ := s.PlanState(PlanRef{"alice", "r2"}); p.GetState() != cpv1.Plan_STATE_PENDING {
		t.Fatalf("approved plan: %v", p)
	}
	if id, _ := s.RuleFor("alice", "object.create", "name=A"); id != rule.GetRuleId() {
		t.Fatalf("RuleFor: %q", id)
	}
	if id, _ := s.RuleFor("bob", "object.create", "name=A"); id != "" {
		t.Fatalf("RuleFor another principal: %q", id)
	}

	// The approved plan's audit: the operation that needed approval names
	// it and its approver; the other only its decision.
	if err := s.Commit(PlanRef{"alice", "r2"}, &cpv1.Plan{RequestId: "r2", SessionId: "s1", State: cpv1.Plan_STATE_SUCCEEDED, ApprovalId: approved},
		[]*cpv1.Receipt{{Sequence: 1, OperationId: "a"}, {Sequence: 2, OperationId: "b"}}); err != nil {
		t.Fatal(err)
	}
	recs, _, _ := s.AuditRecords(AuditFilter{Owner: "alice", RequestID: "r2"}, 0, 10)
	var got []string
	for _, r := range recs {
		got = append(got, fmt.Sprintf("%s|%s|%s|%s|%s|%s", r.GetEvent(), r.GetOperationId(), r.GetPolicyDecision(), r.GetApprovalId(), r.GetApprovedBy(), r.GetInputHash()))
	}
	want := []string{"approval.approved|||" + approved + "|lead|", "|a|require_approval|" + approved + "|lead|h-a", "|b|allow|||h-b"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("audit:\n got %q\nwant %q", got, want)
	}

	// Cancel a waiting plan: CANCELLED, its approval too; resolving it fails.
	if p, err := s.CancelAwaiting(PlanRef{"bob", "r3"}, "bob"); err != nil || p.GetState() != cpv1.Plan_STATE_CANCELLED {
		t.Fatalf("cancel: %v %v", p, err)
	}
	if _, _, err := s.Resolve(Resolution{ApprovalID: cancelled, Decision: cpv1.Decision_DECISION_APPROVE_ONCE, By: "lead"}); !errors.Is(err, ErrApprovalResolved) {
		t.Fatalf("resolving a cancelled plan's approval: %v", err)
	}
	if active, _ := s.ActivePlans(); len(active) != 0 {
		t.Fatalf("active plans left: %v", active)
	}

	// Rules: listed, deleted, unknown ids refused.
	rules, _, _ := s.Rules(0, 10)
	if len(rules) != 1 {
		t.Fatalf("rules: %v", rules)
	}
	if _, err := s.DeleteRule(rules[0].GetRuleId(), "lead"); err != nil {
		t.Fatal(err)
	}
	if id, _ := s.RuleFor("alice", "object.create", "name=A"); id != "" {
		t.Fatalf("a deleted rule still allows: %q", id)
	}
	if recs, _, err := s.AuditRecords(AuditFilter{Owner: "lead"}, 0, 10); err != nil || len(recs) != 1 ||
		recs[0].GetEvent() != "policy_rule.deleted" || recs[0].GetSubject() != rules[0].GetRuleId() {
		t.Fatalf("the deletion's audit record: %v %v", recs, err)
	}
	for _, id := range []string{rules[0].GetRuleId(), "rule-x", "x"} {
		if _, err := s.DeleteRule(id, "lead"); !errors.Is(err, ErrRuleNotFound) {
			t.Errorf("DeleteRule(%q): %v", id, err)
		}
	}
	for _, id := range []string{"apr-99", "apr-0", "apr-", "x"} {
		if _, err := s.Approval(id); !errors.Is(err, ErrApprovalNotFound) {
			t.Errorf("Approval(%q): %v", id, err)
		}
	}
}

// TestMigratesPreviewRenders: a preview's render recorded before renders
// named their plan (no request id, no operation: it read as an upload)
// names its approval's plan after the migration, in its artifact record
// and in the approval's preview; uploads are left as they are.
func TestMigratesPreviewRenders(t *testing.T) {
	s, path := openTest(t)
	if err := s.PutSession(testSession("alice", "s1"), testRegistry); err != nil {
		t.Fatal(err)
	}
	id := waiting(t, s, "alice", "r1")
	render := &cpv1.Artifact{SessionId: "s1", Name: fmt.Sprintf("preview-%s.png", id), Sha256: "pp", SizeBytes: 3}
	for _, a := range []*cpv1.Artifact{render, {SessionId: "s1", Name: "in.obj", Sha256: "up", SizeBytes: 3}} {
		if _, err := s.PutArtifact(a); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetPreview(id, &cpv1.Preview{Render: render}); err != nil {
		t.Fatal(err)
	}
	s = reopenAt(t, s, path, 12)
	if a, err := s.Artifact("s1", render.GetName(), ""); err != nil || a.GetRequestId() != "r1" || a.GetOperationId() != "" {
		t.Errorf("the preview's render after the migration: %v %v", a, err)
	}
	if ap, err := s.Approval(id); err != nil || ap.GetPreview().GetRender().GetRequestId() != "r1" {
		t.Errorf("the approval's preview after the migration: %v %v", ap, err)
	}
	if a, err := s.Artifact("s1", "in.obj", "up"); err != nil || a.GetRequestId() != "" {
		t.Errorf("an upload after the migration: %v %v", a, err)
	}
}
