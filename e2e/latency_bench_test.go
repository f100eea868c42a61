package e2e

import (
	"fmt"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

const (
	oneOpPlans  = 200 // timed one-operation plans per kind and run
	oneOpWarmup = 20  // untimed ones first
)

// BenchmarkOneOpPlan times what an MCP host or a planner does all day: one
// tool call as a one-operation plan, end to end through the real binaries
// (SubmitPlan until its receipt arrives on StreamReceipts), 200 in a row for
// object.create and 200 for scene.get_summary, beside each receipt's bridge
// time (duration_micros) and, in the same run, a bare persistent Blender
// doing the same create over a pipe (testdata/bare_blender.py).
//
// Metrics (milliseconds): p50/p90/p99 of create-e2e, create-bridge,
// summary-e2e, summary-bridge and bare-create; create-overhead-p50 and
// summary-overhead-p50 (the median of e2e minus bridge time, per plan);
// ratio-p50 (create-e2e p50 / bare-create p50; target ≤ 10); and, measured
// in the same run on the daemons' disk, fdatasync (a 4 KiB write and its
// fdatasync), durable-floor-ms (six of them: the three bbolt commits every
// one-operation plan makes in a row) and floor-ratio (that floor plus the
// bare create, over the bare create: the ratio no tree can beat on this
// machine without giving up a commit).
func BenchmarkOneOpPlan(b *testing.B) {
	c := startCluster(b)
	var create, createBridge, summary, summaryBridge, bare, syncs []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		s := c.negotiate(b)
		oneOp := func(kind string, n int, mk func(j int) *cpv1.Operation) (e2e, bridge []time.Duration) {
			for j := -oneOpWarmup; j < n; j++ {
				elapsed, agent := runPlan(b, c, s.GetSessionId(), fmt.Sprintf("oneop-%s-%d-%d", kind, i, j), []*cpv1.Operation{mk(j)})
				if j >= 0 {
					e2e, bridge = append(e2e, elapsed), append(bridge, agent)
				}
			}
			return e2e, bridge
		}
		b.StartTimer()
		e, br := oneOp("create", oneOpPlans, func(j int) *cpv1.Operation {
			return cubeOp("create", fmt.Sprintf("One%d_%04d", i, j+oneOpWarmup), j+oneOpWarmup)
		})
		create, createBridge = append(create, e...), append(createBridge, br...)
		e, br = oneOp("summary", oneOpPlans, func(int) *cpv1.Operation {
			return op("summary", "scene.get_summary", map[string]any{})
		})
		summary, summaryBridge = append(summary, e...), append(summaryBridge, br...)
		b.StopTimer()

		bp := startBare(b)
		for j := 0; j < oneOpWarmup; j++ {
			bp.create(b, fmt.Sprintf("W%d_%04d", i, j), j)
		}
		for j := 0; j < oneOpPlans; j++ {
			start := time.Now()
			bp.create(b, fmt.Sprintf("B%d_%04d", i, j), j)
			bare = append(bare, time.Since(start))
		}
		bp.close(b)
		syncs = append(syncs, fdatasyncs(b, c.dir, oneOpPlans)...)
		b.StartTimer()
	}
	b.StopTimer()
	report := func(name string, d []time.Duration) float64 {
		p50 := percentile(d, 50)
		b.ReportMetric(p50, name+"-p50-ms")
		b.ReportMetric(percentile(d, 90), name+"-p90-ms")
		b.ReportMetric(percentile(d, 99), name+"-p99-ms")
		return p50
	}
	createP50 := report("create-e2e", create)
	report("create-bridge", createBridge)
	report("summary-e2e", summary)
	report("summary-bridge", summaryBridge)
	bareP50 := report("bare-create", bare)
	b.ReportMetric(percentile(minus(create, createBridge), 50), "create-overhead-p50-ms")
	b.ReportMetric(percentile(minus(summary, summaryBridge), 50), "summary-overhead-p50-ms")
	b.ReportMetric(createP50/bareP50, "ratio-p50")
	// What durability alone costs a one-operation plan on this disk: three
	// bbolt commits in a row (the plan's acceptance, the agent's receipt,
	// the control plane's receipt), each two fdatasyncs.
	syncP50 := report("fdatasync", syncs)
	b.ReportMetric(6*syncP50, "durable-floor-ms")
	b.ReportMetric((6*syncP50+bareP50)/bareP50, "floor-ratio")
}

// fdatasyncs times n fdatasyncs, each after a 4 KiB write, of a file in dir
// (the daemons' data directory, so the same disk).
func fdatasyncs(b *testing.B, dir string, n int) []time.Duration {
	b.Helper()
	f, err := os.CreateTemp(dir, "fdatasync-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	page := make([]byte, 4096)
	out := make([]time.Duration, n)
	for i := range out {
		start := time.Now()
		if _, err := f.WriteAt(page, int64(i%64)*4096); err != nil {
			b.Fatal(err)
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			b.Fatal(err)
		}
		out[i] = time.Since(start)
	}
	return out
}

// percentile is the p-th percentile of d in milliseconds (nearest rank).
func percentile(d []time.Duration, p int) float64 {
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	i := min(len(s)-1, max(0, (p*len(s)+99)/100-1))
	return float64(s[i]) / float64(time.Millisecond)
}

func minus(a, b []time.Duration) []time.Duration {
	out := make([]time.Duration, len(a))
	for i := range a {
		out[i] = a[i] - b[i]
	}
	return out
}
