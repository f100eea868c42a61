package blender

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"sort"
	"strings"
	"testing"
)

// Scene-building tools: objects (duplicate, rename, set_parent, select),
// modifiers, materials, lights, cameras, collections.
func init() {
	det, comp, hs, v := DeterminismDeterministic, RollbackCompensation, SafetyModeHeadlessSafe, ">=3.4"
	for name, idem := range map[string]string{
		"object.duplicate":  IdempotenceKeyed,
		"object.rename":     IdempotenceKeyed,
		"object.set_parent": IdempotenceIdempotent,
		"object.select":     IdempotenceIdempotent,
		"modifier.add":      IdempotenceKeyed,
		"modifier.remove":   IdempotenceKeyed,
		"material.create":   IdempotenceKeyed,
		"material.assign":   IdempotenceIdempotent,
		"light.create":      IdempotenceKeyed,
		"camera.create":     IdempotenceKeyed,
		"camera.set_active": IdempotenceIdempotent,
		"camera.look_at":    IdempotenceIdempotent,
		"collection.create": IdempotenceKeyed,
		"collection.link":   IdempotenceIdempotent,
	} {
		wantToolClasses[name] = [5]string{det, comp, idem, hs, v}
	}
}

type sceneStep struct {
	tool   string
	args   map[string]any
	code   string // expected error code; "" for success
	inject string // for a success step: first fail at this checkpoint (rollback test)
}

func sceneOK(tool string, args map[string]any) sceneStep { return sceneStep{tool: tool, args: args} }
func sceneOKInject(tool, label string, args map[string]any) sceneStep {
	return sceneStep{tool: tool, args: args, inject: label}
}
func sceneRefuse(code, tool string, args map[string]any) sceneStep {
	return sceneStep{tool: tool, args: args, code: code}
}

type kv = map[string]any

