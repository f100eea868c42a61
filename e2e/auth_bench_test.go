package e2e

import (
	"fmt"
	"testing"
	"time"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// BenchmarkAuthOverhead measures what identity costs per operation: two
// clusters side by side, one authenticated (a bearer token checked on every
// call, agentd behind mutual TLS) and one with --allow-insecure-local, the
// same one-operation plans interleaved between them so that both see the
// same machine noise. 200 object.create and 200 scene.get_summary plans per
// cluster and run, after 20 untimed ones.
//
// Metrics (milliseconds): p50 and p90 of {create,summary}-{auth,open}, and
// {create,summary}-ratio-p50 (auth p50 / open p50; target ≤ 1.05).
func BenchmarkAuthOverhead(b *testing.B) {
	secure := startCluster(b)
	open := startClusterOpts(b, clusterOpts{insecure: true})
	kinds := []struct {
		name string
		op   func(j int) *cpv1.Operation
	}{
		{"create", func(j int) *cpv1.Operation { return cubeOp("create", fmt.Sprintf("A%05d", j), j) }},
		{"summary", func(int) *cpv1.Operation { return op("summary", "scene.get_summary", map[string]any{}) }},
	}
	times := map[string][]time.Duration{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		sessions := []string{secure.negotiate(b).GetSessionId(), open.negotiate(b).GetSessionId()}
		b.StartTimer()
		for _, k := range kinds {
			for j := -oneOpWarmup; j < oneOpPlans; j++ {
				for n, c := range []*cluster{secure, open} {
					elapsed, _ := runPlan(b, c, sessions[n], fmt.Sprintf("auth-%s-%d-%d", k.name, i, j), []*cpv1.Operation{k.op(i*1000 + j + oneOpWarmup)})
					if j >= 0 {
						key := k.name + map[int]string{0: "-auth", 1: "-open"}[n]
						times[key] = append(times[key], elapsed)
					}
				}
			}
		}
	}
	b.StopTimer()
	for _, k := range kinds {
		on, off := percentile(times[k.name+"-auth"], 50), percentile(times[k.name+"-open"], 50)
		for _, mode := range []string{"-auth", "-open"} {
			b.ReportMetric(percentile(times[k.name+mode], 50), k.name+mode+"-p50-ms")
			b.ReportMetric(percentile(times[k.name+mode], 90), k.name+mode+"-p90-ms")
		}
		b.ReportMetric(on/off, k.name+"-ratio-p50")
	}
}
