package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// TestCluster runs the tests that share one control plane and one agent.
func TestCluster(t *testing.T) {
	c := startCluster(t)
	t.Run("AgentListed", func(t *testing.T) { testAgentListed(t, c) })
	t.Run("HealthAndReflection", func(t *testing.T) { testHealth(t, c) })
	t.Run("PlanRunsInScheduleOrder", func(t *testing.T) { testPlanRuns(t, c) })
	t.Run("Refusals", func(t *testing.T) { testRefusals(t, c) })
	t.Run("ResubmitAndConflict", func(t *testing.T) { testResubmit(t, c) })
	t.Run("FailedOperationStopsPlan", func(t *testing.T) { testFailedOperation(t, c) })
	t.Run("StreamResumesFromCursor", func(t *testing.T) { testStreamCursor(t, c) })
	t.Run("ValidateOnly100k", func(t *testing.T) { testValidateOnly100k(t, c) })
	t.Run("DeterministicAcrossSessions", func(t *testing.T) { testDeterminism(t, c) })
	t.Run("SymlinkOutOfSandbox", func(t *testing.T) { testSymlinkEscape(t, c) })
	t.Run("BlendctlSubmitWatch", func(t *testing.T) { testBlendctl(t, c) })
	t.Run("NegotiateRefusesUnknownContract", func(t *testing.T) { testNegotiateRefusal(t, c) })
}

func testAgentListed(t *testing.T, c *cluster) {
	resp, err := c.client.ListAgents(ctxT(t, 10*time.Second), &cpv1.ListAgentsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetAgents()) != 1 {
		t.Fatalf("agents = %v", resp.GetAgents())
	}
	a := resp.GetAgents()[0]
	rt := a.GetRuntimes()[0]
	if a.GetAddress() != c.agentAddr || rt.GetBlenderProfile().GetVersion() == "" || rt.GetRegistry().GetFingerprint() == "" {
		t.Fatalf("agent = %v", a)
	}
	tools := map[string]bool{}
	for _, tool := range rt.GetRegistry().GetTools() {
		tools[tool.GetName()] = true
		if tool.GetInputSchema().GetFields()["additionalProperties"].GetBoolValue() {
			t.Errorf("tool %s allows additional properties", tool.GetName())
		}
	}
	for _, name := range []string{"scene.get_summary", "object.create", "object.delete", "object.set_transform", "render.still"} {
		if !tools[name] {
			t.Errorf("tool %s missing from registry", name)
		}
	}
}

func testHealth(t *testing.T, c *cluster) {
	for _, addr := range []string{c.cpAddr, c.agentAddr} {
		conn := dial(t, addr)
		if addr == c.agentAddr {
			conn = c.agentConn(t) // only the control plane reaches agentd
		}
		resp, err := grpc_health_v1.NewHealthClient(conn).Check(ctxT(t, 5*time.Second), &grpc_health_v1.HealthCheckRequest{})
		if err != nil || resp.GetStatus() != grpc_health_v1.HealthCheckResponse_SERVING {
			t.Errorf("health of %s: %v %v", addr, resp, err)
		}
		services := listServices(t, conn)
		want := "blendplane.controlplane.v1.ControlPlaneService"
		if addr == c.agentAddr {
			want = "blendplane.agent.v1.AgentService"
		}
		if !strings.Contains(strings.Join(services, " "), want) {
			t.Errorf("reflection on %s lists %v, want %s", addr, services, want)
		}
	}
}