// sceneSteps is the fixed sequence run on both runtimes: every tool's
// success, its refusals and an injected failure midway for each.
func sceneSteps() []sceneStep {
	return []sceneStep{
		sceneOK("object.create", kv{"type": "cube", "name": "Box"}),
		sceneOK("object.create", kv{"type": "plane", "name": "Floor", "size": 10}),

		// object.duplicate
		sceneOKInject("object.duplicate", "object.duplicate:linked", kv{"name": "Box", "new_name": "Box2", "location": []any{3, 0, 0}}),
		sceneOK("object.duplicate", kv{"name": "Box", "new_name": "BoxL", "linked": true}),
		sceneOK("object.duplicate", kv{"name": "Light", "new_name": "Fill"}),
		sceneRefuse(CodeConflict, "object.duplicate", kv{"name": "Box", "new_name": "Box2"}),
		sceneRefuse(CodeNotFound, "object.duplicate", kv{"name": "Nope", "new_name": "X"}),
		sceneRefuse(CodeInvalidInput, "object.duplicate", kv{"name": "Box", "new_name": "__bp_x"}),
		sceneRefuse(CodeInvalidInput, "object.duplicate", kv{"name": "Box"}),

		// object.rename
		sceneOKInject("object.rename", "object.rename:renamed", kv{"name": "Box2", "new_name": "Crate"}),
		sceneOK("object.rename", kv{"name": "Camera", "new_name": "MainCam"}), // the scene camera follows
		sceneRefuse(CodeConflict, "object.rename", kv{"name": "Crate", "new_name": "Box"}),
		sceneRefuse(CodeNotFound, "object.rename", kv{"name": "Box2", "new_name": "Y"}),
		sceneRefuse(CodeInvalidInput, "object.rename", kv{"name": "Crate", "new_name": ""}),

		// object.set_transform then parenting with and without keep_transform
		sceneOK("object.set_transform", kv{"name": "Box", "location": []any{1, 2, 3}, "rotation_euler": []any{0.1, 0.2, 0.3}, "scale": []any{2, 2, 2}}),
		sceneOKInject("object.set_parent", "object.set_parent:set", kv{"name": "Crate", "parent": "Box"}),
		sceneOK("object.set_parent", kv{"name": "Crate", "parent": "Fill"}), // re-parent, keeps world
		sceneOK("object.set_parent", kv{"name": "BoxL", "parent": "Box", "keep_transform": false}),
		sceneOK("object.set_parent", kv{"name": "Crate", "parent": nil}),
		sceneRefuse(CodeConflict, "object.set_parent", kv{"name": "Box", "parent": "BoxL"}), // cycle
		sceneRefuse(CodeConflict, "object.set_parent", kv{"name": "Box", "parent": "Box"}),
		sceneRefuse(CodeNotFound, "object.set_parent", kv{"name": "Box", "parent": "Nope"}),
		sceneRefuse(CodeNotFound, "object.set_parent", kv{"name": "Nope", "parent": nil}),
		sceneRefuse(CodeInvalidInput, "object.set_parent", kv{"name": "Box"}),
		sceneRefuse(CodeInvalidInput, "object.set_parent", kv{"name": "Box", "parent": 3}),

		// object.select
		sceneOKInject("object.select", "object.select:selected", kv{"names": []any{"Box", "Crate"}, "active": "Crate"}),
		sceneOK("object.select", kv{"names": []any{}}),
		sceneRefuse(CodeNotFound, "object.select", kv{"names": []any{"Box", "Nope"}}),
		sceneRefuse(CodeNotFound, "object.select", kv{"names": []any{}, "active": "Nope"}),
		sceneRefuse(CodeInvalidInput, "object.select", kv{"names": "Box"}),

		// modifier.add / modifier.remove
		sceneOKInject("modifier.add", "modifier.add:added", kv{"object": "Box", "type": "bevel", "width": 0.05, "segments": 3}),
		sceneOK("modifier.add", kv{"object": "Box", "type": "array", "count": 3, "relative_offset": []any{0, 1.5, 0}}),
		sceneOK("modifier.add", kv{"object": "Box", "type": "mirror", "axis": "y", "name": "MirrorY"}),
		sceneOK("modifier.add", kv{"object": "Box", "type": "subdivision", "levels": 2}),
		sceneOK("modifier.add", kv{"object": "Box", "type": "solidify", "thickness": 0.02}),
		sceneOK("modifier.add", kv{"object": "Box", "type": "bevel"}), // Bevel.001
		sceneRefuse(CodeConflict, "modifier.add", kv{"object": "Box", "type": "bevel", "name": "MirrorY"}),
		sceneRefuse(CodeInvalidInput, "modifier.add", kv{"object": "Box", "type": "solidify", "levels": 2}),
		sceneRefuse(CodeInvalidInput, "modifier.add", kv{"object": "Box", "type": "mirror", "count": 2}),
		sceneRefuse(CodeInvalidInput, "modifier.add", kv{"object": "Light", "type": "bevel"}),
		sceneRefuse(CodeInvalidInput, "modifier.add", kv{"object": "Box", "type": "remesh"}),
		sceneRefuse(CodeInvalidInput, "modifier.add", kv{"object": "Box", "type": "subdivision", "levels": 7}),
		sceneRefuse(CodeNotFound, "modifier.add", kv{"object": "Nope", "type": "bevel"}),
		sceneOKInject("modifier.remove", "modifier.remove:removed", kv{"object": "Box", "name": "Array"}), // from the middle
		sceneRefuse(CodeNotFound, "modifier.remove", kv{"object": "Box", "name": "Array"}),
		sceneRefuse(CodeNotFound, "modifier.remove", kv{"object": "Nope", "name": "Bevel"}),

		// material.create / material.assign
		sceneOKInject("material.create", "material.create:created", kv{"name": "Red", "base_color": []any{1, 0, 0, 1}, "metallic": 0.5, "roughness": 0.25, "emission_color": []any{1, 0.5, 0}, "emission_strength": 2}),
		sceneOK("material.create", kv{"name": "Grey"}),
		sceneRefuse(CodeConflict, "material.create", kv{"name": "Red"}),
		sceneRefuse(CodeInvalidInput, "material.create", kv{"name": "Bad", "base_color": []any{1, 0, 0}}),
		sceneRefuse(CodeInvalidInput, "material.create", kv{"name": "Bad", "roughness": 1.5}),
		sceneOKInject("material.assign", "material.assign:assigned", kv{"object": "Box", "material": "Red", "slot": 2}), // grows the shared mesh: BoxL too
		sceneOK("material.assign", kv{"object": "Box", "material": "Grey"}),
		sceneOK("material.assign", kv{"object": "Floor", "material": "Grey"}),
		sceneRefuse(CodeNotFound, "material.assign", kv{"object": "Box", "material": "Nope"}),
		sceneRefuse(CodeNotFound, "material.assign", kv{"object": "Nope", "material": "Red"}),
		sceneRefuse(CodeInvalidInput, "material.assign", kv{"object": "Light", "material": "Red"}),
		sceneRefuse(CodeInvalidInput, "material.assign", kv{"object": "Box", "material": "Red", "slot": 32}),

		// light.create
		sceneOKInject("light.create", "light.create:linked", kv{"name": "Key", "type": "area", "energy": 500, "size": 2, "color": []any{1, 0.9, 0.8}, "location": []any{4, -4, 6}}),
		sceneOK("light.create", kv{"name": "Sun", "type": "sun", "energy": 3, "rotation_euler": []any{0.5, 0, 0}}),
		sceneOK("light.create", kv{"name": "Spot", "type": "spot", "size": 0.3}),
		sceneOK("light.create", kv{"name": "Bulb"}),
		sceneRefuse(CodeConflict, "light.create", kv{"name": "Box"}),
		sceneRefuse(CodeInvalidInput, "light.create", kv{"name": "S2", "type": "sun", "size": 1}),
		sceneRefuse(CodeInvalidInput, "light.create", kv{"name": "S2", "type": "laser"}),
		sceneRefuse(CodeInvalidInput, "light.create", kv{"name": "S2", "size": 0}),
		sceneRefuse(CodeInvalidInput, "light.create", kv{"name": "S2", "energy": -1}),
		sceneOK("light.create", kv{"name": "Aimed", "type": "spot", "location": []any{0, -5, 5}, "target": "Box"}),
		sceneRefuse(CodeInvalidInput, "light.create", kv{"name": "S2", "target": "Box", "rotation_euler": []any{0, 0, 0}}),
		sceneRefuse(CodeNotFound, "light.create", kv{"name": "S2", "target": "Nope"}),
		sceneRefuse(CodeConflict, "light.create", kv{"name": "S2", "location": []any{1, 2, 3}, "target": []any{1, 2, 3}}),

		// camera.create / set_active / look_at
		sceneOKInject("camera.create", "camera.create:linked", kv{"name": "Cam2", "lens": 35, "location": []any{0, -10, 2}, "set_active": true}),
		sceneOK("camera.create", kv{"name": "Cam3", "location": []any{10, 0, 0}}),
		sceneRefuse(CodeConflict, "camera.create", kv{"name": "Box"}),
		sceneRefuse(CodeInvalidInput, "camera.create", kv{"name": "C", "lens": 0.5}),
		sceneOKInject("camera.set_active", "camera.set_active:set", kv{"name": "MainCam"}),
		sceneRefuse(CodeInvalidInput, "camera.set_active", kv{"name": "Box"}),
		sceneRefuse(CodeNotFound, "camera.set_active", kv{"name": "Nope"}),
		sceneOKInject("camera.look_at", "camera.look_at:rotated", kv{"name": "Cam2", "target": "Box"}),
		sceneOK("camera.look_at", kv{"name": "Cam3", "target": []any{0, 0, 0}}),
		// A light is not a camera: it is aimed at creation (light.create's target).
		sceneRefuse(CodeInvalidInput, "camera.look_at", kv{"name": "Key", "target": "Floor"}),
		sceneOK("camera.look_at", kv{"name": "Cam2", "target": []any{0, -10, 12}}),                      // straight up
		sceneRefuse(CodeInvalidInput, "camera.look_at", kv{"name": "Crate", "target": []any{0, 0, 10}}), // a mesh
		sceneRefuse(CodeConflict, "camera.look_at", kv{"name": "Cam3", "target": []any{10, 0, 0}}),
		sceneRefuse(CodeNotFound, "camera.look_at", kv{"name": "Cam3", "target": "Nope"}),
		sceneRefuse(CodeInvalidInput, "camera.look_at", kv{"name": "Cam3", "target": []any{1, 2}}),
		sceneRefuse(CodeInvalidInput, "camera.look_at", kv{"name": "Cam3", "target": 5}),

		// collection.create / collection.link
		sceneOKInject("collection.create", "collection.create:linked", kv{"name": "Props"}),
		sceneOK("collection.create", kv{"name": "Small", "parent": "Props"}),
		sceneRefuse(CodeConflict, "collection.create", kv{"name": "Props"}),
		sceneRefuse(CodeNotFound, "collection.create", kv{"name": "X", "parent": "Nope"}),
		sceneRefuse(CodeInvalidInput, "collection.create", kv{"name": "<scene>:X"}),
		sceneOKInject("collection.link", "collection.link:linked", kv{"object": "Box", "collection": "Small"}),
		sceneOK("collection.link", kv{"object": "Crate", "collection": "Props", "unlink_others": true}),
		sceneOK("object.select", kv{"names": []any{"Fill"}, "active": "Fill"}),
		sceneOK("collection.link", kv{"object": "Fill", "collection": "Props", "unlink_others": true}),
		sceneOK("collection.link", kv{"object": "Fill", "collection": "<scene>:Scene", "unlink_others": true}),
		sceneRefuse(CodeNotFound, "collection.link", kv{"object": "Box", "collection": "Nope"}),
		sceneRefuse(CodeNotFound, "collection.link", kv{"object": "Nope", "collection": "Props"}),

		// Deleting a parent keeps the children's parent inverse for its undo.
		sceneOK("object.delete", kv{"name": "Box"}),
	}
}

