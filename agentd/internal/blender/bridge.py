"""Blendplane bridge: runs inside Blender's Python and serves agentd.

Transport
---------
JSON lines over two inherited file descriptors: requests arrive on ``--fd-in``
(fd 3), responses leave on ``--fd-out`` (fd 4). Never stdout, which Blender
writes to. Diagnostics (with correlation ids) go to stderr, one line each.

    request:  {"id": N, "method": "hello|reset|execute|undo|save_checkpoint|
                                    load_checkpoint|scene_hash|snapshot|shutdown",
               "params": {...}}
    response: {"id": N, "ok": true, "result": {...}}
              {"id": N, "ok": false, "error": {"code": "...", "message": "...",
                                                "scene_hash": "..."}}

Error codes (seed-001): invalid_input, not_found, conflict, policy_refused,
capability_missing, timeout, internal_error. A bad request never stops the
bridge; an unexpected Python exception becomes ``internal_error`` with a
one-line message, and its traceback goes to stderr.

Run it as ``blender -b --factory-startup --python bridge.py -- --fd-in 3 --fd-out 4``
or ``python bridge.py --fd-in 3 --fd-out 4`` (a Python that can import bpy).

Baseline scene (``reset``; also loaded by ``hello``)
----------------------------------------------------
Identical on every run and on Blender 3.4 and 4.5. Factory settings with an
empty scene (``wm.read_factory_settings(use_empty=True)``), every tracked
datablock removed, then built with ``bpy.data``:

- scene "Scene" (the only scene), view layer "ViewLayer", frame 1 (range 1-250), 24 fps;
- object "Camera" (camera data "Camera": perspective, lens 50 mm, sensor 36 mm,
  sensor fit AUTO, clip 0.1-100 m) at location (7.3589, -6.9258, 4.9583),
  rotation_euler XYZ (1.1093, 0.0, 0.8149), scale 1; ``scene.camera = Camera``;
- object "Light" (light data "Light": POINT, 1000 W, white, radius 0.1 m) at
  (4.0762, 1.0055, 5.9039), rotation 0, scale 1;
- both objects linked to the scene's master collection; no other collection;
  no active object;
- world "World": no nodes, color (0.05, 0.05, 0.05);
- render: engine CYCLES, device CPU, 640x480 at 100 %, PNG RGBA 8 bit, every
  stamp/metadata field off (render.still also strips PNG text/time chunks), no film transparency, compositing and sequencer off,
  color management Standard view / no look / exposure 0 / gamma 1;
- Cycles: 16 samples, seed 0, animated seed off, adaptive sampling off,
  denoising off (render determinism).

Scene state ``scene_state_v1``
------------------------------
The canonical snapshot holds one record per datablock that a tool can touch:
objects, meshes, cameras, lights, materials, collections, worlds and scenes
(render settings live in the scene record). Keys are ``"<kind>:<name>"``.
Floats are rounded to 5 decimal places (a 1e-5 tolerance) and -0.0 becomes
0.0; mesh vertex coordinates enter as integers ``round(x * 1e5)`` through a
SHA-256 digest, together with the face topology (each face's vertex indices
rotated to start at the lowest index, faces sorted, so face order and a face's
first loop do not matter). Object membership in
collections is stored on the object (the scene's master collection is named
``"<scene>:<scene name>"``), so adding an object re-digests only that object.
Each record is encoded as JSON with sorted keys, separators ``(",", ":")`` and
ASCII escapes; its digest is the SHA-256 of that encoding.

    acc        = sum(int(sha256(key + "\\0" + digest), 16) for every record) mod 2**256
    scene_hash = sha256("scene_state_v1:" + "%064x" % acc)   (lowercase hex)

``acc`` is a multiset hash: a tool reports the keys it touched, and only those
records are re-digested (subtract the old term, add the new one). ``snapshot``
recomputes everything from scratch. Tombstones (below) are not in the state.

Compensations (``execute`` -> ``undo``)
---------------------------------------
Every tool with ``rollback_method: compensation`` computes, before it mutates,
a plain JSON undo record that reverses it exactly, and ``execute`` returns it
as ``"undo"`` (``null`` for read-only tools and for render.still, which writes
only a file). ``undo`` (params ``{"undo": record}`` plus correlation ids)
applies one; right after the call that produced it, it returns that call's
``scene_hash_before``. Records of several calls apply in reverse order. An
applier validates first (``conflict`` when the record no longer fits the
scene, ``invalid_input`` when it is malformed), then mutates in steps that
each register their own reversal, so a failure midway leaves the scene as it
was. It touches only the keys of the change: cost follows the change, not the
scene. Floats in records are exact (float32 values as JSON doubles), so a
restore is bit-identical. Shapes (``v`` = UNDO_VERSION = 1):

    {"v":1,"tool":"object.create","object":O,"mesh":M,"scene":S,"view_layer":VL,
     "active_before":name|null}                  -> remove O and M, reactivate
    {"v":1,"tool":"object.set_transform","object":O,"location":[3],
     "rotation_euler":[3],"scale":[3]}           -> put the three back
    {"v":1,"tool":"object.delete","object":O,"tomb":T,
     "data":{"kind":"mesh|camera|light","name":D,"tomb":T|null}|null,
     "collections":[{"scene":S}|{"collection":C}],
     "children":[{"name":N,"matrix_parent_inverse":[[4]x4]}],
     "camera_of":[S],
     "bases":[{"scene":S,"view_layer":VL,"active":b,"select":b,"hide":b}]}
                                                  -> un-tombstone (below)

Tombstones
----------
``object.delete`` does not free the object: it tombstones it, so the delete
can be compensated. It clears the parent of the object's children, clears
``scene.camera`` where it was the camera, deactivates it, unlinks it from every
collection, renames it (and its mesh/camera/light data, when the object was
the data's only user) to a reserved name ``__bp_tomb_<key>``, stores the live
name in its custom property ``__bp_tomb_of`` and gives it a fake user so that
nothing purges it and checkpoints keep it. ``<key>`` is ``m`` + 24 hex digits
of sha256(mutation_id) when execute got a ``mutation_id`` (a replay of the same
mutations picks the same names whatever was rolled back in between), else a
per-session counter (``BRIDGE["tomb_counter"]``, saved inside checkpoints).
The undo record relinks it to the same collections, renames it (and its data)
back, restores children's parents, the scene camera, the active object and
the selection/hide state of its bases.

Tombstones are invisible: every datablock named ``__bp_tomb_*`` is left out of
the scene_state_v1 snapshot and hash and out of scene.get_summary; tools
refuse names starting with ``__bp_`` (``invalid_input``, or ``not_found`` for
an existing tombstone), and since the live name is free again, a later
``object.create`` of the same name gets exactly that name (no ``.001``).
Tombstones live until the session ends (``reset`` and process exit drop them;
checkpoints keep them). They are not garbage collected: a session that deletes
a lot carries its deleted objects in memory and in its checkpoints. References
a tool cannot create (constraints, modifiers, drivers pointing at the deleted
object) keep pointing at the tombstone; a freed object would have cleared them.

Checkpoints
-----------
``save_checkpoint`` ``{"path": abs}`` writes the whole file with
``wm.save_as_mainfile(copy=True, compress=False, relative_remap=False)``: the
session's file path and state stay as they are. The bridge state (tomb
counter) and the scene hash travel in the scene custom property
``__bp_bridge_state``, set only for the duration of the save (custom
properties are not in scene_state_v1). Go writes ``path.tmp`` through this,
fsyncs it, renames it over the target and fsyncs the directory.
``load_checkpoint`` ``{"path": abs}`` runs ``wm.open_mainfile(load_ui=False,
use_scripts=False)``, takes the bridge state out of the scene, rebuilds the
incremental hash from scratch, and fails with ``internal_error`` (scene
loaded anyway) if the result differs from the hash recorded at save time.
Replaying the same calls on a loaded checkpoint reproduces the same hashes and
the same undo records: every tool is a function of the scene and its args.

Test faults (hello ``"faults": [...]``; never in production)
-----------------------------------------------------------
``"undo"``: every ``undo`` stops after part of its work (after unlinking for
object.create, after the location for set_transform, after the renames for
object.delete) and fails with ``internal_error`` WITHOUT rolling back; the
error's ``scene_hash`` is the honest hash of that partial scene. agentd enables
it through ``BLENDPLANE_TEST_FAULTS=undo``. Separately, execute's and undo's
``inject_failure`` param names a ``Tx.checkpoint`` label to fail at, after
which the normal rollback runs (tests of "no partial effect").
"""

