package blender

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// viewLayersScene builds, with python.exec, objects that are in a view
// layer in every way Blender allows and objects that are not: in an
// excluded collection, in a collection excluded from one view layer only,
// kept out of the viewport by their own or their collection's
// restrictions, hidden, unselectable, in another scene, linked nowhere.
const viewLayersScene = `
sc = bpy.data.scenes["Scene"]
other = bpy.data.scenes.new("Other")
vl2 = sc.view_layers.new("Second")
me = bpy.data.meshes.new("shared")
def ob(name, coll):
    o = bpy.data.objects.new(name, me)
    if coll is not None:
        coll.objects.link(o)
    return o
def coll(name, parent):
    c = bpy.data.collections.new(name)
    parent.children.link(c)
    return c
ob("Plain", sc.collection)
ob("Excluded", coll("Off", sc.collection))
ob("HalfExcluded", coll("OffInSecond", sc.collection))
restricted = coll("Restricted", sc.collection)
restricted.hide_viewport = True
ob("InRestricted", restricted)
ob("Unviewed", sc.collection).hide_viewport = True
ob("Unselectable", sc.collection).hide_select = True
ob("Hidden", sc.collection).hide_set(True)
ob("Elsewhere", other.collection)
ob("Nowhere", None)
# An object linked from a library comes first under the name of a local one
# that none of the per-base getters sees.
import os, tempfile
lib = os.path.join(tempfile.mkdtemp(), "lib.blend")
twin = bpy.data.objects.new("Twin", None)
bpy.data.libraries.write(lib, {twin})
bpy.data.objects.remove(twin)
with bpy.data.libraries.load(lib, link=True) as (src, dst):
    dst.objects = ["Twin"]
sc.collection.objects.link(dst.objects[0])
ob("Twin", sc.collection).hide_viewport = True
sc.view_layers["ViewLayer"].layer_collection.children["Off"].exclude = True
vl2.layer_collection.children["Off"].exclude = True
vl2.layer_collection.children["OffInSecond"].exclude = True
`

// TestViewLayerMembership: the bridge's in_view_layer (the per-base
// getters, then the scan) agrees with the view layer's own list of objects
// for every object and view layer of viewLayersScene, and object.select
// refuses exactly the objects that are not in the scene's view layer.
func TestViewLayerMembership(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		mustExecute(t, p, "python.exec", map[string]any{"code": viewLayersScene})
		out := execResult(t, p, `
from layers import in_view_layer
result = {}
for sc in bpy.data.scenes:
    for vl in sc.view_layers:
        for o in bpy.data.objects:
            key = sc.name + "/" + vl.name + "/" + o.name + ("@lib" if o.library else "")
            result[key] = [in_view_layer(o, vl), any(x == o for x in vl.objects)]
`)
		var got map[string][2]bool
		if err := json.Unmarshal(out, &got); err != nil || len(got) == 0 {
			t.Fatalf("python.exec result %s: %v", out, err)
		}
		in := map[string]bool{}
		for k, v := range got {
			if v[0] != v[1] {
				t.Errorf("%s: in_view_layer %v, the view layer's list says %v", k, v[0], v[1])
			}
			in[k] = v[1]
		}
		if !in["Scene/ViewLayer/Twin"] || !in["Scene/ViewLayer/Twin@lib"] {
			t.Error("the local or the linked Twin is not in Scene's first view layer (the scene is not what the test means)")
		}
		want := map[string]bool{"Plain": true, "Excluded": false, "HalfExcluded": true, "InRestricted": true,
			"Unviewed": true, "Unselectable": true, "Hidden": true, "Elsewhere": false, "Nowhere": false}
		for name, member := range want {
			if in["Scene/ViewLayer/"+name] != member {
				t.Errorf("%s in Scene's first view layer = %v, want %v (the scene is not what the test means)", name, !member, member)
			}
			args := map[string]any{"names": []any{name}}
			if member {
				mustExecute(t, p, "object.select", args)
			} else {
				wantToolError(t, p, "object.select", args, CodeConflict)
			}
		}
		if in["Scene/Second/HalfExcluded"] {
			t.Error("HalfExcluded is in the second view layer (the scene is not what the test means)")
		}
		assertIncrementalMatchesFull(t, p)
	})
}