// runSceneSteps runs sceneSteps; each success is undone at once (back to
// scene_hash_before exactly) and redone (same hash after); each refusal
// leaves the hash alone; the running hash equals a recomputation after every
// step. It returns the hash after every step.
func runSceneSteps(t *testing.T, p *Process) []string {
	var hashes []string
	for i, s := range sceneSteps() {
		name := fmt.Sprintf("step %d %s %v", i, s.tool, s.args)
		if s.code != "" {
			wantToolError(t, p, s.tool, s.args, s.code)
		} else {
			before, err := p.SceneHash(callCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			if s.inject != "" {
				var te *ToolError
				err := p.call(callCtx(t), "execute", kv{"tool": s.tool, "args": s.args, "inject_failure": s.inject}, nil, nil)
				if !errors.As(err, &te) || te.Code != CodeInternalError {
					t.Fatalf("%s: injected failure at %s = %v, want internal_error", name, s.inject, err)
				}
				if h := assertIncrementalMatchesFull(t, p).SceneHash; h != before {
					t.Fatalf("%s: failure at %s left partial work", name, s.inject)
				}
			}
			c := Call{Tool: s.tool, Args: s.args, RequestID: "test"}
			out := mustExecute(t, p, s.tool, s.args)
			if out.SceneHashBefore != before || out.Undo == nil {
				t.Fatalf("%s: outcome %+v", name, out)
			}
			if s.tool != "object.select" && !out.Mutated {
				t.Errorf("%s: not mutated", name)
			}
			assertIncrementalMatchesFull(t, p)
			mustUndo(t, p, out, c)
			assertIncrementalMatchesFull(t, p)
			again := mustExecute(t, p, s.tool, s.args)
			// (object.delete's record names a fresh tombstone each time.)
			if again.SceneHashAfter != out.SceneHashAfter || (s.tool != "object.delete" && string(again.Undo) != string(out.Undo)) {
				t.Fatalf("%s: redo after undo differs: %s vs %s", name, again.SceneHashAfter, out.SceneHashAfter)
			}
		}
		h, err := p.SceneHash(callCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		hashes = append(hashes, h)
	}
	return hashes
}

func TestSceneBuildingTools(t *testing.T) {
	perRuntime := map[RuntimeKind][]string{}
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		hashes := runSceneSteps(t, p)
		perRuntime[rt.Kind] = hashes
		checkSceneRecords(t, assertIncrementalMatchesFull(t, p))
		// A checkpoint of the scene loads with the same hash in a fresh process.
		assertCheckpointRoundTrip(t, p, rt)
	})
	// The same calls give the same scene hashes on Blender 3.4 and 4.5.
	a, b := perRuntime[RuntimeBPYModule], perRuntime[RuntimeBinary]
	if len(a) > 0 && len(a) == len(b) {
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("step %d %s: scene hash differs across Blender versions: 4.5 %s, 3.4 %s", i, sceneSteps()[i].tool, a[i], b[i])
			}
		}
	}
}

