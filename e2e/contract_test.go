package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

const debianBlender = "/usr/bin/blender"

func negotiateReq(mod func(*cpv1.NegotiateRequest)) *cpv1.NegotiateRequest {
	r := &cpv1.NegotiateRequest{ContractVersion: "1.0.0", HostProfile: &cpv1.HostProfile{ClientName: "e2e", ClientVersion: "1"}}
	if mod != nil {
		mod(r)
	}
	return r
}

// contractViolation asserts a CONTRACT_VIOLATION refusal naming field.
func contractViolation(t *testing.T, err error, field, value string) {
	t.Helper()
	st := status.Convert(err)
	info, fields := details(st)
	if st.Code() != codes.FailedPrecondition || info.GetReason() != "CONTRACT_VIOLATION" {
		t.Fatalf("want FAILED_PRECONDITION CONTRACT_VIOLATION, got %v", err)
	}
	if info.GetMetadata()["field"] != field || (value != "" && info.GetMetadata()["value"] != value) {
		t.Errorf("ErrorInfo metadata %v, want field %s value %s", info.GetMetadata(), field, value)
	}
	if len(fields) != 1 || fields[0].GetField() != field || fields[0].GetDescription() == "" {
		t.Errorf("field violations %v", fields)
	}
}

// TestNegotiateContract: the session contract of seed 003, its refusals,
// and placement by Blender version range across two agents.
func TestNegotiateContract(t *testing.T) {
	c := startCluster(t)
	resp, err := c.client.Negotiate(ctxT(t, 2*time.Minute), negotiateReq(func(r *cpv1.NegotiateRequest) {
		r.HostProfile.FeatureFlags = []string{"progress_events"}
		r.Limits = &cpv1.Limits{MaxOperationsPerPlan: 10, MaxPayloadBytes: 1 << 40, ToolSurfaceCap: 500, MaxConcurrentCalls: 4}
		r.Audit = &cpv1.AuditPolicy{Verbosity: "full", Redact: []string{"args"}}
	}))
	if err != nil {
		t.Fatal(err)
	}
	k := resp.GetContract()
	bp, caps, cons, lim := k.GetBlenderProfile(), k.GetCapabilities(), k.GetConstraints(), k.GetLimits()
	switch {
	case k.GetContractVersion() != "1.0.0", k.GetSessionId() == "", k.GetHostProfile().GetClientName() != "e2e":
		t.Errorf("identity fields: %v", k)
	case bp.GetVersion() == "", bp.GetPlatform() == "", len(bp.GetFeatures()) == 0:
		t.Errorf("blender_profile %v", bp)
	case len(caps.GetTools()) == 0, !caps.GetMacros(), strings.Join(caps.GetFeatureFlags(), ",") != "progress_events":
		t.Errorf("capabilities %v", caps)
	case k.GetToolRegistryRef().GetFingerprint() == "", k.GetMacroRegistryRef().GetFingerprint() == "":
		t.Errorf("registry refs %v %v", k.GetToolRegistryRef(), k.GetMacroRegistryRef())
	case cons.GetToolTimeBudgetMs() <= 0, cons.GetMaxMemoryMib() <= 0, cons.GetTempStorageMib() <= 0, len(cons.GetSafetyRails()) == 0:
		t.Errorf("constraints %v", cons)
	case lim.GetMaxOperationsPerPlan() != 10, lim.GetMaxPayloadBytes() != 64<<20, lim.GetToolSurfaceCap() != 35, lim.GetMaxConcurrentCalls() != 1:
		t.Errorf("limits not tightened: %v", lim)
	case !k.GetUiOptional(), k.GetAudit().GetVerbosity() != "full":
		t.Errorf("ui_optional/audit %v %v", k.GetUiOptional(), k.GetAudit())
	}
	for _, f := range []string{"tool_registry", "macro_registry", "schemas", "contract"} {
		if k.GetFingerprints()[f] == "" {
			t.Errorf("fingerprint %s missing: %v", f, k.GetFingerprints())
		}
	}
	// The tightened limit holds plans to it.
	var ops []*cpv1.Operation
	for _, id := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k"} {
		ops = append(ops, op(id, "scene.get_summary", map[string]any{}))
	}
	_, err = c.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: k.GetSessionId(), RequestId: "too-many", Operations: ops})
	if st := status.Convert(err); st.Code() != codes.FailedPrecondition {
		t.Fatalf("11 operations with a limit of 10: %v", err)
	}

	// A payload over the contract's limit is refused before anything runs.
	small, err := c.client.Negotiate(ctxT(t, 2*time.Minute), negotiateReq(func(r *cpv1.NegotiateRequest) {
		r.Limits = &cpv1.Limits{MaxPayloadBytes: 100}
	}))
	if err != nil {
		t.Fatal(err)
	}
	if got := small.GetContract().GetLimits().GetMaxPayloadBytes(); got != 100 {
		t.Fatalf("proposed payload limit of 100 bytes became %d", got)
	}
	_, err = c.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: small.GetContract().GetSessionId(),
		RequestId: "too-big", Operations: ops[:8]})
	if info, _ := details(status.Convert(err)); status.Code(err) != codes.FailedPrecondition || info.GetReason() != "CONTRACT_VIOLATION" {
		t.Fatalf("plan over the payload limit: %v", err)
	}

	for _, tc := range []struct {
		name, field, value string
		mod                func(*cpv1.NegotiateRequest)
	}{
		{"unsupported flag", "host_profile.feature_flags", "time_travel", func(r *cpv1.NegotiateRequest) {
			r.HostProfile.FeatureFlags = []string{"progress_events", "time_travel"}
		}},
		{"contract version", "contract_version", "2.0.0", func(r *cpv1.NegotiateRequest) { r.ContractVersion = "2.0.0" }},
		{"no Blender in range", "blender_version_range", ">=9", func(r *cpv1.NegotiateRequest) { r.BlenderVersionRange = ">=9" }},
		{"unknown registry", "tool_registry_ref", "", func(r *cpv1.NegotiateRequest) {
			r.ToolRegistryRef = &cpv1.ToolRegistryRef{Fingerprint: "0000"}
		}},
		{"unknown macro registry", "macro_registry_ref", "", func(r *cpv1.NegotiateRequest) {
			r.MacroRegistryRef = &cpv1.MacroRegistryRef{Fingerprint: "0000"}
		}},
		{"memory", "constraints.max_memory_mib", "", func(r *cpv1.NegotiateRequest) {
			r.Constraints = &cpv1.Constraints{MaxMemoryMib: 1 << 40}
		}},
		{"time budget", "constraints.tool_time_budget_ms", "", func(r *cpv1.NegotiateRequest) {
			r.Constraints = &cpv1.Constraints{ToolTimeBudgetMs: int64(24 * time.Hour / time.Millisecond)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.client.Negotiate(ctxT(t, time.Minute), negotiateReq(tc.mod))
			contractViolation(t, err, tc.field, tc.value)
		})
	}

	// ListTools: every tool with its metadata; ListMacros: examples.
	tools, err := c.client.ListTools(ctxT(t, 10*time.Second), &cpv1.ListToolsRequest{SessionId: k.GetSessionId()})
	if err != nil {
		t.Fatal(err)
	}
	if tools.GetRegistryRef().GetFingerprint() != k.GetToolRegistryRef().GetFingerprint() || len(tools.GetTools()) < 6 {
		t.Fatalf("ListTools: %v", tools.GetRegistryRef())
	}
	for _, tool := range tools.GetTools() {
		if tool.GetVersion() == "" || tool.GetDescription() == "" || tool.GetInputSchema() == nil || tool.GetSafetyMode() == "" ||
			tool.GetDeterminismClass() == "" || tool.GetIdempotenceClass() == "" || tool.GetRollbackMethod() == "" || tool.GetBlenderVersions() == "" {
			t.Errorf("tool %s lacks metadata: %v", tool.GetName(), tool)
		}
	}
	macros, err := c.client.ListMacros(ctxT(t, 10*time.Second), &cpv1.ListMacrosRequest{})
	if err != nil || len(macros.GetMacros()) < 3 || macros.GetRegistryRef().GetFingerprint() != k.GetMacroRegistryRef().GetFingerprint() {
		t.Fatalf("ListMacros: %v %v", macros, err)
	}
	for _, m := range macros.GetMacros() {
		if m.GetExampleArgs() == nil || len(m.GetTools()) == 0 || m.GetFingerprint() == "" {
			t.Errorf("macro %s: %v", m.GetName(), m)
		}
	}

	// A second agent on Debian's Blender 3.4: a range picks the runtime.
	if _, err := os.Stat(debianBlender); err != nil {
		t.Skip("Debian's blender is not installed; placement across versions not tested")
	}
	second := freeAddr(t)
	startDaemon(t, "agentd", "--listen", second, "--control-plane", c.cpAddr, "--data-dir", filepath.Join(c.dir, "agent34"), "--token-file", filepath.Join(c.dir, "agent.token"), "--blender", debianBlender)
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := c.client.ListAgents(ctxT(t, 5*time.Second), &cpv1.ListAgentsRequest{})
		ready := 0 // not one listed while its certificate is issued: it joins at its next registration
		for _, a := range resp.GetAgents() {
			if a.GetState() == cpv1.Agent_STATE_READY && len(a.GetRuntimes()) > 0 {
				ready++
			}
		}
		if err == nil && ready == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("second agent did not register: %v %v", resp, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for rng, want := range map[string]string{"<4": "3.4", ">=4.5": "4.5"} {
		resp, err := c.client.Negotiate(ctxT(t, 2*time.Minute), negotiateReq(func(r *cpv1.NegotiateRequest) { r.BlenderVersionRange = rng }))
		if err != nil {
			t.Fatalf("range %s: %v", rng, err)
		}
		if v := resp.GetContract().GetBlenderProfile().GetVersion(); !strings.HasPrefix(v, want) {
			t.Errorf("range %s placed on Blender %s", rng, v)
		}
	}
}

// TestCancelAndTimeBudget: CancelPlan stops a long render within seconds
// and a tool over its time budget fails with TIMEOUT; either way nothing of
// the interrupted operation remains and the session goes on.
func TestCancelAndTimeBudget(t *testing.T) {
	c := startCluster(t)
	slow := map[string]any{"output": "slow.png", "resolution": []any{1280, 960}, "samples": 4096, "seed": 1}

	s := c.negotiate(t)
	_, err := c.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: s.GetSessionId(), RequestId: "cancel-1",
		Operations: []*cpv1.Operation{
			op("a", "object.create", map[string]any{"type": "cube", "name": "Before"}),
			op("b", "render.still", slow, "a"),
			op("c", "object.create", map[string]any{"type": "cube", "name": "After"}, "b"),
		}})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := c.client.StreamReceipts(ctxT(t, time.Minute), &cpv1.StreamReceiptsRequest{RequestId: "cancel-1"})
	if err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetReceipt() != nil {
			break // "a" is done; "b" renders now
		}
	}
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	cresp, err := c.client.CancelPlan(ctxT(t, 30*time.Second), &cpv1.CancelPlanRequest{RequestId: "cancel-1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cancel took %s", time.Since(start))
	if cresp.GetPlan().GetState() != cpv1.Plan_STATE_CANCELLED {
		t.Fatalf("plan after cancel: %v", cresp.GetPlan())
	}
	rs := c.receipts(t, "cancel-1", 1)
	if len(rs) != 3 || rs[0].GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED ||
		rs[1].GetStatus() != cpv1.Receipt_STATUS_NOT_RUN || rs[1].GetError().GetErrorCode() != "CANCELLED" ||
		rs[2].GetStatus() != cpv1.Receipt_STATUS_NOT_RUN {
		t.Fatalf("receipts after cancel: %v", rs)
	}
	_, after := c.run(t, s.GetSessionId(), "after-cancel", op("s", "scene.get_summary", map[string]any{}))
	if after[0].GetSceneHashBefore() != rs[0].GetSceneHashAfter() {
		t.Fatalf("scene after cancel %s, want %s", after[0].GetSceneHashBefore(), rs[0].GetSceneHashAfter())
	}

	// A plan whose only operation is interrupted did not do what it was
	// asked: it ends CANCELLED, never SUCCEEDED.
	if _, err := c.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: s.GetSessionId(), RequestId: "cancel-one",
		Operations: []*cpv1.Operation{op("r", "render.still", slow)}}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); c.plan(t, "cancel-one").GetState() != cpv1.Plan_STATE_RUNNING; {
		if time.Now().After(deadline) {
			t.Fatal("the one-operation plan did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // the render is under way
	one, err := c.client.CancelPlan(ctxT(t, 30*time.Second), &cpv1.CancelPlanRequest{RequestId: "cancel-one"})
	if err != nil {
		t.Fatal(err)
	}
	ors := c.receipts(t, "cancel-one", 1)
	if one.GetPlan().GetState() != cpv1.Plan_STATE_CANCELLED || len(ors) != 1 || ors[0].GetStatus() != cpv1.Receipt_STATUS_NOT_RUN ||
		ors[0].GetError().GetErrorCode() != "CANCELLED" {
		t.Fatalf("one-operation plan after cancel: %v, receipts %v", one.GetPlan(), ors)
	}

	// Time budget: 1.5 s per tool call.
	resp, err := c.client.Negotiate(ctxT(t, 2*time.Minute), negotiateReq(func(r *cpv1.NegotiateRequest) {
		r.Constraints = &cpv1.Constraints{ToolTimeBudgetMs: 1500}
	}))
	if err != nil {
		t.Fatal(err)
	}
	sid := resp.GetContract().GetSessionId()
	p, rs := c.run(t, sid, "budget-1",
		op("a", "object.create", map[string]any{"type": "cube", "name": "Kept"}),
		op("b", "render.still", slow, "a"))
	f := rs[1].GetError()
	if p.GetState() != cpv1.Plan_STATE_FAILED || f.GetErrorCode() != "TIMEOUT" || !f.GetRecoverable() ||
		rs[1].GetResult().GetFields()["budget_ms"].GetNumberValue() != 1500 {
		t.Fatalf("over-budget render: %v %v", p.GetState(), rs[1])
	}
	if rs[1].GetSceneHashAfter() != rs[0].GetSceneHashAfter() {
		t.Fatalf("timed-out operation left the scene at %s, want %s", rs[1].GetSceneHashAfter(), rs[0].GetSceneHashAfter())
	}
	_, after = c.run(t, sid, "after-budget", op("s", "scene.get_summary", map[string]any{}))
	if after[0].GetSceneHashBefore() != rs[0].GetSceneHashAfter() {
		t.Fatal("session not usable after a timeout")
	}
}