import hashlib
import json
import math
import os
import platform
import re
import sys
import time
import traceback

import bpy  # first: the bpy module provides bmesh and mathutils
import bmesh
from mathutils import Matrix

PROTOCOL_VERSION = 1
SCHEMA = "scene_state_v1"
TOOL_VERSION = "1.0.0"
MAX_NAME_BYTES = 63  # Blender truncates longer ID names (MAX_ID_NAME - 2 - 1).
RESERVED_PREFIX = "__bp_"  # names the bridge keeps for itself; tools refuse them
TOMB_PREFIX = "__bp_tomb_"  # tombstoned (deleted, restorable) objects and their data
TOMB_OF = "__bp_tomb_of"  # custom property on a tombstone: the object's live name
STATE_PROP = "__bp_bridge_state"  # scene custom property, only inside checkpoints

_corr = {}  # correlation ids of the request being served, for log lines


def log(msg, **attrs):
    attrs = dict(_corr, **attrs)
    parts = ["blendplane-bridge:", msg]
    parts += ["%s=%s" % (k, json.dumps(v)) for k, v in sorted(attrs.items()) if v not in (None, "")]
    sys.stderr.write(" ".join(parts) + "\n")
    sys.stderr.flush()


class ToolError(Exception):
    def __init__(self, code, message):
        Exception.__init__(self, message)
        self.code = code
        self.message = message


# ---------------------------------------------------------------------------
# Version adapters: every Blender 3.4 / 4.5 difference lives here.

def blender_version():
    return tuple(bpy.app.version)


def build_string(value):
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return value


def build_platform():
    p = build_string(bpy.app.build_platform)
    if not p or p == "Unknown":  # Debian's 3.4 build does not record it
        p = sys.platform
    return p.lower()


def eevee_engine():
    items = bpy.types.RenderSettings.bl_rna.properties["engine"].enum_items.keys()
    for name in ("BLENDER_EEVEE_NEXT", "BLENDER_EEVEE"):  # 4.2-4.5 renamed EEVEE
        if name in items:
            return name
    return None


def has_cycles():
    return hasattr(bpy.types.Scene, "cycles")


def world_use_nodes(world):
    # World.use_nodes is deprecated after 4.5; absent means node-less is impossible.
    return bool(getattr(world, "use_nodes", False))


def set_world_use_nodes(world, value):
    if hasattr(world, "use_nodes"):
        world.use_nodes = value


def stamp_flags(render):
    return sorted(p for p in dir(render) if p == "use_stamp" or p.startswith("use_stamp_"))


# ---------------------------------------------------------------------------
# Canonical encoding.

def qf(x):
    r = round(float(x), 5)
    return r + 0.0 if r != 0 else 0.0  # folds -0.0 into 0.0


def qv(v):
    return [qf(x) for x in v]


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def sha256_hex(data):
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def is_tomb(name):
    return name.startswith(TOMB_PREFIX)


def collection_label(coll):
    for sc in bpy.data.scenes:
        if sc.collection == coll:
            return "<scene>:" + sc.name
    return coll.name


def record_object(name):
    ob = bpy.data.objects.get(name)
    if ob is None:
        return None
    return {
        "name": ob.name,
        "type": ob.type,
        "data": ob.data.name if ob.data is not None else None,
        "parent": ob.parent.name if ob.parent is not None else None,
        "location": qv(ob.location),
        "rotation_mode": ob.rotation_mode,
        "rotation_euler": qv(ob.rotation_euler),
        "scale": qv(ob.scale),
        "hide_viewport": bool(ob.hide_viewport),
        "hide_render": bool(ob.hide_render),
        "hide_select": bool(ob.hide_select),
        "collections": sorted(collection_label(c) for c in ob.users_collection),
        "materials": [s.material.name if s.material else None for s in ob.material_slots],
    }


def mesh_geometry_digest(me):
    n = len(me.vertices)
    co = [0.0] * (3 * n)
    me.vertices.foreach_get("co", co)
    h = hashlib.sha256()
    h.update(",".join(str(int(round(x * 100000))) for x in co).encode("ascii"))
    h.update(b"|")
    loops = [0] * len(me.loops)
    me.loops.foreach_get("vertex_index", loops)
    starts = [0] * len(me.polygons)
    me.polygons.foreach_get("loop_start", starts)
    sizes = [0] * len(me.polygons)
    me.polygons.foreach_get("loop_total", sizes)
    faces = []
    for s, n in zip(starts, sizes):
        f = loops[s:s + n]
        k = f.index(min(f)) if f else 0
        faces.append(tuple(f[k:] + f[:k]))  # same winding, lowest vertex first
    # Face order and the first loop of a face differ between Blender versions
    # for the same primitive (UV sphere on 3.4 vs 4.5); the shape does not.
    faces.sort()
    h.update(";".join(",".join(map(str, f)) for f in faces).encode("ascii"))
    return h.hexdigest()


def record_mesh(name):
    me = bpy.data.meshes.get(name)
    if me is None:
        return None
    return {
        "name": me.name,
        "vertices": len(me.vertices),
        "edges": len(me.edges),
        "polygons": len(me.polygons),
        "loops": len(me.loops),
        "geometry_sha256": mesh_geometry_digest(me),
        "materials": [m.name if m else None for m in me.materials],
    }


def record_camera(name):
    c = bpy.data.cameras.get(name)
    if c is None:
        return None
    return {
        "name": c.name,
        "type": c.type,
        "lens": qf(c.lens),
        "lens_unit": c.lens_unit,
        "sensor_width": qf(c.sensor_width),
        "sensor_fit": c.sensor_fit,
        "clip_start": qf(c.clip_start),
        "clip_end": qf(c.clip_end),
        "shift": [qf(c.shift_x), qf(c.shift_y)],
    }


def record_light(name):
    l = bpy.data.lights.get(name)
    if l is None:
        return None
    return {
        "name": l.name,
        "type": l.type,
        "energy": qf(l.energy),
        "color": qv(l.color),
        "shadow_soft_size": qf(l.shadow_soft_size),
    }


def record_material(name):
    m = bpy.data.materials.get(name)
    if m is None:
        return None
    return {
        "name": m.name,
        "diffuse_color": qv(m.diffuse_color),
        "metallic": qf(m.metallic),
        "roughness": qf(m.roughness),
        "use_nodes": bool(m.use_nodes),
    }


def record_collection(name):
    c = bpy.data.collections.get(name)
    if c is None:
        return None
    return {
        "name": c.name,
        "children": sorted(ch.name for ch in c.children),
        "hide_viewport": bool(c.hide_viewport),
        "hide_render": bool(c.hide_render),
    }


def record_world(name):
    w = bpy.data.worlds.get(name)
    if w is None:
        return None
    return {"name": w.name, "color": qv(w.color), "use_nodes": world_use_nodes(w)}