func sceneRecord(t *testing.T, s Snapshot, section, name string) map[string]any {
	t.Helper()
	r, _ := s.State[section].(map[string]any)[name].(map[string]any)
	if r == nil {
		t.Fatalf("no %s record %q", section, name)
	}
	return r
}

func checkSceneRecords(t *testing.T, s Snapshot) {
	t.Helper()
	sc := sceneRecord(t, s, "scenes", "Scene")
	if sc["camera"] != "MainCam" || fmt.Sprint(sc["collection_children"]) != "[Props]" {
		t.Errorf("scene record %v", sc)
	}
	if act := sceneRecord(t, s, "active_objects", "Scene"); act["active_object"] != "Fill" || act["scene"] != "Scene" {
		t.Errorf("active object record %v", act)
	}
	if c := sceneRecord(t, s, "collections", "Props"); fmt.Sprint(c["children"]) != "[Small]" {
		t.Errorf("Props record %v", c)
	}
	crate := sceneRecord(t, s, "objects", "Crate")
	if crate["parent"] != nil || fmt.Sprint(crate["collections"]) != "[Props]" || crate["data"] != "Box2" {
		t.Errorf("Crate record %v", crate)
	}
	// The world position of Crate survived two keep-transform re-parentings.
	if fmt.Sprint(crate["location"]) != "[3 0 0]" {
		t.Errorf("Crate location %v, want [3 0 0]", crate["location"])
	}
	// Box is deleted; BoxL shares its mesh (with Box's slots) and lost its parent.
	boxl := sceneRecord(t, s, "objects", "BoxL")
	if boxl["data"] != "Box" || fmt.Sprint(boxl["materials"]) != "[Grey <nil> Red]" || boxl["parent"] != nil {
		t.Errorf("BoxL record %v", boxl)
	}
	red := sceneRecord(t, s, "materials", "Red")
	if fmt.Sprint(red["principled"]) != "map[base_color:[1 0 0 1] emission_color:[1 0.5 0] emission_strength:2 metallic:0.5 roughness:0.25]" {
		t.Errorf("Red record %v", red)
	}
	if g := sceneRecord(t, s, "materials", "Grey"); fmt.Sprint(g["principled"]) != "map[base_color:[0.8 0.8 0.8 1] emission_color:[0 0 0] emission_strength:0 metallic:0 roughness:0.5]" {
		t.Errorf("Grey record %v", g)
	}
	if k := sceneRecord(t, s, "lights", "Key"); fmt.Sprintf("%v %v %v %v", k["type"], k["energy"], k["area"], k["color"]) != "AREA 500 [SQUARE 2 2] [1 0.9 0.8]" {
		t.Errorf("Key record %v", k)
	}
	if b := sceneRecord(t, s, "lights", "Bulb"); fmt.Sprintf("%v %v %v", b["type"], b["energy"], b["shadow_soft_size"]) != "POINT 1000 0.1" {
		t.Errorf("Bulb record %v", b)
	}
	if c := sceneRecord(t, s, "cameras", "Cam2"); c["lens"] != 35.0 || c["clip_end"] != 1000.0 {
		t.Errorf("Cam2 record %v", c)
	}
	// Cam3 at (10,0,0) looks at the origin: -Z along -X, +Y up.
	if r := sceneRecord(t, s, "objects", "Cam3")["rotation_euler"].([]any); math.Abs(r[0].(float64)-math.Pi/2) > 1e-4 || math.Abs(r[1].(float64)) > 1e-4 || math.Abs(r[2].(float64)-math.Pi/2) > 1e-4 {
		t.Errorf("Cam3 rotation %v, want [pi/2 0 pi/2]", r)
	}
}