// TestDeleteUndoRestoresBases: deleting an object that is selected in one
// view layer, hidden in another and active in a third scene, and undoing the
// delete, gives every base back as it was.
func TestDeleteUndoRestoresBases(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		mustExecute(t, p, "python.exec", map[string]any{"code": `
sc = bpy.data.scenes["Scene"]
other = bpy.data.scenes.new("Other")
vl2 = sc.view_layers.new("Second")
o = bpy.data.objects.new("Shared", bpy.data.meshes.new("m"))
sc.collection.objects.link(o)
other.collection.objects.link(o)
o.select_set(True, view_layer=sc.view_layers["ViewLayer"])
o.hide_set(True, view_layer=vl2)
other.view_layers[0].objects.active = o
`})
		bases := `
result = []
for sc in sorted(bpy.data.scenes, key=lambda s: s.name):
    for vl in sc.view_layers:
        o = bpy.data.objects.get("Shared")
        if o is not None and vl.objects.get("Shared") is not None:
            result.append([sc.name, vl.name, o.select_get(view_layer=vl), o.hide_get(view_layer=vl), vl.objects.active == o])
`
		before := execResult(t, p, bases)
		del := mustExecute(t, p, "object.delete", map[string]any{"name": "Shared"})
		mustUndo(t, p, del, Call{})
		after := execResult(t, p, bases)
		var b, a [][]any
		if json.Unmarshal(before, &b) != nil || json.Unmarshal(after, &a) != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("bases after the undo of the delete:\n%s\nbefore it:\n%s", after, before)
		}
		if n := len(b); n != 3 {
			t.Fatalf("%d bases, want 3 (the scene is not what the test means): %s", n, before)
		}
	})
}

// tombPrefix starts the names of tombstones (bridge/common.py TOMB_PREFIX).
const tombPrefix = "\x7fbp_tomb_"

// TestTombstoneNameTaken: when the tombstone name derived from a delete's
// mutation id is taken, and so is the session counter's next name, the
// delete takes the counter's name after them, the same on both Blenders
// (4.5 finds out by renaming, 3.4 by asking first), and its undo brings the
// object back.
func TestTombstoneNameTaken(t *testing.T) {
	sum := sha256.Sum256([]byte("mut-1"))
	derived := tombPrefix + "m" + hex.EncodeToString(sum[:])[:24]
	py := strings.NewReplacer("\x7f", `\x7f`) // the names as Python string literals write them
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": "Doomed"})
		mustExecute(t, p, "python.exec", map[string]any{"code": `
for n in ["` + py.Replace(derived) + `", "` + py.Replace(tombPrefix) + `0"]:
    bpy.data.objects.new(n, None)
`})
		out, err := p.Execute(callCtx(t), Call{Tool: "object.delete", Args: map[string]any{"name": "Doomed"}, MutationID: "mut-1"})
		if err != nil {
			t.Fatal(err)
		}
		var rec struct {
			Tomb string `json:"tomb"`
			Data struct {
				Tomb string `json:"tomb"`
			} `json:"data"`
		}
		if err := json.Unmarshal(out.Undo, &rec); err != nil {
			t.Fatal(err)
		}
		if want := derived + "_0"; rec.Tomb != want || rec.Data.Tomb != want {
			t.Fatalf("tombstones %q (object), %q (mesh), want %q", rec.Tomb, rec.Data.Tomb, want)
		}
		raw := execResult(t, p, `result = sorted(o.name for o in bpy.data.objects if o.name.startswith("`+py.Replace(tombPrefix)+`"))`)
		var names []string
		if err := json.Unmarshal(raw, &names); err != nil || !reflect.DeepEqual(names, []string{tombPrefix + "0", derived, derived + "_0"}) {
			t.Fatalf("tombstone objects %s (%v), want %q, %q, %q", raw, err, tombPrefix+"0", derived, derived+"_0")
		}
		mustUndo(t, p, out, Call{})
		assertIncrementalMatchesFull(t, p)
	})
}