func testPlanRuns(t *testing.T, c *cluster) {
	s := c.negotiate(t)
	if s.GetContractVersion() != "1.0.0" || s.GetBlenderProfile().GetVersion() == "" || s.GetBaselineSceneHash() == "" {
		t.Fatalf("contract = %v", s)
	}
	p, rs := c.run(t, s.GetSessionId(), "runs-1",
		op("c", "object.create", map[string]any{"type": "cube", "name": "C"}),
		op("a", "object.create", map[string]any{"type": "ico_sphere", "name": "A", "location": []any{1, 2, 3}}),
		op("b", "object.set_transform", map[string]any{"name": "A", "scale": []any{2, 2, 2}}, "a"),
		op("d", "object.delete", map[string]any{"name": "C"}, "b", "c"),
		op("s", "scene.get_summary", map[string]any{}, "d"),
	)
	if p.GetState() != cpv1.Plan_STATE_SUCCEEDED {
		t.Fatalf("plan state %v: %v", p.GetState(), p.GetFailure())
	}
	wantOrder := []string{"a", "b", "c", "d", "s"}
	if fmt.Sprint(p.GetSchedule()) != fmt.Sprint(wantOrder) {
		t.Fatalf("schedule %v, want %v", p.GetSchedule(), wantOrder)
	}
	prev := s.GetBaselineSceneHash()
	for i, r := range rs {
		if r.GetSequence() != int64(i+1) || r.GetOperationId() != wantOrder[i] || r.GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED {
			t.Fatalf("receipt %d = %v", i, r)
		}
		if r.GetRequestId() != "runs-1" || r.GetMcpCallId() == "" || r.GetIdempotencyKey() == "" {
			t.Errorf("receipt %d lacks correlation ids: %v", i, r)
		}
		if r.GetSceneHashBefore() != prev {
			t.Errorf("receipt %s: scene_hash_before %s, want previous after %s", r.GetOperationId(), r.GetSceneHashBefore(), prev)
		}
		mutating := r.GetToolName() != "scene.get_summary"
		if mutating == (r.GetBlenderMutationId() == "") {
			t.Errorf("receipt %s: blender_mutation_id %q", r.GetOperationId(), r.GetBlenderMutationId())
		}
		if mutating == (r.GetSceneHashAfter() == r.GetSceneHashBefore()) {
			t.Errorf("receipt %s: hash before %s after %s", r.GetOperationId(), r.GetSceneHashBefore(), r.GetSceneHashAfter())
		}
		prev = r.GetSceneHashAfter()
	}
	summary := rs[4].GetResult().AsMap()
	names := fmt.Sprint(summary["objects"])
	if !strings.Contains(names, "A") || strings.Contains(names, "name:C ") {
		t.Errorf("summary after plan = %v", summary)
	}
}