// TestSceneToolModifierRecords checks the modifier stack in the object record
// and that removing from the middle and undoing restores the order.
func TestSceneToolModifierRecords(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		mustExecute(t, p, "object.create", kv{"type": "cube", "name": "B"})
		mustExecute(t, p, "modifier.add", kv{"object": "B", "type": "bevel", "width": 0.05, "segments": 3})
		mustExecute(t, p, "modifier.add", kv{"object": "B", "type": "array", "count": 4, "relative_offset": []any{0, 2, 0}})
		mustExecute(t, p, "modifier.add", kv{"object": "B", "type": "subdivision", "levels": 2})
		s := assertIncrementalMatchesFull(t, p)
		mods := sceneRecord(t, s, "objects", "B")["modifiers"].([]any)
		var names []string
		for _, x := range mods {
			names = append(names, x.(map[string]any)["name"].(string))
		}
		if strings.Join(names, ",") != "Bevel,Array,Subdivision" {
			t.Fatalf("stack %v", names)
		}
		arr := mods[1].(map[string]any)
		if fmt.Sprint(arr["count"], arr["relative_offset_displace"]) != "4 [0 2 0]" {
			t.Errorf("array record %v", arr)
		}
		sub := mods[2].(map[string]any)
		if fmt.Sprint(sub["levels"], sub["render_levels"]) != "2 2" {
			t.Errorf("subdivision record %v", sub)
		}
		c := Call{Tool: "modifier.remove", Args: kv{"object": "B", "name": "Array"}}
		out := mustExecute(t, p, c.Tool, c.Args)
		mustUndo(t, p, out, c)
		s = assertIncrementalMatchesFull(t, p)
		if got := fmt.Sprint(sceneRecord(t, s, "objects", "B")["modifiers"]); got != fmt.Sprint(mods) {
			t.Errorf("after undo of remove: %s, want %s", got, fmt.Sprint(mods))
		}
		// A compensation that no longer fits is refused.
		out = mustExecute(t, p, c.Tool, c.Args)
		mustExecute(t, p, "modifier.add", kv{"object": "B", "type": "array", "name": "Array"})
		if _, err := p.Undo(callCtx(t), out.Undo, Call{}); !isCode(err, CodeConflict) {
			t.Errorf("undo remove with the name taken = %v, want conflict", err)
		}
		assertIncrementalMatchesFull(t, p)
	})
}

