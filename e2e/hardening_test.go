package e2e

import (
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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

// TestRenderFrameRange: a frame range its end before its start, or of more
// than 500 frames (render.animation, distributed too), is refused with the
// plan, SCHEMA_INVALID naming frame_end, before anything runs (the
// registry's "x-span"); so is a distributed render without its end. Before, the plan ran up to the render, which
// failed; and each agent of a distributed render checked only its own
// share, so two agents took 900 frames, ten 5,000.
func TestRenderFrameRange(t *testing.T) {
	c := startCluster(t)
	id := c.negotiate(t).GetSessionId()
	type call struct {
		tool string
		args map[string]any
	}
	for name, o := range map[string]call{
		"900 frames, distributed": {"render.animation", map[string]any{"output_prefix": "f", "frame_start": 1, "frame_end": 900,
			"resolution": []any{16, 16}, "samples": 1, "seed": 1, "distribute": true}},
		"900 frames": {"render.animation", map[string]any{"output_prefix": "f", "frame_start": 1, "frame_end": 900}},
		"backwards":  {"render.animation", map[string]any{"output_prefix": "f", "frame_start": 20, "frame_end": 10}},
		"settings":   {"render.settings", map[string]any{"frame_start": 20, "frame_end": 10}},
		// The control plane splits only a range it is given.
		"distributed, no end": {"render.animation", map[string]any{"output_prefix": "f", "frame_start": 1, "distribute": true}},
	} {
		rid := "range-" + strings.ReplaceAll(strings.ReplaceAll(name, " ", "-"), ",", "")
		_, err := c.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: id, RequestId: rid,
			Operations: []*cpv1.Operation{cubeOp("cube", "Before", 0), op("frames", o.tool, o.args, "cube")}})
		st := status.Convert(err)
		info, fields := details(st)
		if st.Code() != codes.InvalidArgument || info.GetReason() != "SCHEMA_INVALID" || len(fields) != 1 || fields[0].GetField() != "operations[1].args.frame_end" {
			t.Errorf("%s: %v (%v), want SCHEMA_INVALID naming operations[1].args.frame_end", name, err, fields)
		}
		if _, err := c.client.GetPlan(ctxT(t, time.Minute), &cpv1.GetPlanRequest{RequestId: rid}); status.Code(err) != codes.NotFound {
			t.Errorf("%s: the refused plan was stored: %v", name, err)
		}
	}
}

// TestAgentFilesPrivate: what agentd and its Blenders write (scenes,
// checkpoints, renders, uploads, the journal; not its certificates) is
// readable by its user alone; with the usual umask, checkpoints were 0644 for any user of the
// host to read.
func TestAgentFilesPrivate(t *testing.T) {
	c := startClusterWith(t, []string{"--checkpoint-every", "1"}, nil)
	id := c.negotiate(t).GetSessionId()
	c.run(t, id, "files", op("a", "object.create", map[string]any{"type": "cube"}),
		op("b", "render.still", map[string]any{"output": "x.png", "resolution": []any{16, 16}, "samples": 1, "seed": 1}, "a"))
	checked := 0
	filepath.WalkDir(filepath.Join(c.dir, "agent"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink != 0 || d.Name() == "ca.pem" || d.Name() == "agent-cert.pem" {
			return nil // certificates are public
		}
		if fi, err := d.Info(); err == nil && fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s is %v", path, fi.Mode().Perm())
		}
		checked++
		return nil
	})
	if checked < 5 {
		t.Fatalf("%d files checked", checked)
	}
}
