package blender

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStorageCeiling: the files in the sandbox take at most the session's
// disk ceiling (bridge/sandbox.py, check_storage). A call whose files would
// take them over it fails with quota_exceeded and leaves none of its files
// and the scene as it was; a file replaced by one of the same size counts
// once; render.animation stops at its first frame over the ceiling
// instead of rendering every frame first. Both ways a Blender gets its
// ceiling are tried: Start (Options.StorageLimitMiB) and Adopt.
func TestStorageCeiling(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		for _, adopted := range []bool{false, true} {
			name := "started"
			if adopted {
				name = "adopted"
			}
			t.Run(name, func(t *testing.T) {
				p, dir := startWith(t, rt, func(o *Options) {
					o.StorageLimitMiB = 1
					if adopted { // a spare: no sandbox and no ceiling until adopted
						o.SandboxDir, o.StorageLimitMiB = "", 0
					}
				})
				sandbox := filepath.Join(dir, "sandbox")
				if adopted {
					if _, err := p.Adopt(callCtx(t), testLogger(t), sandbox, Limits{StorageMiB: 1}); err != nil {
						t.Fatal(err)
					}
				}
				checkStorageCeiling(t, p, sandbox)
			})
		}
	})
}

func checkStorageCeiling(t *testing.T, p *Process, sandbox string) {
	const limit = 1 << 20
	mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": "Box"})
	export := map[string]any{"format": "obj", "output": "a.obj"}
	mustExecute(t, p, "scene.export", export) // a.obj and its a.mtl
	// An upload's worth of bytes leaves one byte free.
	filler := filepath.Join(sandbox, "filler.bin")
	if err := os.WriteFile(filler, make([]byte, limit-1-sandboxBytes(t, sandbox)), 0o600); err != nil {
		t.Fatal(err)
	}
	mustExecute(t, p, "scene.export", export) // replaces itself: the same bytes, counted once

	te := wantToolError(t, p, "scene.export", map[string]any{"format": "obj", "output": "b.obj"}, CodeQuotaExceeded)
	if !strings.Contains(te.Message, "temp_storage_mib of 1 MiB") {
		t.Errorf("message %q does not name the ceiling", te.Message)
	}
	var progress int
	out, err := p.Execute(callCtx(t), Call{Tool: "render.animation", Args: map[string]any{
		"output_prefix": "f", "frame_start": 1, "frame_end": 3, "resolution": []any{32, 24}, "samples": 1, "seed": 1,
	}, OnProgress: func(map[string]any) { progress++ }})
	if !isCode(err, CodeQuotaExceeded) || out.Mutated {
		t.Fatalf("render.animation over the ceiling: %v (%+v), want quota_exceeded", err, out)
	}
	if progress != 0 {
		t.Errorf("render.animation reported %d frames done; it must stop at the first one over the ceiling", progress)
	}
	entries, err := os.ReadDir(sandbox)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "a.mtl a.obj filler.bin" {
		t.Errorf("sandbox after the refused calls: %v, want a.obj, a.mtl and filler.bin only", names)
	}
	assertIncrementalMatchesFull(t, p)

	if err := os.Remove(filler); err != nil { // room again
		t.Fatal(err)
	}
	mustExecute(t, p, "scene.export", map[string]any{"format": "obj", "output": "b.obj"})
	mustExecute(t, p, "render.animation", map[string]any{"output_prefix": "f", "frame_start": 1, "frame_end": 2,
		"resolution": []any{32, 24}, "samples": 1, "seed": 1})
}

// sandboxBytes is what the files in dir take (their sizes).
func sandboxBytes(t *testing.T, dir string) int64 {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		n += fi.Size()
	}
	return n
}

