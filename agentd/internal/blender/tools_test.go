package blender

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSceneSummary(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		out := mustExecute(t, p, "scene.get_summary", nil)
		if out.Mutated || out.SceneHashBefore != out.SceneHashAfter {
			t.Errorf("read-only tool mutated the scene: %+v", out)
		}
		got := fmt.Sprint(out.Fields())
		want := "map[active_object:<nil> object_count:2 objects:[map[name:Camera type:CAMERA] map[name:Light type:LIGHT]]]"
		if got != want {
			t.Errorf("summary = %s, want %s", got, want)
		}
		wantToolError(t, p, "scene.get_summary", map[string]any{"extra": 1}, CodeInvalidInput)
	})
}

func TestObjectCreate(t *testing.T) {
	wantVerts := map[string]float64{
		"cube": 8, "uv_sphere": 482, "ico_sphere": 42, "plane": 4,
		"cylinder": 64, "cone": 33, "torus": 576, "monkey": 507,
	}
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		for typ, verts := range wantVerts {
			out := mustExecute(t, p, "object.create", map[string]any{"type": typ})
			if !out.Mutated || out.SceneHashBefore == out.SceneHashAfter {
				t.Errorf("create %s: not mutated: %+v", typ, out)
			}
			if out.Fields()["vertices"] != verts {
				t.Errorf("create %s: vertices = %v, want %v", typ, out.Fields()["vertices"], verts)
			}
		}
		out := mustExecute(t, p, "object.create", map[string]any{
			"type": "cube", "name": "Box", "location": []any{1, 2, 3},
			"rotation_euler": []any{0, 0, 1.5}, "scale": []any{1, 1, 2}, "size": 0.5,
		})
		if out.Fields()["name"] != "Box" || out.Fields()["type"] != "cube" {
			t.Errorf("result = %v", out.Fields())
		}
		// Default names follow Blender's: Cube, Cube.001, ...
		out = mustExecute(t, p, "object.create", map[string]any{"type": "cube"})
		if out.Fields()["name"] != "Cube.001" {
			t.Errorf("second default cube named %v", out.Fields()["name"])
		}
		summary := mustExecute(t, p, "scene.get_summary", nil)
		if summary.Fields()["active_object"] != "Cube.001" || summary.Fields()["object_count"] != float64(2+len(wantVerts)+2) {
			t.Errorf("summary = %v", summary.Fields())
		}
		s := assertIncrementalMatchesFull(t, p)
		box := s.State["objects"].(map[string]any)["Box"].(map[string]any)
		if fmt.Sprint(box["location"], box["rotation_euler"], box["scale"], box["collections"]) != "[1 2 3] [0 0 1.5] [1 1 2] [<scene>:Scene]" {
			t.Errorf("Box record = %v", box)
		}

		wantToolError(t, p, "object.create", map[string]any{"type": "cube", "name": "Box"}, CodeConflict)
		wantToolError(t, p, "object.create", map[string]any{"type": "cube", "name": "Camera"}, CodeConflict)
		wantToolError(t, p, "object.create", map[string]any{"type": "pyramid"}, CodeInvalidInput)
		wantToolError(t, p, "object.create", map[string]any{}, CodeInvalidInput)
		wantToolError(t, p, "object.create", map[string]any{"type": "cube", "size": 0}, CodeInvalidInput)
		wantToolError(t, p, "object.create", map[string]any{"type": "cube", "size": "big"}, CodeInvalidInput)
		wantToolError(t, p, "object.create", map[string]any{"type": "cube", "location": []any{1, 2}}, CodeInvalidInput)
		wantToolError(t, p, "object.create", map[string]any{"type": "cube", "location": []any{1, 2, "x"}}, CodeInvalidInput)
		wantToolError(t, p, "object.create", map[string]any{"type": "cube", "name": strings.Repeat("é", 40)}, CodeInvalidInput)
		wantToolError(t, p, "object.create", map[string]any{"type": "cube", "colour": "red"}, CodeInvalidInput)
		wantToolError(t, p, "no.such_tool", nil, CodeNotFound)
	})
}