// execResult runs code with python.exec and returns its global result, as
// JSON.
func execResult(t *testing.T, p *Process, code string) []byte {
	t.Helper()
	raw, err := json.Marshal(mustExecute(t, p, "python.exec", map[string]any{"code": code}).Fields()["result"])
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestViewLayersSyncedAfterUnlinks: a delete or an undone create leaves the
// view layer's resync to the next call that needs its bases (layers.py);
// object.select reads the selection of a synced layer (its undo record
// names no tombstone, and the undo works), and python.exec's code walks
// the view layer without meeting what left it.
func TestViewLayersSyncedAfterUnlinks(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": "A"})
		mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": "B"})
		mustExecute(t, p, "object.select", map[string]any{"names": []any{"A", "B"}})
		mustExecute(t, p, "object.delete", map[string]any{"name": "B"})
		sel := mustExecute(t, p, "object.select", map[string]any{"names": []any{}})
		var rec struct {
			Selected []string `json:"selected"`
		}
		if err := json.Unmarshal(sel.Undo, &rec); err != nil || !reflect.DeepEqual(rec.Selected, []string{"A"}) {
			t.Fatalf("select's undo record %s (%v), want selected [A]", sel.Undo, err)
		}
		mustUndo(t, p, sel, Call{})
		c := Call{Tool: "object.create", Args: map[string]any{"type": "cube", "name": "C"}}
		mustUndo(t, p, mustExecute(t, p, c.Tool, c.Args), c)
		mustExecute(t, p, "object.delete", map[string]any{"name": "A"})
		raw := execResult(t, p, `result = sorted(o.name for o in bpy.context.view_layer.objects)`)
		var names []string
		if err := json.Unmarshal(raw, &names); err != nil || slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "__bp_") || n == "A" || n == "C" }) {
			t.Fatalf("python.exec sees the view layer's objects %s (%v): a deleted or undone object among them", raw, err)
		}
		assertIncrementalMatchesFull(t, p)
	})
}

// TestCollectionUnderAnotherScene: a collection created under the master
// collection of a scene that is not the current one can be undone (its
// record names that scene, not the current one).
func TestCollectionUnderAnotherScene(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		mustExecute(t, p, "python.exec", map[string]any{"code": `bpy.data.scenes.new("Other")`})
		c := Call{Tool: "collection.create", Args: map[string]any{"name": "K", "parent": "<scene>:Other"}}
		out := mustExecute(t, p, c.Tool, c.Args)
		mustUndo(t, p, out, c)
		if again := mustExecute(t, p, c.Tool, c.Args); again.SceneHashAfter != out.SceneHashAfter {
			t.Fatalf("created again: %s, first %s", again.SceneHashAfter, out.SceneHashAfter)
		}
		assertIncrementalMatchesFull(t, p)
	})
}

// TestDuplicateDataNameTaken: a copy's data takes the lowest free name
// after the copy's own when that is taken, the same on both Blenders (4.5
// finds out by naming, 3.4 by asking first).
func TestDuplicateDataNameTaken(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": "A"})
		mustExecute(t, p, "python.exec", map[string]any{"code": `
for n in ("Copy", "Copy.002"):
    bpy.data.meshes.new(n).use_fake_user = True
`})
		for _, c := range []struct{ name, mesh string }{{"Copy", "Copy.001"}, {"Other", "Other"}, {"Copy2", "Copy2"}} {
			out := mustExecute(t, p, "object.duplicate", map[string]any{"name": "A", "new_name": c.name})
			var got string
			if err := json.Unmarshal(execResult(t, p, `result = bpy.data.objects["`+c.name+`"].data.name`), &got); err != nil || got != c.mesh {
				t.Fatalf("the copy %s has mesh %q (%v), want %q", c.name, got, err, c.mesh)
			}
			if c.name == "Copy" {
				mustUndo(t, p, out, Call{Tool: "object.duplicate"})
				mustExecute(t, p, "object.duplicate", map[string]any{"name": "A", "new_name": c.name})
			}
		}
		assertIncrementalMatchesFull(t, p)
	})
}

