package blender

import "testing"

// idleScript serves requests through main.serve over pipes from a client
// thread: six creates written at once (five wait in the bridge's buffer),
// their six undos at once, then nothing. The discarded objects and meshes
// must be freed while no request comes (trash.reclaim), and nothing of them
// be left once the client is done.
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
        deadline = time.monotonic() + 60
        while trash.TRASH["ids"] and time.monotonic() < deadline:
            time.sleep(0.05)
        seen["left"] = len(trash.TRASH["ids"])
    finally:
        send(("shutdown", {}))

t = threading.Thread(target=client)
t.start()
main.serve(req_r, resp_w)
t.join()
assert seen.get("left") == 0, seen
tombs = [d.name for c in (bpy.data.objects, bpy.data.meshes) for d in c if d.name.startswith("__bp_tomb_")]
assert not tombs, tombs
assert full_snapshot()[1] == STATE.scene_hash()
print("IDLE-OK")
`

// TestTrashReclaimedWhenIdle: what undos discarded is freed while no
// request comes, not only when the pile is full or a file is written.
func TestTrashReclaimedWhenIdle(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		runBridgeScript(t, rt, idleScript, "IDLE-OK")
	})
}