// sceneOpGen is a seeded random generator over the scene-building tools.
type sceneOpGen struct {
	rng                    *rand.Rand
	n                      int
	objects, meshes, cams  []string
	mats, colls, modifiers []string
}

func (g *sceneOpGen) pick(list []string, fallback string) string {
	if len(list) == 0 || g.rng.Intn(12) == 0 {
		return fallback // sometimes a missing name: a refusal
	}
	return list[g.rng.Intn(len(list))]
}

func (g *sceneOpGen) next() Call {
	g.n++
	vec := func() []any { return []any{g.rng.Float64()*10 - 5, g.rng.Float64()*10 - 5, g.rng.Float64()*10 - 5} }
	name := fmt.Sprintf("%c%d", 'A'+rune(g.rng.Intn(6)), g.rng.Intn(3))
	c := Call{MutationID: fmt.Sprintf("smut-%d", g.n), RequestID: "test"}
	modTypes := []string{"subdivision", "bevel", "array", "mirror", "solidify"}
	switch g.rng.Intn(16) {
	case 0:
		c.Tool, c.Args = "object.create", kv{"type": primitiveTypes[g.rng.Intn(len(primitiveTypes))], "name": name, "location": vec()}
	case 1:
		c.Tool, c.Args = "object.duplicate", kv{"name": g.pick(g.objects, "Zz"), "new_name": name, "linked": g.rng.Intn(2) == 0}
	case 2:
		c.Tool, c.Args = "object.rename", kv{"name": g.pick(g.objects, "Zz"), "new_name": name}
	case 3:
		var parent any = g.pick(g.objects, "Zz")
		if g.rng.Intn(3) == 0 {
			parent = nil
		}
		c.Tool, c.Args = "object.set_parent", kv{"name": g.pick(g.objects, "Zz"), "parent": parent, "keep_transform": g.rng.Intn(3) != 0}
	case 4:
		c.Tool, c.Args = "object.select", kv{"names": []any{g.pick(g.objects, "Zz")}, "active": g.pick(g.objects, "Zz")}
	case 5:
		c.Tool, c.Args = "modifier.add", kv{"object": g.pick(g.meshes, "Zz"), "type": modTypes[g.rng.Intn(len(modTypes))]}
	case 6:
		c.Tool, c.Args = "modifier.remove", kv{"object": g.pick(g.meshes, "Zz"), "name": g.pick(g.modifiers, "Zz")}
	case 7:
		c.Tool, c.Args = "material.create", kv{"name": "M" + name, "base_color": []any{g.rng.Float64(), g.rng.Float64(), g.rng.Float64(), 1}, "roughness": g.rng.Float64()}
	case 8:
		c.Tool, c.Args = "material.assign", kv{"object": g.pick(g.meshes, "Zz"), "material": g.pick(g.mats, "Zz"), "slot": g.rng.Intn(3)}
	case 9:
		c.Tool, c.Args = "light.create", kv{"name": name, "type": []string{"point", "sun", "spot", "area"}[g.rng.Intn(4)], "location": vec()}
	case 10:
		c.Tool, c.Args = "camera.create", kv{"name": name, "location": vec(), "set_active": g.rng.Intn(2) == 0}
	case 11:
		c.Tool, c.Args = "camera.set_active", kv{"name": g.pick(g.cams, "Zz")}
	case 12:
		var target any = vec()
		if g.rng.Intn(2) == 0 {
			target = g.pick(g.objects, "Zz")
		}
		c.Tool, c.Args = "camera.look_at", kv{"name": g.pick(g.objects, "Zz"), "target": target}
	case 13:
		args := kv{"name": "C" + name}
		if g.rng.Intn(2) == 0 {
			args["parent"] = g.pick(g.colls, "Zz")
		}
		c.Tool, c.Args = "collection.create", args
	case 14:
		c.Tool, c.Args = "collection.link", kv{"object": g.pick(g.objects, "Zz"), "collection": g.pick(append([]string{"<scene>:Scene"}, g.colls...), "Zz"), "unlink_others": g.rng.Intn(2) == 0}
	default:
		c.Tool, c.Args = "object.delete", kv{"name": g.pick(g.objects, "Zz")}
	}
	return c
}