// TestLinkKeepsActiveObjects: a collection.link that unlinks nothing reads
// no scene's active object (it cannot change one), and its undo reads them
// again only where the object it unlinks is active. Here the object is
// active where it is linked, and after the link it is made active in a
// scene it reaches only through the new collection, whose active object
// the undo must clear; the running hash matches a recomputation after
// every step, and the active objects are Blender's.
func TestLinkKeepsActiveObjects(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": "Mover"})
		mustExecute(t, p, "python.exec", map[string]any{"code": `
other = bpy.data.scenes.new("Other")
c = bpy.data.collections.new("OnlyOther")
other.collection.children.link(c)
`})
		actives := `result = {sc.name: (sc.view_layers[0].objects.active.name if sc.view_layers[0].objects.active else None) for sc in bpy.data.scenes}`
		want := func(what, w string) {
			t.Helper()
			assertIncrementalMatchesFull(t, p)
			if got := string(execResult(t, p, actives)); got != w {
				t.Fatalf("%s: active objects %s, want %s", what, got, w)
			}
		}
		link := mustExecute(t, p, "collection.link", map[string]any{"object": "Mover", "collection": "OnlyOther"})
		want("after the link", `{"Other":null,"Scene":"Mover"}`)
		mustExecute(t, p, "python.exec", map[string]any{"code": `bpy.data.scenes["Other"].view_layers[0].objects.active = bpy.data.objects["Mover"]`})
		want("made active in Other", `{"Other":"Mover","Scene":"Mover"}`)
		undo := func(out Outcome) {
			t.Helper()
			if _, err := p.Undo(callCtx(t), out.Undo, Call{}); err != nil { // after other changes: not the hash from before
				t.Fatal(err)
			}
		}
		undo(link)
		want("after the undo", `{"Other":null,"Scene":"Mover"}`)
		// Undoing a link of an object active nowhere reads no active object
		// back; the scene's own stays.
		again := mustExecute(t, p, "collection.link", map[string]any{"object": "Mover", "collection": "OnlyOther"})
		mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": "Other active"})
		undo(again)
		want("after the second undo", `{"Other":null,"Scene":"Other active"}`)
	})
}

// TestLinkUndoBases: the undo of a link reads no bases when the object
// stays in every scene's master collection (it keeps a base in every view
// layer then); otherwise it reads them, and an object that leaves a view
// layer through the undo (its other collection is excluded there) is no
// longer that layer's active object. The active objects and the selection
// are Blender's after each undo, and the running hash matches a
// recomputation.
func TestLinkUndoBases(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": "Keep"})
		mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": "Shut"})
		mustExecute(t, p, "python.exec", map[string]any{"code": `
sc = bpy.data.scenes["Scene"]
for name in ("Side", "Hidden", "Open"):
    sc.collection.children.link(bpy.data.collections.new(name))
sc.view_layers[0].layer_collection.children["Hidden"].exclude = True
`})
		mustExecute(t, p, "collection.link", map[string]any{"object": "Shut", "collection": "Hidden", "unlink_others": true})
		mustExecute(t, p, "object.select", map[string]any{"names": []any{"Keep"}, "active": "Keep"})
		state := `vl = bpy.data.scenes["Scene"].view_layers[0]
result = [vl.objects.active.name if vl.objects.active else None, sorted(o.name for o in vl.objects if o.name in ("Keep", "Shut")), sorted(o.name for o in vl.objects.selected)]`
		want := func(what, w string) {
			t.Helper()
			assertIncrementalMatchesFull(t, p)
			if got := string(execResult(t, p, state)); got != w {
				t.Fatalf("%s: active, bases, selected %s, want %s", what, got, w)
			}
		}
		want("before", `["Keep",["Keep"],["Keep"]]`)
		undo := func(out Outcome) {
			t.Helper()
			if _, err := p.Undo(callCtx(t), out.Undo, Call{}); err != nil {
				t.Fatal(err)
			}
		}
		keep := mustExecute(t, p, "collection.link", map[string]any{"object": "Keep", "collection": "Side"})
		undo(keep)
		want("after the undo of Keep's link", `["Keep",["Keep"],["Keep"]]`)

		shut := mustExecute(t, p, "collection.link", map[string]any{"object": "Shut", "collection": "Open"})
		mustExecute(t, p, "object.select", map[string]any{"names": []any{"Shut"}, "active": "Shut"})
		want("Shut linked to Open", `["Shut",["Keep","Shut"],["Shut"]]`)
		undo(shut)
		want("after the undo of Shut's link", `[null,["Keep"],[]]`)
	})
}