// refusal checks a refused plan: code, ErrorInfo reason, a field violation
// naming an operation, and that nothing ran.
func testRefusals(t *testing.T, c *cluster) {
	s := c.negotiate(t)
	cube := map[string]any{"type": "cube"}
	cases := []struct {
		name   string
		ops    []*cpv1.Operation
		reason string
		field  string
	}{
		{"bad operation id", []*cpv1.Operation{op("bad id!", "object.create", cube)}, "SCHEMA_INVALID", "operations[0].operation_id"},
		{"missing args", []*cpv1.Operation{{OperationId: "a", ToolName: "object.create", SafetyLevel: cpv1.SafetyLevel_SAFETY_LEVEL_SAFE_WRITE}}, "SCHEMA_INVALID", "operations[0].args"},
		{"unspecified safety", []*cpv1.Operation{{OperationId: "a", ToolName: "object.create", Args: op("", "", cube).GetArgs()}}, "SCHEMA_INVALID", "operations[0].safety_level"},
		{"duplicate depends_on", []*cpv1.Operation{op("a", "object.create", cube), op("b", "object.create", cube, "a", "a")}, "SCHEMA_INVALID", "operations[1].depends_on"},
		{"args against tool schema", []*cpv1.Operation{op("a", "object.create", map[string]any{"type": "pyramid"})}, "SCHEMA_INVALID", "operations[0].args"},
		{"unknown arg", []*cpv1.Operation{op("a", "object.create", map[string]any{"type": "cube", "colour": "red"})}, "SCHEMA_INVALID", "operations[0].args"},
		{"cycle", []*cpv1.Operation{op("a", "object.create", cube, "c"), op("b", "object.create", cube, "a"), op("c", "object.create", cube, "b")}, "GRAPH_CYCLE", "operations["},
		{"missing dependency", []*cpv1.Operation{op("a", "object.create", cube, "ghost")}, "DEPENDENCY_MISSING", "operations[0].depends_on[0]"},
		{"self dependency", []*cpv1.Operation{op("a", "object.create", cube, "a")}, "GRAPH_CYCLE", "operations[0].depends_on[0]"},
		{"control character in a name", []*cpv1.Operation{op("a", "object.create", map[string]any{"type": "cube", "name": "Evil\n\tmtllib\t../x.mtl"})}, "SCHEMA_INVALID", "operations[0].args.name"},
		{"name of 63 characters but 126 bytes", []*cpv1.Operation{op("a", "object.create", map[string]any{"type": "cube", "name": strings.Repeat("é", 63)})}, "SCHEMA_INVALID", "operations[0].args.name"},
		{"control character in a file name", []*cpv1.Operation{op("a", "render.still", map[string]any{"output": "evil\n.png"})}, "SCHEMA_INVALID", "operations[0].args.output"},
		{"macro step ids over 128 characters", []*cpv1.Operation{op(strings.Repeat("m", 124), "macro.three_point_lighting", map[string]any{"target": "Z"})}, "SCHEMA_INVALID", "operations[0].operation_id"},
		{"duplicate id", []*cpv1.Operation{op("a", "object.create", cube), op("a", "object.create", cube)}, "OPERATION_ID_DUPLICATE", "operations[1].operation_id"},
		// A refusal names the operations sent, not the macro's steps (the
		// operation after a three-step macro was operations[3]).
		{"args after a macro", []*cpv1.Operation{op("m", "macro.three_point_lighting", map[string]any{"target": "Z"}),
			op("b", "object.create", map[string]any{"type": "pyramid"})}, "SCHEMA_INVALID", "operations[1].args"},
		{"unknown tool", []*cpv1.Operation{op("a", "object.create", cube), op("b", "mesh.explode", map[string]any{})}, "TOOL_UNKNOWN", "operations[1].tool_name"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rid := fmt.Sprintf("refused-%d", i)
			// One good op first: a refused plan must not run even that one.
			ops := append([]*cpv1.Operation{op("zz-first", "object.create", map[string]any{"type": "cube", "name": "Z"})}, tc.ops...)
			_, err := c.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: s.GetSessionId(), RequestId: rid, Operations: ops})
			st := status.Convert(err)
			if st.Code() != codes.InvalidArgument {
				t.Fatalf("code %v (%v), want InvalidArgument", st.Code(), err)
			}
			info, fields := details(st)
			if info.GetReason() != tc.reason || info.GetDomain() != "blendplane.dev" {
				t.Fatalf("ErrorInfo %v, want reason %s: %s", info, tc.reason, st.Message())
			}
			found := false
			for _, f := range fields {
				// The good op is prepended: shift the expected index by one.
				if strings.HasPrefix(f.GetField(), shiftIndex(tc.field)) {
					found = true
				}
			}
			if !found {
				t.Errorf("no field violation under %s in %v", shiftIndex(tc.field), fields)
			}
			if _, err := c.client.GetPlan(ctxT(t, 10*time.Second), &cpv1.GetPlanRequest{RequestId: rid}); status.Code(err) != codes.NotFound {
				t.Errorf("refused plan was stored: %v", err)
			}
		})
	}
	// Paths that leave the session's sandbox: refused by the contract gate.
	for i, out := range []string{"../escape.png", "/tmp/escape.png", "sub/escape.png"} {
		rid := fmt.Sprintf("escape-%d", i)
		_, err := c.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: s.GetSessionId(), RequestId: rid,
			Operations: []*cpv1.Operation{op("zz-first", "object.create", map[string]any{"type": "cube", "name": "Z"}),
				op("r", "render.still", map[string]any{"output": out})}})
		st := status.Convert(err)
		info, fields := details(st)
		if st.Code() != codes.FailedPrecondition || info.GetReason() != "POLICY_REFUSED" || len(fields) != 1 || fields[0].GetField() != "operations[1].args.output" {
			t.Fatalf("output %q: %v %v", out, err, fields)
		}
	}
	// Nothing ran: the next operation starts from the baseline scene.
	_, rs := c.run(t, s.GetSessionId(), "after-refusals", op("s", "scene.get_summary", map[string]any{}))
	if got := rs[0].GetSceneHashBefore(); got != s.GetBaselineSceneHash() {
		t.Fatalf("scene changed by refused plans: %s, baseline %s", got, s.GetBaselineSceneHash())
	}
	// An unknown session is NOT_FOUND.
	_, err := c.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: "s-nope", RequestId: "x", Operations: []*cpv1.Operation{op("a", "object.create", cube)}})
	if st := status.Convert(err); st.Code() != codes.NotFound {
		t.Fatalf("unknown session: %v", err)
	}
}

