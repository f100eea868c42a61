package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/blendplane/blendplane/gen/blendplane/agent/v1"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// crashPlan is a plan with slow renders between cheap mutations, so that a
// kill after receipt k lands in the middle of the next (slow) operation.
func crashPlan() []*cpv1.Operation {
	render := func(i int) map[string]any {
		return map[string]any{"output": fmt.Sprintf("r%d.png", i), "resolution": []any{320, 240}, "samples": 48, "seed": i}
	}
	var ops []*cpv1.Operation
	prev := ""
	add := func(o *cpv1.Operation) {
		if prev != "" {
			o.DependsOn = []string{prev}
		}
		prev = o.GetOperationId()
		ops = append(ops, o)
	}
	add(op("s01", "object.create", map[string]any{"type": "cube", "name": "Box", "location": []any{0, 0, 1}}))
	add(op("s02", "object.create", map[string]any{"type": "uv_sphere", "name": "Ball", "location": []any{2, 0, 1}}))
	add(op("s03", "render.still", render(3)))
	add(op("s04", "object.set_transform", map[string]any{"name": "Box", "rotation_euler": []any{0, 0, 0.5}}))
	add(op("s05", "object.create", map[string]any{"type": "torus", "name": "Ring"}))
	add(op("s06", "object.delete", map[string]any{"name": "Ball"}))
	add(op("s07", "render.still", render(7)))
	add(op("s08", "object.create", map[string]any{"type": "monkey", "name": "Suzanne", "location": []any{-2, 0, 1}}))
	add(op("s09", "object.set_transform", map[string]any{"name": "Camera", "location": []any{8, -8, 6}}))
	add(op("s10", "render.still", render(10)))
	add(op("s11", "object.create", map[string]any{"type": "cone", "name": "Cone"}))
	add(op("s12", "scene.get_summary", map[string]any{}))
	return ops
}

// reference runs the crash plan without interruption in a fresh session and
// returns each operation's scene_hash_after.
func reference(t *testing.T, c *cluster) []string {
	s := c.negotiate(t)
	p, rs := c.run(t, s.GetSessionId(), "reference", crashPlan()...)
	if p.GetState() != cpv1.Plan_STATE_SUCCEEDED {
		t.Fatalf("reference run: %v", p.GetFailure())
	}
	return hashes(rs)
}

func hashes(rs []*cpv1.Receipt) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.GetSceneHashAfter()
	}
	return out
}