// TestActiveSetLazily: a tool's new active object reaches Blender when
// something needs Blender's (layers.set_active); until then every way an
// object can leave the layer, be freed or be read by Blender's own code
// finds it set. No step is checked before the next runs (a check reads
// Blender's, which gives it the active object first), only after.
func TestActiveSetLazily(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		mustExecute(t, p, "python.exec", map[string]any{"code": `
sc = bpy.data.scenes["Scene"]
sc.collection.children.link(bpy.data.collections.new("Shut"))
sc.view_layers[0].layer_collection.children["Shut"].exclude = True
`})
		active := `a = bpy.data.scenes["Scene"].view_layers[0].objects.active
result = a.name if a else None`
		want := func(what, w string) {
			t.Helper()
			assertIncrementalMatchesFull(t, p)
			if got := string(execResult(t, p, active)); got != w {
				t.Fatalf("%s: active %s, want %s", what, got, w)
			}
		}
		create := func(name string) Outcome {
			return mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": name})
		}
		// The new active object leaves the layer (its only collection is
		// excluded there) before Blender was told; Blender's was B.
		create("B")
		want("B created", `"B"`)
		create("C")
		mustExecute(t, p, "collection.link", map[string]any{"object": "C", "collection": "Shut", "unlink_others": true})
		want("C left the layer", "null")

		// Deleted while pending; undone while pending.
		create("D")
		mustExecute(t, p, "object.delete", map[string]any{"name": "D"})
		want("D deleted", "null")
		create("E")
		f := create("F")
		if _, err := p.Undo(callCtx(t), f.Undo, Call{}); err != nil {
			t.Fatal(err)
		}
		want("F undone", `"E"`)

		// Code of the user's, and a checkpoint, see it.
		create("G")
		if got := string(execResult(t, p, active)); got != `"G"` {
			t.Fatalf("python.exec sees active %s, want G", got)
		}
		q := reloaded(t, p, rt, create("H").SceneHashAfter)
		if got := string(execResult(t, q, active)); got != `"H"` {
			t.Fatalf("after the checkpoint's load: active %s, want H", got)
		}
		want("after the save", `"H"`)
	})
}

// TestUndoDeleteExcludedLayer: the undo of a delete gives back the object's
// bases where it has one again; where its collection is excluded from the
// view layer by then, there is none to make active or select (it failed
// before, and, with the active object set lazily, left the records saying
// it was active).
func TestUndoDeleteExcludedLayer(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		mustExecute(t, p, "collection.create", map[string]any{"name": "C"})
		mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": "A"})
		mustExecute(t, p, "collection.link", map[string]any{"object": "A", "collection": "C", "unlink_others": true})
		mustExecute(t, p, "object.select", map[string]any{"names": []any{"A"}, "active": "A"})
		del := mustExecute(t, p, "object.delete", map[string]any{"name": "A"})
		mustExecute(t, p, "python.exec", map[string]any{"code": `bpy.context.scene.view_layers[0].layer_collection.children["C"].exclude = True`})
		if _, err := p.Undo(callCtx(t), del.Undo, Call{}); err != nil {
			t.Fatal(err)
		}
		assertIncrementalMatchesFull(t, p)
		got := string(execResult(t, p, `vl = bpy.context.scene.view_layers[0]
result = [vl.objects.active.name if vl.objects.active else None, "A" in bpy.data.collections["C"].objects]`))
		if got != `[null,true]` {
			t.Fatalf("after the undo: active, A in C = %s, want [null,true]", got)
		}
		assertCheckpointRoundTrip(t, p, rt)
	})
}