def record_scene(name):
    sc = bpy.data.scenes.get(name)
    if sc is None:
        return None
    r = sc.render
    vs = sc.view_settings
    active = None
    if len(sc.view_layers):
        a = sc.view_layers[0].objects.active
        active = a.name if a is not None else None
    rec = {
        "name": sc.name,
        "camera": sc.camera.name if sc.camera else None,
        "world": sc.world.name if sc.world else None,
        "active_object": active,
        "view_layers": [vl.name for vl in sc.view_layers],
        "collection_children": sorted(c.name for c in sc.collection.children),
        "frame": [sc.frame_current, sc.frame_start, sc.frame_end],
        "render": {
            "engine": r.engine,
            "resolution": [r.resolution_x, r.resolution_y, r.resolution_percentage],
            "fps": [r.fps, qf(r.fps_base)],
            "film_transparent": bool(r.film_transparent),
            "filepath": r.filepath,
            "image": [r.image_settings.file_format, r.image_settings.color_mode, r.image_settings.color_depth],
            "stamps": [f for f in stamp_flags(r) if getattr(r, f)],
            "use_compositing": bool(r.use_compositing),
            "use_sequencer": bool(r.use_sequencer),
            "color_management": [vs.view_transform, vs.look, qf(vs.exposure), qf(vs.gamma)],
        },
    }
    if hasattr(sc, "cycles"):
        cy = sc.cycles
        rec["cycles"] = {
            "device": cy.device,
            "samples": cy.samples,
            "seed": cy.seed,
            "use_animated_seed": bool(cy.use_animated_seed),
            "use_adaptive_sampling": bool(cy.use_adaptive_sampling),
            "use_denoising": bool(cy.use_denoising),
        }
    return rec


KINDS = [
    # kind, snapshot section, record function, bpy.data collection name
    ("camera", "cameras", record_camera, "cameras"),
    ("collection", "collections", record_collection, "collections"),
    ("light", "lights", record_light, "lights"),
    ("material", "materials", record_material, "materials"),
    ("mesh", "meshes", record_mesh, "meshes"),
    ("object", "objects", record_object, "objects"),
    ("scene", "scenes", record_scene, "scenes"),
    ("world", "worlds", record_world, "worlds"),
]
RECORDERS = {k: f for k, _, f, _ in KINDS}


def term(key, digest):
    return int(sha256_hex(key + "\0" + digest), 16)


def hash_from_acc(acc):
    return sha256_hex(SCHEMA + ":" + "%064x" % acc)


def full_snapshot():
    """Recompute every record from scratch: (snapshot, scene_hash)."""
    snap = {"schema": SCHEMA}
    acc = 0
    for kind, section, fn, coll in KINDS:
        recs = {}
        for db in getattr(bpy.data, coll):
            if db.library is not None or is_tomb(db.name):
                continue
            rec = fn(db.name)
            recs[db.name] = rec
            acc = (acc + term(kind + ":" + db.name, sha256_hex(canonical(rec)))) % (1 << 256)
        snap[section] = recs
    return snap, hash_from_acc(acc)


class SceneState:
    """Per-datablock digests and the running multiset hash."""

    def __init__(self):
        self.digests = {}
        self.acc = 0

    def rebuild(self):
        self.digests = {}
        self.acc = 0
        for kind, _, fn, coll in KINDS:
            for db in getattr(bpy.data, coll):
                if db.library is None and not is_tomb(db.name):
                    self._set(kind + ":" + db.name, sha256_hex(canonical(fn(db.name))))

    def _set(self, key, digest):
        old = self.digests.pop(key, None)
        if old is not None:
            self.acc = (self.acc - term(key, old)) % (1 << 256)
        if digest is not None:
            self.digests[key] = digest
            self.acc = (self.acc + term(key, digest)) % (1 << 256)

    def touch(self, kind, name):
        rec = None if is_tomb(name) else RECORDERS[kind](name)
        self._set(kind + ":" + name, sha256_hex(canonical(rec)) if rec is not None else None)

    def scene_hash(self):
        return hash_from_acc(self.acc)


STATE = SceneState()

# ---------------------------------------------------------------------------
# Baseline scene.

TRACKED_COLLECTIONS = ("objects", "meshes", "cameras", "lights", "materials", "worlds", "collections")


def reset_scene():
    bpy.ops.wm.read_factory_settings(use_empty=True)
    BRIDGE["tomb_counter"] = 0
    for coll in TRACKED_COLLECTIONS:
        data = getattr(bpy.data, coll)
        for db in list(data):
            data.remove(db)
    scenes = list(bpy.data.scenes)
    sc = scenes[0]
    for other in scenes[1:]:
        bpy.data.scenes.remove(other)
    sc.name = "Scene"
    if len(sc.view_layers):
        sc.view_layers[0].name = "ViewLayer"

    cam = bpy.data.cameras.new("Camera")
    cam.type = "PERSP"
    cam.lens_unit = "MILLIMETERS"
    cam.lens = 50.0
    cam.sensor_width = 36.0
    cam.sensor_fit = "AUTO"
    cam.clip_start = 0.1
    cam.clip_end = 100.0
    cam.shift_x = 0.0
    cam.shift_y = 0.0
    cam_ob = bpy.data.objects.new("Camera", cam)
    cam_ob.location = (7.3589, -6.9258, 4.9583)
    cam_ob.rotation_mode = "XYZ"
    cam_ob.rotation_euler = (1.1093, 0.0, 0.8149)
    sc.collection.objects.link(cam_ob)

    light = bpy.data.lights.new("Light", "POINT")
    light.energy = 1000.0
    light.color = (1.0, 1.0, 1.0)
    light.shadow_soft_size = 0.1
    light_ob = bpy.data.objects.new("Light", light)
    light_ob.location = (4.0762, 1.0055, 5.9039)
    sc.collection.objects.link(light_ob)

    world = bpy.data.worlds.new("World")
    set_world_use_nodes(world, False)
    world.color = (0.05, 0.05, 0.05)
    sc.world = world
    sc.camera = cam_ob
    if len(sc.view_layers):
        sc.view_layers[0].objects.active = None

    sc.frame_start = 1
    sc.frame_end = 250
    sc.frame_set(1)
    r = sc.render
    r.fps = 24
    r.fps_base = 1.0
    if has_cycles():
        r.engine = "CYCLES"
    r.resolution_x = 640
    r.resolution_y = 480
    r.resolution_percentage = 100
    r.film_transparent = False
    r.use_compositing = False
    r.use_sequencer = False
    r.filepath = ""
    r.image_settings.file_format = "PNG"
    r.image_settings.color_mode = "RGBA"
    r.image_settings.color_depth = "8"
    r.image_settings.compression = 15
    for f in stamp_flags(r):
        setattr(r, f, False)
    sc.display_settings.display_device = "sRGB"
    sc.view_settings.view_transform = "Standard"
    sc.view_settings.look = "None"
    sc.view_settings.exposure = 0.0
    sc.view_settings.gamma = 1.0
    if has_cycles():
        cy = sc.cycles
        cy.device = "CPU"
        cy.samples = 16
        cy.seed = 0
        cy.use_animated_seed = False
        cy.use_adaptive_sampling = False
        cy.use_denoising = False
    STATE.rebuild()
    return STATE.scene_hash()


def current_scene():
    return bpy.data.scenes.get("Scene") or bpy.data.scenes[0]


# ---------------------------------------------------------------------------
# A tiny JSON Schema checker for the subset our tool schemas use. Go validates
# args first; this keeps a bad request from reaching bpy.

def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _is_integer(v):
    return _is_number(v) and float(v).is_integer()