// refresh reads the live names from the scene (simpler than tracking every
// tool's effect, and exact after undos).
func (g *sceneOpGen) refresh(t *testing.T, s Snapshot) {
	g.objects, g.meshes, g.cams, g.mats, g.colls, g.modifiers = nil, nil, nil, nil, nil, nil
	for name, r := range s.State["objects"].(map[string]any) {
		g.objects = append(g.objects, name)
		r := r.(map[string]any)
		switch r["type"] {
		case "MESH":
			g.meshes = append(g.meshes, name)
		case "CAMERA":
			g.cams = append(g.cams, name)
		}
		for _, md := range r["modifiers"].([]any) {
			g.modifiers = append(g.modifiers, md.(map[string]any)["name"].(string))
		}
	}
	for name := range s.State["materials"].(map[string]any) {
		g.mats = append(g.mats, name)
	}
	for name := range s.State["collections"].(map[string]any) {
		g.colls = append(g.colls, name)
	}
	for _, l := range [][]string{g.objects, g.meshes, g.cams, g.mats, g.colls, g.modifiers} {
		sort.Strings(l)
	}
}

// TestSceneToolsRandomUndo: a seeded random sequence over the scene tools
// (and object.create/delete), with refusals; compensations applied at once
// or later in reverse order return exactly scene_hash_before; the running
// hash equals a recomputation throughout; undoing everything returns to the
// baseline; and both Blender versions go through the same hashes.
func TestSceneToolsRandomUndo(t *testing.T) {
	traces := map[RuntimeKind][]string{}
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		baseline := assertIncrementalMatchesFull(t, p)
		g := &sceneOpGen{rng: rand.New(rand.NewSource(5))}
		g.refresh(t, baseline)
		type done struct {
			c   Call
			out Outcome
		}
		var stack []done
		var trace []string
		okCount := 0
		perTool := map[string]int{}
		for i := 0; i < 250; i++ {
			c := g.next()
			out, err := p.Execute(callCtx(t), c)
			if err != nil {
				var te *ToolError
				if !errors.As(err, &te) || te.Code == CodeInternalError {
					t.Fatalf("op %d %s %v: %v", i, c.Tool, c.Args, err)
				}
				trace = append(trace, c.Tool+":"+te.Code)
				continue
			}
			okCount++
			perTool[c.Tool]++
			trace = append(trace, c.Tool+":"+out.SceneHashAfter)
			stack = append(stack, done{c, out})
			switch r := g.rng.Intn(5); {
			case r == 0:
				d := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				mustUndo(t, p, d.out, d.c)
			case r == 1:
				for k := 1 + g.rng.Intn(min(3, len(stack))); k > 0; k-- {
					d := stack[len(stack)-1]
					stack = stack[:len(stack)-1]
					mustUndo(t, p, d.out, d.c)
				}
			}
			g.refresh(t, assertIncrementalMatchesFull(t, p))
		}
		for len(stack) > 0 {
			d := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			mustUndo(t, p, d.out, d.c)
		}
		if s := assertIncrementalMatchesFull(t, p); s.SceneHash != baseline.SceneHash {
			t.Fatalf("after undoing everything: %s, want baseline %s", s.SceneHash, baseline.SceneHash)
		}
		if okCount < 120 {
			t.Errorf("only %d successful ops", okCount)
		}
		t.Logf("%d ops succeeded: %v", okCount, perTool)
		traces[rt.Kind] = trace
	})
	a, b := traces[RuntimeBPYModule], traces[RuntimeBinary]
	if len(a) > 0 && len(b) > 0 {
		for i := range a {
			if i >= len(b) || a[i] != b[i] {
				t.Fatalf("op %d differs across Blender versions: 4.5 %s, 3.4 %v", i, a[i], b[min(i, len(b)-1)])
			}
		}
	}
}

