"""Bare persistent Blender: the baseline of BenchmarkObjectCreate400 (e2e/bench_test.go).

Reads one JSON line per create from stdin, {"name": "...", "location": [x, y, z]},
and does what the bridge's object.create does for a cube, with nothing around it
(no schema check, no incremental scene hash, no undo bookkeeping, no journal):
bmesh.ops.create_cube into a new mesh, a new object, linked to the scene
collection, location set. Then it writes one ack line "BARE-ACK <name>" to stdout.

Run as `python bare_blender.py` (a Python that can import bpy) or
`blender -b --factory-startup --python bare_blender.py`. Blender writes its own
lines to stdout, so the benchmark skips every line without the ack prefix; the
script prints "BARE-READY" once the scene is set up.
"""

import json
import sys

import bpy  # first: the bpy module provides bmesh
import bmesh

ACK = "BARE-ACK "


def create_cube(name, location, size=2.0):
    sc = bpy.context.scene
    bm = bmesh.new()
    try:
        bmesh.ops.create_cube(bm, size=size)
        me = bpy.data.meshes.new(name)
        bm.to_mesh(me)
    finally:
        bm.free()
    me.update()
    ob = bpy.data.objects.new(name, me)
    ob.location = location
    sc.collection.objects.link(ob)
    return ob


def main():
    bpy.ops.wm.read_factory_settings(use_empty=True)
    out = sys.stdout
    out.write("BARE-READY\n")
    out.flush()
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        req = json.loads(line)
        ob = create_cube(req["name"], req.get("location", (0.0, 0.0, 0.0)))
        out.write(ACK + ob.name + "\n")
        out.flush()


main()