// submitAndKillAfter submits the crash plan and calls kill once receipt
// number after has been streamed, then collects every receipt.
func submitAndKillAfter(t *testing.T, c *cluster, sessionID, requestID string, after []int, kill func(n int)) []*cpv1.Receipt {
	t.Helper()
	_, err := c.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: sessionID, RequestId: requestID, Operations: crashPlan()})
	if err != nil {
		t.Fatal(err)
	}
	var got []*cpv1.Receipt
	next := 0
	for {
		from := int64(len(got) + 1)
		stream, err := c.client.StreamReceipts(ctxT(t, 5*time.Minute), &cpv1.StreamReceiptsRequest{RequestId: requestID, StartSequence: from})
		if err != nil {
			t.Fatal(err)
		}
		broken := false
		for {
			resp, err := stream.Recv()
			if err != nil {
				if status.Code(err) == codes.Unavailable {
					broken = true // the control plane itself was restarted
				} else if !strings.Contains(err.Error(), "EOF") {
					t.Fatalf("stream: %v", err)
				}
				break
			}
			if resp.GetReceipt() == nil {
				continue
			}
			got = append(got, resp.GetReceipt())
			if next < len(after) && len(got) == after[next] {
				kill(after[next])
				next++
			}
		}
		if !broken {
			return got
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// checkSameAsReference: one receipt per operation, in order, without gaps,
// every operation succeeded exactly once, and the scene went through the
// same hashes as in the uninterrupted run.
func checkSameAsReference(t *testing.T, rs []*cpv1.Receipt, ref []string) {
	t.Helper()
	if len(rs) != len(ref) {
		t.Fatalf("%d receipts, want %d: %v", len(rs), len(ref), rs)
	}
	for i, r := range rs {
		if r.GetSequence() != int64(i+1) {
			t.Errorf("receipt %d has sequence %d", i, r.GetSequence())
		}
		if st := r.GetStatus(); st != cpv1.Receipt_STATUS_SUCCEEDED && st != cpv1.Receipt_STATUS_SKIPPED_IDEMPOTENT {
			t.Errorf("receipt %s: %v %v", r.GetOperationId(), st, r.GetError())
		}
		if r.GetSceneHashAfter() != ref[i] {
			t.Errorf("receipt %s: scene %s, uninterrupted run had %s", r.GetOperationId(), r.GetSceneHashAfter(), ref[i])
		}
	}
}

func sessionBlenderPIDs(t *testing.T, c *cluster, sessionID string) []int {
	var out []int
	for _, p := range sessionBlender(t, filepath.Join(c.dir, "agent", "sessions", sessionID)) {
		n, _ := strconv.Atoi(p)
		out = append(out, n)
	}
	return out
}

// TestBlenderKilledMidPlan: kill -9 of the session's Blender in the middle of
// operations; agentd recovers from checkpoint + journal and the plan ends as
// if nothing happened.
func TestBlenderKilledMidPlan(t *testing.T) {
	c := startClusterWith(t, []string{"--checkpoint-every", "3"}, nil)
	ref := reference(t, c)
	s := c.negotiate(t)
	rs := submitAndKillAfter(t, c, s.GetSessionId(), "blender-kill", []int{2, 6, 9}, func(n int) {
		pids := sessionBlenderPIDs(t, c, s.GetSessionId())
		if len(pids) != 1 {
			t.Fatalf("after receipt %d: Blender pids %v", n, pids)
		}
		syscall.Kill(pids[0], syscall.SIGKILL)
		t.Logf("killed Blender %d after receipt %d", pids[0], n)
	})
	checkSameAsReference(t, rs, ref)
	if !strings.Contains(c.agent.log.String(), "session recovered") {
		t.Error("agentd log does not show a recovery")
	}
}

// TestAgentdKilledMidPlan: kill -9 of agentd mid-plan, then a restart on the
// same data dir: same identity, the in-flight operation is re-sent with the
// same key, and the plan finishes with every effect exactly once.
func TestAgentdKilledMidPlan(t *testing.T) {
	c := startClusterWith(t, []string{"--checkpoint-every", "4"}, nil)
	ref := reference(t, c)
	before := c.agentID(t)
	s := c.negotiate(t)
	rs := submitAndKillAfter(t, c, s.GetSessionId(), "agentd-kill", []int{3, 7}, func(n int) {
		c.agent.stop(t, syscall.SIGKILL)
		t.Logf("killed agentd after receipt %d", n)
		// Its Blender dies with it (parent-death signal), never orphaned.
		deadline := time.Now().Add(10 * time.Second)
		for len(sessionBlenderPIDs(t, c, s.GetSessionId())) > 0 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if pids := sessionBlenderPIDs(t, c, s.GetSessionId()); len(pids) > 0 {
			t.Errorf("Blender %v outlived a killed agentd", pids)
		}
		c.restartAgent(t)
	})
	checkSameAsReference(t, rs, ref)
	if after := c.agentID(t); after != before {
		t.Fatalf("agent identity changed across restart: %s → %s", before, after)
	}
}

// TestRetryWindowFromTheOutage: --agent-retry-window counts from when the
// agent stopped answering, not from the start of the batch: agentd killed
// later than the window into one long batch, and back within the window,
// and the plan goes on. (It was counted from the batch's start: such a
// kill failed the plan at once, AGENT_UNAVAILABLE, found by QA.)
func TestRetryWindowFromTheOutage(t *testing.T) {
	const window = 4 * time.Second
	c := startClusterOpts(t, clusterOpts{cpArgs: []string{"--agent-retry-window", window.String()}})
	s := c.negotiate(t)
	var ops []*cpv1.Operation
	prev := ""
	for i := range 60 {
		o := op(fmt.Sprintf("r%02d", i), "render.still", map[string]any{"output": "r.png", "resolution": []any{320, 240}, "samples": 32, "seed": i})
		if prev != "" {
			o.DependsOn = []string{prev}
		}
		prev = o.GetOperationId()
		ops = append(ops, o)
	}
	start := time.Now()
	if _, err := c.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: s.GetSessionId(), RequestId: "long", Operations: ops}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the batch to run longer than the retry window", func() bool { return time.Since(start) > window+time.Second })
	if n := c.plan(t, "long").GetReceiptCount(); n == 0 || n >= int64(len(ops)) {
		t.Skipf("%d receipts %s into the plan: the kill would not land inside its batch", n, time.Since(start))
	}
	c.agent.stop(t, syscall.SIGKILL)
	c.restartAgent(t)
	rs := c.receipts(t, "long", 1)
	if p := c.plan(t, "long"); p.GetState() != cpv1.Plan_STATE_SUCCEEDED || len(rs) != len(ops) {
		t.Fatalf("a plan whose agent was killed %s into its batch and came back: %v (%d receipts)", window, p, len(rs))
	}
}

// TestControlPlaneRestartMidPlan: the control plane is killed mid-plan and
// restarted on its data dir; it resumes the plan from its own store.
func TestControlPlaneRestartMidPlan(t *testing.T) {
	c := startClusterWith(t, nil, nil)
	ref := reference(t, c)
	s := c.negotiate(t)
	rs := submitAndKillAfter(t, c, s.GetSessionId(), "cp-restart", []int{2, 8}, func(n int) {
		args := c.cp.cmd.Args[1:]
		c.cp.stop(t, syscall.SIGKILL)
		t.Logf("killed the control plane after receipt %d", n)
		c.cp = startDaemon(t, "controlplane", args...)
	})
	checkSameAsReference(t, rs, ref)
}

// TestBlendctlWatchAcrossRestart: blendctl submit --watch follows a plan
// while the control plane is down for longer than a quick retry would wait
// (stopped, 8 s, started again): it says the stream was interrupted, opens
// it again once the control plane answers and ends with the plan's end.
func TestBlendctlWatchAcrossRestart(t *testing.T) {
	c := startCluster(t)
	sid := c.negotiateUnsafe(t).GetSessionId()
	gate := filepath.Join(t.TempDir(), "go")
	plan, _ := json.Marshal(map[string]any{"request_id": "held", "operations": []map[string]any{
		{"operation_id": "wait", "tool_name": "python.exec", "safety_level": "destructive",
			"args": map[string]any{"code": fmt.Sprintf("import os, time\nwhile not os.path.exists(%q):\n    time.sleep(0.05)\n", gate)}},
		{"operation_id": "after", "tool_name": "object.create", "safety_level": "safe_write", "depends_on": []string{"wait"},
			"args": map[string]any{"type": "cube", "name": "After"}}}})
	file := filepath.Join(t.TempDir(), "held.json")
	if err := os.WriteFile(file, plan, 0o600); err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	watch := c.blendctl("submit", file, "--session", sid, "--watch")
	watch.Stdout, watch.Stderr = &out, &out
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "blendctl to follow the plan", func() bool { return strings.Contains(out.String(), "plan held ") })
	time.Sleep(500 * time.Millisecond) // its stream open
	args := c.cp.cmd.Args[1:]
	c.cp.stop(t, syscall.SIGTERM)
	time.Sleep(8 * time.Second)
	c.cp = startDaemon(t, "controlplane", args...)
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := watch.Wait(); err != nil || !strings.Contains(out.String(), "SUCCEEDED") ||
		!strings.Contains(out.String(), "once the control plane answers") || !strings.Contains(out.String(), "answers again") {
		t.Fatalf("blendctl submit --watch across a restart: %v\n%s", err, out.String())
	}
}

