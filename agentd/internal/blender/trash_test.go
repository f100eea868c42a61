package blender

import "testing"

// idleScript serves requests through main.serve over pipes from a client
// thread: six creates written at once (five wait in the bridge's buffer),
// their six undos at once, a create and a delete, then nothing. While no
// request comes (main.idle) the discarded objects and meshes must be freed
// (trash.empty_trash in main.idle) and the view layer the delete left brought up to date.
const idleScript = `
import json, os, sys, tempfile, threading, time
sys.path.insert(0, sys.argv[sys.argv.index("--") + 1] if "--" in sys.argv else sys.argv[1])
import bpy
import main, trash
from state import STATE, full_snapshot

main.m_hello({"sandbox_dir": tempfile.mkdtemp()})
req_r, req_w = os.pipe()
resp_r, resp_w = os.pipe()
seen = {}

def client():
    out = os.fdopen(resp_r, "rb")
    n = [0]
    def send(*reqs):
        lines = []
        for method, params in reqs:
            n[0] += 1
            lines.append(json.dumps({"id": n[0], "method": method, "params": params}))
        os.write(req_w, ("\n".join(lines) + "\n").encode())
        got = [json.loads(out.readline()) for _ in reqs]
        assert all(r["ok"] for r in got), got
        return [r["result"] for r in got]
    try:
        made = send(*[("execute", {"tool": "object.create", "args": {"type": "cube", "name": "T%d" % i}}) for i in range(6)])
        send(*[("undo", {"undo": r["undo"]}) for r in reversed(made)])
        send(("execute", {"tool": "object.create", "args": {"type": "cube", "name": "D"}}))
        send(("execute", {"tool": "object.delete", "args": {"name": "D"}}))  # leaves the view layer to resync
        passes = main.IDLE["passes"]
        deadline = time.monotonic() + 60
        while (trash.TRASH["ids"] or main.IDLE["passes"] == passes) and time.monotonic() < deadline:
            time.sleep(0.05)
        seen["left"] = len(trash.TRASH["ids"])
        seen["passes"] = main.IDLE["passes"] - passes
    finally:
        send(("shutdown", {}))

t = threading.Thread(target=client)
t.start()
main.serve(req_r, resp_w)
t.join()
assert seen.get("left") == 0 and seen.get("passes"), seen
freed = [d.name for c in (bpy.data.objects, bpy.data.meshes) for d in c if d.name.startswith("\x7fbp_tomb_x")]
assert not freed, freed
# The pause synced the view layer the delete left: walking it (which does
# not resync) meets no tombstone.
seen_in_layer = [o.name for o in bpy.data.scenes["Scene"].view_layers[0].objects]
assert not [n for n in seen_in_layer if "bp_tomb_" in n], seen_in_layer
assert full_snapshot()[1] == STATE.scene_hash()
print("IDLE-OK")
`

// TestTrashReclaimedWhenIdle: what undos discarded is freed while no
// request comes, not only when the pile is full or a file is written, and
// the view layers are brought up to date then.
func TestTrashReclaimedWhenIdle(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		runBridgeScript(t, rt, idleScript, "IDLE-OK")
	})
}

// pileScript starts the bridge scripts of the pile's tests: a bridge after
// hello, and req, which serves one request through main.handle and returns
// its result.
const pileScript = `
import json, sys, tempfile
sys.path.insert(0, sys.argv[sys.argv.index("--") + 1] if "--" in sys.argv else sys.argv[1])
import bpy
import main, trash
from state import STATE, full_snapshot

main.m_hello({"sandbox_dir": tempfile.mkdtemp()})
n = [0]

def req(method, params):
    n[0] += 1
    r, _ = main.handle(json.dumps({"id": n[0], "method": method, "params": params}).encode())
    assert r["ok"], r
    return json.loads(main.response_line(r))["result"]
`

// fontScript: the undo of a text parks the font it loaded on the pile
// (a font's name is read-only: no tombstone) instead of freeing it, which
// walks all of Main; the next text takes it back, so freeing the pile
// never takes a font from a live text.
const fontScript = pileScript + `
def text(name):
    return req("execute", {"tool": "text.create", "args": {"name": name, "body": name}})

def parked():
    return [x.name for x in trash.TRASH["ids"] if isinstance(x, bpy.types.VectorFont)]

def fonts():
    return sorted(f.name for f in bpy.data.fonts)

a = text("A")
loaded = a["undo"]["fonts_created"]
assert len(loaded) == 1 and fonts() == loaded, (loaded, fonts())
req("undo", {"undo": a["undo"]})
assert parked() == loaded, parked()
assert full_snapshot()[1] == STATE.scene_hash()

b = text("B")  # takes the parked font back: the same record as A's
assert b["undo"]["fonts_created"] == loaded and parked() == [], (b["undo"], parked())
trash.empty_trash()
assert fonts() == loaded and bpy.data.objects["B"].data.font is not None
assert full_snapshot()[1] == STATE.scene_hash()

c = text("C")  # the font was loaded already: C brought none
assert c["undo"]["fonts_created"] == [], c["undo"]
req("undo", {"undo": c["undo"]})
req("undo", {"undo": b["undo"]})
assert parked() == loaded, parked()
trash.empty_trash()
assert fonts() == [] and not bpy.data.curves, (fonts(), list(bpy.data.curves))

# A text undone while another still uses the font leaves it in place.
d, e = text("D"), text("E")
req("undo", {"undo": e["undo"]})
trash.empty_trash()
assert parked() == [] and fonts() == loaded and bpy.data.objects["D"].data.font is not None
assert full_snapshot()[1] == STATE.scene_hash()
print("FONT-OK")
`