func shiftIndex(field string) string {
	var i int
	var rest string
	if n, _ := fmt.Sscanf(field, "operations[%d]", &i); n == 1 {
		rest = field[strings.Index(field, "]")+1:]
		return fmt.Sprintf("operations[%d]%s", i+1, rest)
	}
	return field
}

func details(st *status.Status) (*errdetails.ErrorInfo, []*errdetails.BadRequest_FieldViolation) {
	var info *errdetails.ErrorInfo
	var fields []*errdetails.BadRequest_FieldViolation
	infos := 0
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			info = d
			infos++
		case *errdetails.BadRequest:
			fields = append(fields, d.GetFieldViolations()...)
		}
	}
	if infos != 1 {
		return nil, fields
	}
	return info, fields
}

func testResubmit(t *testing.T, c *cluster) {
	s := c.negotiate(t)
	ops := []*cpv1.Operation{op("a", "object.create", map[string]any{"type": "cube", "name": "Once"})}
	p1, rs1 := c.run(t, s.GetSessionId(), "resubmit-1", ops...)
	if p1.GetState() != cpv1.Plan_STATE_SUCCEEDED {
		t.Fatalf("first run: %v", p1)
	}
	// Identical resubmission: the stored plan and receipts, nothing new runs.
	p2, rs2 := c.run(t, s.GetSessionId(), "resubmit-1", ops...)
	if p2.GetState() != cpv1.Plan_STATE_SUCCEEDED || len(rs2) != 1 || rs2[0].GetBlenderMutationId() != rs1[0].GetBlenderMutationId() {
		t.Fatalf("resubmission: %v %v", p2, rs2)
	}
	// If it had run again, creating "Once" a second time would conflict;
	// the scene is still the one the first run left.
	_, rs3 := c.run(t, s.GetSessionId(), "resubmit-check", op("s", "scene.get_summary", map[string]any{}))
	if rs3[0].GetSceneHashBefore() != rs1[0].GetSceneHashAfter() {
		t.Fatalf("scene changed by resubmission")
	}
	// Same request id, different content: IDEMPOTENCY_CONFLICT.
	_, err := c.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: s.GetSessionId(), RequestId: "resubmit-1",
		Operations: []*cpv1.Operation{op("a", "object.create", map[string]any{"type": "cube", "name": "Twice"})}})
	st := status.Convert(err)
	if info, _ := details(st); st.Code() != codes.FailedPrecondition || info.GetReason() != "IDEMPOTENCY_CONFLICT" {
		t.Fatalf("conflict: %v", err)
	}
}