// TestDiskFloor: a call whose files leave the agent's disk less free than
// it keeps for its journal (Options.MinFreeDiskMiB; here more than any
// disk has) fails with quota_exceeded and leaves none of its files.
func TestDiskFloor(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p, dir := startWith(t, rt, func(o *Options) { o.MinFreeDiskMiB = 1 << 40 })
		sandbox := filepath.Join(dir, "sandbox")
		mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": "Box"})
		te := wantToolError(t, p, "scene.export", map[string]any{"format": "obj", "output": "a.obj"}, CodeQuotaExceeded)
		if !strings.Contains(te.Message, "keeps for its journal") {
			t.Errorf("message %q does not say why", te.Message)
		}
		if n := sandboxBytes(t, sandbox); n != 0 {
			t.Errorf("the refused export left %d bytes in the sandbox", n)
		}
		// A spare adopted by a session keeps the agent's floor.
		if _, err := p.Adopt(callCtx(t), testLogger(t), filepath.Join(dir, "other"), Limits{}); err != nil {
			t.Fatal(err)
		}
		wantToolError(t, p, "scene.export", map[string]any{"format": "obj", "output": "a.obj"}, CodeQuotaExceeded)
	})
}

// TestStorageCeilingKeepsTheFileItWouldReplace: a render over the ceiling
// that would replace a file of its name leaves that file as it was.
func TestStorageCeilingKeepsTheFileItWouldReplace(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p, dir := startWith(t, rt, func(o *Options) { o.StorageLimitMiB = 1 })
		sandbox := filepath.Join(dir, "sandbox")
		mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": "Box"})
		shot := map[string]any{"output": "shot.png", "resolution": []any{16, 16}, "samples": 1, "seed": 1}
		small := mustExecute(t, p, "render.still", shot).Fields()["sha256"]
		if err := os.WriteFile(filepath.Join(sandbox, "filler.bin"), make([]byte, 1<<20-100-sandboxBytes(t, sandbox)), 0o600); err != nil {
			t.Fatal(err)
		}
		shot["resolution"] = []any{256, 256} // more than 100 bytes more
		wantToolError(t, p, "render.still", shot, CodeQuotaExceeded)
		if got := fileSHA(t, filepath.Join(sandbox, "shot.png")); got != small {
			t.Errorf("shot.png after the refused render: %s, want the earlier render %s", got, small)
		}

		// An export's exporter writes its files in place: those it would
		// replace are set aside, and put back when it fails.
		if err := os.Remove(filepath.Join(sandbox, "filler.bin")); err != nil {
			t.Fatal(err)
		}
		export := map[string]any{"format": "obj", "output": "scene.obj"}
		mustExecute(t, p, "scene.export", export)
		obj, mtl := fileSHA(t, filepath.Join(sandbox, "scene.obj")), fileSHA(t, filepath.Join(sandbox, "scene.mtl"))
		if err := os.WriteFile(filepath.Join(sandbox, "filler.bin"), make([]byte, 1<<20-100-sandboxBytes(t, sandbox)), 0o600); err != nil {
			t.Fatal(err)
		}
		mustExecute(t, p, "object.create", map[string]any{"type": "uv_sphere", "name": "Ball"}) // hundreds of vertices more
		wantToolError(t, p, "scene.export", export, CodeQuotaExceeded)
		if aside, _ := filepath.Glob(filepath.Join(dir, "aside", "*")); len(aside) != 0 {
			t.Errorf("a refused export left %v aside", aside)
		}
		if o, m := fileSHA(t, filepath.Join(sandbox, "scene.obj")), fileSHA(t, filepath.Join(sandbox, "scene.mtl")); o != obj || m != mtl {
			t.Errorf("the export's files after it was refused: %s %s, want the earlier ones %s %s", o, m, obj, mtl)
		}
		if err := os.Remove(filepath.Join(sandbox, "filler.bin")); err != nil {
			t.Fatal(err)
		}
		mustExecute(t, p, "scene.export", export)
		if aside, _ := filepath.Glob(filepath.Join(dir, "aside", "*")); len(aside) != 0 {
			t.Errorf("files set aside are left: %v", aside)
		}
	})
}