// TestOldTombstones: a checkpoint of an older bridge holds tombstones named
// __bp_tomb_…; they stay out of the scene's state, and the undo records
// that name them still bring their objects back, also when the tombstone
// was made anew by this bridge (a replay of the older bridge's journal).
func TestOldTombstones(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": "Old"})
		before := assertIncrementalMatchesFull(t, p).SceneHash
		del := mustExecute(t, p, "object.delete", map[string]any{"name": "Old"})
		var rec map[string]any
		if err := json.Unmarshal(del.Undo, &rec); err != nil {
			t.Fatal(err)
		}
		tomb := rec["tomb"].(string)
		old := "__bp_tomb_" + strings.TrimPrefix(tomb, tombPrefix)
		// As an older bridge named them, then a rehash (python.exec).
		mustExecute(t, p, "python.exec", map[string]any{"code": fmt.Sprintf(
			"for c in (bpy.data.objects, bpy.data.meshes):\n    c[%q].name = %q", tomb, old)})
		rec["tomb"] = old
		rec["data"].(map[string]any)["tomb"] = old
		if h := assertIncrementalMatchesFull(t, p).SceneHash; h != del.SceneHashAfter {
			t.Fatalf("with the tombstone renamed: %s, want the hash after the delete %s", h, del.SceneHashAfter)
		}
		undo, _ := json.Marshal(rec)
		if h, err := p.Undo(callCtx(t), undo, Call{}); err != nil || h != before {
			t.Fatalf("undo through the old tombstone: %s, %v; want %s", h, err, before)
		}
		// A journal of an older bridge replayed by this one (recovery): the
		// delete makes its tombstone under the new prefix, the record names
		// the old one.
		del = mustExecute(t, p, "object.delete", map[string]any{"name": "Old"})
		rec = nil
		if err := json.Unmarshal(del.Undo, &rec); err != nil {
			t.Fatal(err)
		}
		old = "__bp_tomb_" + strings.TrimPrefix(rec["tomb"].(string), tombPrefix)
		rec["tomb"] = old
		rec["data"].(map[string]any)["tomb"] = old
		undo, _ = json.Marshal(rec)
		if h, err := p.Undo(callCtx(t), undo, Call{}); err != nil || h != before {
			t.Fatalf("undo of an older record through the new tombstone: %s, %v; want %s", h, err, before)
		}
	})
}

// TestActiveBefore: a create records the object active before it as the
// scene's state last said it (not read from Blender), after each way the
// active object changes: a create, python.exec, object.select, an undo;
// its undo gives that object back.
func TestActiveBefore(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		createAfter := func(name string, want any) {
			t.Helper()
			out := mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": name})
			var rec map[string]any
			if err := json.Unmarshal(out.Undo, &rec); err != nil {
				t.Fatal(err)
			}
			if rec["active_before"] != want {
				t.Fatalf("create %s: active_before %v, want %v", name, rec["active_before"], want)
			}
			mustUndo(t, p, out, Call{})
			if got := string(execResult(t, p, `a = bpy.data.scenes["Scene"].view_layers[0].objects.active
result = a.name if a else None`)); got != fmt.Sprintf("%q", want) && !(want == nil && got == "null") {
				t.Fatalf("after the undo of %s: active %s, want %v", name, got, want)
			}
		}
		mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": "A"})
		createAfter("B", "A")
		mustExecute(t, p, "python.exec", map[string]any{"code": `bpy.data.scenes["Scene"].view_layers[0].objects.active = None`})
		createAfter("C", nil)
		mustExecute(t, p, "object.select", map[string]any{"names": []any{"A"}, "active": "A"})
		mustExecute(t, p, "collection.create", map[string]any{"name": "K"})
		mustExecute(t, p, "collection.link", map[string]any{"object": "A", "collection": "K"}) // leaves the view layer stale
		createAfter("D", "A")
		assertIncrementalMatchesFull(t, p)
	})
}

// TestUndoCreatePrevGone: the undo of a create whose previously active
// object has left the view layer since is a conflict, on both Blenders, and
// changes nothing.
func TestUndoCreatePrevGone(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": "Prev"})
		out := mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": "New"})
		mustExecute(t, p, "collection.create", map[string]any{"name": "Off"})
		mustExecute(t, p, "collection.link", map[string]any{"object": "Prev", "collection": "Off", "unlink_others": true})
		mustExecute(t, p, "python.exec", map[string]any{"code": `bpy.data.scenes["Scene"].view_layers[0].layer_collection.children["Off"].exclude = True`})
		before := assertIncrementalMatchesFull(t, p).SceneHash
		h, err := p.Undo(callCtx(t), out.Undo, Call{})
		if !isCode(err, CodeConflict) || h != before {
			t.Fatalf("undo with the previous active object out of the view layer: %s, %v; want a conflict at %s", h, err, before)
		}
		assertIncrementalMatchesFull(t, p)
	})
}

