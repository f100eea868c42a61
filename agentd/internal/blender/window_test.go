package blender

import "testing"

// windowScript drives checkpoints of an animated scene through main.handle
// and checks where the window's scene is (bridge/window.py): parked in a new
// scene, after a save and after a load, and while data-only tools run; the
// session's again before an export and python.exec, which see the scene
// exactly as a session that never saved or loaded a checkpoint does, and in
// the pause after a save that parked it awake.
const windowScript = `
import json, os, sys, tempfile
sys.path.insert(0, sys.argv[sys.argv.index("--") + 1] if "--" in sys.argv else sys.argv[1])
import bpy
import main, sandbox, window
from state import STATE, full_snapshot

main.m_hello({"sandbox_dir": tempfile.mkdtemp()})
n = [0]

def call(method, **params):
    n[0] += 1
    resp, _ = main.handle(json.dumps({"id": n[0], "method": method, "params": params}).encode())
    r = json.loads(main.response_line(resp))
    assert r["ok"], (method, params, r)
    return r["result"]

def where():
    return bpy.context.window.scene.name

def consistent():
    h = STATE.scene_hash()
    assert full_snapshot()[1] == h, "incremental hash differs from a full recomputation"
    return h

def export(name):
    call("execute", tool="scene.export", args={"format": "obj", "output": name})
    with open(os.path.join(sandbox.SANDBOX["dir"], name), "rb") as f:
        return f.read()

assert where() == window.PARKED, "a new scene is shown parked"
window.wake()  # the exports below compare with one of a window that was never parked since
call("execute", tool="object.create", args={"type": "cube", "name": "A"})
call("execute", tool="keyframe.insert", args={"object": "A", "data_path": "location", "frame": 1})
call("execute", tool="keyframe.insert", args={"object": "A", "data_path": "location", "frame": 10, "value": [1, 2, 3]})
call("execute", tool="object.set_transform", args={"name": "A", "location": [7, 8, 9]})
loc = tuple(bpy.data.objects["A"].location)
before = export("same.obj")
h = consistent()
ck = os.path.join(tempfile.mkdtemp(), "ck.blend")

call("save_checkpoint", path=ck)  # parks the window the export woke, and leaves it parked
assert where() == window.PARKED, where()
assert consistent() == h and tuple(bpy.data.objects["A"].location) == loc
assert export("same.obj") == before  # wakes it
assert where() == "Scene" and window.PARKED not in bpy.data.scenes, (where(), list(bpy.data.scenes))
assert consistent() == h and tuple(bpy.data.objects["A"].location) == loc
call("save_checkpoint", path=ck)
assert where() == window.PARKED and window.REWAKE["due"]
main.idle()  # a pause: wakes the window a save parked
assert where() == "Scene" and not window.REWAKE["due"], where()
assert consistent() == h and tuple(bpy.data.objects["A"].location) == loc
assert export("same.obj") == before
call("save_checkpoint", path=ck)

call("load_checkpoint", path=ck)
assert where() == window.PARKED, where()
assert consistent() == h and tuple(bpy.data.objects["A"].location) == loc
main.idle()  # nothing woke the loaded file's window: a pause leaves it parked
call("execute", tool="scene.get_summary", args={})
call("execute", tool="object.create", args={"type": "cone", "name": "B"})
assert where() == window.PARKED, "a data-only tool woke the window"
call("execute", tool="object.delete", args={"name": "B"})
# A save while parked stays parked, and its file loads the same scene.
call("save_checkpoint", path=ck)
main.idle()
assert where() == window.PARKED
h2 = consistent()
call("load_checkpoint", path=ck)
assert consistent() == h2 and where() == window.PARKED

after = export("same.obj")
assert where() == "Scene" and window.PARKED not in bpy.data.scenes, (where(), list(bpy.data.scenes))
assert tuple(bpy.data.objects["A"].location) == loc, "waking the window moved the animated object"
assert after == before, "the export after a load differs from the export before the save"
assert consistent() == h2

call("load_checkpoint", path=ck)
out = call("execute", tool="python.exec", args={"code": "import bpy\nresult = bpy.context.scene.name"})
assert out["result"]["result"] == "Scene", out
assert where() == "Scene" and consistent() == h2

# No tool reaches the parked scene.
call("load_checkpoint", path=ck)
n[0] += 1
resp, _ = main.handle(json.dumps({"id": n[0], "method": "execute", "params": {"tool": "collection.link",
                      "args": {"object": "A", "collection": "<scene>:" + window.PARKED}}}).encode())
assert not resp["ok"] and resp["error"]["code"] == "not_found", resp
assert where() == window.PARKED and consistent() == h2

# A save leaves the window as python.exec set it: another view layer, then
# another scene; a load shows them again once woken.
show = "import bpy\nw = bpy.context.window\nresult = [w.scene.name, w.view_layer.name]"
call("execute", tool="python.exec", args={"code": "import bpy\nsc = bpy.data.scenes['Scene']\n"
     "bpy.context.window.scene = sc\nbpy.context.window.view_layer = sc.view_layers.new('VL2')"})
call("save_checkpoint", path=ck)
assert where() == window.PARKED, where()
assert call("execute", tool="python.exec", args={"code": show})["result"]["result"] == ["Scene", "VL2"]
call("execute", tool="python.exec", args={"code": "import bpy\nbpy.context.window.scene = bpy.data.scenes.new('Alt')"})
h3 = consistent()
call("save_checkpoint", path=ck)
assert where() == window.PARKED, where()
call("load_checkpoint", path=ck)
assert where() == window.PARKED and consistent() == h3
assert call("execute", tool="python.exec", args={"code": show})["result"]["result"] == ["Alt", "ViewLayer"]
call("execute", tool="python.exec", args={"code": "import bpy\nbpy.context.window.scene = bpy.data.scenes['Scene']\n"
     "bpy.context.window.view_layer = bpy.data.scenes['Scene'].view_layers['VL2']"})
call("save_checkpoint", path=ck)
call("load_checkpoint", path=ck)
assert call("execute", tool="python.exec", args={"code": show})["result"]["result"] == ["Scene", "VL2"]

# A datablock nothing uses survives the checkpoint, and keeps no fake user.
call("execute", tool="material.create", args={"name": "Spare"})
h4 = consistent()
call("save_checkpoint", path=ck)
m = bpy.data.materials["Spare"]
assert m.users == 0 and not m.use_fake_user, (m.users, m.use_fake_user)
call("load_checkpoint", path=ck)
m = bpy.data.materials["Spare"]
assert consistent() == h4 and m.users == 0 and not m.use_fake_user, (m.users, m.use_fake_user)

# The file itself: its state where this bridge reads it, and where older
# bridges read theirs a hash no scene has (they refuse the file); a file of
# theirs (their state where they wrote it) loads: one from before the pile's
# data travelled ("_2"), and one from before the parked window ("", the
# window on the scene).
from common import OLD_STATE_PROPS, STATE_PROP
call("save_checkpoint", path=ck)
for older in OLD_STATE_PROPS:
    bpy.ops.wm.open_mainfile(filepath=ck, load_ui=False, use_scripts=False)
    sc = bpy.data.scenes["Scene"]
    state = json.loads(sc[STATE_PROP])
    assert state["scene_hash"] == h4, state
    for prop in OLD_STATE_PROPS:
        assert json.loads(sc[prop])["scene_hash"] not in (h4, ""), (prop, sc[prop])
    sc[older] = sc[STATE_PROP]
    del sc[STATE_PROP]
    if older == OLD_STATE_PROPS[-1]:
        del sc[OLD_STATE_PROPS[0]]
        bpy.context.window.scene = sc
        bpy.data.scenes.remove(bpy.data.scenes[window.PARKED])
    old = os.path.join(os.path.dirname(ck), "old.blend")
    bpy.ops.wm.save_as_mainfile(filepath=old, copy=True, compress=False)
    call("load_checkpoint", path=old)
    assert consistent() == h4, older
    assert where() == ("Scene" if older == OLD_STATE_PROPS[-1] else window.PARKED), (older, where())
# A reset after a save that parked a woken window shows the new scene
# parked, and the pause after it leaves it so.
call("execute", tool="python.exec", args={"code": "pass"})
call("save_checkpoint", path=ck)
assert where() == window.PARKED and window.REWAKE["due"]
call("reset")
main.idle()
assert where() == window.PARKED and not window.REWAKE["due"], where()
print("WINDOW-OK")
`

// TestParkedWindow: checkpoints are saved with the window's scene parked,
// so a load does not evaluate the session's scene until an operator needs
// it; everything a tool sees is the same as without (window.py), no tool
// reaches the parked scene, and the window shows what it showed before the
// save. Also: a datablock nothing uses survives a checkpoint.
func TestParkedWindow(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		runBridgeScript(t, rt, windowScript, "WINDOW-OK")
	})
}