func TestObjectDelete(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		base := mustExecute(t, p, "scene.get_summary", nil).SceneHashAfter
		created := mustExecute(t, p, "object.create", map[string]any{"type": "monkey", "name": "M"})
		del := mustExecute(t, p, "object.delete", map[string]any{"name": "M"})
		if del.SceneHashBefore != created.SceneHashAfter || !del.Mutated {
			t.Errorf("delete outcome %+v", del)
		}
		if del.Fields()["removed_data"] != "M" {
			t.Errorf("mesh not removed: %v", del.Fields())
		}
		// Creating and deleting returns to the same state, so the same hash.
		if del.SceneHashAfter != base {
			t.Errorf("hash after create+delete = %s, want baseline %s", del.SceneHashAfter, base)
		}
		wantToolError(t, p, "object.delete", map[string]any{"name": "M"}, CodeNotFound)
		wantToolError(t, p, "object.delete", map[string]any{}, CodeInvalidInput)
		wantToolError(t, p, "object.delete", map[string]any{"name": 7}, CodeInvalidInput)

		mustExecute(t, p, "object.delete", map[string]any{"name": "Camera"})
		s := assertIncrementalMatchesFull(t, p)
		if len(s.State["cameras"].(map[string]any)) != 0 {
			t.Errorf("camera data left behind: %v", s.State["cameras"])
		}
		wantToolError(t, p, "render.still", map[string]any{"output": "x.png", "resolution": []any{16, 16}, "samples": 1}, CodeConflict)
	})
}

func TestObjectSetTransform(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		out := mustExecute(t, p, "object.set_transform", map[string]any{"name": "Light", "location": []any{1.5, -2, 0.000001}})
		if fmt.Sprint(out.Fields()["location"], out.Fields()["scale"]) != "[1.5 -2 0] [1 1 1]" || !out.Mutated {
			t.Errorf("result = %v", out.Fields())
		}
		// Rounding to 1e-5 means a sub-tolerance move does not change the hash.
		again := mustExecute(t, p, "object.set_transform", map[string]any{"name": "Light", "location": []any{1.5, -2, 0.000002}})
		if again.Mutated {
			t.Errorf("sub-tolerance move changed the hash")
		}
		wantToolError(t, p, "object.set_transform", map[string]any{"name": "Nope", "location": []any{0, 0, 0}}, CodeNotFound)
		wantToolError(t, p, "object.set_transform", map[string]any{"name": "Light"}, CodeInvalidInput)
		wantToolError(t, p, "object.set_transform", map[string]any{"name": "Light", "scale": []any{1, 1}}, CodeInvalidInput)
		wantToolError(t, p, "object.set_transform", map[string]any{"name": "Light", "scale": []any{1, 1, 1}, "location": true}, CodeInvalidInput)
		assertIncrementalMatchesFull(t, p)
	})
}

func TestRenderStill(t *testing.T) {
	var digests []string
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		var perRuntime []string
		for i := 0; i < 2; i++ { // two fresh processes
			p, sandbox := startInSandbox(t, rt)
			mustExecute(t, p, "object.create", map[string]any{"type": "monkey"})
			args := map[string]any{"output": "frame_1.png", "resolution": []any{64, 48}, "samples": 4, "seed": 7}
			out := mustExecute(t, p, "render.still", args)
			if out.Mutated || out.SceneHashBefore != out.SceneHashAfter {
				t.Errorf("render changed the scene: %+v", out)
			}
			path := out.Fields()["path"].(string)
			if path != "frame_1.png" {
				t.Errorf("result path %q, want the file's plain name", path)
			}
			b, err := os.ReadFile(filepath.Join(sandbox, path))
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(b)
			if hex.EncodeToString(sum[:]) != out.Fields()["sha256"] {
				t.Errorf("sha256 mismatch for %s", path)
			}
			if fmt.Sprint(out.Fields()["seed"], out.Fields()["samples"], out.Fields()["resolution"]) != "7 4 [64 48]" {
				t.Errorf("result = %v", out.Fields())
			}
			if i == 0 {
				sandboxRefusals(t, p, sandbox)
			}
			assertIncrementalMatchesFull(t, p)
			perRuntime = append(perRuntime, out.Fields()["sha256"].(string))
		}
		if perRuntime[0] != perRuntime[1] {
			t.Fatalf("same seed, different bytes across processes: %v", perRuntime)
		}
		digests = append(digests, perRuntime[0])
	})
	if len(digests) == 2 && digests[0] != digests[1] {
		t.Logf("render bytes differ between Blender versions (expected: different Cycles builds): %v", digests)
	}
}

