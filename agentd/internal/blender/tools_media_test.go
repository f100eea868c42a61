package blender

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// Tests of the world, animation, text, render settings/animation,
// import/export and special tools (bridge/tools/world.py, anim.py, text.py,
// render.py, io.py, special.py).

func init() {
	det, comp, hs, v := DeterminismDeterministic, RollbackCompensation, SafetyModeHeadlessSafe, ">=3.4"
	for name, c := range map[string][5]string{
		"world.set":        {det, comp, IdempotenceIdempotent, hs, v},
		"keyframe.insert":  {det, comp, IdempotenceIdempotent, hs, v},
		"text.create":      {det, comp, IdempotenceKeyed, hs, v},
		"render.settings":  {det, comp, IdempotenceIdempotent, hs, v},
		"render.animation": {DeterminismSeeded, RollbackNotNeeded, IdempotenceIdempotent, hs, v},
		"scene.export":     {det, RollbackNotNeeded, IdempotenceIdempotent, hs, v},
		"scene.import":     {det, comp, IdempotenceKeyed, hs, v},
		"ui.highlight":     {det, RollbackNone, IdempotenceReadOnly, SafetyModeUIAssisted, v},
		"python.exec":      {DeterminismNondeterministic, RollbackNone, IdempotenceKeyed, SafetyModeUnsafeOps, v},
	} {
		wantToolClasses[name] = c
	}
}

// mediaStep runs a successful call, checks incremental == full, undoes it
// (when it has a compensation: back to exactly the hash before), then runs it
// again and expects the same resulting hash. It returns the second outcome.
func mediaStep(t *testing.T, p *Process, tool string, args map[string]any) Outcome {
	t.Helper()
	out := mustExecute(t, p, tool, args)
	s := assertIncrementalMatchesFull(t, p)
	if s.SceneHash != out.SceneHashAfter {
		t.Fatalf("%s: snapshot %s, outcome after %s", tool, s.SceneHash, out.SceneHashAfter)
	}
	if out.Undo == nil {
		return out
	}
	mustUndo(t, p, out, Call{Tool: tool, Args: args})
	if s := assertIncrementalMatchesFull(t, p); s.SceneHash != out.SceneHashBefore {
		t.Fatalf("%s: full hash after undo %s, want %s", tool, s.SceneHash, out.SceneHashBefore)
	}
	again := mustExecute(t, p, tool, args)
	if again.SceneHashAfter != out.SceneHashAfter || string(again.Undo) != string(out.Undo) {
		t.Fatalf("%s again: %s undo %s, first %s undo %s", tool, again.SceneHashAfter, again.Undo, out.SceneHashAfter, out.Undo)
	}
	assertIncrementalMatchesFull(t, p)
	return again
}

// mediaInject makes a call (execute, or undo with a record) fail at a
// checkpoint label and checks that nothing of it remains.
func mediaInject(t *testing.T, p *Process, method string, params map[string]any) {
	t.Helper()
	before := assertIncrementalMatchesFull(t, p)
	err := p.call(callCtx(t), method, params, nil, nil)
	if !isCode(err, CodeInternalError) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("%s %v: err = %v, want one-line internal_error", method, params["inject_failure"], err)
	}
	if after := assertIncrementalMatchesFull(t, p); after.SceneHash != before.SceneHash {
		t.Fatalf("%s %v left partial work", method, params["inject_failure"])
	}
}

func record(t *testing.T, s Snapshot, section, name string) map[string]any {
	t.Helper()
	recs, _ := s.State[section].(map[string]any)
	r, _ := recs[name].(map[string]any)
	if r == nil {
		t.Fatalf("snapshot has no %s %q (has %v)", section, name, recs)
	}
	return r
}

