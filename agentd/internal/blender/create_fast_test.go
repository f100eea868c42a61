package blender

import (
	"fmt"
	"math"
	"testing"
)

// TestObjectCreatePrototypes covers object.create's cached primitives and the
// records it builds itself (tools/objects.py: PROTO, Tx.touch_record): every
// primitive at two sizes, twice each (the second from the cache), with and
// without a transform; the incremental hash must equal the full recomputation
// after each call, the cached meshes must record the same geometry as the
// first, a taken name must fail with conflict and leave nothing behind, undo
// must return the exact pre-op hash, and the final hash must be the same on
// every runtime.
func TestObjectCreatePrototypes(t *testing.T) {
	types := []string{"cone", "cube", "cylinder", "ico_sphere", "monkey", "plane", "torus", "uv_sphere"}
	finals := map[string]string{}
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		for _, typ := range types {
			for _, size := range []float64{2.0, 0.5} {
				var names []string
				for k := 0; k < 2; k++ {
					name := fmt.Sprintf("%s_%g_%d", typ, size, k)
					args := map[string]any{"type": typ, "name": name, "size": size}
					if k == 1 {
						args["location"] = []any{1.1, -2.2, 1e-7}
						args["rotation_euler"] = []any{0.3, math.Copysign(0, -1), 7.0}
						args["scale"] = []any{1.0, 2.5, -0.333333}
					}
					mustExecute(t, p, "object.create", args)
					names = append(names, name)
				}
				s := assertIncrementalMatchesFull(t, p)
				meshes := s.State["meshes"].(map[string]any)
				a, b := meshes[names[0]].(map[string]any), meshes[names[1]].(map[string]any)
				for _, f := range []string{"vertices", "edges", "polygons", "loops", "geometry_sha256"} {
					if a[f] != b[f] {
						t.Errorf("%s size %g: %s %v (fresh) != %v (cached)", typ, size, f, a[f], b[f])
					}
				}
			}
		}
		// Default names go through the same path.
		mustExecute(t, p, "object.create", map[string]any{"type": "cube"})
		mustExecute(t, p, "object.create", map[string]any{"type": "cube"})
		assertIncrementalMatchesFull(t, p)

		// A taken name: conflict, no mesh or object left behind.
		wantToolError(t, p, "object.create", map[string]any{"type": "cube", "name": "cube_2_0"}, CodeConflict)
		s := assertIncrementalMatchesFull(t, p)
		if _, ok := s.State["meshes"].(map[string]any)["cube_2_0.001"]; ok {
			t.Error("a refused create left its mesh behind")
		}
		if _, ok := s.State["objects"].(map[string]any)["cube_2_0.001"]; ok {
			t.Error("a refused create left its object behind")
		}
		// A failure after the link rolls back too.
		before, err := p.SceneHash(callCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Execute(callCtx(t), Call{Tool: "object.create", Args: map[string]any{"type": "cube", "name": "Late"},
			injectFailure: "object.create:linked"}); err == nil {
			t.Fatal("injected failure did not fail")
		}
		if after, _ := p.SceneHash(callCtx(t)); after != before {
			t.Fatalf("failed create changed the hash: %s -> %s", before, after)
		}
		assertIncrementalMatchesFull(t, p)

		// Undo returns the exact pre-op hash; a redo hashes as the first time.
		out := mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": "Undone", "location": []any{0.1, 0.2, 0.3}})
		h, err := p.Undo(callCtx(t), out.Undo, Call{})
		if err != nil {
			t.Fatal(err)
		}
		if h != out.SceneHashBefore {
			t.Fatalf("undo hash %s, want %s", h, out.SceneHashBefore)
		}
		assertIncrementalMatchesFull(t, p)
		again := mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": "Undone", "location": []any{0.1, 0.2, 0.3}})
		if again.SceneHashAfter != out.SceneHashAfter {
			t.Fatalf("redo hash %s, want %s", again.SceneHashAfter, out.SceneHashAfter)
		}
		h, err = p.SceneHash(callCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		finals[t.Name()] = h
	})
	var first string
	for name, h := range finals {
		if first == "" {
			first = h
		} else if h != first {
			t.Errorf("final hashes differ between runtimes: %v (%s)", finals, name)
			break
		}
	}
}

// TestUnnamedCreateNames: object.create without a name gives the object the
// lowest free "Cube", "Cube.001", ... and the mesh the object's name (or,
// where a mesh has it, the lowest free mesh name), as checked here against
// a scan of the names; where Blender's naming tells (4.5), it does so
// without looking up, testing or listing the names of every object or mesh
// (Blender's name map answers), but above its map's 1024 numbers, where
// Blender takes the highest + 1 and a lower name may be free. Blender's map
// counts "Cone.1" as number 1: there 4.5 skips "Cone.001" (both Blenders).
func TestUnnamedCreateNames(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		runBridgeScript(t, rt, unnamedCreateScript, "UNNAMED-OK")
	})
}

const unnamedCreateScript = walkCounting + `
def lowest_free(coll, base):
    names = set(x.name for x in coll)
    if base not in names:
        return base
    i = 1
    while "%s.%03d" % (base, i) in names:
        i += 1
    return "%s.%03d" % (base, i)

def create():
    want = lowest_free(bpy.data.objects, "Cube")
    want_mesh = want if want not in bpy.data.meshes else lowest_free(bpy.data.meshes, "Cube")
    del scans[:]
    got = req("execute", {"tool": "object.create", "args": {"type": "cube"}})["result"]["name"]
    walked = list(scans)
    assert (got, bpy.data.objects[got].data.name) == (want, want_mesh), (got, bpy.data.objects[got].data.name, want, want_mesh)
    assert full_snapshot()[1] == STATE.scene_hash()
    return walked

walks = [create() for _ in range(3)]
req("execute", {"tool": "object.delete", "args": {"name": "Cube.001"}})
walks.append(create())  # the gap
exec_("bpy.data.meshes.new('Cube.003')")
walks.append(create())  # an object name some mesh has
if datablocks.naming_tells():
    assert walks == [[]] * len(walks), walks

# Above the name map's numbers: every number below 1024 taken, a gap above.
exec_("for i in range(1030): bpy.data.objects.new('Cube', None)\nbpy.data.objects['Cube.1027'].name = 'Away'")
create()
assert bpy.data.objects["Cube.1027"].type == "MESH"

# An unpadded number: Blender's own name skips the number it holds.
req("execute", {"tool": "object.create", "args": {"type": "cone", "name": "Cone"}})
exec_("bpy.data.objects.new('Cone.1', None)")
got = req("execute", {"tool": "object.create", "args": {"type": "cone"}})["result"]["name"]
assert got == ("Cone.002" if datablocks.naming_tells() else "Cone.001"), got
same()
print("UNNAMED-OK")
`