def check(schema, value, path="args"):
    t = schema.get("type")
    if t == "object":
        if not isinstance(value, dict):
            raise ToolError("invalid_input", "%s: must be an object" % path)
        props = schema.get("properties", {})
        for req in schema.get("required", []):
            if req not in value:
                raise ToolError("invalid_input", "%s: missing required property %r" % (path, req))
        if schema.get("additionalProperties") is False:
            for k in sorted(value):
                if k not in props:
                    raise ToolError("invalid_input", "%s: unknown property %r" % (path, k))
        if len(value) < schema.get("minProperties", 0):
            raise ToolError("invalid_input", "%s: needs at least %d properties" % (path, schema["minProperties"]))
        for k in sorted(value):
            if k in props:
                check(props[k], value[k], path + "." + k)
    elif t == "array":
        if not isinstance(value, list):
            raise ToolError("invalid_input", "%s: must be an array" % path)
        if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", len(value)):
            raise ToolError("invalid_input", "%s: wrong number of items" % path)
        for i, item in enumerate(value):
            check(schema.get("items", {}), item, "%s[%d]" % (path, i))
    elif t in ("number", "integer"):
        ok = _is_integer(value) if t == "integer" else _is_number(value)
        if not ok:
            raise ToolError("invalid_input", "%s: must be a finite %s" % (path, t))
        if "minimum" in schema and value < schema["minimum"]:
            raise ToolError("invalid_input", "%s: must be >= %s" % (path, schema["minimum"]))
        if "maximum" in schema and value > schema["maximum"]:
            raise ToolError("invalid_input", "%s: must be <= %s" % (path, schema["maximum"]))
        if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
            raise ToolError("invalid_input", "%s: must be > %s" % (path, schema["exclusiveMinimum"]))
    elif t == "string":
        if not isinstance(value, str):
            raise ToolError("invalid_input", "%s: must be a string" % path)
        if len(value) < schema.get("minLength", 0) or len(value) > schema.get("maxLength", len(value)):
            raise ToolError("invalid_input", "%s: wrong length" % path)
        if "pattern" in schema and not re.search(schema["pattern"], value):
            raise ToolError("invalid_input", "%s: does not match %s" % (path, schema["pattern"]))
    elif t == "boolean":
        if not isinstance(value, bool):
            raise ToolError("invalid_input", "%s: must be a boolean" % path)
    if "enum" in schema and value not in schema["enum"]:
        raise ToolError("invalid_input", "%s: must be one of %s" % (path, ", ".join(map(str, schema["enum"]))))


def check_name(name):
    if len(name.encode("utf-8")) > MAX_NAME_BYTES:
        raise ToolError("invalid_input", "name is longer than %d bytes" % MAX_NAME_BYTES)
    if "\x00" in name:
        raise ToolError("invalid_input", "name contains a NUL character")
    if name.startswith(RESERVED_PREFIX):
        raise ToolError("invalid_input", "names starting with %r are reserved" % RESERVED_PREFIX)


# ---------------------------------------------------------------------------
# Tool transactions: touched keys and compensations for partial work.

class InjectedFault(Exception):
    """The "undo" test fault: stop midway and keep the partial work."""


class Tx:
    def __init__(self, inject_failure=None, mutation_id=None, fault=False):
        self.touched = []
        self.undo = []
        self.inject_failure = inject_failure
        self.mutation_id = mutation_id or None
        self.fault = fault
        self.undo_record = None  # the compensation a successful tool returns

    def fault_point(self, label):
        """Where the "undo" test fault (hello param faults) stops an undo."""
        if self.fault:
            raise InjectedFault("injected fault: undo stopped after " + label)

    def checkpoint(self, label):
        """Tests name a checkpoint in execute's inject_failure param to make the
        tool fail there, after partial work, and check the rollback."""
        if self.inject_failure == label:
            raise RuntimeError("injected failure at " + label)

    def touch(self, kind, name):
        if (kind, name) not in self.touched:
            self.touched.append((kind, name))

    def on_undo(self, fn):
        self.undo.append(fn)

    def rollback(self):
        for fn in reversed(self.undo):
            try:
                fn()
            except Exception:
                log("rollback step failed", trace=traceback.format_exc())
                raise

    def apply_touches(self):
        for kind, name in self.touched:
            STATE.touch(kind, name)


UNDO_VERSION = 1

VEC3 = {"type": "array", "items": {"type": "number"}, "minItems": 3, "maxItems": 3}
NAME = {"type": "string", "minLength": 1, "maxLength": MAX_NAME_BYTES}

PRIMITIVES = {
    # type: default object/mesh name (Blender's own names for these primitives)
    "cube": "Cube",
    "uv_sphere": "Sphere",
    "ico_sphere": "Icosphere",
    "plane": "Plane",
    "cylinder": "Cylinder",
    "cone": "Cone",
    "torus": "Torus",
    "monkey": "Suzanne",
}


def build_torus(bm, size):
    major, minor = size / 2.0, size / 8.0
    nu, nv = 48, 12
    verts = []
    for i in range(nu):
        a = 2.0 * math.pi * i / nu
        for j in range(nv):
            b = 2.0 * math.pi * j / nv
            r = major + minor * math.cos(b)
            verts.append(bm.verts.new((r * math.cos(a), r * math.sin(a), minor * math.sin(b))))
    for i in range(nu):
        for j in range(nv):
            i2, j2 = (i + 1) % nu, (j + 1) % nv
            bm.faces.new((verts[i * nv + j], verts[i2 * nv + j], verts[i2 * nv + j2], verts[i * nv + j2]))


def build_primitive(bm, kind, size):
    half = size / 2.0
    if kind == "cube":
        bmesh.ops.create_cube(bm, size=size)
    elif kind == "uv_sphere":
        bmesh.ops.create_uvsphere(bm, u_segments=32, v_segments=16, radius=half)
    elif kind == "ico_sphere":
        bmesh.ops.create_icosphere(bm, subdivisions=2, radius=half)
    elif kind == "plane":
        bmesh.ops.create_grid(bm, x_segments=1, y_segments=1, size=half)
    elif kind == "cylinder":
        bmesh.ops.create_cone(bm, cap_ends=True, cap_tris=False, segments=32, radius1=half, radius2=half, depth=size)
    elif kind == "cone":
        bmesh.ops.create_cone(bm, cap_ends=True, cap_tris=False, segments=32, radius1=half, radius2=0.0, depth=size)
    elif kind == "torus":
        build_torus(bm, size)
    elif kind == "monkey":
        bmesh.ops.create_monkey(bm, matrix=Matrix.Scale(half, 4))
    else:
        raise ToolError("invalid_input", "unknown primitive type %r" % kind)


def free_name(base):
    """The lowest free name of base, base.001, base.002, ...: a function of the
    scene alone, so a replay after recovery picks the same names."""
    if base not in bpy.data.objects:
        return base
    taken = set(bpy.data.objects.keys())
    i = 1
    while "%s.%03d" % (base, i) in taken:
        i += 1
    return "%s.%03d" % (base, i)


def transform_of(ob):
    return {"location": qv(ob.location), "rotation_euler": qv(ob.rotation_euler), "scale": qv(ob.scale)}


def active_view_layer(sc):
    return sc.view_layers[0] if len(sc.view_layers) else None


def tool_scene_get_summary(tx, args):
    sc = current_scene()
    objs = sorted(((ob.name, ob.type) for ob in sc.objects if not is_tomb(ob.name)))
    vl = active_view_layer(sc)
    active = vl.objects.active if vl is not None else None
    return {
        "objects": [{"name": n, "type": t} for n, t in objs],
        "active_object": active.name if active is not None else None,
        "object_count": len(objs),
    }


def tool_object_create(tx, args):
    kind = args["type"]
    size = float(args.get("size", 2.0))
    name = args.get("name")
    if name is None:
        name = free_name(PRIMITIVES[kind])
    check_name(name)
    if name in bpy.data.objects:
        raise ToolError("conflict", "an object named %r already exists" % name)
    sc = current_scene()
    vl = active_view_layer(sc)

    # Everything that can fail on input happens before the first mutation.
    bm = bmesh.new()
    try:
        build_primitive(bm, kind, size)
        me = bpy.data.meshes.new(name)
        mesh_name = me.name
        tx.touch("mesh", mesh_name)
        tx.on_undo(lambda: bpy.data.meshes.remove(bpy.data.meshes[mesh_name]))
        bm.to_mesh(me)
    finally:
        bm.free()
    me.update()
    ob = bpy.data.objects.new(name, me)
    tx.touch("object", name)
    tx.on_undo(lambda: bpy.data.objects.remove(bpy.data.objects[name], do_unlink=True))
    if "location" in args:
        ob.location = args["location"]
    if "rotation_euler" in args:
        ob.rotation_euler = args["rotation_euler"]
    if "scale" in args:
        ob.scale = args["scale"]
    sc.collection.objects.link(ob)
    prev_name = None
    if vl is not None:
        prev = vl.objects.active
        prev_name = prev.name if prev is not None else None
        tx.touch("scene", sc.name)
        tx.on_undo(lambda: setattr(vl.objects, "active", bpy.data.objects.get(prev_name) if prev_name else None))
        vl.objects.active = ob
    tx.checkpoint("object.create:linked")
    tx.undo_record = {
        "v": UNDO_VERSION, "tool": "object.create", "object": name, "mesh": mesh_name,
        "scene": sc.name, "view_layer": vl.name if vl is not None else None, "active_before": prev_name,
    }
    return {"name": ob.name, "type": kind, "vertices": len(me.vertices)}