func fileSHA(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// TestMediaSceneTools: world.set, keyframe.insert, text.create and
// render.settings: success, records, refusals, no partial effect, exact undo;
// the same calls give the same hash on Blender 3.4 and 4.5.
func TestMediaSceneTools(t *testing.T) {
	finals := map[RuntimeKind]string{}
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)

		// world.set
		mediaStep(t, p, "world.set", map[string]any{"color": []any{0.2, 0.4, 0.6}})
		mediaStep(t, p, "world.set", map[string]any{"strength": 2.5})
		s := assertIncrementalMatchesFull(t, p)
		w := record(t, s, "worlds", "World")
		if fmt.Sprint(w["background"]) != "map[color:[0.2 0.4 0.6 1] strength:2.5]" || w["use_nodes"] != true {
			t.Errorf("world record %v", w)
		}
		wantToolError(t, p, "world.set", map[string]any{}, CodeInvalidInput)
		wantToolError(t, p, "world.set", map[string]any{"color": []any{1.5, 0, 0}}, CodeInvalidInput)
		wantToolError(t, p, "world.set", map[string]any{"strength": -1}, CodeInvalidInput)
		wantToolError(t, p, "world.set", map[string]any{"strength": 1, "hdri": "x"}, CodeInvalidInput)
		mediaInject(t, p, "execute", map[string]any{"tool": "world.set", "args": map[string]any{"color": []any{1, 1, 1}}, "inject_failure": "world.set:set"})

		// keyframe.insert
		mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": "Box"})
		mediaStep(t, p, "keyframe.insert", map[string]any{"object": "Box", "data_path": "location", "frame": 1})
		mediaStep(t, p, "keyframe.insert", map[string]any{"object": "Box", "data_path": "location", "frame": 10, "value": []any{1, 2, 3}})
		kf := mediaStep(t, p, "keyframe.insert", map[string]any{"object": "Box", "data_path": "location", "frame": 10, "value": []any{4, 5, 6}})
		if fmt.Sprint(kf.Fields()["keyframes"], kf.Fields()["value"]) != "[2 2 2] [4 5 6]" {
			t.Errorf("overwriting key: %v", kf.Fields())
		}
		mediaStep(t, p, "keyframe.insert", map[string]any{"object": "Box", "data_path": "rotation_euler", "frame": 5, "value": []any{0, 0, 1.5}})
		s = assertIncrementalMatchesFull(t, p)
		if a := record(t, s, "objects", "Box")["animation"]; fmt.Sprint(a) != "map[action:BoxAction]" {
			t.Errorf("Box animation = %v", a)
		}
		act := record(t, s, "actions", "BoxAction")
		if got := fmt.Sprint(act["fcurves"]); !strings.Contains(got, "map[data_path:location index:2 keyframes:[[1 0 BEZIER] [10 6 BEZIER]]]") ||
			!strings.Contains(got, "map[data_path:rotation_euler index:2 keyframes:[[5 1.5 BEZIER]]]") {
			t.Errorf("BoxAction fcurves = %s", got)
		}
		wantToolError(t, p, "keyframe.insert", map[string]any{"object": "Nope", "data_path": "location", "frame": 1}, CodeNotFound)
		wantToolError(t, p, "keyframe.insert", map[string]any{"object": "Box", "data_path": "color", "frame": 1}, CodeInvalidInput)
		wantToolError(t, p, "keyframe.insert", map[string]any{"object": "Box", "data_path": "location", "frame": 1.5}, CodeInvalidInput)
		wantToolError(t, p, "keyframe.insert", map[string]any{"object": "Box", "data_path": "location", "frame": -1}, CodeInvalidInput)
		wantToolError(t, p, "keyframe.insert", map[string]any{"object": "Box", "data_path": "location"}, CodeInvalidInput)
		wantToolError(t, p, "keyframe.insert", map[string]any{"object": "Box", "data_path": "scale", "frame": 1, "value": []any{1, 1}}, CodeInvalidInput)
		mediaInject(t, p, "execute", map[string]any{"tool": "keyframe.insert", "args": map[string]any{"object": "Box", "data_path": "location", "frame": 10, "value": []any{9, 9, 9}}, "inject_failure": "keyframe.insert:inserted"})
		mediaInject(t, p, "execute", map[string]any{"tool": "keyframe.insert", "args": map[string]any{"object": "Light", "data_path": "scale", "frame": 3, "value": []any{2, 2, 2}}, "inject_failure": "keyframe.insert:inserted"})
		// Box stands at (4, 5, 6), keyed there at frame 10, while its
		// animation puts it at (0, 0, 0) at the current frame 1. Blender
		// evaluates the animation at every operator call (bpy.ops) and file
		// load: a render, a modifier put back by an undo (an operator on
		// 3.4), a checkpoint's save and its load must leave Box where it is.
		mustExecute(t, p, "modifier.add", map[string]any{"object": "Box", "type": "bevel"})
		mustExecute(t, p, "modifier.add", map[string]any{"object": "Box", "type": "mirror"})
		mediaStep(t, p, "modifier.remove", map[string]any{"object": "Box", "name": "Bevel"})
		mediaStep(t, p, "render.still", map[string]any{"output": "anim.png", "resolution": []any{16, 16}, "samples": 1})
		assertCheckpointRoundTrip(t, p, rt)

		// text.create
		txt := mediaStep(t, p, "text.create", map[string]any{"name": "Title", "body": "Hello, Blendplane", "size": 0.5, "extrude": 0.05, "location": []any{0, 0, 2}, "rotation_euler": []any{1.5708, 0, 0}})
		if txt.Fields()["name"] != "Title" || txt.Fields()["curve"] != "Title" {
			t.Errorf("text.create = %v", txt.Fields())
		}
		s = assertIncrementalMatchesFull(t, p)
		cu := record(t, s, "curves", "Title")
		if fmt.Sprintf("%v|%v|%v|%v|%v", cu["type"], cu["body"], cu["size"], cu["extrude"], cu["font"]) != "TextCurve|Hello, Blendplane|0.5|0.05|<builtin>" {
			t.Errorf("curve record %v", cu)
		}
		if ob := record(t, s, "objects", "Title"); ob["type"] != "FONT" || ob["data"] != "Title" {
			t.Errorf("text object record %v", ob)
		}
		wantToolError(t, p, "text.create", map[string]any{"name": "Title", "body": "x"}, CodeConflict)
		wantToolError(t, p, "text.create", map[string]any{"name": "Long", "body": strings.Repeat("x", 1025)}, CodeInvalidInput)
		wantToolError(t, p, "text.create", map[string]any{"name": "Zero", "body": "x", "size": 0}, CodeInvalidInput)
		wantToolError(t, p, "text.create", map[string]any{"name": "Neg", "body": "x", "extrude": -1}, CodeInvalidInput)
		wantToolError(t, p, "text.create", map[string]any{"name": "NoBody"}, CodeInvalidInput)
		wantToolError(t, p, "text.create", map[string]any{"name": "__bp_x", "body": "x"}, CodeInvalidInput)
		mediaInject(t, p, "execute", map[string]any{"tool": "text.create", "args": map[string]any{"name": "Half", "body": "x"}, "inject_failure": "text.create:linked"})

		// render.settings
		rs := mediaStep(t, p, "render.settings", map[string]any{"engine": "eevee", "resolution": []any{320, 240}, "samples": 8,
			"frame_start": 300, "frame_end": 400, "fps": 30, "film_transparent": true})
		if fmt.Sprint(rs.Fields()) != "map[engine:eevee film_transparent:true fps:30 frame_end:400 frame_start:300 resolution:[320 240] samples:8]" {
			t.Errorf("render.settings = %v", rs.Fields())
		}
		mediaStep(t, p, "render.settings", map[string]any{"frame_start": 1, "frame_end": 20})
		mediaStep(t, p, "render.settings", map[string]any{"engine": "cycles", "samples": 2})
		mediaStep(t, p, "render.settings", map[string]any{"engine": "workbench"})
		s = assertIncrementalMatchesFull(t, p)
		sc := record(t, s, "scenes", "Scene")
		if fmt.Sprintf("%v|%v|%v|%v", sc["frame"], sc["render"].(map[string]any)["engine"], sc["eevee"], sc["cycles"].(map[string]any)["samples"]) !=
			"[1 1 20]|BLENDER_WORKBENCH|map[taa_render_samples:8]|2" {
			t.Errorf("scene record %v", sc)
		}
		wantToolError(t, p, "render.settings", map[string]any{}, CodeInvalidInput)
		wantToolError(t, p, "render.settings", map[string]any{"samples": 4}, CodeInvalidInput) // workbench has none
		wantToolError(t, p, "render.settings", map[string]any{"resolution": []any{8, 8}}, CodeInvalidInput)
		wantToolError(t, p, "render.settings", map[string]any{"frame_start": 30}, CodeInvalidInput)
		wantToolError(t, p, "render.settings", map[string]any{"frame_start": 5, "frame_end": 4}, CodeInvalidInput)
		wantToolError(t, p, "render.settings", map[string]any{"engine": "octane"}, CodeInvalidInput)
		wantToolError(t, p, "render.settings", map[string]any{"fps": 0}, CodeInvalidInput)
		wantToolError(t, p, "render.settings", map[string]any{"film_transparent": "yes"}, CodeInvalidInput)
		mediaInject(t, p, "execute", map[string]any{"tool": "render.settings", "args": map[string]any{"engine": "cycles", "resolution": []any{64, 64}, "fps": 60}, "inject_failure": "render.settings:resolution_x"})

		// Undo appliers that fail midway roll back; malformed records are refused.
		w1 := mustExecute(t, p, "world.set", map[string]any{"color": []any{0, 1, 0}, "strength": 0.5})
		k1 := mustExecute(t, p, "keyframe.insert", map[string]any{"object": "Camera", "data_path": "location", "frame": 2, "value": []any{1, 1, 1}})
		t1 := mustExecute(t, p, "text.create", map[string]any{"name": "Sub", "body": "sub"})
		r1 := mustExecute(t, p, "render.settings", map[string]any{"engine": "cycles", "frame_end": 40})
		for _, c := range []struct {
			out   Outcome
			label string
		}{{r1, "undo.render.settings:first"}, {t1, "undo.text.create:unlinked"}, {k1, "undo.keyframe.insert:value"}, {w1, "undo.world.set:background"}} {
			mediaInject(t, p, "undo", map[string]any{"undo": c.out.Undo, "inject_failure": c.label})
		}
		for _, bad := range []string{`{"v":1,"tool":"world.set","world":"World","created":false,"color":[1,2],"use_nodes":true,"background":null,"added_nodes":[]}`,
			`{"v":1,"tool":"keyframe.insert","object":"Camera","data_path":"hide","frame":2}`,
			`{"v":1,"tool":"render.settings","scene":"Scene","settings":{"render.engine":"X"}}`,
			`{"v":1,"tool":"text.create","object":"Sub"}`} {
			if _, err := p.Undo(callCtx(t), json.RawMessage(bad), Call{}); !isCode(err, CodeInvalidInput) {
				t.Errorf("Undo(%s) = %v, want invalid_input", bad, err)
			}
		}
		for _, o := range []Outcome{r1, t1, k1, w1} {
			mustUndo(t, p, o, Call{})
		}
		// A compensation applies once.
		if _, err := p.Undo(callCtx(t), t1.Undo, Call{}); !isCode(err, CodeConflict) {
			t.Errorf("second text.create undo = %v, want conflict", err)
		}
		if _, err := p.Undo(callCtx(t), k1.Undo, Call{}); !isCode(err, CodeConflict) {
			t.Errorf("second keyframe.insert undo = %v, want conflict", err)
		}
		finals[rt.Kind] = assertIncrementalMatchesFull(t, p).SceneHash
	})
	if len(finals) == 2 && finals[RuntimeBPYModule] != finals[RuntimeBinary] {
		t.Errorf("same calls, different scene hash across Blender versions: %v", finals)
	}
}