// TestCheckpointLoadsItsWindowManager: a checkpoint loads with the file's
// window manager, not the running one (which holds Blender's queue of
// notifiers, never emptied without an event loop, that every free walks):
// a property set on the running one after the save is gone after the load.
func TestCheckpointLoadsItsWindowManager(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": "Kept"})
		ckpt := filepath.Join(t.TempDir(), "c.blend")
		saved, err := p.SaveCheckpoint(callCtx(t), ckpt)
		if err != nil {
			t.Fatal(err)
		}
		mustExecute(t, p, "python.exec", map[string]any{"code": `bpy.data.window_managers[0]["running"] = 1`})
		if loaded, err := p.LoadCheckpoint(callCtx(t), ckpt); err != nil || loaded != saved {
			t.Fatalf("load: %s, %v; want %s", loaded, err, saved)
		}
		if got := string(execResult(t, p, `result = [len(bpy.data.window_managers), "running" in bpy.data.window_managers[0]]`)); got != "[1,false]" {
			t.Fatalf("after the load: [window managers, the running one's property] = %s, want [1,false]", got)
		}
	})
}

// TestUndoCreatedReadsNoScene: object.duplicate and the undos of
// object.duplicate and light.create find what they made by the index, with
// no look-up that scans a datablock list, and the undo of a create that did
// not make its object active reads no active object from Blender (which
// would resync the view layer the create linked to). The undo still refuses
// while the made object is active, in the first view layer or another one,
// and the hashes hold (both Blenders).
func TestUndoCreatedReadsNoScene(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		runBridgeScript(t, rt, undoCreatedScript, "UNDO-CREATED-OK")
	})
}

// TestLinkUndoReadsNoBases: in a new session (its window parked, an empty
// scene of the bridge's own beside the session's), the undo of a link that
// kept the object in the scene's master collection reads no bases and no
// active object (both Blenders).
func TestLinkUndoReadsNoBases(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		runBridgeScript(t, rt, walkCounting+`
import window
assert bpy.context.window.scene.name == window.PARKED
call("object.create", type="cube", name="X")
call("collection.create", name="C")
layers.flush_actives()
out = call("collection.link", object="X", collection="C")
del reads[:]
req("undo", {"undo": out["undo"]})
assert reads == [], reads
same()
print("LINK-UNDO-OK")
`, "LINK-UNDO-OK")
	})
}

// TestSceneSettingsReadNoActive: the tools that change a scene's own
// settings (its camera, world, render settings) leave its active object as
// it is, and say so instead of reading it back from Blender after a link
// left the view layer stale; the hashes hold (both Blenders).
func TestSceneSettingsReadNoActive(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		runBridgeScript(t, rt, sceneSettingsScript, "SETTINGS-OK")
	})
}

const sceneSettingsScript = walkCounting + `
call("camera.create", name="Cam0")
calls = [("camera.create", dict(name="Cam1", set_active=True)), ("camera.set_active", dict(name="Cam0")),
         ("render.settings", dict(resolution=[64, 48], frame_end=12)), ("world.set", dict(color=[0.1, 0.2, 0.3]))]
for i, (tool, args) in enumerate(calls):
    call("light.create", name="L%d" % i, type="point")  # a link: the layer is stale
    layers.flush_actives()
    del reads[:]
    out = call(tool, **args)
    assert reads == [], (tool, reads)
    same()
    if out.get("undo") is not None:
        del reads[:]
        req("undo", {"undo": out["undo"]})
        assert reads == [], ("undo " + tool, reads)
        same()
print("SETTINGS-OK")
`