DATA_KINDS = {"MESH": ("mesh", "meshes"), "CAMERA": ("camera", "cameras"), "LIGHT": ("light", "lights")}
BRIDGE = {"tomb_counter": 0}  # per-session bridge state; saved inside checkpoints


def tomb_name(mutation_id):
    """A fresh tombstone name. With a mutation id it is derived from it, so a
    replay of the same mutations picks the same names whatever was rolled back
    in between; without one it comes from the session's counter."""
    if mutation_id:
        base = TOMB_PREFIX + "m" + sha256_hex(mutation_id)[:24]
        if base not in bpy.data.objects:
            return base
    while True:
        n = BRIDGE["tomb_counter"]
        BRIDGE["tomb_counter"] = n + 1
        name = TOMB_PREFIX + str(n)
        if name not in bpy.data.objects:
            return name
        if mutation_id:
            name = "%s_%d" % (base, n)
            if name not in bpy.data.objects:
                return name


def collection_ref(coll):
    for sc in bpy.data.scenes:
        if sc.collection == coll:
            return {"scene": sc.name}
    return {"collection": coll.name}


def resolve_collection(ref):
    if "scene" in ref:
        sc = bpy.data.scenes.get(ref["scene"])
        return sc.collection if sc is not None else None
    return bpy.data.collections.get(ref.get("collection", ""))


def resolve_view_layer(scene_name, vl_name):
    sc = bpy.data.scenes.get(scene_name or "")
    if sc is None:
        return None, None
    return sc, sc.view_layers.get(vl_name or "")


def matrix_rows(m):
    return [list(row) for row in m]


def rename(idb, name, what):
    """Rename an ID and insist on the exact name (no .001 suffix)."""
    idb.name = name
    if idb.name != name:
        raise ToolError("conflict", "could not name %s %r (got %r)" % (what, name, idb.name))


def tool_object_delete(tx, args):
    name = args["name"]
    ob = bpy.data.objects.get(name)
    if ob is None or is_tomb(name):
        raise ToolError("not_found", "no object named %r" % name)
    data = ob.data
    data_kind = DATA_KINDS.get(ob.type) if data is not None else None
    # Sole owner: the old "remove the data once nothing else uses it".
    owns_data = data_kind is not None and data.users == 1 and data.library is None
    counter = BRIDGE["tomb_counter"]
    tx.on_undo(lambda: BRIDGE.__setitem__("tomb_counter", counter))  # a failed delete takes no number
    tomb = tomb_name(tx.mutation_id)

    # The compensation, computed before anything changes.
    bases = []
    for sc in bpy.data.scenes:
        for vl in sc.view_layers:
            if vl.objects.get(name) is not None:
                bases.append({
                    "scene": sc.name, "view_layer": vl.name,
                    "active": vl.objects.active == ob,
                    "select": bool(ob.select_get(view_layer=vl)),
                    "hide": bool(ob.hide_get(view_layer=vl)),
                })
    children = [c for c in ob.children if not is_tomb(c.name)]
    rec = {
        "v": UNDO_VERSION, "tool": "object.delete", "object": name, "tomb": tomb,
        "data": {"kind": data_kind[0], "name": data.name, "tomb": tomb if owns_data else None} if data_kind else None,
        "collections": [collection_ref(c) for c in ob.users_collection],
        "children": [{"name": c.name, "matrix_parent_inverse": matrix_rows(c.matrix_parent_inverse)} for c in children],
        "camera_of": [sc.name for sc in bpy.data.scenes if sc.camera == ob],
        "bases": bases,
    }

    for c in children:
        tx.touch("object", c.name)
    for sc in bpy.data.scenes:
        tx.touch("scene", sc.name)
    tx.touch("object", name)
    if data_kind:
        tx.touch(data_kind[0], data.name)

    # Tombstone: every step reverses itself if a later one fails.
    for c in children:
        pinv = c.matrix_parent_inverse.copy()
        tx.on_undo(lambda c=c, pinv=pinv: (setattr(c, "parent", ob), setattr(c, "matrix_parent_inverse", pinv)))
        c.parent = None
    for sc in bpy.data.scenes:
        if sc.camera == ob:
            tx.on_undo(lambda sc=sc: setattr(sc, "camera", ob))
            sc.camera = None
    for b in bases:
        if b["active"]:
            vl = bpy.data.scenes[b["scene"]].view_layers[b["view_layer"]]
            tx.on_undo(lambda vl=vl: setattr(vl.objects, "active", ob))
            vl.objects.active = None
    for coll in list(ob.users_collection):
        tx.on_undo(lambda coll=coll: coll.objects.link(ob))
        coll.objects.unlink(ob)
    tx.checkpoint("object.delete:unlinked")
    tx.on_undo(lambda: setattr(ob, "use_fake_user", False))
    ob.use_fake_user = True  # unlinked objects would be dropped by a checkpoint
    ob[TOMB_OF] = name
    tx.on_undo(lambda: ob.pop(TOMB_OF, None))
    tx.on_undo(lambda: setattr(ob, "name", name))
    rename(ob, tomb, "tombstone")
    if owns_data:
        data_name = data.name
        tx.on_undo(lambda: setattr(data, "name", data_name))
        rename(data, tomb, "tombstone data")
    tx.checkpoint("object.delete:tombstoned")
    tx.undo_record = rec
    return {"name": name, "deleted": True, "removed_data": rec["data"]["name"] if owns_data else None}


def tool_object_set_transform(tx, args):
    name = args["name"]
    ob = bpy.data.objects.get(name)
    if ob is None or is_tomb(name):
        raise ToolError("not_found", "no object named %r" % name)
    if not any(k in args for k in ("location", "rotation_euler", "scale")):
        raise ToolError("invalid_input", "give at least one of location, rotation_euler, scale")
    old = {k: tuple(getattr(ob, k)) for k in ("location", "rotation_euler", "scale")}
    tx.undo_record = dict({"v": UNDO_VERSION, "tool": "object.set_transform", "object": name},
                          **{k: list(v) for k, v in old.items()})
    tx.touch("object", name)
    tx.on_undo(lambda: [setattr(bpy.data.objects[name], k, v) for k, v in old.items()])
    for k in ("location", "rotation_euler", "scale"):
        if k in args:
            setattr(ob, k, args[k])
            tx.checkpoint("object.set_transform:" + k)
    out = transform_of(ob)
    out["name"] = name
    return out


OUTPUT_PATTERN = r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}\.png$"
SANDBOX = {"dir": None}


def sandbox_path(output):
    root = SANDBOX["dir"]
    if not root:
        raise ToolError("policy_refused", "no sandbox directory is configured for outputs")
    if not re.match(OUTPUT_PATTERN, output):
        raise ToolError("policy_refused", "output must be a plain .png file name")
    root = os.path.realpath(root)
    path = os.path.realpath(os.path.join(root, output))
    if os.path.commonpath([root, path]) != root or os.path.dirname(path) != root:
        raise ToolError("policy_refused", "output %r resolves outside the sandbox" % output)
    return path


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PNG_VOLATILE_CHUNKS = (b"tEXt", b"zTXt", b"iTXt", b"tIME")


def strip_png_metadata(path):
    """Drop text and time chunks: Cycles on 3.4 writes render times there even
    with every stamp off, which would make equal pixels differ in bytes."""
    with open(path, "rb") as f:
        data = f.read()
    if not data.startswith(PNG_SIGNATURE):
        raise ToolError("internal_error", "render output is not a PNG")
    out = [PNG_SIGNATURE]
    i = len(PNG_SIGNATURE)
    while i + 8 <= len(data):
        n = int.from_bytes(data[i:i + 4], "big")
        kind = data[i + 4:i + 8]
        end = i + 12 + n
        if end > len(data):
            raise ToolError("internal_error", "render output is a truncated PNG")
        if kind not in PNG_VOLATILE_CHUNKS:
            out.append(data[i:end])
        i = end
    with open(path, "wb") as f:
        f.write(b"".join(out))


