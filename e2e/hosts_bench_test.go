package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"testing"
	"time"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// BenchmarkFailover measures how long a plan stops when its agent is lost,
// at 100 and 10,000 objects in the session: two agents on loopback, a
// session built to that size by one plan, then a plan of 300 creates whose
// agent (agentd, and its Blender with it) is killed with SIGKILL after 50
// receipts. Reported per size, in milliseconds:
//
//   - detect: the kill → the control plane lists the agent LOST (about
//     --agent-lost-after, 2 s here; a setting, not a cost);
//   - failover: LOST → the first receipt of the plan after the kill, the
//     number the issue asks for: the move (at most one --heartbeat tick,
//     1 s here), the rebuild on the other agent (the session's whole
//     history replayed: no checkpoints reach the control plane yet), and
//     the plan's next operation.
//
// The killed agent is started again (on its data dir) before the next
// size, so both sizes have two agents.
func BenchmarkFailover(b *testing.B) {
	c := startClusterOpts(b, clusterOpts{cpArgs: []string{"--agent-lost-after", "2s"}})
	second := freeAddr(b)
	secondArgs := append([]string{"--listen", second, "--control-plane", c.cpAddr, "--data-dir", filepath.Join(c.dir, "agent2"),
		"--token-file", filepath.Join(c.dir, "agent.token")}, blenderFlags()...)
	agents := map[string]*daemon{c.agentAddr: c.agent, second: startDaemon(b, "agentd", secondArgs...)}
	args := map[string][]string{c.agentAddr: c.agentArgs, second: secondArgs}
	waitReady(b, c, second)
	for i := 0; i < b.N; i++ {
		for _, n := range []int{100, 10000} {
			b.StopTimer()
			s := c.negotiate(b).GetSessionId()
			build := make([]*cpv1.Operation, n)
			for j := range build {
				build[j] = op(fmt.Sprintf("p%05d", j), "object.create", map[string]any{
					"type": "plane", "name": fmt.Sprintf("P%05d", j), "location": []any{float64(j % 100 * 3), float64(j / 100 * 3), 0.0}})
			}
			if p, _ := c.run(b, s, fmt.Sprintf("build-%d-%d", i, n), build...); p.GetState() != cpv1.Plan_STATE_SUCCEEDED {
				b.Fatalf("build: %v", p)
			}
			addr := agentAddrOf(b, c, s)
			b.StartTimer()
			detect, failover := killMidPlan(b, c, s, fmt.Sprintf("run-%d-%d", i, n), agents[addr])
			b.StopTimer()
			label := "100"
			if n == 10000 {
				label = "10k"
			}
			b.ReportMetric(float64(detect.Milliseconds()), "detect-ms-"+label)
			b.ReportMetric(float64(failover.Milliseconds()), "failover-ms-"+label)
			agents[addr] = startDaemon(b, "agentd", args[addr]...)
			waitReady(b, c, addr)
		}
	}
}

// killMidPlan runs 300 creates in a session, kills its agent after 50
// receipts, and returns kill → LOST and LOST → the next receipt.
func killMidPlan(b *testing.B, c *cluster, sessionID, requestID string, agent *daemon) (detect, failover time.Duration) {
	b.Helper()
	ops := make([]*cpv1.Operation, 300)
	for j := range ops {
		ops[j] = cubeOp(fmt.Sprintf("c%03d", j), fmt.Sprintf("K%03d", j), j)
	}
	if _, err := c.client.SubmitPlan(ctxT(b, time.Minute), &cpv1.SubmitPlanRequest{SessionId: sessionID, RequestId: requestID, Operations: ops}); err != nil {
		b.Fatal(err)
	}
	stream, err := c.client.StreamReceipts(ctxT(b, 10*time.Minute), &cpv1.StreamReceiptsRequest{RequestId: requestID, StartSequence: 1})
	if err != nil {
		b.Fatal(err)
	}
	var killed, lost, resumed time.Time
	var mu sync.Mutex
	stop := make(chan struct{})
	defer close(stop)
	n := 0
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			b.Fatalf("stream: %v", err)
		}
		r := resp.GetReceipt()
		if r == nil {
			continue
		}
		if r.GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED {
			b.Fatalf("receipt %d: %v", r.GetSequence(), r)
		}
		n++
		if n == 50 {
			agent.expectExit()
			agent.cmd.Process.Kill()
			killed = time.Now()
			go watchLost(c, agentIDOf(b, c, sessionID), stop, func(at time.Time) { mu.Lock(); lost = at; mu.Unlock() })
			continue
		}
		if !killed.IsZero() && resumed.IsZero() {
			mu.Lock()
			seenLost := !lost.IsZero()
			mu.Unlock()
			if seenLost {
				resumed = time.Now()
			}
		}
	}
	if n != len(ops) || resumed.IsZero() {
		b.Fatalf("%d receipts; resumed: %v (receipts already sent when the agent was killed are not a resumption)", n, !resumed.IsZero())
	}
	return lost.Sub(killed), resumed.Sub(lost)
}