// TestCloseSessionCancelsItsPlan: closing a session interrupts its running
// plan, which ends CANCELLED saying its session was closed (not "by
// CancelPlan", which no one called).
func TestCloseSessionCancelsItsPlan(t *testing.T) {
	c := startCluster(t)
	sid := c.negotiateUnsafe(t).GetSessionId()
	if _, err := c.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: sid, RequestId: "closed-under", Operations: []*cpv1.Operation{
		op("look", "scene.get_summary", map[string]any{}),
		op("wait", "python.exec", map[string]any{"code": "import time\ntime.sleep(600)"}, "look")}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the plan's first receipt", func() bool { return c.plan(t, "closed-under").GetReceiptCount() == 1 })
	time.Sleep(500 * time.Millisecond) // into its python.exec
	if _, err := c.client.CloseSession(ctxT(t, time.Minute), &cpv1.CloseSessionRequest{SessionId: sid}); err != nil {
		t.Fatal(err)
	}
	p := c.plan(t, "closed-under")
	if p.GetState() != cpv1.Plan_STATE_CANCELLED || p.GetFailure().GetMessage() != "cancelled: its session was closed" {
		t.Fatalf("a plan whose session was closed under it: %v", p)
	}
}

// TestAnimatedSessionRecovers: a session whose object stands where its
// animation does not put it at the current frame (keyed at frame 24 with a
// value, the scene at frame 1) is checkpointed, its Blender killed, and the
// recovered scene is the one it had: a checkpoint keeps animated
// properties as the scene held them (Blender writes the animation over
// them when it saves or loads a file).
func TestAnimatedSessionRecovers(t *testing.T) {
	c := startClusterWith(t, []string{"--checkpoint-every", "1"}, nil)
	s := c.negotiate(t)
	id := s.GetSessionId()
	_, rs := c.run(t, id, "animate", cubeOp("cube", "Mover", 0),
		op("k1", "keyframe.insert", map[string]any{"object": "Mover", "data_path": "location", "frame": 1, "value": []any{-3, 0, 0}}, "cube"),
		op("k2", "keyframe.insert", map[string]any{"object": "Mover", "data_path": "location", "frame": 24, "value": []any{3, 0, 0}}, "k1"))
	want := rs[len(rs)-1].GetSceneHashAfter()
	checkpoints := func() int {
		n, _ := filepath.Glob(filepath.Join(c.dir, "agent", "sessions", id, "checkpoint-*.blend"))
		return len(n)
	}
	waitFor(t, "a checkpoint of the animated scene", func() bool { return checkpoints() > 0 })
	pids := sessionBlenderPIDs(t, c, id)
	if len(pids) != 1 {
		t.Fatalf("Blender pids %v", pids)
	}
	syscall.Kill(pids[0], syscall.SIGKILL)
	_, after := c.run(t, id, "after-kill", op("s", "scene.get_summary", map[string]any{}))
	if after[0].GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED || after[0].GetSceneHashBefore() != want {
		t.Fatalf("after the recovery: %v, want the scene %s", after[0], want)
	}
	if !strings.Contains(c.agent.log.String(), "session recovered") {
		t.Error("agentd log does not show a recovery")
	}
}