func testFailedOperation(t *testing.T, c *cluster) {
	s := c.negotiate(t)
	p, rs := c.run(t, s.GetSessionId(), "fails-1",
		op("a", "object.create", map[string]any{"type": "cube", "name": "Keep"}),
		op("b", "object.delete", map[string]any{"name": "Ghost"}, "a"),
		op("c", "object.create", map[string]any{"type": "cube", "name": "Never"}, "b"),
		op("d", "object.create", map[string]any{"type": "cube", "name": "AlsoNever"}),
	)
	if p.GetState() != cpv1.Plan_STATE_FAILED || p.GetFailure().GetErrorCode() != "NOT_FOUND" {
		t.Fatalf("plan %v", p)
	}
	want := []cpv1.Receipt_Status{cpv1.Receipt_STATUS_SUCCEEDED, cpv1.Receipt_STATUS_FAILED, cpv1.Receipt_STATUS_NOT_RUN, cpv1.Receipt_STATUS_NOT_RUN}
	if len(rs) != len(want) {
		t.Fatalf("receipts %v", rs)
	}
	for i, r := range rs {
		if r.GetStatus() != want[i] {
			t.Errorf("receipt %s status %v, want %v", r.GetOperationId(), r.GetStatus(), want[i])
		}
	}
	f := rs[1].GetError()
	if f.GetErrorCode() != "NOT_FOUND" || !f.GetRecoverable() || f.GetRetryHint() == "" || len(f.GetMinimalRepairPlan()) == 0 {
		t.Errorf("failure payload %v", f)
	}
	if rs[1].GetSceneHashAfter() != rs[1].GetSceneHashBefore() {
		t.Errorf("failed operation changed the scene")
	}
}

func testStreamCursor(t *testing.T, c *cluster) {
	s := c.negotiate(t)
	var ops []*cpv1.Operation
	for i := 0; i < 12; i++ {
		ops = append(ops, op(fmt.Sprintf("o%02d", i), "object.create", map[string]any{"type": "plane", "name": fmt.Sprintf("P%02d", i)}))
	}
	_, all := c.run(t, s.GetSessionId(), "cursor-1", ops...)
	for _, from := range []int64{0, 1, 5, 12, 13} {
		got := c.receipts(t, "cursor-1", from)
		first := max(from, 1)
		if len(got) != 12-int(first)+1 {
			t.Fatalf("from %d: %d receipts", from, len(got))
		}
		for i, r := range got {
			if r.GetSequence() != first+int64(i) || r.GetOperationId() != all[first-1+int64(i)].GetOperationId() {
				t.Fatalf("from %d: receipt %d = %v", from, i, r)
			}
		}
	}
	if _, err := c.client.StreamReceipts(ctxT(t, time.Second*10), &cpv1.StreamReceiptsRequest{RequestId: "nope"}); err == nil {
		// The error arrives on the first Recv.
		stream, _ := c.client.StreamReceipts(ctxT(t, time.Second*10), &cpv1.StreamReceiptsRequest{RequestId: "nope"})
		if _, err := stream.Recv(); status.Code(err) != codes.NotFound {
			t.Fatalf("unknown plan stream: %v", err)
		}
	}
}