// TestAssignUndoObjectSlot: the undo of a material.assign that added a slot
// drops the slot without emptying it first, unless the object holds a
// material of its own there (link OBJECT): that material's user goes back.
func TestAssignUndoObjectSlot(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": "Box"})
		mustExecute(t, p, "material.create", map[string]any{"name": "Red"})
		mustExecute(t, p, "material.create", map[string]any{"name": "Own"})
		out := mustExecute(t, p, "material.assign", map[string]any{"object": "Box", "material": "Red", "slot": 1})
		mustExecute(t, p, "python.exec", map[string]any{"code": `s = bpy.data.objects["Box"].material_slots[1]
s.link = "OBJECT"
s.material = bpy.data.materials["Own"]`})
		if _, err := p.Undo(callCtx(t), out.Undo, Call{}); err != nil { // after python.exec: not the hash from before
			t.Fatal(err)
		}
		got := string(execResult(t, p, `o = bpy.data.objects["Box"]
result = [len(o.material_slots), bpy.data.materials["Own"].users, bpy.data.materials["Red"].users]`))
		if got != "[0,0,0]" {
			t.Fatalf("after the undo: [slots, users of Own, users of Red] = %s, want [0,0,0]", got)
		}
		assertIncrementalMatchesFull(t, p)
	})
}

// TestSummaryObjects: scene.get_summary lists every object of the scene but
// tombstones, each with its type, sorted by name, as the objects themselves
// say (both Blenders).
func TestSummaryObjects(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": "b"})
		mustExecute(t, p, "object.create", map[string]any{"type": "plane", "name": "Gone"})
		mustExecute(t, p, "object.delete", map[string]any{"name": "Gone"})
		mustExecute(t, p, "light.create", map[string]any{"name": "A", "type": "sun"})
		mustExecute(t, p, "camera.create", map[string]any{"name": "C"})
		mustExecute(t, p, "text.create", map[string]any{"name": "T", "body": "t"})
		mustExecute(t, p, "python.exec", map[string]any{"code": "sc = bpy.data.scenes['Scene']\n" +
			"sc.collection.objects.link(bpy.data.objects.new('Empty', None))\n" +
			"cu = bpy.data.curves.new('Cu', 'CURVE')\nsc.collection.objects.link(bpy.data.objects.new('Cu', cu))"})
		want := string(execResult(t, p, `result = [{"name": n, "type": k} for n, k in sorted((o.name, o.type) `+
			`for o in bpy.data.scenes['Scene'].objects if not o.name.startswith('\x7fbp_tomb_'))]`))
		out := mustExecute(t, p, "scene.get_summary", nil).Fields()
		got, err := json.Marshal(out["objects"])
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want || out["object_count"] != 8.0 { // with the baseline's camera and light
			t.Fatalf("objects = %s (count %v), want %s (8)", got, out["object_count"], want)
		}
	})
}