class Saved:
    """Remembers attribute values so a tool can put them back."""

    def __init__(self):
        self.items = []

    def set(self, owner, attr, value):
        self.items.append((owner, attr, getattr(owner, attr)))
        setattr(owner, attr, value)

    def restore(self):
        for owner, attr, value in reversed(self.items):
            setattr(owner, attr, value)


def tool_render_still(tx, args):
    if not has_cycles():
        raise ToolError("capability_missing", "this Blender has no Cycles")
    path = sandbox_path(args["output"])
    w, h = [int(x) for x in args.get("resolution", [640, 480])]
    samples = int(args.get("samples", 16))
    seed = int(args.get("seed", 0))
    sc = current_scene()
    if sc.camera is None:
        raise ToolError("conflict", "the scene has no camera")
    r = sc.render
    saved = Saved()
    try:
        saved.set(r, "engine", "CYCLES")
        saved.set(r, "resolution_x", w)
        saved.set(r, "resolution_y", h)
        saved.set(r, "resolution_percentage", 100)
        saved.set(r, "filepath", path)
        saved.set(r, "use_file_extension", True)
        saved.set(r, "use_compositing", False)
        saved.set(r, "use_sequencer", False)
        saved.set(r, "use_persistent_data", False)
        saved.set(r, "use_border", False)
        saved.set(r.image_settings, "file_format", "PNG")
        for f in stamp_flags(r):
            saved.set(r, f, False)
        cy = sc.cycles
        saved.set(cy, "device", "CPU")
        saved.set(cy, "samples", samples)
        saved.set(cy, "seed", seed)
        saved.set(cy, "use_animated_seed", False)
        saved.set(cy, "use_adaptive_sampling", False)
        saved.set(cy, "use_denoising", False)
        tmp = path + ".partial.png"
        saved.set(r, "filepath", tmp)
        t0 = time.time()
        bpy.ops.render.render(write_still=True, scene=sc.name)
        if not os.path.exists(tmp):
            raise ToolError("internal_error", "Blender did not write the render output")
        strip_png_metadata(tmp)
        os.replace(tmp, path)
        log("render done", seconds=round(time.time() - t0, 3), path=path)
    finally:
        saved.restore()
        if os.path.exists(path + ".partial.png"):
            os.remove(path + ".partial.png")
    with open(path, "rb") as f:
        digest = sha256_hex(f.read())
    return {"path": path, "sha256": digest, "seed": seed, "samples": samples, "resolution": [w, h]}


# ---------------------------------------------------------------------------
# Compensations: undo records (returned by execute) and their appliers.
# Each applier validates everything it needs first, then mutates in steps that
# register their own reversal, so a failure midway leaves the scene as it was.

def field(rec, key, types, optional=False):
    v = rec.get(key)
    if v is None and optional:
        return None
    if not isinstance(v, types):
        raise ToolError("invalid_input", "undo record: bad or missing %r" % key)
    return v


def live_object(name, what="object"):
    ob = bpy.data.objects.get(name)
    if ob is None or is_tomb(name):
        raise ToolError("conflict", "cannot undo: %s %r is gone" % (what, name))
    return ob


def vec3(rec, key):
    v = field(rec, key, list)
    if len(v) != 3 or not all(_is_number(x) for x in v):
        raise ToolError("invalid_input", "undo record: %r must be 3 finite numbers" % key)
    return tuple(float(x) for x in v)


def undo_object_create(tx, rec):
    name = field(rec, "object", str)
    mesh_name = field(rec, "mesh", str)
    prev_name = field(rec, "active_before", str, optional=True)
    ob = live_object(name)
    me = bpy.data.meshes.get(mesh_name)
    if me is None or ob.data != me or me.users != 1:
        raise ToolError("conflict", "cannot undo create: %r no longer solely owns mesh %r" % (name, mesh_name))
    if any(not is_tomb(c.name) for c in ob.children) or any(sc.camera == ob for sc in bpy.data.scenes):
        raise ToolError("conflict", "cannot undo create: other datablocks now refer to %r" % name)
    sc, vl = resolve_view_layer(field(rec, "scene", str), field(rec, "view_layer", str, optional=True))
    prev = live_object(prev_name, "previously active object") if prev_name else None
    tx.touch("object", name)
    tx.touch("mesh", mesh_name)
    for s in bpy.data.scenes:
        tx.touch("scene", s.name)

    if vl is not None:
        cur = vl.objects.active
        tx.on_undo(lambda: setattr(vl.objects, "active", cur))
        vl.objects.active = prev
    for coll in list(ob.users_collection):
        tx.on_undo(lambda coll=coll: coll.objects.link(ob))
        coll.objects.unlink(ob)
    tx.fault_point("object.create:unlinked")
    tx.checkpoint("undo.object.create:unlinked")
    # Irreversible and validated above: nothing after this point can fail.
    bpy.data.objects.remove(ob)
    bpy.data.meshes.remove(me)


def undo_object_set_transform(tx, rec):
    name = field(rec, "object", str)
    want = [(k, vec3(rec, k)) for k in ("location", "rotation_euler", "scale")]
    ob = live_object(name)
    tx.touch("object", name)
    for i, (k, v) in enumerate(want):
        cur = tuple(getattr(ob, k))
        tx.on_undo(lambda k=k, cur=cur: setattr(ob, k, cur))
        setattr(ob, k, v)
        if i == 0:
            tx.fault_point("object.set_transform:location")
            tx.checkpoint("undo.object.set_transform:location")


def undo_object_delete(tx, rec):
    name = field(rec, "object", str)
    tomb = field(rec, "tomb", str)
    ob = bpy.data.objects.get(tomb)
    if ob is None or not is_tomb(tomb) or ob.get(TOMB_OF) != name:
        raise ToolError("conflict", "cannot undo delete: tombstone %r of %r is gone" % (tomb, name))
    if name in bpy.data.objects:
        raise ToolError("conflict", "cannot undo delete: an object named %r exists again" % name)
    d = field(rec, "data", dict, optional=True)
    data, data_kind, data_name = None, None, None
    if d is not None:
        data_kind, data_name = field(d, "kind", str), field(d, "name", str)
        colls = {k: c for k, c in DATA_KINDS.values()}
        if data_kind not in colls:
            raise ToolError("invalid_input", "undo record: unknown data kind %r" % data_kind)
        data_tomb = field(d, "tomb", str, optional=True)
        if data_tomb is not None:
            data = getattr(bpy.data, colls[data_kind]).get(data_tomb)
            if data is None or ob.data != data:
                raise ToolError("conflict", "cannot undo delete: tombstoned data %r is gone" % data_tomb)
            if data_name in getattr(bpy.data, colls[data_kind]):
                raise ToolError("conflict", "cannot undo delete: %s %r exists again" % (data_kind, data_name))
    colls = []
    for ref in field(rec, "collections", list):
        c = resolve_collection(ref) if isinstance(ref, dict) else None
        if c is None:
            raise ToolError("conflict", "cannot undo delete: collection %r is gone" % (ref,))
        colls.append(c)
    children = []
    for ch in field(rec, "children", list):
        c = live_object(field(ch, "name", str), "child")
        if c.parent is not None:
            raise ToolError("conflict", "cannot undo delete: child %r has a parent again" % c.name)
        rows = field(ch, "matrix_parent_inverse", list)
        if len(rows) != 4 or not all(isinstance(r, list) and len(r) == 4 and all(map(_is_number, r)) for r in rows):
            raise ToolError("invalid_input", "undo record: bad matrix_parent_inverse")
        children.append((c, Matrix(rows)))
    cams = []
    for scn in field(rec, "camera_of", list):
        sc = bpy.data.scenes.get(scn) if isinstance(scn, str) else None
        if sc is None:
            raise ToolError("conflict", "cannot undo delete: scene %r is gone" % (scn,))
        cams.append(sc)
    bases = []
    for b in field(rec, "bases", list):
        sc, vl = resolve_view_layer(field(b, "scene", str), field(b, "view_layer", str))
        if vl is None:
            raise ToolError("conflict", "cannot undo delete: view layer %r is gone" % b.get("view_layer"))
        bases.append((vl, bool(b.get("active")), bool(b.get("select")), bool(b.get("hide"))))

    tx.touch("object", name)
    if data_kind:
        tx.touch(data_kind, data_name)
    for c, _ in children:
        tx.touch("object", c.name)
    for s in bpy.data.scenes:
        tx.touch("scene", s.name)

    if data is not None:
        tx.on_undo(lambda: setattr(data, "name", data_tomb))
        rename(data, data_name, data_kind)
    tx.on_undo(lambda: setattr(ob, "name", tomb))
    rename(ob, name, "object")
    tx.fault_point("object.delete:renamed")
    tx.checkpoint("undo.object.delete:renamed")
    for c in colls:
        tx.on_undo(lambda c=c: c.objects.unlink(ob))
        c.objects.link(ob)
    for c, pinv in children:
        old = c.matrix_parent_inverse.copy()
        tx.on_undo(lambda c=c, old=old: (setattr(c, "parent", None), setattr(c, "matrix_parent_inverse", old)))
        c.parent = ob
        c.matrix_parent_inverse = pinv
    for sc in cams:
        cur = sc.camera
        tx.on_undo(lambda sc=sc, cur=cur: setattr(sc, "camera", cur))
        sc.camera = ob
    for vl, active, select, hide in bases:
        cur = vl.objects.active
        tx.on_undo(lambda vl=vl, cur=cur: setattr(vl.objects, "active", cur))
        if active:
            vl.objects.active = ob
        ob.select_set(select, view_layer=vl)
        ob.hide_set(hide, view_layer=vl)
    tx.checkpoint("undo.object.delete:relinked")
    tx.on_undo(lambda: (setattr(ob, "use_fake_user", True), ob.__setitem__(TOMB_OF, name)))
    ob.use_fake_user = False
    ob.pop(TOMB_OF, None)


