package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// scrape reads a Prometheus text exposition with curl: "name{labels}" →
// value.
func scrape(t testing.TB, url, token string) map[string]float64 {
	t.Helper()
	code, body := curl(t, "GET", url, token, "")
	if code != "200" {
		t.Fatalf("GET %s: %s\n%s", url, code, body)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// TestMetrics: the control plane's /metrics (Prometheus, admin token) and
// agentd's own listener; their counters move when a plan runs; names all
// start blendplane_ (besides the Go runtime's); no ids in labels.
func TestMetrics(t *testing.T) {
	agentMetrics := freeAddr(t)
	c := startClusterOpts(t, clusterOpts{agentArgs: []string{"--metrics-listen", agentMetrics}})
	cp := "http://" + c.httpAddr + "/metrics"
	if code, _ := curl(t, "GET", cp, "", ""); code != "401" {
		t.Fatalf("/metrics without a token: %s", code)
	}
	if code, _ := curl(t, "GET", cp, c.createToken(t, "viewer", "plans"), ""); code != "403" {
		t.Fatalf("/metrics with a plans token: %s", code)
	}
	before := scrape(t, cp, c.adminToken)
	agentBefore := scrape(t, "http://"+agentMetrics+"/metrics", "")
	s := c.negotiate(t)
	c.run(t, s.GetSessionId(), "metrics-1", cubeOp("a", "A", 0), op("look", "scene.get_summary", map[string]any{}, "a"))
	after := scrape(t, cp, c.adminToken)
	agentAfter := scrape(t, "http://"+agentMetrics+"/metrics", "")

	moved := func(name string, m0, m1 map[string]float64, by float64) {
		t.Helper()
		if m1[name]-m0[name] != by {
			t.Errorf("%s: %v → %v, want +%v", name, m0[name], m1[name], by)
		}
	}
	moved(`blendplane_operations_total{status="succeeded",tool="object.create"}`, before, after, 1)
	moved(`blendplane_operations_total{status="succeeded",tool="scene.get_summary"}`, before, after, 1)
	moved(`blendplane_plans_finished_total{state="succeeded"}`, before, after, 1)
	moved(`blendplane_receipts_committed_total`, before, after, 2)
	if after[`blendplane_store_commits_total`] <= before[`blendplane_store_commits_total`] {
		t.Errorf("store commits: %v → %v", before[`blendplane_store_commits_total`], after[`blendplane_store_commits_total`])
	}
	moved(`blendplane_operation_duration_seconds_count{tool="object.create"}`, before, after, 1)
	if after[`blendplane_agents{state="ready"}`] != 1 || after[`blendplane_sessions{state="open"}`]+after[`blendplane_sessions{state="parked"}`] != 1 ||
		after[`blendplane_approvals_pending`] != 0 || after[`blendplane_agent_heartbeats_total`] < 1 {
		t.Errorf("gauges: agents %v, sessions open %v parked %v, approvals %v, heartbeats %v", after[`blendplane_agents{state="ready"}`],
			after[`blendplane_sessions{state="open"}`], after[`blendplane_sessions{state="parked"}`], after[`blendplane_approvals_pending`],
			after[`blendplane_agent_heartbeats_total`])
	}

	moved(`blendplane_agent_operations_total{status="succeeded",tool="object.create"}`, agentBefore, agentAfter, 1)
	moved(`blendplane_bridge_duration_seconds_count{tool="object.create"}`, agentBefore, agentAfter, 1)
	if agentAfter[`blendplane_journal_commits_total`] <= agentBefore[`blendplane_journal_commits_total`] ||
		agentAfter[`blendplane_journal_fsyncs_total`] < 2*agentAfter[`blendplane_journal_commits_total`] {
		t.Errorf("journal: commits %v → %v, fsyncs %v", agentBefore[`blendplane_journal_commits_total`],
			agentAfter[`blendplane_journal_commits_total`], agentAfter[`blendplane_journal_fsyncs_total`])
	}
	if agentAfter[`blendplane_blender_processes`] != 1 || agentAfter[`blendplane_blender_memory_bytes`] < 50<<20 {
		t.Errorf("blender: %v processes, %v bytes", agentAfter[`blendplane_blender_processes`], agentAfter[`blendplane_blender_memory_bytes`])
	}
	// The session's start left a spare Blender behind it.
	waitFor(t, "a spare Blender", func() bool { return scrape(t, "http://"+agentMetrics+"/metrics", "")[`blendplane_blender_spares`] == 1 })
	for _, m := range []map[string]float64{after, agentAfter} {
		for name := range m {
			if !strings.HasPrefix(name, "blendplane_") && !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "promhttp_") {
				t.Errorf("metric %s is not a blendplane_ one", name)
			}
			if strings.Contains(name, `="s-`) || strings.Contains(name, `="agent-`) || strings.Contains(name, "request_id") {
				t.Errorf("an id as a label: %s", name)
			}
		}
	}
}

// TestReceiptsShareCommits: the receipts of a long plan are committed in
// groups in both daemons, as the commit counters of both show: 200
// operations take far fewer than 200 commits (6–7 each on the benchmark
// machine with the group waits of groupcommit.Gather, 12–26 without them,
// from the receipts that arrive while a commit runs; 200 if each receipt
// were committed alone).
func TestReceiptsShareCommits(t *testing.T) {
	agentMetrics := freeAddr(t)
	c := startClusterOpts(t, clusterOpts{agentArgs: []string{"--metrics-listen", agentMetrics}})
	cp, agent := "http://"+c.httpAddr+"/metrics", "http://"+agentMetrics+"/metrics"
	s := c.negotiate(t)
	c.run(t, s.GetSessionId(), "warm", cubeOp("w", "W", 0)) // its Blender runs
	const n = 200
	ops := make([]*cpv1.Operation, n)
	for i := range ops {
		ops[i] = cubeOp(fmt.Sprintf("op-%03d", i), fmt.Sprintf("C%03d", i), i)
	}
	before, agentBefore := scrape(t, cp, c.adminToken), scrape(t, agent, "")
	if p, _ := c.run(t, s.GetSessionId(), "long", ops...); p.GetState() != cpv1.Plan_STATE_SUCCEEDED {
		t.Fatalf("plan: %v", p.GetState())
	}
	after, agentAfter := scrape(t, cp, c.adminToken), scrape(t, agent, "")
	receipts := after[`blendplane_receipts_committed_total`] - before[`blendplane_receipts_committed_total`]
	commits := after[`blendplane_store_commits_total`] - before[`blendplane_store_commits_total`]
	journal := agentAfter[`blendplane_journal_commits_total`] - agentBefore[`blendplane_journal_commits_total`]
	t.Logf("%v receipts: %v commits in the control plane, %v in agentd's journal", receipts, commits, journal)
	if receipts != n || commits < 1 || commits > n/2 || journal < 1 || journal > n/2 {
		t.Errorf("%v receipts took %v commits in the control plane and %v in agentd's journal: want at most %d each", receipts, commits, journal, n/2)
	}
}
