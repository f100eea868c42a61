"""Object tools: object.create, object.delete, object.set_transform, and the
appliers of their undo records.

Undo record shapes (``v`` = UNDO_VERSION = 1; see registry.py, Compensations):

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
"""

import math

import bpy  # first: the bpy module provides bmesh and mathutils
import bmesh
from mathutils import Matrix

from common import TOMB_OF, TOMB_PREFIX, is_tomb, sha256_hex
from registry import ToolError, field, tool, undoer
from schema import NAME, VEC3, check_name, is_number
from state import BRIDGE, active_view_layer, current_scene, qv

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


@tool(
    "object.create",
    description="Create a mesh primitive object in the scene collection and make it active.",
    schema={
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
    safety_level="safe_write",
    idempotence_class="keyed",
    rollback_method="compensation",
    blender_versions=">=3.4",
)


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
    tx.set_undo({
        "object": name, "mesh": mesh_name,
        "scene": sc.name, "view_layer": vl.name if vl is not None else None, "active_before": prev_name,
    })
    return {"name": ob.name, "type": kind, "vertices": len(me.vertices)}


DATA_KINDS = {"MESH": ("mesh", "meshes"), "CAMERA": ("camera", "cameras"), "LIGHT": ("light", "lights")}


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


@tool(
    "object.delete",
    description="Delete an object; its mesh, camera or light data goes too when nothing else uses it.",
    schema={"type": "object", "properties": {"name": NAME}, "required": ["name"], "additionalProperties": False},
    safety_level="destructive",
    idempotence_class="keyed",
    rollback_method="compensation",
    blender_versions=">=3.4",
)


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
        "object": name, "tomb": tomb,
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
    tx.set_undo(rec)
    return {"name": name, "deleted": True, "removed_data": rec["data"]["name"] if owns_data else None}


@tool(
    "object.set_transform",
    description="Set an object's location, rotation (XYZ Euler, radians) and/or scale.",
    schema={
        "type": "object",
        "properties": {"name": NAME, "location": VEC3, "rotation_euler": VEC3, "scale": VEC3},
        "required": ["name"],
        "minProperties": 2,
        "additionalProperties": False,
    },
    safety_level="safe_write",
    idempotence_class="idempotent",
    rollback_method="compensation",
    blender_versions=">=3.4",
)


def tool_object_set_transform(tx, args):
    name = args["name"]
    ob = bpy.data.objects.get(name)
    if ob is None or is_tomb(name):
        raise ToolError("not_found", "no object named %r" % name)
    if not any(k in args for k in ("location", "rotation_euler", "scale")):
        raise ToolError("invalid_input", "give at least one of location, rotation_euler, scale")
    old = {k: tuple(getattr(ob, k)) for k in ("location", "rotation_euler", "scale")}
    tx.set_undo(dict({"object": name}, **{k: list(v) for k, v in old.items()}))
    tx.touch("object", name)
    tx.on_undo(lambda: [setattr(bpy.data.objects[name], k, v) for k, v in old.items()])
    for k in ("location", "rotation_euler", "scale"):
        if k in args:
            setattr(ob, k, args[k])
            tx.checkpoint("object.set_transform:" + k)
    out = transform_of(ob)
    out["name"] = name
    return out


def live_object(name, what="object"):
    ob = bpy.data.objects.get(name)
    if ob is None or is_tomb(name):
        raise ToolError("conflict", "cannot undo: %s %r is gone" % (what, name))
    return ob


def vec3(rec, key):
    v = field(rec, key, list)
    if len(v) != 3 or not all(is_number(x) for x in v):
        raise ToolError("invalid_input", "undo record: %r must be 3 finite numbers" % key)
    return tuple(float(x) for x in v)


@undoer("object.create")
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


@undoer("object.set_transform")
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


@undoer("object.delete")
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
        if len(rows) != 4 or not all(isinstance(r, list) and len(r) == 4 and all(map(is_number, r)) for r in rows):
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
