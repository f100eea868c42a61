package blender

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// familyCall is the representative call of one tool in BenchmarkToolFamilies.
type familyCall struct {
	tool string
	// args gives the arguments of iteration i in a scene of n planes.
	args func(i, n int) map[string]any
}

// familyPlane names a plane of a scale scene (see buildPlanes), spread over
// the name list as in BenchmarkSetTransformScale, so that a scan of the
// name-sorted ID list costs what it costs on average, not on the first names.
func familyPlane(i, n int) string { return fmt.Sprintf("P%05d", (i*7919)%n) }

// familyFixed is the plane that carries the fixtures (familyFixtures).
func familyFixed(n int) string { return fmt.Sprintf("P%05d", n/2) }

// familyFixtures are created (untimed, never undone) in each scene before the
// measurements, for the calls that need something to act on: a modifier to
// remove, a material to assign, a camera that is not the active one, a
// collection to link to.
func familyFixtures(n int) []Call {
	return []Call{
		{Tool: "modifier.add", Args: map[string]any{"object": familyFixed(n), "type": "bevel", "name": "BenchFixMod"}},
		{Tool: "material.create", Args: map[string]any{"name": "BenchFixMat"}},
		{Tool: "camera.create", Args: map[string]any{"name": "BenchFixCam", "location": []any{0, -12, 4}}},
		{Tool: "collection.create", Args: map[string]any{"name": "BenchFixColl"}},
	}
}

// toolFamilies is one representative call of every tool of every family
// (python.exec, ui.highlight, scene.import and render.animation left out:
// gated, or covered by another call of the same machinery).
var toolFamilies = []struct {
	family string
	calls  []familyCall
}{
	{"objects", []familyCall{
		{"object.create", func(i, n int) map[string]any {
			return map[string]any{"type": "plane", "name": "BenchNew", "location": []any{float64(i % 50), -3, 0}}
		}},
		{"object.duplicate", func(i, n int) map[string]any {
			return map[string]any{"name": familyPlane(i, n), "new_name": "BenchDup"}
		}},
		{"object.rename", func(i, n int) map[string]any {
			return map[string]any{"name": familyPlane(i, n), "new_name": "BenchRenamed"}
		}},
		{"object.set_transform", func(i, n int) map[string]any {
			return map[string]any{"name": familyPlane(i, n), "location": []any{float64(i % 50), 1.5, 2}}
		}},
		{"object.set_parent", func(i, n int) map[string]any {
			return map[string]any{"name": familyPlane(i, n), "parent": familyPlane(i+1, n)}
		}},
		{"object.select", func(i, n int) map[string]any {
			return map[string]any{"names": []any{familyPlane(i, n)}, "active": familyPlane(i, n)}
		}},
		{"object.delete", func(i, n int) map[string]any {
			return map[string]any{"name": familyPlane(i, n)}
		}},
	}},
	{"modifiers", []familyCall{
		{"modifier.add", func(i, n int) map[string]any {
			return map[string]any{"object": familyPlane(i, n), "type": "subdivision", "levels": 1}
		}},
		{"modifier.remove", func(i, n int) map[string]any {
			return map[string]any{"object": familyFixed(n), "name": "BenchFixMod"}
		}},
	}},
	{"materials", []familyCall{
		{"material.create", func(i, n int) map[string]any {
			return map[string]any{"name": "BenchMat", "base_color": []any{0.8, 0.2, 0.1, 1}, "roughness": 0.4}
		}},
		{"material.assign", func(i, n int) map[string]any {
			return map[string]any{"object": familyPlane(i, n), "material": "BenchFixMat"}
		}},
	}},
	{"lights", []familyCall{
		{"light.create", func(i, n int) map[string]any {
			return map[string]any{"name": "BenchLight", "type": "point", "energy": 500, "location": []any{0, 0, 5}}
		}},
	}},
	{"cameras", []familyCall{
		{"camera.create", func(i, n int) map[string]any {
			return map[string]any{"name": "BenchCam", "lens": 35, "location": []any{0, -10, 3}}
		}},
		{"camera.look_at", func(i, n int) map[string]any {
			return map[string]any{"name": "Camera", "target": familyPlane(i, n)}
		}},
		{"camera.set_active", func(i, n int) map[string]any {
			return map[string]any{"name": "BenchFixCam"}
		}},
	}},
	{"collections", []familyCall{
		{"collection.create", func(i, n int) map[string]any {
			return map[string]any{"name": "BenchColl"}
		}},
		{"collection.link", func(i, n int) map[string]any {
			return map[string]any{"object": familyPlane(i, n), "collection": "BenchFixColl"}
		}},
	}},
	{"world", []familyCall{
		{"world.set", func(i, n int) map[string]any {
			return map[string]any{"color": []any{0.2, 0.3, 0.4}, "strength": 0.5}
		}},
	}},
	{"keyframe", []familyCall{
		{"keyframe.insert", func(i, n int) map[string]any {
			return map[string]any{"object": familyPlane(i, n), "data_path": "location", "frame": 1 + i%10, "value": []any{1, 2, 3}}
		}},
	}},
	{"text", []familyCall{
		{"text.create", func(i, n int) map[string]any {
			return map[string]any{"name": "BenchText", "body": "Blendplane"}
		}},
	}},
	{"render", []familyCall{
		{"render.settings", func(i, n int) map[string]any {
			return map[string]any{"resolution": []any{320, 240}, "frame_end": 120}
		}},
		{"render.still", func(i, n int) map[string]any {
			return map[string]any{"output": "bench.png", "resolution": []any{32, 24}, "samples": 1}
		}},
	}},
	{"scene", []familyCall{
		{"scene.get_summary", func(i, n int) map[string]any { return map[string]any{} }},
		{"scene.snapshot", func(i, n int) map[string]any { return map[string]any{} }},
		{"scene.export", func(i, n int) map[string]any {
			return map[string]any{"format": "obj", "output": "bench.obj"}
		}},
	}},
}