func sandboxRefusals(t *testing.T, p *Process, sandbox string) {
	t.Helper()
	outside := t.TempDir()
	if err := os.Symlink(filepath.Join(outside, "evil.png"), filepath.Join(sandbox, "link.png")); err != nil {
		t.Fatal(err)
	}
	small := func(out string) map[string]any {
		return map[string]any{"output": out, "resolution": []any{16, 16}, "samples": 1}
	}
	wantToolError(t, p, "render.still", small("link.png"), CodePolicyRefused)
	if _, err := os.Stat(filepath.Join(outside, "evil.png")); err == nil {
		t.Error("render escaped the sandbox through a symlink")
	}
	// Names that leave the sandbox pass the schema (it checks only the
	// extension and control characters) and meet the path gate: policy_refused.
	for _, bad := range []string{"../escape.png", "/tmp/abs.png", "sub/dir.png", `..\escape.png`} {
		wantToolError(t, p, "render.still", small(bad), CodePolicyRefused)
	}
	for _, bad := range []string{"x.jpg", "", ".png.jpg", strings.Repeat("x", 130) + ".png", "nul\x00.png", "tab\t.png", "x.png\n", "del\x7f.png", strings.Repeat("é", 127) + ".png"} {
		wantToolError(t, p, "render.still", small(bad), CodeInvalidInput)
	}
	wantToolError(t, p, "render.still", map[string]any{"output": "a.png", "resolution": []any{8, 16}}, CodeInvalidInput)
	wantToolError(t, p, "render.still", map[string]any{"output": "a.png", "samples": 0}, CodeInvalidInput)
	wantToolError(t, p, "render.still", map[string]any{"output": "a.png", "seed": -1}, CodeInvalidInput)
	wantToolError(t, p, "render.still", map[string]any{"output": "a.png", "samples": 1.5}, CodeInvalidInput)
}

// TestIncrementalHashMatchesFull runs a seeded random sequence of operations,
// including failing ones, and holds the running hash equal to a recomputation.
func TestIncrementalHashMatchesFull(t *testing.T) {
	finals := map[RuntimeKind]string{}
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		rng := rand.New(rand.NewSource(42))
		types := []string{"cube", "uv_sphere", "ico_sphere", "plane", "cylinder", "cone", "torus", "monkey"}
		names := []string{"Camera", "Light"}
		vec := func() []any { return []any{rng.Float64()*10 - 5, rng.Float64()*10 - 5, rng.Float64()*10 - 5} }
		for i := 0; i < 60; i++ {
			var tool string
			var args map[string]any
			switch op := rng.Intn(10); {
			case op < 5:
				tool, args = "object.create", map[string]any{"type": types[rng.Intn(len(types))], "location": vec()}
				if rng.Intn(3) == 0 && len(names) > 0 {
					args["name"] = names[rng.Intn(len(names))] // conflict
				}
			case op < 7 && len(names) > 0:
				tool, args = "object.set_transform", map[string]any{"name": names[rng.Intn(len(names))], "rotation_euler": vec(), "scale": []any{1, 2, 3}}
			case op < 8 && len(names) > 0:
				tool, args = "object.delete", map[string]any{"name": names[rng.Intn(len(names))]}
			default:
				tool, args = "object.delete", map[string]any{"name": "Missing"}
			}
			out, err := p.Execute(callCtx(t), Call{Tool: tool, Args: args})
			if err == nil {
				switch tool {
				case "object.create":
					names = append(names, out.Fields()["name"].(string))
				case "object.delete":
					for j, n := range names {
						if n == args["name"] {
							names = append(names[:j], names[j+1:]...)
							break
						}
					}
				}
			} else if _, ok := err.(*ToolError); !ok {
				t.Fatalf("op %d %s: %v", i, tool, err)
			}
			if i%10 == 9 {
				assertIncrementalMatchesFull(t, p)
			}
		}
		s := assertIncrementalMatchesFull(t, p)
		t.Logf("%d objects, hash %s", len(s.State["objects"].(map[string]any)), s.SceneHash)
		finals[rt.Kind] = s.SceneHash
	})
	// The same operations give the same scene on Blender 3.4 and 4.5.
	if len(finals) == 2 && finals[RuntimeBPYModule] != finals[RuntimeBinary] {
		t.Errorf("same operations, different scene hash across Blender versions: %v", finals)
	}
}