// watchLost polls ListAgents until the agent is LOST and reports when.
func watchLost(c *cluster, agentID string, stop <-chan struct{}, at func(time.Time)) {
	for {
		select {
		case <-stop:
			return
		case <-time.After(10 * time.Millisecond):
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := c.client.ListAgents(ctx, &cpv1.ListAgentsRequest{})
		cancel()
		if err != nil {
			continue
		}
		for _, a := range resp.GetAgents() {
			if a.GetAgentId() == agentID && a.GetState() == cpv1.Agent_STATE_LOST {
				at(time.Now())
				return
			}
		}
	}
}

func agentIDOf(b *testing.B, c *cluster, sessionID string) string {
	b.Helper()
	resp, err := c.client.GetSession(ctxT(b, time.Minute), &cpv1.GetSessionRequest{SessionId: sessionID})
	if err != nil {
		b.Fatal(err)
	}
	return resp.GetSession().GetAgentId()
}

// agentAddrOf is the address of the agent a session is on.
func agentAddrOf(b *testing.B, c *cluster, sessionID string) string {
	b.Helper()
	id := agentIDOf(b, c, sessionID)
	resp, err := c.client.ListAgents(ctxT(b, time.Minute), &cpv1.ListAgentsRequest{})
	if err != nil {
		b.Fatal(err)
	}
	for _, a := range resp.GetAgents() {
		if a.GetAgentId() == id {
			return a.GetAddress()
		}
	}
	b.Fatalf("agent %s not listed", id)
	return ""
}

// waitReady waits until the agent at addr is READY.
func waitReady(b *testing.B, c *cluster, addr string) {
	b.Helper()
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		resp, err := c.client.ListAgents(ctxT(b, time.Minute), &cpv1.ListAgentsRequest{})
		if err != nil {
			continue
		}
		for _, a := range resp.GetAgents() {
			if a.GetAddress() == addr && a.GetState() == cpv1.Agent_STATE_READY {
				return
			}
		}
	}
	b.Fatalf("agent at %s not READY within 90 s", addr)
}

// BenchmarkRenderFanOut renders the same 24 frames (320×240, 32 samples, a
// moving cube) with render.animation "distribute": true on 1, 2 and 3
// agents of one loopback cluster (labels pick them: the sessions' selectors
// match one, two or all three), and reports frames per second of the whole
// operation (forks opened and rebuilt, frames rendered and collected) and
// its speed-up over one agent. Cycles renders on the CPU: on a machine with
// fewer cores than agents, the agents share them.
func BenchmarkRenderFanOut(b *testing.B) {
	c := startClusterOpts(b, clusterOpts{agentArgs: []string{"--label", "a1=y", "--label", "a2=y", "--label", "a3=y"}})
	for i, labels := range [][]string{{"--label", "a2=y", "--label", "a3=y"}, {"--label", "a3=y"}} {
		addr := freeAddr(b)
		startDaemon(b, "agentd", append(append([]string{"--listen", addr, "--control-plane", c.cpAddr,
			"--data-dir", filepath.Join(c.dir, fmt.Sprintf("agent-fan%d", i)), "--token-file", filepath.Join(c.dir, "agent.token")},
			blenderFlags()...), labels...)...)
		waitReady(b, c, addr)
	}
	const frames = 24
	sessions := map[int]string{}
	for n := 1; n <= 3; n++ {
		resp, err := c.client.Negotiate(ctxT(b, time.Minute), negotiateReq(func(r *cpv1.NegotiateRequest) {
			r.AgentSelector = map[string]string{fmt.Sprintf("a%d", n): "y"}
		}))
		if err != nil {
			b.Fatal(err)
		}
		id := resp.GetContract().GetSessionId()
		if p, _ := c.run(b, id, fmt.Sprintf("scene-%d", n), cubeOp("cube", "Mover", 0),
			op("k1", "keyframe.insert", map[string]any{"object": "Mover", "data_path": "location", "frame": 1, "value": []any{-3, 0, 0}}, "cube"),
			op("k2", "keyframe.insert", map[string]any{"object": "Mover", "data_path": "location", "frame": frames, "value": []any{3, 0, 0}}, "k1"),
		); p.GetState() != cpv1.Plan_STATE_SUCCEEDED {
			b.Fatalf("scene: %v", p)
		}
		sessions[n] = id
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		fps := map[int]float64{}
		for n := 1; n <= 3; n++ {
			start := time.Now()
			p, rs := c.run(b, sessions[n], fmt.Sprintf("fan-%d-%d", i, n), op("render", "render.animation", map[string]any{
				"output_prefix": fmt.Sprintf("f%d_%d", i, n), "frame_start": 1, "frame_end": frames,
				"resolution": []any{320, 240}, "samples": 32, "seed": 7, "distribute": true}))
			if p.GetState() != cpv1.Plan_STATE_SUCCEEDED {
				b.Fatalf("render on %d agents: %v %v", n, p, rs)
			}
			if got := rs[0].GetResult().GetFields()["agents"].GetNumberValue(); int(got) != n {
				b.Fatalf("rendered by %v agents, want %d", got, n)
			}
			fps[n] = frames / time.Since(start).Seconds()
			b.ReportMetric(fps[n], fmt.Sprintf("fps-%dagents", n))
		}
		b.ReportMetric(fps[2]/fps[1], "speedup-2agents")
		b.ReportMetric(fps[3]/fps[1], "speedup-3agents")
	}
}