// familyMinCalls and familyMinTime bound one measurement of one tool: at
// least this many calls per scene size, and calls until this much time has
// gone by (both sizes, undos included), whichever comes last.
const (
	familyMinCalls = 5
	familyMinTime  = 500 * time.Millisecond
)

// BenchmarkToolFamilies times one representative call of every tool family
// through the real Execute (Go -> bridge -> tool -> incremental hash -> Go)
// in a scene of 100 and of 10,000 planes (scaleSizes, built once per run of
// the benchmark by scaleProcesses with one python.exec call), on Blender 4.5
// (the bpy wheel) only. Each call runs once per size, interleaved so that
// load on the machine hits both alike, and is undone right away (the undo is
// timed too), so every call sees a scene of the same size; the benchmark
// fails if an undo does not give back the scene hash from before the call.
//
// One sub-benchmark per tool, grouped by family
// (BenchmarkToolFamilies/objects/object.create). One iteration is one full
// measurement of the tool (familyMinCalls, familyMinTime), so -benchtime 1x
// is enough. Metrics: ms/op-100, ms/op-10k and ratio-10k/100 for the call;
// for calls that have an undo, ms/undo-100, ms/undo-10k and ratio-undo;
// calls, the number of calls per size averaged. ns/op is left out (it would
// be the time of the whole measurement).
//
// More rows: interactive/object.create (benchInteractive),
// unnamed/object.create (unnamedCreate) and, last, reloaded/<tool>: the
// calls over 1.5 again after both scenes were saved and loaded (reload).
func BenchmarkToolFamilies(b *testing.B) {
	rt := testRuntimes()[0]
	if rt.name != "bpy_4.5" {
		b.Fatalf("testRuntimes()[0] is %s, want bpy_4.5", rt.name)
	}
	if !isExecutable(rt.rt.Path) {
		b.Skipf("runtime %s not installed at %s (run `make blender`)", rt.name, rt.rt.Path)
	}
	ps := scaleProcesses(b, rt.rt)
	for k, p := range ps {
		for _, c := range familyFixtures(scaleSizes[k]) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			_, err := p.Execute(ctx, c)
			cancel()
			if err != nil {
				b.Fatalf("fixture %s %v at %d planes: %v", c.Tool, c.Args, scaleSizes[k], err)
			}
		}
	}
	for _, fam := range toolFamilies {
		b.Run(fam.family, func(b *testing.B) {
			for _, c := range fam.calls {
				b.Run(c.tool, func(b *testing.B) { benchFamilyCall(b, ps, c) })
			}
		})
	}
	b.Run("interactive/object.create", func(b *testing.B) { benchInteractive(b, ps, toolFamilies[0].calls[0]) })
	b.Run("unnamed/object.create", func(b *testing.B) { benchFamilyCall(b, ps, unnamedCreate) })
	b.Run("reloaded", func(b *testing.B) {
		reload(b, ps)
		for _, c := range reloadedCalls() {
			b.Run(c.tool, func(b *testing.B) { benchFamilyCall(b, ps, c) })
		}
	})
}

// reloadedCalls are the calls whose cost at 10,000 objects is over 1.5 times
// their cost at 100 in a Blender that built its scene itself.
func reloadedCalls() []familyCall {
	var out []familyCall
	for _, fam := range toolFamilies {
		for _, c := range fam.calls {
			switch c.tool {
			case "object.create", "object.duplicate", "object.rename", "object.delete", "light.create",
				"camera.create", "keyframe.insert", "text.create", "material.create", "collection.create":
				out = append(out, c)
			}
		}
	}
	return out
}