// TestMediaRenderAnimation: progress events in order, byte-identical frames
// across runs, the scene (animated) unchanged, sandbox refusals.
func TestMediaRenderAnimation(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p, sandbox := startInSandbox(t, rt)
		mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": "Box"})
		mustExecute(t, p, "keyframe.insert", map[string]any{"object": "Box", "data_path": "location", "frame": 1, "value": []any{0, 0, 0}})
		mustExecute(t, p, "keyframe.insert", map[string]any{"object": "Box", "data_path": "location", "frame": 2, "value": []any{1, 0, 0}})
		// The property now differs from the animation at the current frame:
		// rendering (frame_set) must not leave it changed.
		mustExecute(t, p, "object.set_transform", map[string]any{"name": "Box", "location": []any{0.5, 0.5, 0.5}})
		base := assertIncrementalMatchesFull(t, p)
		var digests [][]any
		for i, prefix := range []string{"anim", "again"} {
			var got []map[string]any
			out, err := p.Execute(callCtx(t), Call{Tool: "render.animation", Args: map[string]any{
				"output_prefix": prefix, "frame_start": 1, "frame_end": 2, "resolution": []any{32, 24}, "samples": 1, "seed": 5,
			}, OnProgress: func(m map[string]any) { got = append(got, m) }})
			if err != nil {
				t.Fatal(err)
			}
			want := []map[string]any{{"done": 1.0, "total": 2.0, "frame": 1.0}, {"done": 2.0, "total": 2.0, "frame": 2.0}}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("progress %v, want %v", got, want)
			}
			if out.Mutated || out.Undo != nil || out.SceneHashAfter != base.SceneHash {
				t.Errorf("render.animation changed the scene: %+v", out)
			}
			paths, sums := out.Fields()["paths"].([]any), out.Fields()["sha256"].([]any)
			if len(paths) != 2 || len(sums) != 2 || fmt.Sprint(out.Fields()["frames"], out.Fields()["seed"]) != "[1 2] 5" {
				t.Fatalf("result %v", out.Fields())
			}
			for k, pth := range paths {
				if pth != fmt.Sprintf("%s_%04d.png", prefix, k+1) || fileSHA(t, filepath.Join(sandbox, pth.(string))) != sums[k] {
					t.Errorf("frame %d: %s / %s", k, pth, sums[k])
				}
			}
			digests = append(digests, sums)
			if i == 0 && sums[0] == sums[1] {
				t.Errorf("frames 1 and 2 of a moving cube are identical")
			}
		}
		if !reflect.DeepEqual(digests[0], digests[1]) {
			t.Errorf("two runs differ: %v", digests)
		}
		if s := assertIncrementalMatchesFull(t, p); s.SceneHash != base.SceneHash {
			t.Errorf("scene changed by rendering")
		}

		outside := t.TempDir()
		if err := os.Symlink(filepath.Join(outside, "evil.png"), filepath.Join(sandbox, "link_0002.png")); err != nil {
			t.Fatal(err)
		}
		small := map[string]any{"output_prefix": "link", "frame_start": 1, "frame_end": 2, "resolution": []any{16, 16}, "samples": 1}
		wantToolError(t, p, "render.animation", small, CodePolicyRefused)
		if _, err := os.Stat(filepath.Join(outside, "evil.png")); err == nil {
			t.Error("render.animation escaped the sandbox through a symlink")
		}
		if _, err := os.Stat(filepath.Join(sandbox, "link_0001.png")); err == nil {
			t.Error("a refused render.animation left a frame behind")
		}
		for _, bad := range []string{"../x", "/tmp/x", "a/b", `a\b`, "..", "."} {
			wantToolError(t, p, "render.animation", map[string]any{"output_prefix": bad, "frame_start": 1, "frame_end": 1}, CodePolicyRefused)
		}
		for _, bad := range []string{"", strings.Repeat("x", 129), strings.Repeat("é", 120), "a\nb"} {
			wantToolError(t, p, "render.animation", map[string]any{"output_prefix": bad, "frame_start": 1, "frame_end": 1}, CodeInvalidInput)
		}
		wantToolError(t, p, "render.animation", map[string]any{"output_prefix": "x", "frame_start": 1, "frame_end": 501}, CodeInvalidInput)
		wantToolError(t, p, "render.animation", map[string]any{"output_prefix": "x", "frame_start": 3, "frame_end": 2}, CodeInvalidInput)
		wantToolError(t, p, "render.animation", map[string]any{"output_prefix": "x", "frame_start": 1, "frame_end": 1, "samples": 0}, CodeInvalidInput)
	})
}