// walkCounting is the start of the bridge scripts that count what a call
// walks: it serves requests through main.handle (req, call, exec_), counts
// in scans the look-ups, tests, listings and iterations of the datablock
// lists that grow with the scene (objects, meshes, lights, cameras, curves,
// materials) made through the index and the object tools, and in reads the
// active objects read from Blender rather than from the pending ones (a
// read can make Blender resync a view layer).
const walkCounting = `
import json, sys, tempfile
sys.path.insert(0, sys.argv[sys.argv.index("--") + 1] if "--" in sys.argv else sys.argv[1])
import bpy
import main, index, layers, records
import tools.datablocks as datablocks
import tools.objects as objects
from state import STATE, full_snapshot

main.m_hello({"sandbox_dir": tempfile.mkdtemp()})
n = [0]

def req(method, params, ok=True):
    n[0] += 1
    r, _ = main.handle(json.dumps({"id": n[0], "method": method, "params": params}).encode())
    assert r["ok"] == ok, r
    return json.loads(main.response_line(r))["result"] if ok else r["error"]

def call(tool, **args):
    return req("execute", {"tool": tool, "args": args})

def exec_(code):
    req("execute", {"tool": "python.exec", "allow": ["python.exec"], "args": {"code": code}})

def same():
    assert full_snapshot()[1] == STATE.scene_hash()

GROWING = ("objects", "meshes", "lights", "cameras", "curves", "materials")
scans = []
class Coll:
    def __init__(self, kind, coll): self.kind, self.coll = kind, coll
    def note(self, what):
        if self.kind in GROWING:
            scans.append((self.kind, what))
    def get(self, name, default=None):
        self.note("get")
        return self.coll.get(name, default)
    def __contains__(self, k):
        self.note("in")
        return k in self.coll
    def keys(self):
        self.note("keys")
        return self.coll.keys()
    def __iter__(self):
        self.note("iter")
        return iter(self.coll)
    def __getattr__(self, a): return getattr(self.coll, a)
    def __len__(self): return len(self.coll)
    def __getitem__(self, k): return self.coll[k]
class Data:
    def __getattr__(self, kind): return Coll(kind, getattr(bpy.data, kind))
class Bpy:
    data = Data()
    def __getattr__(self, a): return getattr(bpy, a)
index.bpy = datablocks.bpy = objects.bpy = Bpy()

reads = []
def active_of(vl):
    if vl.as_pointer() not in layers.PENDING:
        reads.append(vl.name)
    return layers.active_of(vl)
datablocks.active_of = records.active_of = active_of
`

const undoCreatedScript = walkCounting + `
call("object.create", type="cube", name="Src")
layers.flush_actives()
index.INDEX.children_of(bpy.data.objects["Src"])  # the map of children is built once, in one pass
del scans[:]
dup = call("object.duplicate", name="Src", new_name="Dup")
# Where Blender's naming cannot tell a taken name (3.4), the name is looked up.
assert scans == [] or not datablocks.naming_tells(), scans
same()
del scans[:]
req("undo", {"undo": dup["undo"]})
assert scans == [], scans
same()

light = call("light.create", name="L", type="point")
del scans[:], reads[:]
req("undo", {"undo": light["undo"]})
assert scans == [] and reads == [], (scans, reads)
same()

# Still refused while the made object is active: in the first view layer,
sc = bpy.data.scenes["Scene"]
light = call("light.create", name="L", type="point")
before = STATE.scene_hash()
call("object.select", names=["L"], active="L")
after = STATE.scene_hash()
err = req("undo", {"undo": light["undo"]}, ok=False)
assert err["code"] == "conflict" and "active object now" in err["message"], err
assert STATE.scene_hash() == after
same()
call("object.select", names=["Src"], active="Src")
req("undo", {"undo": light["undo"]})
assert "L" not in bpy.data.objects
same()

# A linked copy waits on the void mesh, which goes with the last of the pile.
import trash
lnk = call("object.duplicate", name="Src", new_name="Lnk", linked=True)
req("undo", {"undo": lnk["undo"]})
assert trash.VOID["mesh"].users == 1 and bpy.data.objects["Src"].data.users == 1
same()
trash.empty_trash()
assert "mesh" not in trash.VOID and not [m for m in bpy.data.meshes if "bp_tomb_" in m.name]

# An undone create whose view layer (or scene) was renamed since: the
# records still follow the active object it takes with it.
for tool, args in (("object.create", dict(type="cube", name="A")), ("text.create", dict(name="T", body="t"))):
    made = call(tool, **args)
    exec_("bpy.data.scenes['Scene'].view_layers[0].name = 'Renamed%s'" % args["name"])
    req("undo", {"undo": made["undo"]})
    same()

# and in another one.
light = call("light.create", name="L2", type="point")
req("execute", {"tool": "python.exec", "allow": ["python.exec"], "args": {"code":
    "vl = bpy.data.scenes['Scene'].view_layers.new('Second'); vl.objects.active = bpy.data.objects['L2']"}})
after = STATE.scene_hash()
err = req("undo", {"undo": light["undo"]}, ok=False)
assert err["code"] == "conflict" and "active object now" in err["message"], err
assert STATE.scene_hash() == after
same()
print("UNDO-CREATED-OK")
`