UNDOERS = {
    "object.create": undo_object_create,
    "object.set_transform": undo_object_set_transform,
    "object.delete": undo_object_delete,
}


def tool_scene_snapshot(tx, args):
    snap, h = full_snapshot()
    return {"scene_hash": h, "snapshot": snap}


TOOLS = {}


def register(name, safety_level, description, schema, fn):
    read_only = safety_level == "read_only"
    TOOLS[name] = {
        "name": name,
        "version": TOOL_VERSION,
        "description": description,
        "safety_level": safety_level,
        "input_schema": schema,
        # deterministic: same scene + same args -> same scene and result;
        # seeded: the output depends on a seed argument, recorded in the result.
        "determinism_class": "seeded" if name == "render.still" else "deterministic",
        # none: read-only; compensation: execute returns an undo record;
        # not_needed: writes only files, never the scene.
        "rollback_method": "none" if read_only else ("not_needed" if name == "render.still" else "compensation"),
        "fn": fn,
    }


register(
    "scene.get_summary", "read_only",
    "List the scene's objects (name and type, sorted by name), the active object and the object count.",
    {"type": "object", "properties": {}, "additionalProperties": False},
    tool_scene_get_summary,
)
register(
    "object.create", "safe_write",
    "Create a mesh primitive object in the scene collection and make it active.",
    {
        "type": "object",
        "properties": {
            "type": {"type": "string", "enum": sorted(PRIMITIVES)},
            "name": dict(NAME, description="Object and mesh name; defaults to Blender's name for the primitive (Cube, Cube.001, ...)."),
            "location": VEC3,
            "rotation_euler": VEC3,
            "scale": VEC3,
            "size": {"type": "number", "exclusiveMinimum": 0, "maximum": 1000000, "default": 2.0},
        },
        "required": ["type"],
        "additionalProperties": False,
    },
    tool_object_create,
)
register(
    "object.delete", "destructive",
    "Delete an object; its mesh, camera or light data goes too when nothing else uses it.",
    {"type": "object", "properties": {"name": NAME}, "required": ["name"], "additionalProperties": False},
    tool_object_delete,
)
register(
    "object.set_transform", "safe_write",
    "Set an object's location, rotation (XYZ Euler, radians) and/or scale.",
    {
        "type": "object",
        "properties": {"name": NAME, "location": VEC3, "rotation_euler": VEC3, "scale": VEC3},
        "required": ["name"],
        "minProperties": 2,
        "additionalProperties": False,
    },
    tool_object_set_transform,
)
register(
    "render.still", "safe_write",
    "Render the scene camera with Cycles on the CPU to a PNG in the session sandbox; same seed, same bytes. Leaves the scene unchanged.",
    {
        "type": "object",
        "properties": {
            "output": {"type": "string", "pattern": OUTPUT_PATTERN},
            "resolution": {
                "type": "array",
                "items": {"type": "integer", "minimum": 16, "maximum": 4096},
                "minItems": 2,
                "maxItems": 2,
                "default": [640, 480],
            },
            "samples": {"type": "integer", "minimum": 1, "maximum": 4096, "default": 16},
            "seed": {"type": "integer", "minimum": 0, "maximum": 2147483647, "default": 0},
        },
        "required": ["output"],
        "additionalProperties": False,
    },
    tool_render_still,
)
register(
    "scene.snapshot", "read_only",
    "Return the full canonical scene_state_v1 snapshot and its scene hash.",
    {"type": "object", "properties": {}, "additionalProperties": False},
    tool_scene_snapshot,
)


def tool_list():
    return [{k: v for k, v in t.items() if k != "fn"} for _, t in sorted(TOOLS.items())]


# ---------------------------------------------------------------------------
# Methods.

def features():
    f = {"workbench"}
    if has_cycles():
        f.add("cycles")
    if eevee_engine():
        f.add("eevee")
    try:
        for mod in bpy.context.preferences.addons.keys():
            if mod.startswith("io_"):
                f.add(mod)
    except Exception:
        pass
    return sorted(f)


def profile():
    return {
        "version": "%d.%d.%d" % blender_version(),
        "version_string": build_string(bpy.app.version_string),
        "build_hash": build_string(bpy.app.build_hash),
        "platform": build_platform(),
        "python_version": platform.python_version(),
        "features": features(),
    }


FAULTS = set()  # test hooks from hello's "faults" param


def m_hello(params):
    SANDBOX["dir"] = params.get("sandbox_dir") or None
    FAULTS.clear()
    FAULTS.update(f for f in (params.get("faults") or []) if isinstance(f, str))
    if FAULTS:
        log("test faults enabled", faults=sorted(FAULTS))
    h = reset_scene()
    return {"protocol_version": PROTOCOL_VERSION, "profile": profile(), "tools": tool_list(), "scene_hash": h}


def m_reset(params):
    return {"scene_hash": reset_scene()}


def m_scene_hash(params):
    return {"scene_hash": STATE.scene_hash()}


def m_snapshot(params):
    snap, h = full_snapshot()
    return {"scene_hash": h, "incremental_scene_hash": STATE.scene_hash(), "snapshot": snap}


def m_execute(params):
    name = params.get("tool")
    args = params.get("args")
    if args is None:
        args = {}
    tool = TOOLS.get(name) if isinstance(name, str) else None
    before = STATE.scene_hash()
    if tool is None:
        raise ToolError("not_found", "unknown tool %r" % (name,))
    check(tool["input_schema"], args)
    inject = params.get("inject_failure")
    mid = params.get("mutation_id")
    tx = Tx(inject if isinstance(inject, str) else None, mid if isinstance(mid, str) else None)
    t0 = time.time()
    try:
        result = tool["fn"](tx, args)
    except BaseException as e:
        try:
            tx.rollback()
        finally:
            tx.apply_touches()
        after = STATE.scene_hash()
        if after != before:
            log("rollback left the scene changed", before=before, after=after)
            raise ToolError("internal_error", "rollback after a failed %s left the scene changed" % name)
        raise
    tx.apply_touches()
    after = STATE.scene_hash()
    log("tool done", tool=name, ms=round((time.time() - t0) * 1000, 3), mutated=after != before)
    return {"result": result, "scene_hash_before": before, "scene_hash_after": after, "mutated": after != before,
            "undo": tx.undo_record}