// TestFailureMidwayRollsBack makes tools fail after partial work (through the
// bridge's inject_failure hook) and checks that nothing of it remains.
func TestFailureMidwayRollsBack(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": "Keep"})
		before := assertIncrementalMatchesFull(t, p)
		cases := []map[string]any{
			{"tool": "object.create", "args": map[string]any{"type": "monkey", "name": "Half"}, "inject_failure": "object.create:linked"},
			{"tool": "object.create", "args": map[string]any{"type": "cube"}, "inject_failure": "object.create:linked"},
			{"tool": "object.set_transform", "args": map[string]any{"name": "Keep", "location": []any{9, 9, 9}, "scale": []any{2, 2, 2}}, "inject_failure": "object.set_transform:scale"},
			{"tool": "object.delete", "args": map[string]any{"name": "Keep"}, "inject_failure": "object.delete:unlinked"},
			{"tool": "object.delete", "args": map[string]any{"name": "Camera"}, "inject_failure": "object.delete:tombstoned", "mutation_id": "m1"},
		}
		for _, c := range cases {
			var te *ToolError
			err := p.call(callCtx(t), "execute", c, nil, nil)
			if !errors.As(err, &te) || te.Code != CodeInternalError || strings.Contains(te.Message, "\n") {
				t.Fatalf("%v: err = %v, want one-line internal_error", c, err)
			}
			after := assertIncrementalMatchesFull(t, p)
			if after.SceneHash != before.SceneHash {
				t.Fatalf("%v left partial work: hash %s, want %s", c, after.SceneHash, before.SceneHash)
			}
		}
		summary := mustExecute(t, p, "scene.get_summary", nil)
		if summary.Fields()["object_count"] != float64(3) || summary.Fields()["active_object"] != "Keep" {
			t.Errorf("summary after rollbacks = %v", summary.Fields())
		}
	})
}

// TestLightTarget: a light created with a target is rotated exactly as
// camera.look_at rotates a camera at the same place toward the same point,
// and camera.look_at refuses to move a light.
func TestLightTarget(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		loc, target := []any{3.0, -4.0, 5.0}, []any{0.5, 0.25, 1.0}
		mustExecute(t, p, "light.create", map[string]any{"name": "L", "type": "area", "location": loc, "target": target})
		mustExecute(t, p, "camera.create", map[string]any{"name": "C", "location": loc})
		cam := mustExecute(t, p, "camera.look_at", map[string]any{"name": "C", "target": target})
		snap := assertIncrementalMatchesFull(t, p)
		l, c := record(t, snap, "objects", "L"), record(t, snap, "objects", "C")
		if l["rotation_euler"] == nil || fmt.Sprint(l["rotation_euler"]) != fmt.Sprint(c["rotation_euler"]) {
			t.Fatalf("light rotation %v, camera aimed at the same point %v", l["rotation_euler"], c["rotation_euler"])
		}
		wantToolError(t, p, "camera.look_at", map[string]any{"name": "L", "target": []any{0, 0, 0}}, CodeInvalidInput)
		if h := assertIncrementalMatchesFull(t, p).SceneHash; h != cam.SceneHashAfter {
			t.Fatalf("scene hash %s after a refused look_at, %s before", h, cam.SceneHashAfter)
		}
	})
}
