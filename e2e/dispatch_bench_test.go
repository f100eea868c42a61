package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// BenchmarkDispatch: a control plane with 50 registered agents (one real
// agentd, 49 that only register and heartbeat like agents with full slots
// elsewhere) and 20 live sessions on the real one, running 500 one-operation
// plans queued at once (25 per session). Per receipt it measures the
// dispatch overhead as the client sees it, as issue 15 defines it: from the
// receipt committed on the agent (Receipt.agent_sent_time, stamped by
// agentd once its journal committed it) to the receipt arriving on the
// client's stream — the hop, the control plane's commit and the stream
// (dispatch-*). And from the operation's end in Blender
// (Receipt.complete_time, before agentd's commit) to the same arrival
// (complete-*): agentd's commit added. Also the memory per session of the
// control plane, agentd and the Blenders (RSS growth from before the
// sessions, divided by 20). And the commits each daemon made per plan: how
// well its group commits gather (a plan's acceptance and its receipt in the
// control plane, its receipt in agentd).
func BenchmarkDispatch(b *testing.B) {
	const agents, sessions, plans = 50, 20, 500
	metrics := freeAddr(b)
	c := startClusterOpts(b, clusterOpts{insecure: true,
		agentArgs: []string{"--label", "bench=real", "--max-sessions", strconv.Itoa(sessions), "--metrics-listen", metrics}})
	commits := func() (cp, agent float64) {
		return scrape(b, "http://"+c.httpAddr+"/metrics", "")["blendplane_store_commits_total"],
			scrape(b, "http://"+metrics+"/metrics", "")["blendplane_journal_commits_total"]
	}
	var wg sync.WaitGroup
	defer wg.Wait() // after cancel, which runs first
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	list, err := c.client.ListAgents(ctxT(b, 10*time.Second), &cpv1.ListAgentsRequest{})
	if err != nil || len(list.GetAgents()) != 1 {
		b.Fatalf("agents: %v %v", list, err)
	}
	runtimes := list.GetAgents()[0].GetRuntimes()
	byFingerprint := make([]*cpv1.Runtime, len(runtimes))
	for i, rt := range runtimes {
		byFingerprint[i] = &cpv1.Runtime{RuntimeId: rt.GetRuntimeId(), BlenderProfile: rt.GetBlenderProfile(), BaselineSceneHash: rt.GetBaselineSceneHash(),
			Registry: &cpv1.ToolRegistry{Version: rt.GetRegistry().GetVersion(), Fingerprint: rt.GetRegistry().GetFingerprint()}}
	}
	for i := 1; i < agents; i++ {
		req := &cpv1.RegisterAgentRequest{AgentId: fmt.Sprintf("bench-agent-%02d", i), Address: "127.0.0.1:9",
			Hostname: fmt.Sprintf("host-%02d", i), Runtimes: runtimes, MaxSessions: 8, Labels: map[string]string{"bench": "elsewhere"}}
		if resp, err := c.client.RegisterAgent(ctxT(b, 10*time.Second), req); err != nil || !resp.GetRegistriesHeld() {
			b.Fatal(resp, err)
		}
		hb := &cpv1.RegisterAgentRequest{AgentId: req.GetAgentId(), Address: req.GetAddress(), Hostname: req.GetHostname(), Runtimes: byFingerprint,
			RegistriesByFingerprint: true, MaxSessions: req.GetMaxSessions(), Labels: req.GetLabels()}
		wg.Go(func() { // heartbeats, as agentd sends them: registries by fingerprint
			for {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Second):
					c.client.RegisterAgent(ctx, hb)
				}
			}
		})
	}
	cpBefore, agentBefore := rss(b, c.cp.cmd.Process.Pid), rss(b, c.agent.cmd.Process.Pid)

	ids := make([]string, sessions)
	for i := range ids {
		resp, err := c.client.Negotiate(ctxT(b, time.Minute), &cpv1.NegotiateRequest{ContractVersion: "1.0.0",
			HostProfile: &cpv1.HostProfile{ClientName: "bench"}, AgentSelector: map[string]string{"bench": "real"}})
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = resp.GetContract().GetSessionId()
		c.run(b, ids[i], fmt.Sprintf("warm-%d", i), cubeOp("w", fmt.Sprintf("W%d", i), 0)) // its Blender starts
	}

	for n := 0; n < b.N; n++ {
		var mu sync.Mutex
		var overhead, sinceComplete []time.Duration
		var streams sync.WaitGroup
		cpCommits, agentCommits := commits()
		start, cpCPU, agentCPU := time.Now(), threadsCPU(b, c.cp.cmd.Process.Pid), threadsCPU(b, c.agent.cmd.Process.Pid)
		for k := range plans {
			id := fmt.Sprintf("d%d-%03d", n, k)
			if _, err := c.client.SubmitPlan(ctxT(b, time.Minute), &cpv1.SubmitPlanRequest{SessionId: ids[k%sessions], RequestId: id,
				Operations: []*cpv1.Operation{cubeOp("a", fmt.Sprintf("C%d_%03d", n, k), k)}}); err != nil {
				b.Fatal(err)
			}
			streams.Go(func() {
				s, err := c.client.StreamReceipts(ctxT(b, 5*time.Minute), &cpv1.StreamReceiptsRequest{RequestId: id})
				if err != nil {
					b.Error(err)
					return
				}
				for {
					ev, err := s.Recv()
					if err != nil {
						return // io.EOF: the plan ended
					}
					if r := ev.GetReceipt(); r != nil {
						now := time.Now()
						if r.GetAgentSentTime() == nil {
							b.Errorf("receipt of %s without agent_sent_time", id)
						}
						mu.Lock()
						overhead = append(overhead, now.Sub(r.GetAgentSentTime().AsTime()))
						sinceComplete = append(sinceComplete, now.Sub(r.GetCompleteTime().AsTime()))
						mu.Unlock()
					}
				}
			})
		}
		streams.Wait()
		wall := time.Since(start)
		if len(overhead) != plans {
			b.Fatalf("%d receipts for %d plans", len(overhead), plans)
		}
		for name, d := range map[string][]time.Duration{"dispatch": overhead, "complete": sinceComplete} {
			slices.Sort(d)
			at := func(q float64) float64 { return ms(d[int(q*float64(len(d)-1))]) }
			b.ReportMetric(at(0.5), "ms/"+name+"-p50")
			b.ReportMetric(at(0.9), "ms/"+name+"-p90")
			b.ReportMetric(at(0.99), "ms/"+name+"-p99")
		}
		b.ReportMetric(float64(plans)/wall.Seconds(), "plans/s")
		// CPU per plan, heartbeats of the 49 other agents included.
		b.ReportMetric(ms(threadsCPU(b, c.cp.cmd.Process.Pid)-cpCPU)/plans, "ms-cpu/plan-cp")
		b.ReportMetric(ms(threadsCPU(b, c.agent.cmd.Process.Pid)-agentCPU)/plans, "ms-cpu/plan-agentd")
		cpAfter, agentAfter := commits()
		b.ReportMetric((cpAfter-cpCommits)/plans, "commits/plan-cp")
		b.ReportMetric((agentAfter-agentCommits)/plans, "commits/plan-agentd")
	}
	var blenders int64
	for _, pid := range childPIDs(c.agent.cmd.Process.Pid) {
		blenders += rss(b, pid)
	}
	b.ReportMetric(float64(rss(b, c.cp.cmd.Process.Pid)-cpBefore)/sessions/(1<<20), "MiB/session-cp")
	b.ReportMetric(float64(rss(b, c.agent.cmd.Process.Pid)-agentBefore)/sessions/(1<<20), "MiB/session-agentd")
	b.ReportMetric(float64(blenders)/sessions/(1<<20), "MiB/session-blender")
}

