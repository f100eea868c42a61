package blender

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// checkpointScenes starts the checkpoint benchmarks' two Blenders (4.5),
// one per scene size of scaleSizes, and gives a context for their calls and
// a directory for their checkpoints.
func checkpointScenes(b *testing.B) ([2]*Process, context.Context, string) {
	rt := testRuntimes()[0]
	if !isExecutable(rt.rt.Path) {
		b.Skipf("runtime %s not installed at %s (run `make blender`)", rt.name, rt.rt.Path)
	}
	ps := scaleProcesses(b, rt.rt)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	b.Cleanup(cancel)
	return ps, ctx, b.TempDir()
}

// checkpointPairs is how many camera.create calls, each undone, come before
// each save in BenchmarkCheckpointSave: their 240 discarded datablocks stay
// under the pile's bound (trash.TRASH_MAX), as between two checkpoints of a
// busy session.
const checkpointPairs = 120

// BenchmarkCheckpointSave times SaveCheckpoint at 100 and 10,000 objects
// (scaleSizes, built by one python.exec) right after checkpointPairs
// camera.create calls and their undos, on Blender 4.5: what a session
// waits for at a checkpoint after a stretch of creates that were undone or
// rolled back (a save that freed the pile first paid for its frees here;
// trash.py). Metrics: ms/save-100, ms/save-10k and their ratio.
func BenchmarkCheckpointSave(b *testing.B) {
	ps, ctx, dir := checkpointScenes(b)
	var save [2]time.Duration
	saves := 0
	for b.Loop() {
		for k, p := range ps {
			for range checkpointPairs {
				out, err := p.Execute(ctx, Call{Tool: "camera.create", Args: map[string]any{"name": "BenchCam", "lens": 35, "location": []any{0, -10, 3}}})
				if err == nil {
					_, err = p.Undo(ctx, out.Undo, Call{})
				}
				if err != nil {
					b.Fatalf("at %d planes: %v", scaleSizes[k], err)
				}
			}
			t0 := time.Now()
			if _, err := p.SaveCheckpoint(ctx, filepath.Join(dir, "ck.blend")); err != nil {
				b.Fatal(err)
			}
			save[k] += time.Since(t0)
		}
		saves++
	}
	reportScale(b, "ms/save", save, saves)
}

// rehashRounds is how many loads and how many python.exec calls each
// measurement of BenchmarkRehash times per scene.
const rehashRounds = 5

// BenchmarkRehash times the two requests that hash the whole scene from
// scratch, at 100 and 10,000 objects (scaleSizes, built by one
// python.exec), on Blender 4.5: LoadCheckpoint of the scene's own
// checkpoint (what a recovery, a restore or a refresh waits for in
// Blender: the file's read and the rehash) and a python.exec that changes
// nothing (the rehash after the code; the window already awake). Metrics:
// ms/load-100, ms/load-10k, ms/exec-100, ms/exec-10k.
func BenchmarkRehash(b *testing.B) {
	ps, ctx, dir := checkpointScenes(b)
	var load, exec [2]time.Duration
	rounds := 0
	for b.Loop() {
		for k, p := range ps {
			path := filepath.Join(dir, fmt.Sprintf("ck-%d.blend", k))
			if _, err := p.SaveCheckpoint(ctx, path); err != nil {
				b.Fatal(err)
			}
			for range rehashRounds {
				t0 := time.Now()
				if _, err := p.LoadCheckpoint(ctx, path); err != nil {
					b.Fatal(err)
				}
				load[k] += time.Since(t0)
			}
			// The first call after a load wakes the window (window.py):
			// once, untimed, so that the timed calls measure the rehash.
			for i := range rehashRounds + 1 {
				t0 := time.Now()
				if _, err := p.Execute(ctx, Call{Tool: "python.exec", Args: map[string]any{"code": "result = len(bpy.data.objects)"}}); err != nil {
					b.Fatal(err)
				}
				if i > 0 {
					exec[k] += time.Since(t0)
				}
			}
		}
		rounds += rehashRounds
	}
	for k, size := range []string{"100", "10k"} {
		b.ReportMetric(float64(load[k].Microseconds())/1000/float64(rounds), "ms/load-"+size)
		b.ReportMetric(float64(exec[k].Microseconds())/1000/float64(rounds), "ms/exec-"+size)
	}
}