// TestMediaImportExport: export leaves the scene alone and is deterministic
// (every format); export -> import round trips for glTF and OBJ; import undo
// removes everything it created; sandbox and reference refusals (USD:
// text layers only, their references checked through every layer).
func TestMediaImportExport(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p, sandbox := startInSandbox(t, rt)
		mustExecute(t, p, "object.create", map[string]any{"type": "monkey", "name": "Suzanne", "location": []any{1, 0, 0}})
		mustExecute(t, p, "keyframe.insert", map[string]any{"object": "Suzanne", "data_path": "location", "frame": 1})
		mustExecute(t, p, "keyframe.insert", map[string]any{"object": "Suzanne", "data_path": "location", "frame": 5, "value": []any{0, 0, 2}})
		mustExecute(t, p, "text.create", map[string]any{"name": "Label", "body": "Hi"})
		base := assertIncrementalMatchesFull(t, p)

		formats := map[string]string{"obj": "rt.obj", "gltf": "rt.glb", "fbx": "rt.fbx", "usd": "rt.usda"}
		hasUSD := false
		for _, f := range []string{"obj", "gltf", "fbx", "usd"} {
			out, err := p.Execute(callCtx(t), Call{Tool: "scene.export", Args: map[string]any{"format": f, "output": formats[f]}})
			if err != nil {
				// Debian's 3.4: no USD (and no glTF where numpy is missing).
				if isCode(err, CodeCapabilityMissing) && rt.Kind == RuntimeBinary && (f == "usd" || f == "gltf") {
					t.Logf("%s: %v", f, err)
					wantToolError(t, p, "scene.import", map[string]any{"format": f, "input": "none." + strings.Split(formats[f], ".")[1]}, CodeCapabilityMissing)
					continue
				}
				t.Fatalf("export %s: %v", f, err)
			}
			hasUSD = hasUSD || f == "usd"
			if out.Mutated || out.Undo != nil || out.SceneHashAfter != base.SceneHash {
				t.Errorf("export %s changed the scene: %+v", f, out)
			}
			if out.Fields()["path"] != formats[f] || fileSHA(t, filepath.Join(sandbox, formats[f])) != out.Fields()["sha256"] || out.Fields()["bytes"].(float64) < 100 {
				t.Errorf("export %s result %v", f, out.Fields())
			}
			assertIncrementalMatchesFull(t, p)
			again := mustExecute(t, p, "scene.export", map[string]any{"format": f, "output": formats[f]})
			if again.Fields()["sha256"] != out.Fields()["sha256"] {
				t.Errorf("export %s twice: different bytes", f)
			}
			imp := mediaStep(t, p, "scene.import", map[string]any{"format": f, "input": formats[f]})
			// What it read, for a control plane that replays it elsewhere:
			// the file and the material library the OBJ names.
			want := map[string]any{formats[f]: fileSHA(t, filepath.Join(sandbox, formats[f]))}
			if mtl := filepath.Join(sandbox, "rt.mtl"); f == "obj" {
				want["rt.mtl"] = fileSHA(t, mtl)
			}
			if read := imp.Fields()["files_read"]; !reflect.DeepEqual(read, want) {
				t.Errorf("import %s files_read %v, want %v", f, read, want)
			}
			objs := fmt.Sprint(imp.Fields()["objects"])
			if !strings.Contains(objs, "Suzanne.001") || !strings.Contains(objs, "Label.001") {
				t.Errorf("import %s objects %s", f, objs)
			}
			mustUndo(t, p, imp, Call{})
			if s := assertIncrementalMatchesFull(t, p); s.SceneHash != base.SceneHash {
				t.Fatalf("after undoing import %s: %s, want %s", f, s.SceneHash, base.SceneHash)
			}
		}
		// Partial failure of an import leaves nothing behind; an undo that
		// fails midway neither.
		mediaInject(t, p, "execute", map[string]any{"tool": "scene.import", "args": map[string]any{"format": "obj", "input": "rt.obj"}, "inject_failure": "scene.import:imported"})
		imp := mustExecute(t, p, "scene.import", map[string]any{"format": "obj", "input": "rt.obj"})
		mediaInject(t, p, "undo", map[string]any{"undo": imp.Undo, "inject_failure": "undo.scene.import:deactivated"})
		mustUndo(t, p, imp, Call{})

		// Refusals.
		wantToolError(t, p, "scene.import", map[string]any{"format": "obj", "input": "missing.obj"}, CodeNotFound)
		wantToolError(t, p, "scene.import", map[string]any{"format": "obj", "input": "rt.fbx"}, CodeInvalidInput)
		wantToolError(t, p, "scene.export", map[string]any{"format": "fbx", "output": "x.obj"}, CodeInvalidInput)
		wantToolError(t, p, "scene.export", map[string]any{"format": "stl", "output": "x.stl"}, CodeInvalidInput)
		for _, bad := range []string{"../x.obj", "/tmp/x.obj", "sub/x.obj", `sub\x.obj`} {
			wantToolError(t, p, "scene.export", map[string]any{"format": "obj", "output": bad}, CodePolicyRefused)
			wantToolError(t, p, "scene.import", map[string]any{"format": "obj", "input": bad}, CodePolicyRefused)
		}
		wantToolError(t, p, "scene.export", map[string]any{"format": "obj", "output": "x.txt"}, CodeInvalidInput)
		wantToolError(t, p, "scene.import", map[string]any{"format": "obj", "input": ""}, CodeInvalidInput)
		outside := t.TempDir()
		data, err := os.ReadFile(filepath.Join(sandbox, "rt.obj"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(outside, "real.obj"), data, 0o600); err != nil {
			t.Fatal(err)
		}
		for link, target := range map[string]string{"in.obj": "real.obj", "out.obj": "evil.obj"} {
			if err := os.Symlink(filepath.Join(outside, target), filepath.Join(sandbox, link)); err != nil {
				t.Fatal(err)
			}
		}
		wantToolError(t, p, "scene.import", map[string]any{"format": "obj", "input": "in.obj"}, CodePolicyRefused)
		wantToolError(t, p, "scene.export", map[string]any{"format": "obj", "output": "out.obj"}, CodePolicyRefused)
		if _, err := os.Stat(filepath.Join(outside, "evil.obj")); err == nil {
			t.Error("export escaped the sandbox through a symlink")
		}
		// A file inside the sandbox that refers to files outside it.
		if err := os.WriteFile(filepath.Join(sandbox, "refs.obj"), []byte("mtllib /etc/passwd\nv 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		wantToolError(t, p, "scene.import", map[string]any{"format": "obj", "input": "refs.obj"}, CodePolicyRefused)
		if err := os.WriteFile(filepath.Join(sandbox, "refs.gltf"), []byte(`{"asset":{"version":"2.0"},"buffers":[{"uri":"../../etc/passwd","byteLength":4}]}`), 0o600); err != nil {
			t.Fatal(err)
		}
		wantToolError(t, p, "scene.import", map[string]any{"format": "gltf", "input": "refs.gltf"}, CodePolicyRefused)
		if hasUSD {
			// USD: every layer text, every asset path in the sandbox, in the
			// layers the file names too. A binary layer may name any file
			// (a crate referring to /etc/... imported its meshes): refused,
			// Blender's own .usdc export included.
			for name, body := range map[string]string{
				"crate.usdc":  "PXR-USDC\x00\x00\x00\x00",
				"inner.usda":  "#usda 1.0\ndef Xform \"X\" (references = @/etc/hosts.usda@) {}\n",
				"outer.usda":  "#usda 1.0\ndef Xform \"X\" (references = @inner.usda@) {}\n",
				"outer2.usda": "#usda 1.0\n(subLayers = [@crate.usdc@])\n",
				"binary.usd":  "PXR-USDC\x00\x00\x00\x00",
			} {
				if err := os.WriteFile(filepath.Join(sandbox, name), []byte(body), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			for _, name := range []string{"crate.usdc", "outer.usda", "outer2.usda", "binary.usd"} {
				wantToolError(t, p, "scene.import", map[string]any{"format": "usd", "input": name}, CodePolicyRefused)
			}
			mustExecute(t, p, "scene.export", map[string]any{"format": "usd", "output": "own.usdc"})
			wantToolError(t, p, "scene.import", map[string]any{"format": "usd", "input": "own.usdc"}, CodePolicyRefused)
		}
		if err := os.WriteFile(filepath.Join(sandbox, "junk.obj"), []byte("this is not\x00an obj"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Execute(callCtx(t), Call{Tool: "scene.import", Args: map[string]any{"format": "obj", "input": "junk.obj"}}); err != nil && !isCode(err, CodeInvalidInput) {
			t.Errorf("junk import: %v", err)
		}
		if s := assertIncrementalMatchesFull(t, p); s.SceneHash != base.SceneHash {
			t.Logf("junk.obj imported as an empty object set")
		}
	})
}

// TestMediaSpecialTools: ui.highlight needs a UI; python.exec runs code,
// returns result and stdout, keeps the hash right, refuses failures.
func TestMediaSpecialTools(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		wantToolError(t, p, "ui.highlight", map[string]any{"name": "Camera"}, CodeCapabilityMissing)
		wantToolError(t, p, "ui.highlight", map[string]any{"name": "Nope"}, CodeCapabilityMissing)
		wantToolError(t, p, "ui.highlight", map[string]any{}, CodeInvalidInput)

		out := mustExecute(t, p, "python.exec", map[string]any{"code": "print('hi')\nresult = sorted(o.name for o in bpy.data.objects)"})
		if fmt.Sprintf("%v|%v", out.Fields()["result"], out.Fields()["stdout"]) != "[Camera Light]|hi\n" || out.Mutated || out.Undo != nil {
			t.Errorf("python.exec = %+v", out)
		}
		out = mustExecute(t, p, "python.exec", map[string]any{"code": "bpy.data.objects['Light'].location.x = 42\nbpy.data.lights['Light'].energy = 5"})
		if !out.Mutated || out.Fields()["result"] != nil {
			t.Errorf("python.exec mutation = %+v", out)
		}
		s := assertIncrementalMatchesFull(t, p)
		if record(t, s, "lights", "Light")["energy"] != 5.0 {
			t.Errorf("light record %v", record(t, s, "lights", "Light"))
		}
		for _, code := range []string{"raise ValueError('boom\\nsecond line')", "def (:", "import sys; sys.exit(2)", "result = float('nan')", "result = object()"} {
			te := wantToolError(t, p, "python.exec", map[string]any{"code": code}, CodeInvalidInput)
			if strings.Contains(te.Message, "\n") || strings.Contains(te.Message, "Traceback") {
				t.Errorf("python.exec error message %q", te.Message)
			}
		}
		wantToolError(t, p, "python.exec", map[string]any{"code": strings.Repeat("#", 65537)}, CodeInvalidInput)
		wantToolError(t, p, "python.exec", map[string]any{}, CodeInvalidInput)
		// Code that changes the scene and then fails: the hash stays honest.
		_, err := p.Execute(callCtx(t), Call{Tool: "python.exec", Args: map[string]any{"code": "bpy.data.lights['Light'].energy = 7\nraise RuntimeError('late')"}})
		if !isCode(err, CodeInternalError) {
			t.Errorf("changing then failing python.exec = %v, want internal_error", err)
		}
		s = assertIncrementalMatchesFull(t, p)
		if record(t, s, "lights", "Light")["energy"] != 7.0 {
			t.Errorf("light record %v", record(t, s, "lights", "Light"))
		}
		// The process still serves calls.
		mustExecute(t, p, "scene.get_summary", nil)
	})
}

// TestFrameRangeInSchema: the bridge's own schema check refuses what the
// registry's "x-span" says (a range backwards, render.animation's over 500
// frames), naming the range's end, before the tool runs; a range with an
// end from the scene is the tool's to check.
func TestFrameRangeInSchema(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		for _, c := range []struct {
			tool string
			args map[string]any
			want string
		}{
			{"render.animation", map[string]any{"output_prefix": "f", "frame_start": 20, "frame_end": 10}, "args.frame_end: frame_end 10 is before frame_start 20"},
			{"render.animation", map[string]any{"output_prefix": "f", "frame_start": 1, "frame_end": 501}, "args.frame_end: frame_start 1 to frame_end 501 is 501 frames, at most 500"},
			{"render.settings", map[string]any{"frame_start": 20, "frame_end": 10}, "args.frame_end: frame_end 10 is before frame_start 20"},
			{"render.settings", map[string]any{"frame_start": 400}, "frame_start 400 is after frame_end 250"}, // the scene's end
		} {
			if te := wantToolError(t, p, c.tool, c.args, CodeInvalidInput); !strings.Contains(te.Message, c.want) {
				t.Errorf("%s %v: %q, want %q", c.tool, c.args, te.Message, c.want)
			}
		}
	})
}

// TestExportSeparateGLTF: a glTF export to a .gltf name writes the JSON and
// its .bin on both Blenders. On 4.5, whose exporter makes its formats when
// it runs, the format was dropped as unknown: it wrote its default, a .glb,
// and the call failed.
func TestExportSeparateGLTF(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p, sandbox := startInSandbox(t, rt)
		mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": "Box"})
		out, err := p.Execute(callCtx(t), Call{Tool: "scene.export", Args: map[string]any{"format": "gltf", "output": "box.gltf"}})
		if isCode(err, CodeCapabilityMissing) && rt.Kind == RuntimeBinary {
			t.Skipf("this Blender has no glTF exporter: %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(filepath.Join(sandbox, "box.gltf"))
		if fmt.Sprint(out.Fields()["files"]) != "[box.gltf box.bin]" || err != nil || !bytes.HasPrefix(bytes.TrimSpace(raw), []byte("{")) {
			t.Fatalf("export to box.gltf: files %v, box.gltf %.20q (%v)", out.Fields()["files"], raw, err)
		}
		if _, err := os.Stat(filepath.Join(sandbox, "box.glb")); err == nil {
			t.Error("a .glb beside the .gltf")
		}
		// Its meshes as modified, as the other formats write them (the
		// exporter's default left the modifiers out; found by QA).
		positions := func() float64 {
			t.Helper()
			mustExecute(t, p, "scene.export", map[string]any{"output": "box.gltf"})
			var doc struct {
				Meshes []struct {
					Primitives []struct {
						Attributes map[string]int `json:"attributes"`
					} `json:"primitives"`
				} `json:"meshes"`
				Accessors []map[string]any `json:"accessors"`
			}
			raw, _ := os.ReadFile(filepath.Join(sandbox, "box.gltf"))
			if err := json.Unmarshal(raw, &doc); err != nil || len(doc.Meshes) != 1 {
				t.Fatalf("box.gltf: %v", err)
			}
			return doc.Accessors[doc.Meshes[0].Primitives[0].Attributes["POSITION"]]["count"].(float64)
		}
		plain := positions()
		mustExecute(t, p, "modifier.add", map[string]any{"object": "Box", "type": "subdivision", "levels": 2})
		if subdivided := positions(); subdivided <= plain {
			t.Errorf("the .gltf of a subdivided cube has %v vertices, the plain cube's %v: the modifier was left out", subdivided, plain)
		}
	})
}

// TestImportErrorSaysWhy: an importer written in Python that fails raises
// a RuntimeError whose first line is "Error: Python: Traceback (most recent
// call last):"; the error names the exception the traceback ends with, which
// says what is wrong with the file.
func TestImportErrorSaysWhy(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p, sandbox := startInSandbox(t, rt)
		writeFile(t, filepath.Join(sandbox, "badidx.gltf"), `{"asset":{"version":"2.0"},"scenes":[{"nodes":[5]}],"scene":0}`)
		_, err := p.Execute(callCtx(t), Call{Tool: "scene.import", Args: map[string]any{"format": "gltf", "input": "badidx.gltf"}})
		if isCode(err, CodeCapabilityMissing) && rt.Kind == RuntimeBinary {
			t.Skipf("this Blender has no glTF importer: %v", err)
		}
		var te *ToolError
		if !errors.As(err, &te) || te.Code != CodeInvalidInput || strings.Contains(te.Message, "Traceback") ||
			!regexp.MustCompile(`could not import 'badidx.gltf': \w+Error: `).MatchString(te.Message) {
			t.Fatalf("import of a glTF naming a node it lacks: %v", err)
		}
	})
}
