package e2e

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// approvalsPolicy keeps the defaults (destructive operations need approval)
// and denies exports outside a naming scheme.
const approvalsPolicy = `rules:
  - name: shot-exports
    tools: [scene.export]
    args: {output: "!shot_*"}
    decision: deny
    reason: exports are named shot_*
`

// TestApprovals: the policy gate and the approval flow end to end, on the
// default policy plus a deny rule: a destructive plan waits and changes
// nothing; its preview names what it would delete and leaves the session's
// scene alone; reject runs nothing; approve once runs it, also after a
// control-plane restart; always-allow skips the next approval of the same
// kind only; a denied tool refuses the plan; only the approve scope
// resolves; the audit names every decision.
func TestApprovals(t *testing.T) {
	c := startClusterOpts(t, clusterOpts{policy: approvalsPolicy})
	sid := c.negotiate(t).GetSessionId()
	_, rs := c.run(t, sid, "setup",
		op("a", "object.create", map[string]any{"type": "cube", "name": "Doomed"}),
		op("b", "object.create", map[string]any{"type": "cube", "name": "Keep"}))
	if rs[len(rs)-1].GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED {
		t.Fatalf("setup: %v", rs)
	}
	base := rs[len(rs)-1].GetSceneHashAfter()
	sceneHash := func() string {
		resp, err := c.client.GetSession(ctxT(t, 10*time.Second), &cpv1.GetSessionRequest{SessionId: sid})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetSession().GetSceneHash()
	}
	submit := func(id string, ops ...*cpv1.Operation) *cpv1.Plan {
		t.Helper()
		resp, err := c.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: sid, RequestId: id, Operations: ops})
		if err != nil {
			t.Fatalf("submit %s: %v", id, err)
		}
		return resp.GetPlan()
	}
	del := func(id, name string) *cpv1.Plan {
		t.Helper()
		return submit(id, op("del", "object.delete", map[string]any{"name": name}))
	}
	resolve := func(client cpv1.ControlPlaneServiceClient, id string, d cpv1.Decision) (*cpv1.ResolveApprovalResponse, error) {
		return client.ResolveApproval(ctxT(t, 10*time.Second), &cpv1.ResolveApprovalRequest{ApprovalId: id, Decision: d})
	}

	// A destructive plan waits; nothing runs.
	p := del("del-1", "Doomed")
	if p.GetState() != cpv1.Plan_STATE_AWAITING_APPROVAL || p.GetApprovalId() == "" {
		t.Fatalf("a destructive plan: %v", p)
	}
	apID := p.GetApprovalId()

	// The stream of a waiting plan says so first.
	stream, err := c.client.StreamReceipts(ctxT(t, time.Minute), &cpv1.StreamReceiptsRequest{RequestId: "del-1"})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := stream.Recv()
	if err != nil || ev.GetAwaitingApproval().GetApprovalId() != apID {
		t.Fatalf("first event on a waiting plan's stream: %v %v", ev, err)
	}

	// The preview: computed on a fork, names the deleted object, leaves the
	// session's scene alone.
	ap := waitPreview(t, c, apID)
	pv := ap.GetPreview()
	if pv.GetState() != cpv1.Preview_STATE_READY || pv.GetSceneHashBefore() != base || pv.GetSceneHashAfter() == base {
		t.Fatalf("preview: %v", pv)
	}
	if !slices.ContainsFunc(pv.GetChanges(), func(ch *cpv1.DatablockChange) bool {
		return ch.GetKind() == cpv1.DatablockChange_KIND_REMOVED && ch.GetCollection() == "objects" && ch.GetName() == "Doomed"
	}) || slices.ContainsFunc(pv.GetChanges(), func(ch *cpv1.DatablockChange) bool { return ch.GetName() == "Keep" }) {
		t.Fatalf("preview changes: %v", pv.GetChanges())
	}
	if ap.GetRequestedBy() != "admin" || len(ap.GetDecisions()) != 1 || ap.GetDecisions()[0].GetReason() == "" ||
		ap.GetDecisions()[0].GetTarget() != "name=Doomed" {
		t.Fatalf("approval: %v", ap)
	}
	if got := sceneHash(); got != base {
		t.Fatalf("the session's scene hash moved while the plan waited and was previewed: %s, was %s", got, base)
	}

	// Without the approve scope: PERMISSION_DENIED; reject runs nothing.
	ana := c.clientAs(t, c.createToken(t, "ana", "plans"))
	if _, err := resolve(ana, apID, cpv1.Decision_DECISION_APPROVE_ONCE); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("resolve without the approve scope: %v", err)
	}
	approver := c.clientAs(t, c.createToken(t, "lead", "plans", "approve"))
	// The approve scope alone sees every approval (SECURITY.md); a token
	// with neither it nor plans sees none.
	onlyApprove := c.clientAs(t, c.createToken(t, "reviewer", "approve"))
	if list, err := onlyApprove.ListApprovals(ctxT(t, 10*time.Second), &cpv1.ListApprovalsRequest{}); err != nil || len(list.GetApprovals()) != 1 {
		t.Fatalf("ListApprovals with only the approve scope: %v %v", list, err)
	}
	agentOnly := c.clientAs(t, c.createToken(t, "joiner", "agent"))
	if _, err := agentOnly.ListApprovals(ctxT(t, 10*time.Second), &cpv1.ListApprovalsRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("ListApprovals with the agent scope: %v", err)
	}
	if _, err := resolve(approver, apID, cpv1.Decision_DECISION_REJECT); err != nil {
		t.Fatal(err)
	}
	if _, err := resolve(approver, apID, cpv1.Decision_DECISION_APPROVE_ONCE); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("resolving twice: %v", err)
	}
	drainStream(t, stream)
	if p := c.plan(t, "del-1"); p.GetState() != cpv1.Plan_STATE_FAILED || p.GetFailure().GetErrorCode() != "APPROVAL_REJECTED" || p.GetReceiptCount() != 0 {
		t.Fatalf("a rejected plan: %v", p)
	}
	if got := sceneHash(); got != base {
		t.Fatalf("a rejected plan changed the scene: %s, was %s", got, base)
	}

	// Approve once, after a control-plane restart: the approval survives.
	p = del("del-2", "Doomed")
	c.cp.stop(t, syscall.SIGTERM)
	c.cp = startDaemon(t, "controlplane", c.cp.cmd.Args[1:]...)
	c.waitAgent(t)
	list, err := approver.ListApprovals(ctxT(t, 10*time.Second), &cpv1.ListApprovalsRequest{State: cpv1.Approval_STATE_PENDING})
	if err != nil || len(list.GetApprovals()) != 1 || list.GetApprovals()[0].GetApprovalId() != p.GetApprovalId() {
		t.Fatalf("pending approvals after a restart: %v %v", list, err)
	}
	if _, err := resolve(approver, p.GetApprovalId(), cpv1.Decision_DECISION_APPROVE_ONCE); err != nil {
		t.Fatal(err)
	}
	rs = c.receipts(t, "del-2", 1)
	if len(rs) != 1 || rs[0].GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED || c.plan(t, "del-2").GetState() != cpv1.Plan_STATE_SUCCEEDED {
		t.Fatalf("an approved plan: %v", rs)
	}
	if pv := waitPreview(t, c, p.GetApprovalId()).GetPreview(); rs[0].GetSceneHashAfter() != pv.GetSceneHashAfter() {
		t.Errorf("the scene after the approved plan (%s) differs from its preview's: %v", rs[0].GetSceneHashAfter(), pv)
	}

	// The audit: the operation's record names the decision, the approval,
	// who approved and the input hash; the decisions have records too.
	audit, err := c.client.ListAuditRecords(ctxT(t, 10*time.Second), &cpv1.ListAuditRecordsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	var opRec *cpv1.AuditRecord
	for _, r := range audit.GetAuditRecords() {
		if strings.HasPrefix(r.GetEvent(), "approval.") { // the admin's token.created ones too
			events = append(events, r.GetRequestId()+" "+r.GetEvent()+" by "+r.GetPrincipal())
		}
		if r.GetRequestId() == "del-2" && r.GetOperationId() == "del" {
			opRec = r
		}
	}
	if !slices.Equal(events, []string{"del-1 approval.rejected by lead", "del-2 approval.approved by lead"}) {
		t.Errorf("decision audit records: %q", events)
	}
	if opRec.GetPolicyDecision() != "require_approval" || opRec.GetApprovalId() != p.GetApprovalId() ||
		opRec.GetApprovedBy() != "lead" || len(opRec.GetInputHash()) != 64 || opRec.GetPolicyRule() != "default" {
		t.Errorf("the approved operation's audit record: %v", opRec)
	}

	// Always allow: the same principal, tool and target run at once from
	// then on; another target still waits; deleting the rule restores it.
	submit("mk-1", op("mk", "object.create", map[string]any{"type": "cube", "name": "Tmp"}),
		op("mk2", "object.create", map[string]any{"type": "cube", "name": "Other"}))
	c.receipts(t, "mk-1", 1)
	p = del("del-tmp-1", "Tmp")
	resp, err := resolve(approver, p.GetApprovalId(), cpv1.Decision_DECISION_APPROVE_AND_ALWAYS_ALLOW)
	if err != nil || len(resp.GetRules()) != 1 || resp.GetRules()[0].GetTarget() != "name=Tmp" {
		t.Fatalf("always allow: %v %v", resp, err)
	}
	c.receipts(t, "del-tmp-1", 1)
	submit("mk-2", op("mk", "object.create", map[string]any{"type": "cube", "name": "Tmp"}))
	c.receipts(t, "mk-2", 1)
	if p := del("del-tmp-2", "Tmp"); p.GetState() == cpv1.Plan_STATE_AWAITING_APPROVAL {
		t.Fatalf("the same kind after always-allow still waits: %v", p)
	}
	if rs := c.receipts(t, "del-tmp-2", 1); len(rs) != 1 || rs[0].GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED {
		t.Fatalf("the always-allowed delete: %v", rs)
	}
	// Its audit record names the persisted rule that allowed it.
	if trail, err := c.client.ListAuditRecords(ctxT(t, 10*time.Second), &cpv1.ListAuditRecordsRequest{RequestId: "del-tmp-2"}); err != nil ||
		len(trail.GetAuditRecords()) != 1 || trail.GetAuditRecords()[0].GetPolicyDecision() != "allow" ||
		trail.GetAuditRecords()[0].GetPolicyRule() != resp.GetRules()[0].GetRuleId() {
		t.Fatalf("the audit of the always-allowed delete: %v %v (rule %s)", trail, err, resp.GetRules()[0].GetRuleId())
	}
	other := del("del-other", "Other")
	if other.GetState() != cpv1.Plan_STATE_AWAITING_APPROVAL {
		t.Fatalf("another target after always-allow: %v", other)
	}
	// A plan waiting for approval holds its place in its session's queue:
	// a plan submitted after it waits behind it (else it could change the
	// scene the approver judges, renaming another object "Other"), and
	// runs once the waiting one is decided.
	submit("behind", op("mk", "object.create", map[string]any{"type": "cube", "name": "Behind"}))
	time.Sleep(time.Second)
	if p := c.plan(t, "behind"); p.GetState() != cpv1.Plan_STATE_PENDING || p.GetReceiptCount() != 0 {
		t.Fatalf("a plan submitted behind one waiting for approval: %v", p)
	}
	// One behind it cancelled: it ends now, never run (its cancel waited
	// for the approval ahead, for as long as no one decided; found by QA).
	submit("behind-cancelled", op("mk", "object.create", map[string]any{"type": "cube", "name": "Never"}))
	cresp, err := c.client.CancelPlan(ctxT(t, 10*time.Second), &cpv1.CancelPlanRequest{RequestId: "behind-cancelled"})
	if err != nil || cresp.GetPlan().GetState() != cpv1.Plan_STATE_CANCELLED {
		t.Fatalf("cancelling a plan queued behind one waiting for approval: %v %v", cresp, err)
	}
	if rs := c.receipts(t, "behind-cancelled", 1); len(rs) != 1 || rs[0].GetStatus() != cpv1.Receipt_STATUS_NOT_RUN {
		t.Fatalf("the cancelled plan's receipts: %v", rs)
	}
	if _, err := resolve(approver, other.GetApprovalId(), cpv1.Decision_DECISION_REJECT); err != nil {
		t.Fatal(err)
	}
	if rs := c.receipts(t, "behind", 1); len(rs) != 1 || rs[0].GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED {
		t.Fatalf("the plan behind, once the approval was decided: %v", rs)
	}
	rules, err := approver.ListPolicyRules(ctxT(t, 10*time.Second), &cpv1.ListPolicyRulesRequest{})
	if err != nil || len(rules.GetRules()) != 1 {
		t.Fatalf("rules: %v %v", rules, err)
	}
	if _, err := approver.DeletePolicyRule(ctxT(t, 10*time.Second), &cpv1.DeletePolicyRuleRequest{RuleId: rules.GetRules()[0].GetRuleId()}); err != nil {
		t.Fatal(err)
	}
	submit("mk-3", op("mk", "object.create", map[string]any{"type": "cube", "name": "Tmp"}))
	c.receipts(t, "mk-3", 1)
	if p := del("del-tmp-3", "Tmp"); p.GetState() != cpv1.Plan_STATE_AWAITING_APPROVAL {
		t.Fatalf("after its rule was deleted: %v", p)
	}

	// Cancelling a waiting plan cancels its approval.
	if _, err := c.client.CancelPlan(ctxT(t, 10*time.Second), &cpv1.CancelPlanRequest{RequestId: "del-tmp-3"}); err != nil {
		t.Fatal(err)
	}
	if p := c.plan(t, "del-tmp-3"); p.GetState() != cpv1.Plan_STATE_CANCELLED || p.GetFailure().GetErrorCode() != "CANCELLED" ||
		!strings.Contains(p.GetFailure().GetMessage(), "while it waited for approval") {
		t.Fatalf("a cancelled waiting plan (its failure says so): %v", p)
	}
	if _, err := resolve(approver, p.GetApprovalId(), cpv1.Decision_DECISION_APPROVE_ONCE); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("resolving a cancelled plan's approval: %v", err)
	}

	// A denied tool refuses the whole plan; nothing runs.
	before := sceneHash()
	_, err = c.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: sid, RequestId: "export", Operations: []*cpv1.Operation{
		op("mk", "object.create", map[string]any{"type": "cube", "name": "Fine"}),
		op("out", "scene.export", map[string]any{"format": "obj", "output": "final.obj"}, "mk"),
	}})
	st := status.Convert(err)
	info, violations := details(st)
	if st.Code() != codes.FailedPrecondition || info.GetReason() != "POLICY_BLOCKED" || len(violations) != 1 ||
		violations[0].GetField() != "operations[1]" {
		t.Fatalf("a denied export: %v %v %v", st, info, violations)
	}
	if got := sceneHash(); got != before {
		t.Fatalf("a refused plan changed the scene")
	}
	if p := submit("export-ok", op("out", "scene.export", map[string]any{"format": "obj", "output": "shot_010.obj"})); p.GetState() == cpv1.Plan_STATE_AWAITING_APPROVAL {
		t.Fatalf("an export in the scheme waits: %v", p)
	}

	// A dry run that fails says so, with the failure contract.
	p = del("del-missing", "Nope")
	if fpv := waitPreview(t, c, p.GetApprovalId()).GetPreview(); fpv.GetState() != cpv1.Preview_STATE_FAILED ||
		fpv.GetFailedOperationId() != "del" || fpv.GetFailure().GetErrorCode() != "NOT_FOUND" || fpv.GetFailure().GetRetryHint() == "" {
		t.Fatalf("the preview of a plan that would fail: %v", fpv)
	}
	if _, err := resolve(approver, p.GetApprovalId(), cpv1.Decision_DECISION_REJECT); err != nil {
		t.Fatal(err)
	}

	// preview_render: a small render of the previewed scene, kept as an
	// artifact of the session.
	resp2, err := c.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: sid, RequestId: "del-render",
		Operations: []*cpv1.Operation{op("del", "object.delete", map[string]any{"name": "Keep"})}, PreviewRender: true})
	if err != nil {
		t.Fatal(err)
	}
	rpv := waitPreview(t, c, resp2.GetPlan().GetApprovalId()).GetPreview()
	if rpv.GetRender().GetName() != "preview-"+resp2.GetPlan().GetApprovalId()+".png" || rpv.GetRender().GetRequestId() != "del-render" ||
		rpv.GetRender().GetOperationId() != "" {
		t.Fatalf("a preview with a render (its plan's, no operation's): %v", rpv)
	}
	if _, png, err := c.download(t, &cpv1.DownloadArtifactRequest{SessionId: sid, Name: rpv.GetRender().GetName()}); err != nil ||
		!strings.HasPrefix(string(png), "\x89PNG") {
		t.Fatalf("the preview render: %v (%d bytes)", err, len(png))
	}
	// Approvers see it too, with the approve scope alone or beside plans
	// (not the owners of the session), and nothing else of the session.
	for name, client := range map[string]cpv1.ControlPlaneServiceClient{"reviewer": onlyApprove, "lead": approver} {
		if _, png, err := downloadAs(t, client, &cpv1.DownloadArtifactRequest{SessionId: sid, Name: rpv.GetRender().GetName()}); err != nil ||
			!strings.HasPrefix(string(png), "\x89PNG") {
			t.Errorf("the preview render, downloaded by the approver %s: %v (%d bytes)", name, err, len(png))
		}
		if _, _, err := downloadAs(t, client, &cpv1.DownloadArtifactRequest{SessionId: sid, Name: "shot_010.obj"}); status.Code(err) != codes.NotFound {
			t.Errorf("another artifact of the session, downloaded by the approver %s: %v", name, err)
		}
	}
	if _, err := resolve(approver, resp2.GetPlan().GetApprovalId(), cpv1.Decision_DECISION_REJECT); err != nil {
		t.Fatal(err)
	}

	// blendctl: submit --watch says the plan waits (--preview-render: its
	// preview has a render), approvals shows its diff, approve (--always,
	// after the id) resumes it and the watch ends with the receipt.
	submit("mk-cli", op("mk", "object.create", map[string]any{"type": "cube", "name": "Cli"}))
	c.receipts(t, "mk-cli", 1)
	file := filepath.Join(t.TempDir(), "del.json")
	os.WriteFile(file, []byte(`{"request_id": "del-cli", "operations": [{"operation_id": "del", "tool_name": "object.delete",
		"safety_level": "destructive", "args": {"name": "Cli"}}]}`), 0o600)
	var out syncBuffer
	watch := c.blendctl("submit", file, "--session", sid, "--preview-render", "--watch")
	watch.Stdout, watch.Stderr = &out, &out
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "blendctl submit --watch to say the plan waits", func() bool { return strings.Contains(out.String(), "waiting for approval") })
	id := c.plan(t, "del-cli").GetApprovalId()
	if pv := waitPreview(t, c, id).GetPreview(); pv.GetRender().GetName() != "preview-"+id+".png" {
		t.Errorf("blendctl submit --preview-render: the preview %v has no render", pv)
	}
	listing, err := c.blendctl("approvals").CombinedOutput()
	if err != nil || !strings.Contains(string(listing), id) || !strings.Contains(string(listing), "- objects/Cli") {
		t.Fatalf("blendctl approvals: %v\n%s", err, listing)
	}
	// As the usage writes it: the id first, then --always.
	if msg, err := c.blendctl("approve", id, "--always").CombinedOutput(); err != nil {
		t.Fatalf("blendctl approve ID --always: %v\n%s", err, msg)
	}
	if rules, err := c.blendctl("policy", "list").CombinedOutput(); err != nil || !strings.Contains(string(rules), "object.delete") {
		t.Fatalf("blendctl policy list after approve --always: %v\n%s", err, rules)
	}
	if err := watch.Wait(); err != nil || !strings.Contains(out.String(), "SUCCEEDED") {
		t.Fatalf("blendctl submit --watch after the approval: %v\n%s", err, out.String())
	}
	// The audit's text names the approval's event and who decided it.
	if trail, err := c.blendctl("audit", "del-cli").CombinedOutput(); err != nil || !strings.Contains(string(trail), "approval.approved") ||
		!strings.Contains(string(trail), id+" by admin") {
		t.Fatalf("blendctl audit of an approved plan: %v\n%s", err, trail)
	}
}

