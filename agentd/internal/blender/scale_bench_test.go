package blender

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// scaleSizes are the two scenes of the scale benchmarks: the baseline scene
// plus this many planes (P00000, ...), in the scene's master collection.
var scaleSizes = [2]int{100, 10000}

// buildPlanes adds n planes to p's scene in one python.exec call (a test-only
// shortcut: 10,000 object.create calls take minutes). python.exec rebuilds
// the scene state from scratch afterwards, as a checkpoint load does.
func buildPlanes(tb testing.TB, p *Process, n int) {
	tb.Helper()
	code := fmt.Sprintf(`
sc = bpy.data.scenes["Scene"]
for i in range(%d):
    name = "P%%05d" %% i
    me = bpy.data.meshes.new(name)
    me.from_pydata([(-1, -1, 0), (1, -1, 0), (1, 1, 0), (-1, 1, 0)], [], [(0, 1, 2, 3)])
    ob = bpy.data.objects.new(name, me)
    ob.location = (i %% 100, i // 100, 0)
    sc.collection.objects.link(ob)
`, n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := p.Execute(ctx, Call{Tool: "python.exec", Args: map[string]any{"code": code}}); err != nil {
		tb.Fatalf("building %d planes: %v", n, err)
	}
}

// scaleProcesses starts one process per scene size of scaleSizes.
func scaleProcesses(b *testing.B, rt Runtime) [2]*Process {
	b.Helper()
	var ps [2]*Process
	for i, n := range scaleSizes {
		ps[i] = startTestProcess(b, rt)
		t0 := time.Now()
		buildPlanes(b, ps[i], n)
		b.Logf("built %d planes in %v", n, time.Since(t0))
	}
	return ps
}

// reportScale reports the mean time per operation at each size (ms/op-100,
// ms/op-10k with unit) and their ratio (10k/100).
func reportScale(b *testing.B, unit string, total [2]time.Duration, n int) {
	ms := [2]float64{}
	for i := range total {
		ms[i] = float64(total[i].Microseconds()) / 1000 / float64(n)
	}
	b.ReportMetric(ms[0], unit+"-100")
	b.ReportMetric(ms[1], unit+"-10k")
	b.ReportMetric(ms[1]/ms[0], "ratio-10k/100")
}

// BenchmarkSetTransformScale measures object.set_transform through the real
// Execute (Go -> bridge -> bpy -> incremental hash -> Go) at 100 and 10,000
// objects, interleaved so that load on the machine hits both alike. Target
// (issue 3): ratio-10k/100 <= 1.5.
func BenchmarkSetTransformScale(b *testing.B) {
	for _, r := range testRuntimes() {
		b.Run(r.name, func(b *testing.B) {
			if !isExecutable(r.rt.Path) {
				b.Skipf("runtime %s not installed", r.name)
			}
			ps := scaleProcesses(b, r.rt)
			ctx := context.Background()
			var total [2]time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for k, p := range ps {
					name := fmt.Sprintf("P%05d", (i*7919)%scaleSizes[k]) // spread over the name list
					args := map[string]any{"name": name, "location": []any{float64(i % 50), 1.5, 2}}
					t0 := time.Now()
					if _, err := p.Execute(ctx, Call{Tool: "object.set_transform", Args: args}); err != nil {
						b.Fatal(err)
					}
					total[k] += time.Since(t0)
				}
			}
			b.StopTimer()
			reportScale(b, "ms/op", total, b.N)
		})
	}
}

// BenchmarkRollbackScale measures the compensation (Undo) of an
// object.set_transform and of an object.create at 100 and 10,000 objects.
func BenchmarkRollbackScale(b *testing.B) {
	for _, r := range testRuntimes() {
		b.Run(r.name, func(b *testing.B) {
			if !isExecutable(r.rt.Path) {
				b.Skipf("runtime %s not installed", r.name)
			}
			ps := scaleProcesses(b, r.rt)
			ctx := context.Background()
			var setT, createT [2]time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for k, p := range ps {
					name := fmt.Sprintf("P%05d", (i*7919)%scaleSizes[k])
					out, err := p.Execute(ctx, Call{Tool: "object.set_transform", Args: map[string]any{"name": name, "scale": []any{2, 2, 2}}})
					if err != nil {
						b.Fatal(err)
					}
					t0 := time.Now()
					if _, err := p.Undo(ctx, out.Undo, Call{}); err != nil {
						b.Fatal(err)
					}
					setT[k] += time.Since(t0)
					out, err = p.Execute(ctx, Call{Tool: "object.create", Args: map[string]any{"type": "plane", "name": "Extra"}})
					if err != nil {
						b.Fatal(err)
					}
					t0 = time.Now()
					if _, err := p.Undo(ctx, out.Undo, Call{}); err != nil {
						b.Fatal(err)
					}
					createT[k] += time.Since(t0)
				}
			}
			b.StopTimer()
			reportScale(b, "ms/undo-set", setT, b.N)
			ms := [2]float64{}
			for k := range createT {
				ms[k] = float64(createT[k].Microseconds()) / 1000 / float64(b.N)
			}
			b.ReportMetric(ms[0], "ms/undo-create-100")
			b.ReportMetric(ms[1], "ms/undo-create-10k")
		})
	}
}

// BenchmarkCheckpointLoadScale measures LoadCheckpoint (open the file and
// rehash the whole scene) of the 10,000-object scene.
func BenchmarkCheckpointLoadScale(b *testing.B) {
	for _, r := range testRuntimes() {
		b.Run(r.name, func(b *testing.B) {
			if !isExecutable(r.rt.Path) {
				b.Skipf("runtime %s not installed", r.name)
			}
			p := startTestProcess(b, r.rt)
			buildPlanes(b, p, scaleSizes[1])
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			path := filepath.Join(b.TempDir(), "scale.blend")
			want, err := p.SaveCheckpoint(ctx, path)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				got, err := p.LoadCheckpoint(ctx, path)
				if err != nil {
					b.Fatal(err)
				}
				if got != want {
					b.Fatalf("loaded hash %s, saved %s", got, want)
				}
			}
		})
	}
}
