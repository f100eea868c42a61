package blender

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// hostileBlend is python.exec code that makes the scene a hostile file would
// carry: a text block registered to run when the file loads, and a driver
// whose expression is Python (not one of the simple expressions Blender
// evaluates without Python). Either one touches marker when it runs.
func hostileBlend(marker string) string {
	return fmt.Sprintf(`import bpy
t = bpy.data.texts.new("autorun.py")
t.write('import pathlib\npathlib.Path(%[1]q + ".text").touch()\n')
t.use_module = True
ob = bpy.data.objects.new("Driven", None)
bpy.context.scene.collection.objects.link(ob)
d = ob.driver_add("location", 0).driver
d.type = "SCRIPTED"
d.expression = '__import__("pathlib").Path(%[1]q + ".driver").touch() or frame'
result = True
`, marker)
}

// TestHostileBlendRunsNothing: a .blend that carries code (a registered text
// block, a Python driver) loaded as a checkpoint runs none of it, on every
// runtime, however the scene is evaluated afterwards. The control case
// trusts the same file and sees both run, so the test can fail.
func TestHostileBlendRunsNothing(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		dir := t.TempDir()
		marker := filepath.Join(dir, "ran")
		file := filepath.Join(dir, "hostile.blend")

		maker := startTestProcess(t, rt)
		if _, err := maker.Execute(ctx, Call{Tool: "python.exec", Args: map[string]any{"code": hostileBlend(marker)}}); err != nil {
			t.Fatal(err)
		}
		if _, err := maker.SaveCheckpoint(ctx, file); err != nil {
			t.Fatal(err)
		}
		// Written while autoexec is off in the maker too: the driver has not run.
		assertNoMarkers(t, marker)

		p := startTestProcess(t, rt)
		if _, err := p.LoadCheckpoint(ctx, file); err != nil {
			t.Fatal(err)
		}
		evaluate := map[string]any{"code": "import bpy\nsc = bpy.context.scene\nfor f in (1, 2, 3):\n    sc.frame_set(f)\n" +
			"bpy.context.evaluated_depsgraph_get().update()\nresult = bpy.app.autoexec_fail"}
		out, err := p.Execute(ctx, Call{Tool: "python.exec", Args: evaluate})
		if err != nil {
			t.Fatal(err)
		}
		assertNoMarkers(t, marker)
		if out.Fields()["result"] != true {
			t.Errorf("bpy.app.autoexec_fail after evaluating the hostile file's driver = %v, want true", out.Fields()["result"])
		}

		// Control: the same file, trusted, runs both (once its scene is the
		// window's: checkpoints are saved with it parked, window.py).
		trust := map[string]any{"code": fmt.Sprintf("import bpy\nbpy.ops.wm.open_mainfile(filepath=%q, load_ui=False, use_scripts=True)\n"+
			"bpy.context.window.scene = bpy.data.scenes['Scene']\n%s", file, evaluate["code"])}
		if _, err := p.Execute(ctx, Call{Tool: "python.exec", Args: trust}); err != nil {
			t.Fatal(err)
		}
		for _, what := range []string{".text", ".driver"} {
			if _, err := os.Stat(marker + what); err != nil {
				t.Errorf("control case: the trusted file's %s code did not run: %v", what[1:], err)
			}
		}
	})
}

func assertNoMarkers(t *testing.T, marker string) {
	t.Helper()
	for _, what := range []string{".text", ".driver"} {
		if _, err := os.Stat(marker + what); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("code embedded in the .blend ran (%s): %v", what[1:], err)
		}
	}
}

// withMemCap narrows the memory ceiling's mechanisms to kind for one test,
// skipping the test where this host cannot offer it.
func withMemCap(t *testing.T, kind string) {
	t.Helper()
	old := memCapKinds
	memCapKinds = []string{kind}
	t.Cleanup(func() { memCapKinds = old })
	c, err := newMemCap(1)
	if err != nil {
		t.Skipf("no %s here: %v", kind, err)
	}
	c.release()
}

// forEachMemCap runs fn on every Blender runtime under each memory ceiling
// mechanism (kind) this host offers, skipping the others, with a deadline.
func forEachMemCap(t *testing.T, fn func(t *testing.T, ctx context.Context, rt Runtime, kind string)) {
	for _, kind := range []string{capCgroup2, capCgroup1, capRlimit} {
		t.Run(kind, func(t *testing.T) {
			withMemCap(t, kind)
			forEachRuntime(t, func(t *testing.T, rt Runtime) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				fn(t, ctx, rt, kind)
			})
		})
	}
}

// leftoverCgroups are the cgroups this test process made and did not remove.
func leftoverCgroups(t *testing.T) []string {
	var left []string
	for _, kind := range []string{capCgroup2, capCgroup1} {
		var parent string
		var err error
		if kind == capCgroup2 {
			parent, err = ownCgroup("cgroup2", "")
		} else {
			parent, err = ownCgroup("cgroup", "memory")
		}
		if err == nil {
			found, _ := filepath.Glob(filepath.Join(parent, fmt.Sprintf("blendplane-%d-*", os.Getpid())))
			left = append(left, found...)
		}
	}
	return left
}