// rss is a process's resident memory now, in bytes.
func rss(b *testing.B, pid int) int64 { return procStatus(b, pid, "VmRSS:") }

// threadsCPU is the time a process's live threads have run on a CPU, to the
// nanosecond (the scheduler's own count, /proc/PID/task/TID/schedstat),
// where /proc/PID/stat counts 10 ms ticks: too coarse for 400 creates.
func threadsCPU(b *testing.B, pid int) time.Duration {
	stats, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(stats) == 0 {
		b.Fatalf("threads of %d: %v", pid, err)
	}
	var total time.Duration
	for _, f := range stats {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended
		}
		ns, err := strconv.ParseInt(strings.Fields(string(raw))[0], 10, 64)
		if err != nil {
			b.Fatalf("%s: %q", f, raw)
		}
		total += time.Duration(ns)
	}
	return total
}

// procStatus reads a memory line of /proc/<pid>/status, in bytes.
func procStatus(b testing.TB, pid int, key string) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(string(raw)) {
		if kb, ok := strings.CutPrefix(line, key); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(kb), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n << 10
		}
	}
	b.Fatalf("no %s in /proc/%d/status", key, pid)
	return 0
}

// childPIDs lists the live children of a process.
func childPIDs(parent int) []int {
	return processes(func(stat, _ string) bool {
		// pid (comm) state ppid ...: comm may hold spaces, so read after ")".
		f := strings.Fields(stat[strings.LastIndexByte(stat, ')')+1:])
		return len(f) > 1 && f[1] == strconv.Itoa(parent)
	})
}