func testValidateOnly100k(t *testing.T, c *cluster) {
	s := c.negotiate(t)
	const n = 100_000
	ops := make([]*cpv1.Operation, n)
	for i := range ops {
		var deps []string
		if i > 0 {
			deps = []string{fmt.Sprintf("op%06d", i-1)}
		}
		ops[i] = op(fmt.Sprintf("op%06d", i), "object.create", map[string]any{"type": "cube", "name": fmt.Sprintf("C%06d", i)}, deps...)
	}
	resp, err := c.client.SubmitPlan(ctxT(t, 2*time.Minute), &cpv1.SubmitPlanRequest{SessionId: s.GetSessionId(), RequestId: "big-1", Operations: ops, ValidateOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	p := resp.GetPlan()
	if p.GetState() != cpv1.Plan_STATE_VALIDATED || len(p.GetSchedule()) != n || p.GetSchedule()[n-1] != "op099999" {
		t.Fatalf("plan state %v, %d scheduled", p.GetState(), len(p.GetSchedule()))
	}
	if _, err := c.client.GetPlan(ctxT(t, 10*time.Second), &cpv1.GetPlanRequest{RequestId: "big-1"}); status.Code(err) != codes.NotFound {
		t.Fatalf("validate_only stored the plan: %v", err)
	}
}

func testDeterminism(t *testing.T, c *cluster) {
	plan := func() []*cpv1.Operation {
		return []*cpv1.Operation{
			op("floor", "object.create", map[string]any{"type": "plane", "name": "Floor", "size": 8}),
			op("ball", "object.create", map[string]any{"type": "uv_sphere", "name": "Ball", "location": []any{0, 0, 1}}, "floor"),
			op("move", "object.set_transform", map[string]any{"name": "Camera", "location": []any{6, -6, 4}}, "ball"),
			op("render", "render.still", map[string]any{"output": "det.png", "resolution": []any{64, 48}, "samples": 4, "seed": 3}, "move"),
		}
	}
	var runs [2][]*cpv1.Receipt
	var sessions [2]string
	for i := range runs {
		sessions[i] = c.negotiate(t).GetSessionId()
		p, rs := c.run(t, sessions[i], fmt.Sprintf("det-%d", i), plan()...)
		if p.GetState() != cpv1.Plan_STATE_SUCCEEDED {
			t.Fatalf("run %d: %v", i, p.GetFailure())
		}
		runs[i] = rs
	}
	for j := range runs[0] {
		a, b := runs[0][j], runs[1][j]
		if a.GetSceneHashAfter() != b.GetSceneHashAfter() {
			t.Errorf("%s: scene hash %s vs %s", a.GetOperationId(), a.GetSceneHashAfter(), b.GetSceneHashAfter())
		}
	}
	ra, rb := runs[0][3].GetResult().AsMap(), runs[1][3].GetResult().AsMap()
	if ra["sha256"] != rb["sha256"] {
		t.Fatalf("seeded renders differ: %v vs %v", ra["sha256"], rb["sha256"])
	}
	// The result names the file by its plain name, so the two sessions'
	// results are the same bytes; the receipt's sha256 is the file's.
	if !proto.Equal(runs[0][3].GetResult(), runs[1][3].GetResult()) || ra["path"] != "det.png" {
		t.Fatalf("the renders' results differ, or name more than the file: %v vs %v", ra, rb)
	}
	_, raw, err := c.download(t, &cpv1.DownloadArtifactRequest{SessionId: sessions[0], Name: "det.png"})
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(raw); hex.EncodeToString(sum[:]) != ra["sha256"] {
		t.Fatalf("sha256 of det.png does not match the receipt")
	}
}

func testBlendctl(t *testing.T, c *cluster) {
	cmd := c.blendctl("submit", filepath.Join(repoRoot(), "examples/plans/hello.json"), "--watch")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("blendctl submit: %v\n%s", err, out)
	}
	text := string(out)
	for _, want := range []string{"[1/8]", "[8/8]", "render.still", "SUCCEEDED", "hello.png", "plan hello-1 SUCCEEDED"} {
		if !strings.Contains(text, want) {
			t.Errorf("blendctl output lacks %q:\n%s", want, text)
		}
	}
	// A refused plan exits non-zero and names the reason.
	bad := filepath.Join(t.TempDir(), "cycle.json")
	os.WriteFile(bad, []byte(`{"request_id":"cli-cycle","operations":[
		{"operation_id":"a","tool_name":"object.create","args":{"type":"cube"},"depends_on":["b"],"safety_level":"safe_write"},
		{"operation_id":"b","tool_name":"object.create","args":{"type":"cube"},"depends_on":["a"],"safety_level":"safe_write"}]}`), 0o644)
	out, err = c.blendctl("submit", bad).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "GRAPH_CYCLE") {
		t.Fatalf("blendctl on a cycle: %v\n%s", err, out)
	}
	out, err = c.blendctl("plan", "hello-1").CombinedOutput()
	if m := regexp.MustCompile(`receipts:\s+(\d+) \((\d+) operations\)`).FindStringSubmatch(string(out)); err != nil ||
		!strings.Contains(string(out), "SUCCEEDED") || m == nil || m[1] != m[2] {
		t.Fatalf("blendctl plan: %v\n%s", err, out)
	}
	out, err = c.blendctl("audit", "hello-1").CombinedOutput()
	if err != nil || strings.Count(string(out), "hello-1") != 8 || !strings.Contains(string(out), "render.still") ||
		!strings.Contains(string(out), "PRINCIPAL") || !strings.Contains(string(out), " admin ") {
		t.Fatalf("blendctl audit: %v\n%s", err, out)
	}
	if out, err = c.blendctl("audit", "no-such-plan").CombinedOutput(); err == nil || !strings.Contains(string(out), "PLAN_NOT_FOUND") {
		t.Fatalf("blendctl audit of a plan that does not exist: %v\n%s", err, out)
	}
	out, err = c.blendctl("agents").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "READY") {
		t.Fatalf("blendctl agents: %v\n%s", err, out)
	}
}