// pileSaveScript: a checkpoint's save frees nothing of the pile, and the
// file holds none of its objects; what it holds of the pile (the data the
// pile's objects used: a mesh, a camera, a text's curve and font, the void
// mesh of an undone linked copy) loads back onto the pile, with no users
// and not tracked; the pile's names go on from the saved ones; freeing it
// leaves no tombstone, and the next save holds none.
const pileSaveScript = pileScript + `
import os
from common import is_tomb

def tombs():
    return sorted((c, d.name) for c in sorted(trash.ID_COLLECTIONS) for d in getattr(bpy.data, c) if is_tomb(d.name))

def pile():  # the void mesh too, once made
    return sorted((trash.collection_of(d), d.name) for d in trash.TRASH["ids"] + [trash._live_void()] if d is not None)

req("execute", {"tool": "object.create", "args": {"type": "cube", "name": "Keep"}})
made = [req("execute", {"tool": t, "args": a}) for t, a in (
    ("object.create", {"type": "cube", "name": "A"}),
    ("camera.create", {"name": "C"}),
    ("text.create", {"name": "T", "body": "pile"}),
    ("object.duplicate", {"name": "Keep", "new_name": "L", "linked": True}),
)]
for r in reversed(made):
    req("undo", {"undo": r["undo"]})
before = pile()
assert before and tombs() == sorted(x for x in before if x[0] != "fonts"), (before, tombs())

d = tempfile.mkdtemp()
saved = req("save_checkpoint", {"path": os.path.join(d, "a.blend")})
assert pile() == before, ("the save freed", before, pile())
counter = trash.trash_counter()
trash.TRASH["n"] = 0  # as in another Blender (a refresh, a recovery)
loaded = req("load_checkpoint", {"path": os.path.join(d, "a.blend")})
assert loaded["scene_hash"] == saved["scene_hash"] == STATE.scene_hash() == full_snapshot()[1], (saved, loaded)
back = pile()
assert not [x for x in back if x[0] == "objects"], ("the file held the pile's objects", back)
kinds = sorted({c for c, _ in back})
assert kinds == ["cameras", "curves", "fonts", "meshes"], kinds
assert [x for x in tombs() if x not in back] == [], ("tombstones off the pile", tombs(), back)
assert all(d.users == 0 or trash.collection_of(d) == "fonts" for d in trash.TRASH["ids"]), [(d.name, d.users) for d in trash.TRASH["ids"]]
assert trash.trash_counter() == counter

# The next discard's names follow the saved ones: none meets a loaded name.
r = req("execute", {"tool": "object.create", "args": {"type": "cube", "name": "B"}})
req("undo", {"undo": r["undo"]})
new = [x for x in pile() if x not in back]
assert new == [("meshes", "\x7fbp_tomb_x%d" % (counter + 2)), ("objects", "\x7fbp_tomb_x%d" % (counter + 1))], (counter, new)

# A new text takes the loaded font back off the pile.
font = [dd for dd in trash.TRASH["ids"] if trash.collection_of(dd) == "fonts"]
t = req("execute", {"tool": "text.create", "args": {"name": "T", "body": "pile"}})
assert t["undo"]["fonts_created"] == [font[0].name] and font[0] not in trash.TRASH["ids"], t["undo"]
assert bpy.data.objects["T"].data.font == font[0]

trash.empty_trash()
assert tombs() == [], tombs()
assert full_snapshot()[1] == STATE.scene_hash()
again = req("save_checkpoint", {"path": os.path.join(d, "b.blend")})
req("load_checkpoint", {"path": os.path.join(d, "b.blend")})
assert tombs() == [] and pile() == [] and STATE.scene_hash() == again["scene_hash"], (tombs(), pile())
print("PILE-SAVE-OK")
`

// TestPileNotFreedBySave: see pileSaveScript.
func TestPileNotFreedBySave(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		runBridgeScript(t, rt, pileSaveScript, "PILE-SAVE-OK")
	})
}

// TestTextUndoParksFont: see fontScript.
func TestTextUndoParksFont(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		runBridgeScript(t, rt, fontScript, "FONT-OK")
	})
}

// TestParkedFontReloaded: a checkpoint saved while an undone text's font
// is parked loads with the hash it was saved with and the font parked
// again (pileSaveScript), so the first python.exec, which frees the pile
// first, finds no font; a text made after that loads the font anew.
func TestParkedFontReloaded(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		txt := mustExecute(t, p, "text.create", map[string]any{"name": "T", "body": "parked"})
		if _, err := p.Undo(callCtx(t), txt.Undo, Call{}); err != nil {
			t.Fatal(err)
		}
		q := reloaded(t, p, rt, assertIncrementalMatchesFull(t, p).SceneHash)
		fonts := `result = sorted(f.name for f in bpy.data.fonts)`
		if got := string(execResult(t, q, fonts)); got != "[]" {
			t.Fatalf("fonts in the loaded checkpoint: %s", got)
		}
		again := mustExecute(t, q, "text.create", map[string]any{"name": "T", "body": "parked"})
		if again.SceneHashAfter != txt.SceneHashAfter {
			t.Fatalf("the same text after the load hashes %s, first %s", again.SceneHashAfter, txt.SceneHashAfter)
		}
		assertIncrementalMatchesFull(t, q)
	})
}
