package e2e

import (
	"testing"
	"time"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// TestMemoryCeiling: a session's negotiated max_memory_mib holds on its
// Blender. An operation that goes over it fails with RESOURCE_EXHAUSTED and
// leaves nothing; the session goes on from its journal, and the agent
// stays ready.
func TestMemoryCeiling(t *testing.T) {
	c := startCluster(t)
	resp, err := c.client.Negotiate(ctxT(t, time.Minute), negotiateReq(func(r *cpv1.NegotiateRequest) {
		r.HostProfile.FeatureFlags = []string{"unsafe_ops", "nondeterministic_tools"}
		r.Constraints = &cpv1.Constraints{MaxMemoryMib: 1024}
	}))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetContract().GetConstraints().GetMaxMemoryMib(); got != 1024 {
		t.Fatalf("contract max_memory_mib = %d", got)
	}
	id := resp.GetContract().GetSessionId()
	_, rs := c.run(t, id, "keep", op("keep", "object.create", map[string]any{"type": "cube", "name": "Keep"}))
	if rs[0].GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED {
		t.Fatalf("object.create: %v", rs[0])
	}
	kept := rs[0].GetSceneHashAfter()
	// 6 GiB, touched: far over the ceiling, well within this machine.
	_, rs = c.run(t, id, "hog", op("hog", "python.exec", map[string]any{"code": "import bpy\nbpy.data.objects.new('Hog', None)\nb = bytearray(6 << 30)\nresult = len(b)"}))
	r := rs[len(rs)-1]
	if r.GetStatus() != cpv1.Receipt_STATUS_FAILED || r.GetError().GetErrorCode() != "RESOURCE_EXHAUSTED" ||
		r.GetSceneHashAfter() != kept || !r.GetError().GetRecoverable() {
		t.Fatalf("an operation over the memory ceiling: %v", r)
	}
	_, rs = c.run(t, id, "after", op("look", "python.exec", map[string]any{"code": "import bpy\nresult = sorted(o.name for o in bpy.data.objects if o.name in ('Keep', 'Hog'))"}))
	if got := rs[0].GetResult().GetFields()["result"].GetListValue().GetValues(); rs[0].GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED ||
		len(got) != 1 || got[0].GetStringValue() != "Keep" {
		t.Fatalf("the session after its Blender went over the ceiling: %v", rs[0])
	}
	agents, err := c.client.ListAgents(ctxT(t, 10*time.Second), &cpv1.ListAgentsRequest{})
	if err != nil || len(agents.GetAgents()) != 1 || agents.GetAgents()[0].GetState() != cpv1.Agent_STATE_READY {
		t.Fatalf("the agent after a Blender went over its ceiling: %v %v", agents, err)
	}
}