// TestMemoryCeiling: under each mechanism this host offers, a Blender under
// its ceiling works, one that goes over it is stopped and the call fails
// with ErrMemoryExceeded (and ErrProcessExited), and nothing is left behind.
func TestMemoryCeiling(t *testing.T) {
	forEachMemCap(t, func(t *testing.T, ctx context.Context, rt Runtime, kind string) {
		dir := t.TempDir()
		p, err := Start(ctx, rt, Options{Logger: testLogger(t), WorkDir: filepath.Join(dir, "work"), MemoryLimitMiB: 1024})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Stop(5 * time.Second)
		if p.mem == nil || p.mem.kind != kind {
			t.Fatalf("memory cap %+v, want %s", p.mem, kind)
		}
		alloc := func(mib int) (Outcome, error) {
			code := fmt.Sprintf("b = bytearray(%d << 20)\nresult = len(b)", mib)
			return p.Execute(ctx, Call{Tool: "python.exec", Args: map[string]any{"code": code}})
		}
		if _, err := alloc(256); err != nil {
			t.Fatalf("256 MiB under a 1024 MiB ceiling: %v", err)
		}
		_, err = alloc(4096)
		if !errors.Is(err, ErrMemoryExceeded) || !errors.Is(err, ErrProcessExited) {
			t.Fatalf("4 GiB under a 1024 MiB ceiling: %v, want ErrMemoryExceeded and ErrProcessExited", err)
		}
		t.Logf("over the ceiling: %v", err)
		if _, err := p.SceneHash(ctx); !errors.Is(err, ErrMemoryExceeded) {
			t.Fatalf("a call after the ceiling stopped Blender: %v", err)
		}
		p.Stop(5 * time.Second)
		if left := leftoverCgroups(t); len(left) > 0 {
			t.Fatalf("cgroups left behind: %v", left)
		}
	})
}

// TestAdopt: a Blender started ahead of its session (a spare: no sandbox,
// a generous ceiling, a work dir of its own) takes its session's sandbox
// and memory ceiling when adopted, keeps the baseline scene, and its work
// dir goes when it exits.
func TestAdopt(t *testing.T) {
	forEachMemCap(t, func(t *testing.T, ctx context.Context, rt Runtime, kind string) {
		dir := t.TempDir()
		work := filepath.Join(dir, "spare")
		p, err := Start(ctx, rt, Options{Logger: testLogger(t), WorkDir: work, RemoveWorkDir: true, MemoryLimitMiB: 16384})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Stop(5 * time.Second)
		baseline, err := p.SceneHash(ctx)
		if err != nil {
			t.Fatal(err)
		}
		export := Call{Tool: "scene.export", Args: map[string]any{"format": "obj", "output": "scene.obj"}}
		if _, err := p.Execute(ctx, export); !isCode(err, CodePolicyRefused) {
			t.Fatalf("an export before adoption (no sandbox): %v, want policy_refused", err)
		}
		sandbox := filepath.Join(dir, "session", "output")
		// A ceiling above the one it started under (an rlimit cannot be
		// raised) or none keeps its own; a lower one lowers it.
		for _, limit := range []int64{32768, 0, 1024} {
			if h, err := p.Adopt(ctx, testLogger(t), sandbox, Limits{MemoryMiB: limit}); err != nil || h != baseline {
				t.Fatalf("Adopt(%d MiB) = %s, %v; want the baseline %s", limit, h, err, baseline)
			}
		}
		if _, err := p.Execute(ctx, export); err != nil {
			t.Fatalf("an export into the adopted sandbox: %v", err)
		}
		if _, err := os.Stat(filepath.Join(sandbox, "scene.obj")); err != nil {
			t.Fatal(err)
		}
		alloc := func(mib int) error {
			code := fmt.Sprintf("b = bytearray(%d << 20)\nresult = len(b)", mib)
			_, err := p.Execute(ctx, Call{Tool: "python.exec", Args: map[string]any{"code": code}})
			return err
		}
		if err := alloc(256); err != nil {
			t.Fatalf("256 MiB under the adopted 1024 MiB ceiling: %v", err)
		}
		if err := alloc(4096); !errors.Is(err, ErrMemoryExceeded) {
			t.Fatalf("4 GiB under the adopted 1024 MiB ceiling (started under 16 GiB): %v, want ErrMemoryExceeded", err)
		}
		p.Stop(5 * time.Second)
		if _, err := os.Stat(work); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the spare's work dir outlived it: %v", err)
		}
		if left := leftoverCgroups(t); len(left) > 0 {
			t.Fatalf("cgroups left behind: %v", left)
		}
	})
}

// TestMemoryCeilingTooSmallToStart: a ceiling Blender cannot even start
// under fails Start with a clear error (ErrMemoryExceeded where a cgroup
// saw the kill) and leaves nothing behind.
func TestMemoryCeilingTooSmallToStart(t *testing.T) {
	forEachMemCap(t, func(t *testing.T, ctx context.Context, rt Runtime, kind string) {
		p, err := Start(ctx, rt, Options{Logger: testLogger(t), WorkDir: filepath.Join(t.TempDir(), "work"), MemoryLimitMiB: 24})
		if err == nil {
			p.Stop(5 * time.Second)
			t.Fatal("Blender started under a 24 MiB ceiling")
		}
		t.Logf("Start: %v", err)
		if kind != capRlimit && !errors.Is(err, ErrMemoryExceeded) {
			t.Errorf("Start under a too small cgroup ceiling: %v, want ErrMemoryExceeded", err)
		}
		if left := leftoverCgroups(t); len(left) > 0 {
			t.Fatalf("cgroups left behind: %v", left)
		}
	})
}
