package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/planjson"
)

// planFromFile reads one of the example plans the way blendctl does.
func planFromFile(t *testing.T, name string) []*cpv1.Operation {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(), "examples", "plans", name))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Operations []planjson.Operation `json:"operations"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	var ops []*cpv1.Operation
	for _, o := range f.Operations {
		args, err := structpb.NewStruct(o.Args)
		if err != nil {
			t.Fatal(err)
		}
		level := cpv1.SafetyLevel(cpv1.SafetyLevel_value["SAFETY_LEVEL_"+strings.ToUpper(o.SafetyLevel)])
		ops = append(ops, &cpv1.Operation{OperationId: o.OperationID, ToolName: o.ToolName, Args: args, DependsOn: o.DependsOn, SafetyLevel: level})
	}
	return ops
}

// TestToolSurface runs the example plans that use the wider tool surface
// and macros, end to end, and the contract gates of the special tools.
func TestToolSurface(t *testing.T) {
	c := startCluster(t)

	t.Run("ProductShotWithMacro", func(t *testing.T) {
		s := c.negotiate(t)
		p, rs := c.run(t, s.GetSessionId(), "product-shot", planFromFile(t, "product_shot.json")...)
		if p.GetState() != cpv1.Plan_STATE_SUCCEEDED {
			t.Fatalf("plan %v: %v", p.GetState(), p.GetFailure())
		}
		steps := 0
		for _, r := range rs {
			if strings.HasPrefix(r.GetOperationId(), "studio:") {
				steps++
			}
		}
		if steps < 8 || len(rs) != len(p.GetSchedule()) {
			t.Fatalf("receipts do not show the macro's steps: %d steps in %d receipts", steps, len(rs))
		}
		last := rs[len(rs)-1].GetResult().AsMap()
		if !strings.HasSuffix(last["path"].(string), "product.obj") {
			t.Fatalf("export result %v", last)
		}
	})

	t.Run("TurntableWithProgress", func(t *testing.T) {
		resp, err := c.client.Negotiate(ctxT(t, 2*time.Minute), negotiateReq(func(r *cpv1.NegotiateRequest) {
			r.HostProfile.FeatureFlags = []string{"progress_events"}
		}))
		if err != nil {
			t.Fatal(err)
		}
		sid := resp.GetContract().GetSessionId()
		if _, err := c.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: sid, RequestId: "turntable",
			Operations: planFromFile(t, "turntable.json")}); err != nil {
			t.Fatal(err)
		}
		stream, err := c.client.StreamReceipts(ctxT(t, 5*time.Minute), &cpv1.StreamReceiptsRequest{RequestId: "turntable"})
		if err != nil {
			t.Fatal(err)
		}
		var progress []*cpv1.Progress
		var last *cpv1.Receipt
		for {
			ev, err := stream.Recv()
			if err != nil {
				break
			}
			if pg := ev.GetProgress(); pg != nil {
				progress = append(progress, pg)
			} else {
				last = ev.GetReceipt()
			}
		}
		if last.GetToolName() != "render.animation" || last.GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED {
			t.Fatalf("last receipt %v", last)
		}
		if n := len(last.GetResult().GetFields()["paths"].GetListValue().GetValues()); n != 8 {
			t.Fatalf("%d frames rendered", n)
		}
		if len(progress) == 0 || progress[len(progress)-1].GetTotal() != 8 || progress[0].GetOperationId() != "frames" {
			t.Fatalf("progress events %v", progress)
		}
		for i := 1; i < len(progress); i++ {
			if progress[i].GetDone() < progress[i-1].GetDone() {
				t.Fatalf("progress goes backwards: %v", progress)
			}
		}
	})

	t.Run("VerifyAndDeterminism", func(t *testing.T) {
		s := c.negotiate(t)
		create := op("v", "object.create", map[string]any{"type": "cone", "name": "Checked"})
		create.Verify = true
		render := op("r", "render.still", map[string]any{"output": "v.png", "resolution": []any{32, 24}, "samples": 1, "seed": 5}, "v")
		p, rs := c.run(t, s.GetSessionId(), "verify-1", create, render)
		if p.GetState() != cpv1.Plan_STATE_SUCCEEDED || !rs[0].GetVerified() || rs[1].GetVerified() {
			t.Fatalf("verify: %v %v", p.GetFailure(), rs)
		}
		if rs[0].GetDeterminismClass() != "deterministic" || rs[1].GetDeterminismClass() != "seeded" ||
			rs[1].GetResult().GetFields()["seed"].GetNumberValue() != 5 || rs[0].GetTolerance() == "" {
			t.Fatalf("determinism metadata: %v", rs)
		}
	})

	t.Run("ContractGates", func(t *testing.T) {
		s := c.negotiate(t)
		refused := func(requestID, reason string, atomic bool, ops ...*cpv1.Operation) {
			t.Helper()
			_, err := c.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: s.GetSessionId(), RequestId: requestID, Operations: ops, Atomic: atomic})
			st := status.Convert(err)
			if info, _ := details(st); st.Code() != codes.FailedPrecondition || info.GetReason() != reason {
				t.Fatalf("%s: %v, want %s", requestID, err, reason)
			}
		}
		refused("ui", "CAPABILITY_MISSING", false, op("h", "ui.highlight", map[string]any{"name": "Camera"}))
		py := op("x", "python.exec", map[string]any{"code": "import bpy\nresult = len(bpy.data.objects)"})
		py.SafetyLevel = cpv1.SafetyLevel_SAFETY_LEVEL_DESTRUCTIVE
		refused("py", "POLICY_REFUSED", false, py)

		// unsafe_ops alone is not enough: python.exec promises no determinism.
		resp, err := c.client.Negotiate(ctxT(t, 2*time.Minute), negotiateReq(func(r *cpv1.NegotiateRequest) {
			r.HostProfile.FeatureFlags = []string{"unsafe_ops"}
		}))
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: resp.GetContract().GetSessionId(),
			RequestId: "py-nondet", Operations: []*cpv1.Operation{py}})
		if info, _ := details(status.Convert(err)); info.GetReason() != "NONDETERMINISTIC_REFUSED" {
			t.Fatalf("python.exec without nondeterministic_tools: %v", err)
		}
		resp, err = c.client.Negotiate(ctxT(t, 2*time.Minute), negotiateReq(func(r *cpv1.NegotiateRequest) {
			r.HostProfile.FeatureFlags = []string{"unsafe_ops", "nondeterministic_tools"}
		}))
		if err != nil {
			t.Fatal(err)
		}
		unsafe := resp.GetContract().GetSessionId()
		p, rs := c.run(t, unsafe, "py-ok", py)
		if p.GetState() != cpv1.Plan_STATE_SUCCEEDED || rs[0].GetResult().GetFields()["result"].GetNumberValue() != 2 ||
			rs[0].GetDeterminismClass() != "nondeterministic" {
			t.Fatalf("python.exec with unsafe_ops: %v %v", p.GetFailure(), rs)
		}
		_, err = c.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: unsafe, RequestId: "py-atomic",
			Operations: []*cpv1.Operation{py}, Atomic: true})
		if info, _ := details(status.Convert(err)); info.GetReason() != "CONTRACT_VIOLATION" {
			t.Fatalf("python.exec in an atomic plan: %v", err)
		}
		// Paths in any tool stay in the sandbox.
		_, err = c.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: s.GetSessionId(), RequestId: "escape",
			Operations: []*cpv1.Operation{op("e", "scene.export", map[string]any{"format": "obj", "output": "../../escape.obj"})}})
		if info, _ := details(status.Convert(err)); info.GetReason() != "POLICY_REFUSED" {
			t.Fatalf("export outside the sandbox: %v", err)
		}
	})
}
