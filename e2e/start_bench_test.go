package e2e

import (
	"fmt"
	"testing"
	"time"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// sessionStarts is how many new sessions each cluster of BenchmarkSessionStart
// opens per run.
const sessionStarts = 10

// BenchmarkSessionStart times what a new session's first tool call costs
// (Negotiate, then a one-operation plan until its receipt: Blender starts
// with that plan), on two clusters side by side, taking turns: agentd with
// spare Blenders (the default: the plan adopts one started ahead) and
// without (--spare-blenders=false: the plan starts Blender). A second
// between sessions lets the next spare start, as between an MCP host's
// conversations.
//
// Metrics (milliseconds): first-plan-{spare,cold}-p50 and -max, and
// ratio-p50 (cold / spare).
func BenchmarkSessionStart(b *testing.B) {
	spare := startCluster(b)
	cold := startClusterOpts(b, clusterOpts{agentArgs: []string{"--spare-blenders=false"}})
	times := map[string][]time.Duration{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := 0; j < sessionStarts; j++ {
			for _, k := range []struct {
				name string
				c    *cluster
			}{{"spare", spare}, {"cold", cold}} {
				start := time.Now()
				s := k.c.negotiate(b)
				runPlan(b, k.c, s.GetSessionId(), fmt.Sprintf("first-%d-%d", i, j), []*cpv1.Operation{cubeOp("c", "First", 0)})
				times[k.name] = append(times[k.name], time.Since(start))
				b.StopTimer()
				time.Sleep(time.Second)
				b.StartTimer()
			}
		}
	}
	b.StopTimer()
	for _, k := range []string{"spare", "cold"} {
		b.ReportMetric(percentile(times[k], 50), "first-plan-"+k+"-p50-ms")
		b.ReportMetric(percentile(times[k], 100), "first-plan-"+k+"-max-ms")
	}
	b.ReportMetric(percentile(times["cold"], 50)/percentile(times["spare"], 50), "ratio-p50")
}