func testNegotiateRefusal(t *testing.T, c *cluster) {
	_, err := c.client.Negotiate(ctxT(t, 10*time.Second), &cpv1.NegotiateRequest{ContractVersion: "2.0.0",
		HostProfile: &cpv1.HostProfile{ClientName: "e2e"}})
	st := status.Convert(err)
	if info, _ := details(st); st.Code() != codes.FailedPrecondition || info.GetReason() != "CONTRACT_VIOLATION" {
		t.Fatalf("negotiate 2.0.0: %v", err)
	}
}

// testSymlinkEscape plants a symlink in the session's output directory that
// leads outside; rendering to it is refused and nothing is written outside.
func testSymlinkEscape(t *testing.T, c *cluster) {
	s := c.negotiate(t)
	outside := filepath.Join(t.TempDir(), "outside.png")
	sandbox := filepath.Join(c.dir, "agent", "sessions", s.GetSessionId(), "output")
	if err := os.Symlink(outside, filepath.Join(sandbox, "evil.png")); err != nil {
		t.Fatal(err)
	}
	p, rs := c.run(t, s.GetSessionId(), "symlink-1",
		op("r", "render.still", map[string]any{"output": "evil.png", "resolution": []any{32, 24}, "samples": 1}))
	if p.GetState() != cpv1.Plan_STATE_FAILED || rs[0].GetError().GetErrorCode() != "POLICY_REFUSED" {
		t.Fatalf("plan %v, receipt %v", p.GetState(), rs[0])
	}
	if _, err := os.Stat(outside); !os.IsNotExist(err) {
		t.Fatalf("render escaped the sandbox: %v", err)
	}
}

// TestMacrosWithTheirDefaults: every macro, called with its required
// arguments only (its example's), passes the plan's checks: its defaults
// reach its operations as JSON values (product_shot's samples was refused,
// "int is not a JSON value"; turntable_camera's frames read 0).
func TestMacrosWithTheirDefaults(t *testing.T) {
	c := startCluster(t)
	sid := c.negotiate(t).GetSessionId()
	macros, err := c.client.ListMacros(ctxT(t, time.Minute), &cpv1.ListMacrosRequest{})
	if err != nil || len(macros.GetMacros()) == 0 {
		t.Fatalf("ListMacros: %v %v", macros, err)
	}
	for _, m := range macros.GetMacros() {
		args := map[string]any{}
		required, _ := m.GetInputSchema().AsMap()["required"].([]any)
		for _, k := range required {
			args[k.(string)] = m.GetExampleArgs().AsMap()[k.(string)]
		}
		_, err := c.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: sid, RequestId: "defaults-" + m.GetName(),
			ValidateOnly: true, Operations: []*cpv1.Operation{op("m", m.GetName(), args)}})
		if err != nil {
			t.Errorf("%s with %v: %v", m.GetName(), args, err)
		}
	}
}