// reload saves both scenes as a checkpoint and loads them back (with the
// file's UI, as load_checkpoint does): what a recovered or restored session
// runs on. A Blender that built its scene call by call keeps a queue of
// notifiers as long as the datablocks it touched, which every free walks,
// and its datablocks where they were allocated; a load starts both afresh
// (docs/BENCHMARKS.md).
func reload(b *testing.B, ps [2]*Process) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for k, p := range ps {
		path := filepath.Join(b.TempDir(), "reload.blend")
		saved, err := p.SaveCheckpoint(ctx, path)
		if err != nil {
			b.Fatalf("save at %d planes: %v", scaleSizes[k], err)
		}
		if loaded, err := p.LoadCheckpoint(ctx, path); err != nil || loaded != saved {
			b.Fatalf("load at %d planes: %s, %v; saved %s", scaleSizes[k], loaded, err, saved)
		}
	}
}

// unnamedCreate is object.create without a name: Blender's own ("Plane",
// "Plane.001", ...), the lowest free, found in its name map on 4.5
// (tools/datablocks.py: blender_named).
var unnamedCreate = familyCall{"object.create", func(i, n int) map[string]any {
	return map[string]any{"type": "plane", "location": []any{float64(i % 50), -3, 0}}
}}

// interactivePairs and interactivePause shape the interactive measurement:
// that many calls and undos per scene size, each undo followed by a pause
// longer than the bridge's idle time before it does the work of a pause
// (main.IDLE_SECONDS, 0.25 s), as a person or a model leaves between calls.
const (
	interactivePairs = 20
	interactivePause = 400 * time.Millisecond
)

// benchInteractive times c and its undo as BenchmarkToolFamilies does, but
// with a pause after every undo: what a session driven by a person or a
// model sees, whose discarded datablocks are freed between its calls.
func benchInteractive(b *testing.B, ps [2]*Process, c familyCall) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var t familyTimes
	for b.Loop() {
		for range interactivePairs {
			t.call(b, ctx, ps, c)
			time.Sleep(interactivePause)
		}
	}
	t.report(b)
}

func benchFamilyCall(b *testing.B, ps [2]*Process, c familyCall) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var t familyTimes
	for b.Loop() {
		start := time.Now()
		for n := 0; n < familyMinCalls || time.Since(start) < familyMinTime; n++ {
			t.call(b, ctx, ps, c)
		}
	}
	t.report(b)
	b.ReportMetric(float64(t.calls), "calls")
}

// familyTimes adds up the times of a tool's calls and of their undos at
// each scene size.
type familyTimes struct {
	exec, undo [2]time.Duration
	undos      [2]int
	calls      int // per size
}

// call runs c's next call once per size, each undone right away (the
// benchmark fails if an undo does not give back the scene hash from before
// the call), interleaved so that load on the machine hits both alike.
func (t *familyTimes) call(b *testing.B, ctx context.Context, ps [2]*Process, c familyCall) {
	for k, p := range ps {
		size := scaleSizes[k]
		args := c.args(t.calls, size)
		t0 := time.Now()
		out, err := p.Execute(ctx, Call{Tool: c.tool, Args: args})
		t.exec[k] += time.Since(t0)
		if err != nil {
			b.Fatalf("%s %v at %d planes: %v", c.tool, args, size, err)
		}
		if out.Undo == nil {
			continue
		}
		t0 = time.Now()
		h, err := p.Undo(ctx, out.Undo, Call{})
		t.undo[k] += time.Since(t0)
		if err != nil {
			b.Fatalf("undo of %s %v at %d planes: %v", c.tool, args, size, err)
		}
		if h != out.SceneHashBefore {
			b.Fatalf("undo of %s %v at %d planes: scene hash %s, want %s", c.tool, args, size, h, out.SceneHashBefore)
		}
		t.undos[k]++
	}
	t.calls++
}

// report reports ms/op-100, ms/op-10k and their ratio, and for a tool with
// an undo ms/undo-100, ms/undo-10k and ratio-undo.
func (t *familyTimes) report(b *testing.B) {
	reportScale(b, "ms/op", t.exec, t.calls)
	if t.undos[0] > 0 && t.undos[1] > 0 {
		var ms [2]float64
		for k := range t.undo {
			ms[k] = float64(t.undo[k].Microseconds()) / 1000 / float64(t.undos[k])
		}
		b.ReportMetric(ms[0], "ms/undo-100")
		b.ReportMetric(ms[1], "ms/undo-10k")
		b.ReportMetric(ms[1]/ms[0], "ratio-undo")
	}
	b.ReportMetric(0, "ns/op")
}
