package e2e

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/internal/blenderprocs"
)

// blenderPIDs lists the Blenders of one agentd data dir (spares included).
func blenderPIDs(t testing.TB, dir string) []string {
	t.Helper()
	return blenderprocs.Under(dir)
}

// sessionBlender lists the Blender of the session whose directory on its
// agent is dir, if it runs.
func sessionBlender(t testing.TB, dir string) []string {
	t.Helper()
	return blenderprocs.OfSession(dir)
}

// TestShutdownAndRestart: SIGTERM stops agentd with its Blender children, and
// a restarted control plane still serves the plans and receipts it stored.
func TestShutdownAndRestart(t *testing.T) {
	c := startCluster(t)
	s := c.negotiate(t)
	p, rs := c.run(t, s.GetSessionId(), "lifecycle-1", op("a", "object.create", map[string]any{"type": "cube"}))
	if p.GetState() != cpv1.Plan_STATE_SUCCEEDED {
		t.Fatalf("plan: %v", p)
	}
	agentDir := filepath.Join(c.dir, "agent")
	if pids := sessionBlender(t, filepath.Join(agentDir, "sessions", s.GetSessionId())); len(pids) != 1 {
		t.Fatalf("want one Blender child for the session, found %v", pids)
	}
	c.agent.stop(t, syscall.SIGTERM)
	if code := c.agent.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("agentd exit code %d after SIGTERM", code)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(blenderPIDs(t, agentDir)) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if pids := blenderPIDs(t, agentDir); len(pids) > 0 {
		t.Fatalf("Blender outlived agentd: %v", pids)
	}

	// Restart the control plane on the same data dir.
	c.cp.stop(t, syscall.SIGTERM)
	if code := c.cp.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("controlplane exit code %d after SIGTERM", code)
	}
	c.cp = startDaemon(t, "controlplane", c.cp.cmd.Args[1:]...)
	var got []*cpv1.Receipt
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if _, err := c.client.GetPlan(ctxT(t, time.Second), &cpv1.GetPlanRequest{RequestId: "lifecycle-1"}); err == nil {
			got = c.receipts(t, "lifecycle-1", 1)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(got) != 1 || got[0].GetSceneHashAfter() != rs[0].GetSceneHashAfter() {
		t.Fatalf("receipts after restart: %v", got)
	}
}

// TestAgentComesBackOnAnotherAddress: sessions are bound to their agent's
// id, not its address: an agent restarted on another port keeps serving
// them.
func TestAgentComesBackOnAnotherAddress(t *testing.T) {
	c := startCluster(t)
	s := c.negotiate(t)
	_, rs := c.run(t, s.GetSessionId(), "moved-1", op("a", "object.create", map[string]any{"type": "cube", "name": "Stay"}))
	c.agent.stop(t, syscall.SIGTERM)
	moved := freeAddr(t)
	for i, arg := range c.agentArgs {
		if arg == c.agentAddr {
			c.agentArgs[i] = moved
		}
	}
	c.agentAddr = moved
	c.restartAgent(t)
	c.waitAgent(t)
	p, after := c.run(t, s.GetSessionId(), "moved-2", op("b", "scene.get_summary", map[string]any{}))
	if p.GetState() != cpv1.Plan_STATE_SUCCEEDED || after[0].GetSceneHashBefore() != rs[0].GetSceneHashAfter() {
		t.Fatalf("after the agent moved: %v %v", p, after)
	}
}

// TestRegistriesByFingerprint: once the control plane holds an agent's tool
// registries, its heartbeats name them by fingerprint; a restarted control
// plane does not hold them, says so, and has them in full from the agent's
// next registration, so sessions are placed as before.
func TestRegistriesByFingerprint(t *testing.T) {
	c := startCluster(t)
	tools := func() int {
		resp, err := c.client.ListAgents(ctxT(t, 10*time.Second), &cpv1.ListAgentsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, a := range resp.GetAgents() {
			for _, rt := range a.GetRuntimes() {
				n += len(rt.GetRegistry().GetTools())
			}
		}
		return n
	}
	const held, resent = "heartbeats name them by fingerprint", "registering them in full"
	waitLog(t, c.agent, held)
	time.Sleep(2500 * time.Millisecond) // heartbeats by fingerprint
	want := tools()
	if want < 20 {
		t.Fatalf("after heartbeats by fingerprint the agent lists %d tools", want)
	}
	c.cp.stop(t, syscall.SIGTERM)
	c.cp = startDaemon(t, "controlplane", c.cp.cmd.Args[1:]...)
	waitLog(t, c.agent, resent)
	c.waitAgent(t)
	if got := tools(); got != want {
		t.Fatalf("after the restart the agent lists %d tools, want %d", got, want)
	}
	s := c.negotiate(t)
	if p, _ := c.run(t, s.GetSessionId(), "fingerprint-1", op("a", "object.create", map[string]any{"type": "cube"})); p.GetState() != cpv1.Plan_STATE_SUCCEEDED {
		t.Fatalf("plan after the restart: %v", p)
	}
}
