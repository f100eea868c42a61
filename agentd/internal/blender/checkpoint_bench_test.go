package blender

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

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
	rt := testRuntimes()[0]
	if !isExecutable(rt.rt.Path) {
		b.Skipf("runtime %s not installed at %s (run `make blender`)", rt.name, rt.rt.Path)
	}
	ps := scaleProcesses(b, rt.rt)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := b.TempDir()
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