def m_undo(params):
    rec = params.get("undo")
    if not isinstance(rec, dict) or rec.get("v") != UNDO_VERSION or rec.get("tool") not in UNDOERS:
        raise ToolError("invalid_input", "not an undo record of version %d" % UNDO_VERSION)
    inject = params.get("inject_failure")
    tx = Tx(inject if isinstance(inject, str) else None, fault="undo" in FAULTS)
    before = STATE.scene_hash()
    t0 = time.time()
    try:
        UNDOERS[rec["tool"]](tx, rec)
    except InjectedFault as e:
        # Test hook: keep the partial work and report it honestly.
        tx.apply_touches()
        log("undo fault injected", tool=rec["tool"], before=before, after=STATE.scene_hash())
        raise ToolError("internal_error", str(e))
    except BaseException:
        try:
            tx.rollback()
        finally:
            tx.apply_touches()
        after = STATE.scene_hash()
        if after != before:
            log("undo rollback left the scene changed", before=before, after=after)
            raise ToolError("internal_error", "rollback after a failed undo of %s left the scene changed" % rec["tool"])
        raise
    tx.apply_touches()
    after = STATE.scene_hash()
    log("undo done", tool=rec["tool"], ms=round((time.time() - t0) * 1000, 3))
    return {"scene_hash_before": before, "scene_hash_after": after}


def checkpoint_path(params):
    path = params.get("path")
    if not isinstance(path, str) or not os.path.isabs(path) or "\x00" in path:
        raise ToolError("invalid_input", "path must be an absolute file path")
    return path


def m_save_checkpoint(params):
    path = checkpoint_path(params)
    h = STATE.scene_hash()
    for stale in (path, path + "1", path + "@"):  # target, Blender's backup and temp file
        if os.path.exists(stale):
            os.remove(stale)
    sc = current_scene()
    sc[STATE_PROP] = canonical({"schema": SCHEMA, "scene_hash": h, "tomb_counter": BRIDGE["tomb_counter"]})
    t0 = time.time()
    try:
        res = bpy.ops.wm.save_as_mainfile(filepath=path, copy=True, compress=False,
                                          relative_remap=False, check_existing=False)
    finally:
        del sc[STATE_PROP]
    if "FINISHED" not in res or not os.path.isfile(path):
        raise ToolError("internal_error", "Blender did not write the checkpoint")
    ms = round((time.time() - t0) * 1000, 3)
    log("checkpoint saved", path=path, ms=ms, scene_hash=h)
    return {"scene_hash": h, "bytes": os.path.getsize(path), "ms": ms}


def tomb_counter_floor():
    n = 0
    for ob in bpy.data.objects:
        m = re.match(re.escape(TOMB_PREFIX) + r"(\d+)$", ob.name)
        if m:
            n = max(n, int(m.group(1)) + 1)
    return n


def m_load_checkpoint(params):
    path = checkpoint_path(params)
    if not os.path.isfile(path):
        raise ToolError("not_found", "no checkpoint at %r" % path)
    t0 = time.time()
    try:
        bpy.ops.wm.open_mainfile(filepath=path, load_ui=False, use_scripts=False)
    except RuntimeError as e:
        STATE.rebuild()  # whatever Blender kept, hash it honestly
        raise ToolError("internal_error", "could not load checkpoint: " + one_line(e))
    saved = {}
    for sc in bpy.data.scenes:
        raw = sc.get(STATE_PROP)
        if raw is not None:
            try:
                saved = json.loads(raw)
            except ValueError:
                saved = {}
            del sc[STATE_PROP]
    BRIDGE["tomb_counter"] = max(int(saved.get("tomb_counter", 0)), tomb_counter_floor())
    STATE.rebuild()
    h = STATE.scene_hash()
    ms = round((time.time() - t0) * 1000, 3)
    log("checkpoint loaded", path=path, ms=ms, scene_hash=h)
    want = saved.get("scene_hash")
    if want and want != h:
        raise ToolError("internal_error", "checkpoint hashed %s when saved but %s after loading" % (want, h))
    return {"scene_hash": h, "saved_scene_hash": want, "ms": ms}


class Shutdown(Exception):
    pass


def m_shutdown(params):
    raise Shutdown()


METHODS = {
    "hello": m_hello,
    "reset": m_reset,
    "scene_hash": m_scene_hash,
    "snapshot": m_snapshot,
    "execute": m_execute,
    "undo": m_undo,
    "save_checkpoint": m_save_checkpoint,
    "load_checkpoint": m_load_checkpoint,
    "shutdown": m_shutdown,
}


def one_line(e):
    msg = ("%s: %s" % (type(e).__name__, e)).strip()
    return msg.splitlines()[0][:500] if msg else type(e).__name__


def handle(line):
    """Serve one request line; returns (response dict, stop flag)."""
    rid = None
    _corr.clear()
    try:
        req = json.loads(line)
        if not isinstance(req, dict):
            raise ToolError("invalid_input", "request must be a JSON object")
        rid = req.get("id")
        method = req.get("method")
        params = req.get("params") or {}
        if not isinstance(params, dict):
            raise ToolError("invalid_input", "params must be an object")
        for k in ("request_id", "operation_id", "mcp_call_id", "mutation_id"):
            if isinstance(params.get(k), str):
                _corr[k] = params[k]
        fn = METHODS.get(method) if isinstance(method, str) else None
        if fn is None:
            raise ToolError("invalid_input", "unknown method %r" % (method,))
        return {"id": rid, "ok": True, "result": fn(params)}, False
    except Shutdown:
        return {"id": rid, "ok": True, "result": {}}, True
    except ToolError as e:
        log("request failed", code=e.code, message=e.message)
        return {"id": rid, "ok": False, "error": {"code": e.code, "message": e.message, "scene_hash": STATE.scene_hash()}}, False
    except ValueError as e:  # bad JSON
        if rid is None:
            return {"id": None, "ok": False, "error": {"code": "invalid_input", "message": one_line(e), "scene_hash": STATE.scene_hash()}}, False
        log("unexpected error", trace=traceback.format_exc())
        return {"id": rid, "ok": False, "error": {"code": "internal_error", "message": one_line(e), "scene_hash": STATE.scene_hash()}}, False
    except Exception as e:
        log("unexpected error", trace=traceback.format_exc())
        return {"id": rid, "ok": False, "error": {"code": "internal_error", "message": one_line(e), "scene_hash": STATE.scene_hash()}}, False


def parse_argv(argv):
    if "--" in argv:  # blender binary: our arguments follow "--"
        argv = argv[argv.index("--") + 1:]
    else:
        argv = argv[1:]
    opts = {"fd_in": 3, "fd_out": 4}
    i = 0
    while i < len(argv):
        if argv[i] in ("--fd-in", "--fd-out") and i + 1 < len(argv):
            opts[argv[i][2:].replace("-", "_")] = int(argv[i + 1])
            i += 2
        else:
            i += 1
    return opts


def serve(fd_in, fd_out):
    rin = os.fdopen(fd_in, "rb")
    rout = os.fdopen(fd_out, "wb")
    log("ready", pid=os.getpid(), blender=build_string(bpy.app.version_string))
    while True:
        line = rin.readline()
        if not line:
            log("request stream closed")
            return
        if not line.strip():
            continue
        resp, stop = handle(line)
        try:
            data = canonical(resp)
        except ValueError as e:  # e.g. NaN in a result
            data = canonical({"id": resp.get("id"), "ok": False, "error": {"code": "internal_error", "message": one_line(e), "scene_hash": STATE.scene_hash()}})
        rout.write(data.encode("ascii") + b"\n")
        rout.flush()
        if stop:
            log("shutdown")
            return


def main():
    opts = parse_argv(sys.argv)
    serve(opts["fd_in"], opts["fd_out"])


if __name__ == "__main__":
    main()