// waitFor polls cond for up to a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// waitPreview waits until an approval's preview is no longer pending.
func waitPreview(t *testing.T, c *cluster, id string) *cpv1.Approval {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		resp, err := c.client.ListApprovals(ctxT(t, 10*time.Second), &cpv1.ListApprovalsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, ap := range resp.GetApprovals() {
			if ap.GetApprovalId() == id && ap.GetPreview().GetState() != cpv1.Preview_STATE_PENDING {
				return ap
			}
		}
	}
	t.Fatalf("no preview for %s", id)
	return nil
}

// drainStream reads a receipt stream to its end.
func drainStream(t *testing.T, s interface {
	Recv() (*cpv1.StreamReceiptsResponse, error)
}) {
	t.Helper()
	for {
		if _, err := s.Recv(); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("stream: %v", err)
			}
			return
		}
	}
}

// TestManyPreviews: more approvals than previews run at once (two on an
// agent), each at its turn in its own session, all get their preview: the
// rest wait for a slot and read their plans when it comes; a plan
// cancelled while its preview waits is not previewed. In one session, a
// plan's preview waits for the plans before it: it is computed on the
// scene the plan will run on.
func TestManyPreviews(t *testing.T) {
	c := startClusterOpts(t, clusterOpts{policy: approvalsPolicy})
	const n = 5
	var sids, ids []string
	for i := range n {
		sid := c.negotiate(t).GetSessionId()
		c.run(t, sid, fmt.Sprintf("setup-%d", i), op("c", "object.create", map[string]any{"type": "cube", "name": fmt.Sprintf("Box%d", i)}))
		sids = append(sids, sid)
	}
	for i, sid := range sids {
		resp, err := c.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: sid, RequestId: fmt.Sprintf("del-%d", i),
			Operations: []*cpv1.Operation{op("del", "object.delete", map[string]any{"name": fmt.Sprintf("Box%d", i)})}})
		if err != nil || resp.GetPlan().GetApprovalId() == "" {
			t.Fatalf("submit %d: %v %v", i, resp, err)
		}
		ids = append(ids, resp.GetPlan().GetApprovalId())
	}
	if _, err := c.client.CancelPlan(ctxT(t, 10*time.Second), &cpv1.CancelPlanRequest{RequestId: fmt.Sprintf("del-%d", n-1)}); err != nil {
		t.Fatal(err)
	}
	for i, id := range ids[:n-1] {
		ap := waitPreview(t, c, id)
		pv := ap.GetPreview()
		if pv.GetState() != cpv1.Preview_STATE_READY || !slices.ContainsFunc(pv.GetChanges(), func(ch *cpv1.DatablockChange) bool {
			return ch.GetKind() == cpv1.DatablockChange_KIND_REMOVED && ch.GetName() == fmt.Sprintf("Box%d", i)
		}) {
			t.Fatalf("preview %d: %v", i, pv)
		}
	}
	list, err := c.client.ListApprovals(ctxT(t, 10*time.Second), &cpv1.ListApprovalsRequest{State: cpv1.Approval_STATE_CANCELLED})
	if err != nil || len(list.GetApprovals()) != 1 || list.GetApprovals()[0].GetApprovalId() != ids[n-1] {
		t.Fatalf("the cancelled plan's approval: %v %v", list, err)
	}

	// In one session: a plan that renames Box0 is submitted before the
	// approval plan that deletes "Moved"; the preview is of the scene after
	// the rename (else it would fail: no "Moved" yet), which the plan before
	// it may take its time to reach.
	if _, err := c.client.CancelPlan(ctxT(t, 10*time.Second), &cpv1.CancelPlanRequest{RequestId: "del-0"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: sids[0], RequestId: "slow-rename",
		Operations: []*cpv1.Operation{
			op("wait", "render.still", map[string]any{"output": "slow.png", "resolution": []any{320, 240}, "samples": 64, "seed": 1}),
			op("ren", "object.rename", map[string]any{"name": "Box0", "new_name": "Moved"}, "wait")}}); err != nil {
		t.Fatal(err)
	}
	resp, err := c.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: sids[0], RequestId: "del-moved",
		Operations: []*cpv1.Operation{op("del", "object.delete", map[string]any{"name": "Moved"})}})
	if err != nil {
		t.Fatal(err)
	}
	pv := waitPreview(t, c, resp.GetPlan().GetApprovalId()).GetPreview()
	if pv.GetState() != cpv1.Preview_STATE_READY || !slices.ContainsFunc(pv.GetChanges(), func(ch *cpv1.DatablockChange) bool {
		return ch.GetKind() == cpv1.DatablockChange_KIND_REMOVED && ch.GetName() == "Moved"
	}) {
		t.Fatalf("the preview of a plan behind another: %v", pv)
	}
	if c.plan(t, "slow-rename").GetState() != cpv1.Plan_STATE_SUCCEEDED {
		t.Fatalf("previewed before the plan ahead of it ended: %v", c.plan(t, "slow-rename"))
	}
}