// TestAtomicRollback: an atomic plan whose last operation fails is rolled
// back whole: the scene returns exactly to the pre-plan hash.
func TestAtomicRollback(t *testing.T) {
	c := startClusterWith(t, []string{"--checkpoint-every", "2"}, nil)
	s := c.negotiate(t)
	// A non-atomic plan first, so the pre-plan scene is not the baseline.
	_, pre := c.run(t, s.GetSessionId(), "pre", op("keep", "object.create", map[string]any{"type": "cube", "name": "Keep"}))
	prePlan := pre[0].GetSceneHashAfter()

	ops := []*cpv1.Operation{
		op("a1", "object.create", map[string]any{"type": "cylinder", "name": "Temp"}),
		op("a2", "object.set_transform", map[string]any{"name": "Keep", "location": []any{3, 3, 3}}, "a1"),
		op("a3", "object.delete", map[string]any{"name": "Keep"}, "a2"),
		op("a4", "object.create", map[string]any{"type": "cube", "name": "Keep"}, "a3"),
		op("a5", "object.delete", map[string]any{"name": "Nope"}, "a4"),
		op("a6", "object.create", map[string]any{"type": "cone", "name": "Never"}, "a5"),
	}
	_, err := c.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: s.GetSessionId(), RequestId: "atomic-1", Operations: ops, Atomic: true})
	if err != nil {
		t.Fatal(err)
	}
	rs := c.receipts(t, "atomic-1", 1)
	var statuses []string
	rolledBack := map[string]bool{}
	for _, r := range rs {
		statuses = append(statuses, r.GetOperationId()+":"+strings.TrimPrefix(r.GetStatus().String(), "STATUS_"))
		if r.GetStatus() == cpv1.Receipt_STATUS_ROLLED_BACK {
			rolledBack[r.GetOperationId()] = true
		}
	}
	want := "[a1:SUCCEEDED a2:SUCCEEDED a3:SUCCEEDED a4:SUCCEEDED a5:FAILED a4:ROLLED_BACK a3:ROLLED_BACK a2:ROLLED_BACK a1:ROLLED_BACK a6:NOT_RUN]"
	if fmt.Sprint(statuses) != want {
		t.Fatalf("receipts %v\nwant     %s", statuses, want)
	}
	// Receipts the agent ran or undid say when it sent them, its journal
	// having committed them; the one the control plane wrote does not.
	for _, r := range rs {
		sent, agents := r.GetAgentSentTime(), r.GetStatus() != cpv1.Receipt_STATUS_NOT_RUN
		if agents != (sent != nil) || agents && sent.AsTime().Before(r.GetCompleteTime().AsTime()) {
			t.Fatalf("receipt %s %s: complete %v, agent_sent %v", r.GetOperationId(), r.GetStatus(), r.GetCompleteTime().AsTime(), sent)
		}
	}
	last := rs[8]
	if last.GetSceneHashAfter() != prePlan {
		t.Fatalf("after rollback the scene is %s, before the plan it was %s", last.GetSceneHashAfter(), prePlan)
	}
	p := c.plan(t, "atomic-1")
	if p.GetState() != cpv1.Plan_STATE_FAILED || p.GetFailure().GetErrorCode() != "NOT_FOUND" {
		t.Fatalf("plan %v", p)
	}
	// The live scene agrees, and survives a Blender crash (the journal
	// replays the undo entries too).
	for _, pid := range sessionBlenderPIDs(t, c, s.GetSessionId()) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	_, after := c.run(t, s.GetSessionId(), "after-atomic", op("s", "scene.get_summary", map[string]any{}))
	if after[0].GetSceneHashBefore() != prePlan {
		t.Fatalf("scene after rollback + recovery %s, want %s", after[0].GetSceneHashBefore(), prePlan)
	}

	// The rolled-back key, sent again to the agent, is a conflict: nothing runs.
	agent := agentv1.NewAgentServiceClient(c.agentConn(t))
	stream, err := agent.Execute(ctxT(t, time.Minute), &agentv1.ExecuteRequest{SessionId: s.GetSessionId(), RequestId: "atomic-1",
		Operations: []*agentv1.OperationCall{{OperationId: "a1", ToolName: "object.create", Args: ops[0].GetArgs(),
			SafetyLevel: ops[0].GetSafetyLevel(), IdempotencyKey: rs[0].GetIdempotencyKey(), McpCallId: "call-manual"}}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.GetReceipt(); r.GetStatus() != cpv1.Receipt_STATUS_FAILED || r.GetError().GetErrorCode() != "IDEMPOTENCY_CONFLICT" ||
		len(r.GetError().GetMinimalRepairPlan()) == 0 {
		t.Fatalf("replayed rolled-back key: %v", r)
	}
	_, check := c.run(t, s.GetSessionId(), "after-conflict", op("s", "scene.get_summary", map[string]any{}))
	if check[0].GetSceneHashBefore() != prePlan {
		t.Fatal("a conflicting key changed the scene")
	}
}

// TestAtomicCancelRollsBack: CancelPlan of an atomic plan stops it where it
// is and rolls back what ran, newest first: the scene returns to the
// pre-plan hash, the plan ends CANCELLED saying so. (Until 2026-11-30 a
// cancelled atomic plan kept what ran.)
func TestAtomicCancelRollsBack(t *testing.T) {
	c := startCluster(t)
	s := c.negotiate(t)
	_, pre := c.run(t, s.GetSessionId(), "pre", op("keep", "object.create", map[string]any{"type": "cube", "name": "Keep"}))
	prePlan := pre[0].GetSceneHashAfter()
	slow := map[string]any{"output": "slow.png", "resolution": []any{1280, 960}, "samples": 4096, "seed": 1}
	if _, err := c.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: s.GetSessionId(), RequestId: "atomic-cancel", Atomic: true,
		Operations: []*cpv1.Operation{
			op("a1", "object.create", map[string]any{"type": "uv_sphere", "name": "Temp"}),
			op("a2", "object.set_transform", map[string]any{"name": "Keep", "location": []any{3, 3, 3}}, "a1"),
			op("a3", "render.still", slow, "a2"),
			op("a4", "object.delete", map[string]any{"name": "Keep"}, "a3"),
		}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the plan's first two receipts", func() bool { return c.plan(t, "atomic-cancel").GetReceiptCount() == 2 })
	time.Sleep(300 * time.Millisecond) // into its render
	cresp, err := c.client.CancelPlan(ctxT(t, time.Minute), &cpv1.CancelPlanRequest{RequestId: "atomic-cancel"})
	if err != nil {
		t.Fatal(err)
	}
	if p := cresp.GetPlan(); p.GetState() != cpv1.Plan_STATE_CANCELLED || !strings.Contains(p.GetFailure().GetMessage(), "rolled back") {
		t.Fatalf("the cancelled atomic plan: %v", p)
	}
	rs := c.receipts(t, "atomic-cancel", 1)
	var statuses []string
	for _, r := range rs {
		statuses = append(statuses, r.GetOperationId()+":"+strings.TrimPrefix(r.GetStatus().String(), "STATUS_"))
	}
	// The interrupted render, the undos, then what did not run, as after a
	// failure.
	if want := "[a1:SUCCEEDED a2:SUCCEEDED a3:NOT_RUN a2:ROLLED_BACK a1:ROLLED_BACK a4:NOT_RUN]"; fmt.Sprint(statuses) != want {
		t.Fatalf("receipts %v\nwant     %s", statuses, want)
	}
	if code := rs[2].GetError().GetErrorCode(); code != "CANCELLED" {
		t.Errorf("the interrupted render: %s", code)
	}
	if last := rs[4]; last.GetSceneHashAfter() != prePlan {
		t.Fatalf("after the rollback the scene is %s, before the plan it was %s", last.GetSceneHashAfter(), prePlan)
	}
	_, after := c.run(t, s.GetSessionId(), "after-cancel", op("s", "scene.get_summary", map[string]any{}))
	if after[0].GetSceneHashBefore() != prePlan {
		t.Fatalf("the session's scene after the cancel %s, want %s", after[0].GetSceneHashBefore(), prePlan)
	}
}

// TestRollbackFailure: with a fault injected into the bridge's compensation,
// the plan reports ROLLBACK_FAILED with the last consistent checkpoint,
// never success, and the session stays usable. The agentd as shipped
// ignores the same fault setting: its rollback runs whole.
func TestRollbackFailure(t *testing.T) {
	ops := []*cpv1.Operation{
		op("b1", "object.create", map[string]any{"type": "cube", "name": "One"}),
		op("b2", "object.create", map[string]any{"type": "cube", "name": "Two"}, "b1"),
		op("b3", "object.delete", map[string]any{"name": "Nope"}, "b2"),
	}
	env := []string{"BLENDPLANE_TEST_FAULTS=undo"}
	t.Run("test build", func(t *testing.T) {
		c := startClusterOpts(t, clusterOpts{agentEnv: env, faults: true})
		s := c.negotiate(t)
		_, err := c.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: s.GetSessionId(), RequestId: "rbfail", Operations: ops, Atomic: true})
		if err != nil {
			t.Fatal(err)
		}
		rs := c.receipts(t, "rbfail", 1)
		p := c.plan(t, "rbfail")
		f := p.GetFailure()
		if p.GetState() != cpv1.Plan_STATE_FAILED || f.GetErrorCode() != "ROLLBACK_FAILED" || f.GetRecoverable() {
			t.Fatalf("plan %v, receipts %v", p, rs)
		}
		cp := f.GetLastConsistentCheckpoint()
		if cp.GetSceneHash() == "" || cp.GetPath() == "" {
			t.Fatalf("no checkpoint in the failure: %v", f)
		}
		if _, err := os.Stat(cp.GetPath()); err != nil {
			t.Fatalf("checkpoint file: %v", err)
		}
		// The session continues from that consistent state.
		_, after := c.run(t, s.GetSessionId(), "after-rbfail", op("s", "scene.get_summary", map[string]any{}))
		if after[0].GetSceneHashBefore() != cp.GetSceneHash() {
			t.Fatalf("session at %s, checkpoint says %s", after[0].GetSceneHashBefore(), cp.GetSceneHash())
		}
	})
	t.Run("production build", func(t *testing.T) {
		c := startClusterOpts(t, clusterOpts{agentEnv: env})
		s := c.negotiate(t)
		_, before := c.run(t, s.GetSessionId(), "before", op("s", "scene.get_summary", map[string]any{}))
		_, err := c.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: s.GetSessionId(), RequestId: "rb", Operations: ops, Atomic: true})
		if err != nil {
			t.Fatal(err)
		}
		rs := c.receipts(t, "rb", 1)
		if p := c.plan(t, "rb"); p.GetState() != cpv1.Plan_STATE_FAILED || p.GetFailure().GetErrorCode() != "NOT_FOUND" {
			t.Fatalf("plan %v, receipts %v; want it rolled back whole", p, rs)
		}
		_, after := c.run(t, s.GetSessionId(), "after", op("s", "scene.get_summary", map[string]any{}))
		if after[0].GetSceneHashBefore() != before[0].GetSceneHashBefore() {
			t.Fatal("the rollback left the scene changed")
		}
		if strings.Contains(c.agent.log.String(), "test faults") {
			t.Fatalf("the production agentd enabled test faults:\n%s", c.agent.log.String())
		}
	})
}

