package e2e

import (
	"strconv"
	"strings"
	"testing"
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
