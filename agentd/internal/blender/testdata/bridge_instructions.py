"""The bridge's instructions per call, counted rather than timed.

Wall-clock time on a shared 2-CPU machine moves by 2-3x within an hour, so a
change of a few percent in the bridge cannot be timed. Valgrind's count of
executed instructions can: it is the same from run to run within about 0.2 %
of a call (Blender on one thread, a fixed hash seed). This script serves one
hello, 20 warm-up cubes and then N calls through main.handle and
main.response_line, as serve does, into memory (no pipe). Count it with
SERVE=1 and SERVE=0 (the N requests built, none served); the difference over
N is one call's instructions, Blender's included:

    run() { BRIDGE=agentd/internal/blender/bridge N=2000 SERVE=$1 TOOL=create PYTHONHASHSEED=0 \\
        valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \\
        blender -b -t 1 --factory-startup --python agentd/internal/blender/testdata/bridge_instructions.py \\
        2>&1 | sed -n 's/.*I *refs: *//p' | tr -d ,; }
    echo $(( ($(run 1) - $(run 0)) / 2000 ))

(with the bpy wheel: .blender/venv/bin/python in place of blender's
arguments). TOOL is create (object.create of named cubes, as
ObjectCreate400) or set (object.set_transform of the warm-up cubes, as
Scale/Durable). Point BRIDGE at a worktree's bridge to compare two trees.
docs/BENCHMARKS.md has the numbers.
"""

import io
import json
import os
import sys
import tempfile

sys.argv = ["bridge_instructions"]
sys.path.insert(0, os.path.abspath(os.environ.get("BRIDGE", "agentd/internal/blender/bridge")))
import main  # noqa: E402  (the bridge, from BRIDGE)

main.OUT["stream"] = io.BytesIO()
N = int(os.environ.get("N", "2000"))
TOOL = os.environ.get("TOOL", "create")


def line(rid, method, params):
    return json.dumps({"id": rid, "method": method, "params": params}).encode() + b"\n"


def serve(request):
    resp, _ = main.handle(request)
    assert resp["ok"], resp
    main.OUT["stream"].write(main.response_line(resp).encode("ascii") + b"\n")


serve(line(1, "hello", {"sandbox_dir": tempfile.mkdtemp()}))
for j in range(20):
    serve(line(2 + j, "execute", {"tool": "object.create", "args": {"type": "cube", "name": "W%03d" % j}}))
requests = []
for j in range(N):
    p = {"mutation_id": "m-%d-%s" % (j, "a" * 24), "request_id": "bench", "operation_id": "op-%03d" % j, "batch": "b"}
    if TOOL == "create":
        p.update(tool="object.create", args={"type": "cube", "name": "C%04d" % j,
                                             "location": [float(j % 20 * 3), float(j // 20 % 20 * 3), 0.0]})
    else:
        p.update(tool="object.set_transform", args={"name": "W%03d" % (j % 20), "location": [float(j), 1.0, 2.0]})
    requests.append(line(100 + j, "execute", p))
if os.environ.get("SERVE", "1") == "1":
    for r in requests:
        serve(r)
sys.stdout.flush()
os._exit(0)