// TestAuditAndCorrelation: every receipt has an audit record with the
// seed's minimum fields, pages work, and the ids appear in the daemons' logs.
func TestAuditAndCorrelation(t *testing.T) {
	c := startClusterWith(t, []string{"--log-level", "debug"}, nil)
	c.cp.stop(t, syscall.SIGTERM)
	c.cp = startDaemon(t, "controlplane", append(c.cp.cmd.Args[1:], "--log-level", "debug")...)
	c.waitAgent(t)
	s := c.negotiate(t)
	_, rs := c.run(t, s.GetSessionId(), "audit-1",
		op("x1", "object.create", map[string]any{"type": "cube", "name": "A"}),
		op("x2", "object.set_transform", map[string]any{"name": "A", "location": []any{1, 1, 1}}, "x1"),
		op("x3", "scene.get_summary", map[string]any{}, "x2"))
	var records []*cpv1.AuditRecord
	token := ""
	for pages := 0; ; pages++ {
		resp, err := c.client.ListAuditRecords(ctxT(t, 10*time.Second), &cpv1.ListAuditRecordsRequest{RequestId: "audit-1", PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		records = append(records, resp.GetAuditRecords()...)
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
		if pages > 5 {
			t.Fatal("pagination does not end")
		}
	}
	if len(records) != len(rs) {
		t.Fatalf("%d audit records for %d receipts", len(records), len(rs))
	}
	for i, a := range records {
		r := rs[i]
		if a.GetTimestamp() == nil || a.GetRequestId() != "audit-1" || a.GetOperationId() != r.GetOperationId() ||
			a.GetMcpCallId() != r.GetMcpCallId() || a.GetBlenderMutationId() != r.GetBlenderMutationId() ||
			a.GetToolName() != r.GetToolName() || a.GetSafetyLevel() != r.GetSafetyLevel() || a.GetStatus() != r.GetStatus() ||
			a.GetSceneHashBefore() != r.GetSceneHashBefore() || a.GetSceneHashAfter() != r.GetSceneHashAfter() {
			t.Errorf("audit record %v does not match receipt %v", a, r)
		}
	}
	_, err := c.client.ListAuditRecords(ctxT(t, 10*time.Second), &cpv1.ListAuditRecordsRequest{RequestId: "other", PageToken: "bm9wZQ"})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad page token: %v", err)
	}
	// Correlation ids reach both daemons' log lines (and the bridge's).
	time.Sleep(200 * time.Millisecond)
	for _, d := range []*daemon{c.agent, c.cp} {
		logText := d.log.String()
		for _, r := range rs[:2] {
			for _, id := range []string{r.GetMcpCallId(), r.GetBlenderMutationId(), r.GetOperationId()} {
				if !strings.Contains(logText, id) {
					t.Errorf("%s log lacks %s", d.name, id)
				}
			}
		}
	}
}

// waitTold returns once a new stream of the plan, after its first receipt,
// no longer opens with the agent wait, and fails if that lasts until the
// next receipt: the agent is back, runs the long operation again, and the
// plan waits for it no more.
func waitTold(t *testing.T, c *cluster, requestID string) {
	t.Helper()
	probe := func() (waiting, receipt bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		s, err := c.client.StreamReceipts(ctx, &cpv1.StreamReceiptsRequest{RequestId: requestID, StartSequence: 2})
		if err != nil {
			t.Fatal(err)
		}
		ev, err := s.Recv()
		if err != nil {
			return false, false // nothing to tell within the while
		}
		return ev.GetProgress().GetDetail().GetFields()["waiting_for_agent"].GetStringValue() != "", ev.GetReceipt() != nil
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		waiting, receipt := probe()
		if receipt {
			t.Fatal("the plan said it waited for its agent until the agent's next receipt")
		}
		if !waiting {
			return
		}
	}
	t.Fatal("the plan still says it waits for its agent after a minute")
}

// TestWaitingForAgentShown: while a plan's agent does not answer, a stream
// with progress events says so (which agent, why, until when it is
// retried), and blendctl submit --watch prints it: before, the stream was
// silent for as long as the agent was down. Once the agent is back, the
// plan no longer says so (it did until the next receipt). The plan then
// ends as usual.
func TestWaitingForAgentShown(t *testing.T) {
	c := startCluster(t)
	agentID := c.agentID(t)
	resp, err := c.client.Negotiate(ctxT(t, 2*time.Minute), &cpv1.NegotiateRequest{ContractVersion: "1.0.0",
		HostProfile: &cpv1.HostProfile{ClientName: "e2e", FeatureFlags: []string{"progress_events", "unsafe_ops", "nondeterministic_tools"}}})
	if err != nil {
		t.Fatal(err)
	}
	s := resp.GetContract()
	var ops []*cpv1.Operation
	for i, secs := range []float64{0.5, 4, 0.5, 0.5} { // agentd is killed while p1 runs, which runs again after
		o := op(fmt.Sprintf("p%d", i), "python.exec", map[string]any{"code": fmt.Sprintf("import time\ntime.sleep(%g)", secs)})
		o.SafetyLevel = cpv1.SafetyLevel_SAFETY_LEVEL_DESTRUCTIVE
		ops = append(ops, o)
	}
	if _, err := c.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: s.GetSessionId(), RequestId: "wait-1", Operations: ops}); err != nil {
		t.Fatal(err)
	}
	stream, err := c.client.StreamReceipts(ctxT(t, 2*time.Minute), &cpv1.StreamReceiptsRequest{RequestId: "wait-1"})
	if err != nil {
		t.Fatal(err)
	}
	killed, told, receipts := false, false, 0
	for {
		ev, err := stream.Recv()
		if err != nil {
			break
		}
		if r := ev.GetReceipt(); r != nil {
			receipts++
			if r.GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED && r.GetStatus() != cpv1.Receipt_STATUS_SKIPPED_IDEMPOTENT {
				t.Errorf("receipt %s: %v %v", r.GetOperationId(), r.GetStatus(), r.GetError())
			}
			if !killed {
				c.agent.stop(t, syscall.SIGKILL)
				killed = true
			}
		}
		if f := ev.GetProgress().GetDetail().GetFields(); f["waiting_for_agent"].GetStringValue() != "" && !told {
			if f["waiting_for_agent"].GetStringValue() != agentID || f["reason"].GetStringValue() == "" || f["retry_until"].GetStringValue() == "" {
				t.Fatalf("the wait, told: %v", ev)
			}
			told = true
			c.restartAgent(t)
			waitTold(t, c, "wait-1")
		}
	}
	if !told || receipts != len(ops) {
		t.Fatalf("told of the wait: %v; receipts %d of %d", told, receipts, len(ops))
	}
}
