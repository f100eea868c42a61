package e2e

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// refreshPlans is how many rollback plans BenchmarkRefresh times per cluster.
const refreshPlans = 300

// BenchmarkRefresh measures what agentd's --refresh-after gives a session
// that built a big scene itself: two clusters side by side, each with a
// session of 10,000 planes built by one plan of creates (as BenchmarkScale
// builds its large scene), one with --refresh-after 0 and one with the
// default, whose session is handed to a fresh Blender at its idle checkpoint. Then,
// plan by plan on the two in turn, atomic plans of one object.create and a
// failing operation: each create is rolled back, the undo of a create. It
// reports agentd's duration of the create and of its undo (duration_micros)
// in each (ms/create-built, ms/undo-built, ms/create-refreshed,
// ms/undo-refreshed), the refresh's own time, its load of the checkpoint
// and how long of it the session waited (s/refresh, s/refresh-load and
// ms/refresh-held, from agentd's "session refreshed … loaded= took= held=").
func BenchmarkRefresh(b *testing.B) {
	scenes := make([]*scene, 2)
	for i, after := range []int{0, 1000} {
		metrics := freeAddr(b)
		c := startClusterOpts(b, clusterOpts{agentArgs: []string{"--checkpoint-every", "1000000", "--checkpoint-interval", "24h",
			"--checkpoint-idle", "1s", "--refresh-after", strconv.Itoa(after), "--metrics-listen", metrics, "--max-sessions", "3"}})
		c.agentMetrics = metrics
		scenes[i] = buildScene(b, c, scaleLarge)
	}
	refreshed := scenes[1]
	refreshes := func() float64 {
		return scrape(b, "http://"+refreshed.c.agentMetrics+"/metrics", "")["blendplane_sessions_refreshed_total"]
	}
	// The refresh needs the spare ready when the session turns idle; one
	// starts once the agent is quiet after the build. If it was late, the
	// next idle session tries again.
	for try := 0; refreshes() != 1; try++ {
		if try == 5 {
			b.Fatalf("%v refreshes after the build and %d idle periods", refreshes(), try)
		}
		if try > 0 {
			refreshed.run(b, "nudge", false, refreshed.moves(1))
		}
		for deadline := time.Now().Add(10 * time.Second); refreshes() != 1 && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
		}
	}
	took := refreshed.logLines("session refreshed")
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		var create, undo [2]float64
		for i := range refreshPlans {
			for k, s := range scenes {
				a := op("c", "object.create", map[string]any{"type": "plane", "name": fmt.Sprintf("Undone%d", i)})
				_, rs := s.run(b, "rollback", true, []*cpv1.Operation{a, op("fail", "object.delete", map[string]any{"name": "Missing"}, "c")})
				requireStatuses(b, rs, 3, cpv1.Receipt_STATUS_SUCCEEDED, cpv1.Receipt_STATUS_FAILED, cpv1.Receipt_STATUS_ROLLED_BACK)
				create[k] += float64(rs[0].GetDurationMicros()) / 1000 / refreshPlans
				undo[k] += float64(rs[2].GetDurationMicros()) / 1000 / refreshPlans
			}
		}
		b.ReportMetric(create[0], "ms/create-built")
		b.ReportMetric(undo[0], "ms/undo-built")
		b.ReportMetric(create[1], "ms/create-refreshed")
		b.ReportMetric(undo[1], "ms/undo-refreshed")
	}
	if len(took) == 1 {
		if d, err := time.ParseDuration(took[0]["took"]); err == nil {
			b.ReportMetric(d.Seconds(), "s/refresh")
		}
		if d, err := time.ParseDuration(took[0]["loaded"]); err == nil {
			b.ReportMetric(d.Seconds(), "s/refresh-load")
		}
		if d, err := time.ParseDuration(took[0]["held"]); err == nil {
			b.ReportMetric(ms(d), "ms/refresh-held")
		}
	}
	b.ReportMetric(0, "ns/op")
}
