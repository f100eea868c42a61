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
``object.delete`` does not free the object: it tombstones it, so the delete can
be compensated. It clears the parent of the object's children, clears
``scene.camera`` where it was the camera, deactivates it, unlinks it from every
collection, renames it (and its mesh/camera/light data, when the object was the
data's only user) to a reserved name ``\x7fbp_tomb_<key>`` (it starts with the
control character DEL), stores the live name in its custom property
``__bp_tomb_of`` and gives it a fake user so that nothing purges it and
checkpoints keep it. ``<key>`` is ``m`` + 24 hex digits of sha256(mutation_id)
when execute got a ``mutation_id`` (a replay of the same mutations picks the
same names whatever was rolled back in between), else a per-session counter
(``BRIDGE["tomb_counter"]``, saved inside checkpoints). The undo record relinks
it to the same collections, renames it (and its data) back, restores children's
parents, the scene camera, the active object and the selection/hide state of
its bases.

Tombstones are invisible: every datablock named ``\x7fbp_tomb_*`` (or
``__bp_tomb_*``, the name older bridges gave them) is left out of the
scene_state_v1 snapshot and hash and out of scene.get_summary; tools refuse
names starting with ``__bp_`` or holding a control character
(``invalid_input``; ``not_found`` for an existing tombstone of an older
bridge). Blender keeps every ID list sorted by name, case-insensitively, so the
DEL puts tombstones after every ASCII name: renaming a datablock to one finds
its place at once (``__bp_tomb_`` came first and made Blender walk the whole
list, 0.15 ms at 10,000 objects). A bridge before that counts these as objects:
it refuses a checkpoint that holds them (docs/DEPLOY.md, "Upgrades"). Since the
live name is free again, a later ``object.create`` of the same name gets exactly
that name (no ``.001``).
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

from common import TOMB_OF, TOMB_PREFIX, is_tomb, sha256_hex, tomb_key
from registry import ToolError, field, tool, undoer
from schema import NAME, VEC3, check_name, check_name_free, is_number
from baseline import active_view_layer, current_scene, live_scene
from index import INDEX, link_object, set_parent, unlink_object
from layers import active_of, in_view_layer, set_active, synced
from records import mesh_geometry_digest, qv
from state import BRIDGE

from .datablocks import (bases_of, basis_from_record, basis_state, blender_named, check_id_name_free,
                         check_new_object_name, check_object_name_free, check_removable, collection_ref,
                         created_data_record, data_collection, free_name_in, get_object, live_object, make_active,
                         matrix_from_record, matrix_rows, name_free, named, naming_tells, note_active_objects,
                         remove_created_object, rename, resolve_collection, resolve_view_layer, restore_bases,
                         restore_basis, set_basis_from_matrix, took_name, touch_data, undo_remove_created, world_matrix)

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


def canonical(bm):
    """A copy of primitive bm with its faces in the order of the geometry
    digest (records.geometry_digest): sorted, each from its lowest vertex,
    winding kept; the edges follow from the faces. create_uvsphere orders
    its faces (and so its edges) by memory address, which differs from one
    Blender process to the next; its vertices, and every other primitive's
    whole mesh, come out the same each time. The digest never saw the
    difference, but exports did: a sphere's OBJ and glTF differed between
    two sessions. Canonical faces make the mesh, and so every export of it,
    the same in every process and on both Blenders (their primitives'
    faces differed in order too)."""
    bm.verts.index_update()
    faces = []
    for f in bm.faces:
        vs = [v.index for v in f.verts]
        k = vs.index(min(vs))
        faces.append(vs[k:] + vs[:k])
    faces.sort()
    out = bmesh.new()
    verts = [out.verts.new(v.co) for v in bm.verts]
    for f in faces:
        out.faces.new([verts[i] for i in f])
    return out


def transform_of(ob):
    return {"location": qv(ob.location), "rotation_euler": qv(ob.rotation_euler), "scale": qv(ob.scale)}


# Prototypes of the primitives: canonical(bmesh output) is a function of
# (type, size) alone, so each is built once and written into every new mesh
# of that kind (BMesh.to_mesh leaves the BMesh as it was), and the mesh
# record's counts and geometry digest are computed once, from the first mesh
# made, with records.mesh_geometry_digest itself. Keyed on the exact float
# size; at most PROTO_MAX entries (oldest dropped). The BMesh belongs to no
# Main, so a reset or a checkpoint load does not touch it.
PROTO = {}  # (type, size) -> [BMesh, (vertices, edges, polygons, loops, geometry_sha256) | None]
PROTO_MAX = 32


def primitive_proto(kind, size):
    key = (kind, size)
    p = PROTO.get(key)
    if p is None:
        raw = bmesh.new()
        try:
            build_primitive(raw, kind, size)
            bm = canonical(raw)
        finally:
            raw.free()
        while len(PROTO) >= PROTO_MAX:
            PROTO.pop(next(iter(PROTO)))[0].free()
        p = PROTO[key] = [bm, None]
    return p


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
    # The records of the new object, its mesh and the scene's active object
    # are built here from what the tool just made (Tx.touch_record) instead
    # of being read back from Blender; they must equal records.record_object /
    # record_mesh / record_active, which the tests check after every call.
    kind = args["type"]
    size = float(args.get("size", 2.0))
    name = args.get("name")
    base = PRIMITIVES[kind]
    if name is None and not naming_tells():
        name = free_name_in(bpy.data.objects, base)  # a scan of every object
    if name is not None:
        check_name(name)
        if len(bpy.data.libraries):
            # A linked object may carry the name without making a local one
            # .001; the exact-name check below covers only local objects.
            check_name_free(name, bpy.data.objects, "an object")
    sc = current_scene()
    vl = active_view_layer(sc)
    proto = primitive_proto(kind, size)

    # Unnamed where naming tells, Blender names the object (blender_named)
    # and the mesh takes its name after, as if made with it.
    made_as = name if name is not None else base
    me = bpy.data.meshes.new(made_as)
    tx.on_undo(lambda: bpy.data.meshes.remove(me))
    proto[0].to_mesh(me)
    me.update()
    geo = proto[1]
    if geo is None:
        geo = proto[1] = (len(me.vertices), len(me.edges), len(me.polygons), len(me.loops), mesh_geometry_digest(me))
    ob = bpy.data.objects.new(made_as, me)
    tx.on_undo(lambda: bpy.data.objects.remove(ob, do_unlink=True))
    if name is None:
        name = blender_named(ob, bpy.data.objects, base)
        if me.name != name:
            me.name = name
    else:
        named(ob, name, "object")
    mesh_name = me.name
    tx.touch("mesh", mesh_name)
    INDEX.put("meshes", me)
    INDEX.new_object(ob)
    tx.touch("object", name)
    loc, rot, scale = args.get("location"), args.get("rotation_euler"), args.get("scale")
    if loc is not None:
        ob.location = loc
        loc = qv(ob.location)  # as stored: float32
    if rot is not None:
        ob.rotation_euler = rot
        rot = qv(ob.rotation_euler)
    if scale is not None:
        ob.scale = scale
        scale = qv(ob.scale)
    coll = sc.collection
    tx.on_undo(lambda: unlink_object(coll, ob))
    link_object(coll, ob)
    prev_name = make_active(tx, sc, vl, ob)
    tx.checkpoint("object.create:linked")
    scene_name = sc.name
    tx.known[("mesh", mesh_name)] = {
        "name": mesh_name, "vertices": geo[0], "edges": geo[1], "polygons": geo[2], "loops": geo[3],
        "geometry_sha256": geo[4], "materials": [],
    }
    tx.known[("object", name)] = {
        "name": name, "type": "MESH", "data": mesh_name, "parent": None,
        "location": loc if loc is not None else [0.0, 0.0, 0.0], "rotation_mode": "XYZ",
        "rotation_euler": rot if rot is not None else [0.0, 0.0, 0.0],
        "scale": scale if scale is not None else [1.0, 1.0, 1.0],
        "hide_viewport": False, "hide_render": False, "hide_select": False,
        "collections": ["<scene>:" + scene_name], "materials": [], "modifiers": [],
    }
    if vl is not None:
        tx.known[("active", scene_name)] = {"scene": scene_name, "active_object": name}
    tx.set_undo({
        "object": name, "mesh": mesh_name,
        "scene": scene_name, "view_layer": vl.name if vl is not None else None, "active_before": prev_name,
    })
    return {"name": name, "type": kind, "vertices": geo[0]}


DATA_KINDS = {"MESH": ("mesh", "meshes"), "CAMERA": ("camera", "cameras"), "LIGHT": ("light", "lights")}


def tombstone(ob, mutation_id):
    """Rename ob to a fresh tombstone name and return it. With a mutation id
    the name is derived from it, so a replay of the same mutations picks the
    same names whatever was rolled back in between; without one, or when
    that name is taken, it comes from the session's counter. Where a rename
    to a taken name gives the renamed ID a suffix the rename itself answers
    whether a name is free (took_name)."""
    old = ob.name

    def took(name):
        return took_name(ob, bpy.data.objects, name)

    def pick():
        if mutation_id:
            base = TOMB_PREFIX + "m" + sha256_hex(mutation_id)[:24]
            if took(base):
                return base
        while True:
            n = BRIDGE["tomb_counter"]
            BRIDGE["tomb_counter"] = n + 1
            if took(TOMB_PREFIX + str(n)):
                return TOMB_PREFIX + str(n)
            if mutation_id and took("%s_%d" % (base, n)):
                return "%s_%d" % (base, n)

    name = pick()
    INDEX.renamed("objects", ob, old)  # its undo finds it through INDEX
    return name


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
    ob = get_object(name)
    data = ob.data
    data_kind = DATA_KINDS.get(ob.type) if data is not None else None
    # Sole owner: the old "remove the data once nothing else uses it".
    owns_data = data_kind is not None and data.users == 1 and data.library is None
    counter = BRIDGE["tomb_counter"]
    tx.on_undo(lambda: BRIDGE.__setitem__("tomb_counter", counter))  # a failed delete takes no number

    # The compensation, computed before anything changes (but the tombstone
    # name, which is found by taking it).
    bases = bases_of(ob)
    children = [c for c in INDEX.children_of(ob) if not is_tomb(c.name)]
    rec = {
        "object": name, "tomb": None,
        "data": {"kind": data_kind[0], "name": data.name, "tomb": None} if data_kind else None,
        "collections": [collection_ref(c) for c in INDEX.collections_of(ob)],
        "children": [{"name": c.name, "matrix_parent_inverse": matrix_rows(c.matrix_parent_inverse)} for c in children],
        "camera_of": [sc.name for sc in bpy.data.scenes if sc.camera == ob],
        "bases": bases,
    }

    for c in children:
        tx.touch("object", c.name)
    for sc in bpy.data.scenes:
        tx.touch("scene", sc.name)
    # The object, and the data it owns, leave under tombstone names: their
    # records go without a lookup of the names they leave (which would scan
    # every datablock of the kind). Data it shares stays, and is re-read.
    tx.gone("object", name)
    if data_kind:
        if owns_data:
            tx.gone(data_kind[0], data.name)
        else:
            tx.touch(data_kind[0], data.name)

    # Tombstone: every step reverses itself if a later one fails.
    for c in children:
        pinv = c.matrix_parent_inverse.copy()
        tx.on_undo(lambda c=c, pinv=pinv: (set_parent(c, ob), setattr(c, "matrix_parent_inverse", pinv)))
        c.parent = None
    for sc in bpy.data.scenes:
        if sc.camera == ob:
            tx.on_undo(lambda sc=sc: setattr(sc, "camera", ob))
            sc.camera = None
    note_active_objects(tx, leaving=ob)
    for b in bases:
        if b["active"]:
            vl = bpy.data.scenes[b["scene"]].view_layers[b["view_layer"]]
            tx.on_undo(lambda vl=vl: set_active(vl, ob))
            set_active(vl, None)
    for coll in INDEX.collections_of(ob):
        tx.on_undo(lambda coll=coll: link_object(coll, ob))
        unlink_object(coll, ob)
    tx.checkpoint("object.delete:unlinked")
    tx.on_undo(lambda: setattr(ob, "use_fake_user", False))
    ob.use_fake_user = True  # unlinked objects would be dropped by a checkpoint
    ob[TOMB_OF] = name
    tx.on_undo(lambda: ob.pop(TOMB_OF, None))
    tx.on_undo(lambda: setattr(ob, "name", name))
    tomb = rec["tomb"] = tombstone(ob, tx.mutation_id)
    if owns_data:
        data_name = data.name
        tx.on_undo(lambda: setattr(data, "name", data_name))
        rename(data, tomb, "tombstone data")
        rec["data"]["tomb"] = tomb
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
    ob = get_object(name)
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
    me = INDEX.get("meshes", mesh_name)
    check_removable(ob, me, "mesh", mesh_name, "create")
    sc, vl = resolve_view_layer(field(rec, "scene", str), field(rec, "view_layer", str, optional=True))
    prev = live_object(prev_name, "previously active object") if prev_name else None
    tx.touch("object", name)
    tx.touch("mesh", mesh_name)
    for s in bpy.data.scenes:
        tx.touch("scene", s.name)
    remove_created_object(tx, ob, "object.create", vl, prev, data=me)


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


def find_tomb(coll, tomb):
    """The tombstone named tomb in bpy.data.<coll>, or the one of the same
    key under TOMB_PREFIX: a bridge before TOMB_PREFIX changed wrote its
    old prefix in its undo records, and a newer one that replays its journal
    (recovery, rollback) makes that tombstone anew under the new one."""
    key = tomb_key(tomb)
    return INDEX.get(coll, tomb) or (INDEX.get(coll, TOMB_PREFIX + key) if key is not None else None)


@undoer("object.delete")
def undo_object_delete(tx, rec):
    name = field(rec, "object", str)
    tomb = field(rec, "tomb", str)
    ob = find_tomb("objects", tomb)
    if ob is None or not is_tomb(tomb) or ob.get(TOMB_OF) != name:
        raise ToolError("conflict", "cannot undo delete: tombstone %r of %r is gone" % (tomb, name))
    check_id_name_free(name, bpy.data.objects, "an object")
    d = field(rec, "data", dict, optional=True)
    data, data_kind, data_name = None, None, None
    if d is not None:
        data_kind, data_name = field(d, "kind", str), field(d, "name", str)
        colls = {k: c for k, c in DATA_KINDS.values()}
        if data_kind not in colls:
            raise ToolError("invalid_input", "undo record: unknown data kind %r" % data_kind)
        data_tomb = field(d, "tomb", str, optional=True)
        if data_tomb is not None:
            data_coll = colls[data_kind]
            data = find_tomb(data_coll, data_tomb)
            if data is None or ob.data != data:
                raise ToolError("conflict", "cannot undo delete: tombstoned data %r is gone" % data_tomb)
            check_id_name_free(data_name, getattr(bpy.data, data_coll), "a " + data_kind)
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
        sc = live_scene(scn) if isinstance(scn, str) else None
        if sc is None:
            raise ToolError("conflict", "cannot undo delete: scene %r is gone" % (scn,))
        cams.append(sc)
    bases = []
    for b in field(rec, "bases", list):
        sc, vl = resolve_view_layer(field(b, "scene", str), field(b, "view_layer", str))
        if vl is None:
            raise ToolError("conflict", "cannot undo delete: view layer %r is gone" % b.get("view_layer"))
        bases.append({"scene": sc.name, "view_layer": vl.name, "active": bool(b.get("active")),
                      "select": bool(b.get("select")), "hide": bool(b.get("hide"))})

    tx.touch("object", name)
    if data_kind:
        tx.touch(data_kind, data_name)
    for c, _ in children:
        tx.touch("object", c.name)
    for s in bpy.data.scenes:
        tx.touch("scene", s.name)

    if data is not None:
        data_tomb = data.name
        tx.on_undo(lambda: setattr(data, "name", data_tomb))
        rename(data, data_name, data_kind)
    tomb = ob.name
    tx.on_undo(lambda: setattr(ob, "name", tomb))
    rename(ob, name, "object")
    tx.fault_point("object.delete:renamed")
    tx.checkpoint("undo.object.delete:renamed")
    for c in colls:
        tx.on_undo(lambda c=c: unlink_object(c, ob))
        link_object(c, ob)
    for c, pinv in children:
        old = c.matrix_parent_inverse.copy()
        tx.on_undo(lambda c=c, old=old: (setattr(c, "parent", None), setattr(c, "matrix_parent_inverse", old)))
        set_parent(c, ob)
        c.matrix_parent_inverse = pinv
    for sc in cams:
        cur = sc.camera
        tx.on_undo(lambda sc=sc, cur=cur: setattr(sc, "camera", cur))
        sc.camera = ob
    restore_bases(ob, bases, tx)
    tx.checkpoint("undo.object.delete:relinked")
    tx.on_undo(lambda: (setattr(ob, "use_fake_user", True), ob.__setitem__(TOMB_OF, name)))
    ob.use_fake_user = False
    ob.pop(TOMB_OF, None)


# ---------------------------------------------------------------------------
# object.duplicate, object.rename, object.set_parent, object.select
#
# Undo records:
#   {"v":1,"tool":"object.duplicate","object":O,
#    "data":{"kind":K|null,"collection":C,"name":D}|null}   -> remove O (and D)
#   {"v":1,"tool":"object.rename","object":NEW,"name_before":OLD}
#   {"v":1,"tool":"object.set_parent","object":O,"parent":P|null,
#    "matrix_parent_inverse":[[4]x4],"location":[3],"rotation_mode":M,
#    "rotation_euler":[3],"rotation_quaternion":[4],"rotation_axis_angle":[4],
#    "scale":[3]}                                           -> exact restore
#   {"v":1,"tool":"object.select","scene":S,"view_layer":VL,
#    "selected":[names],"active":name|null}
#
# Selection is not part of scene_state_v1: it is view-layer UI state, and
# keeping it in the hash would make every tool that selects through an
# operator (imports) re-digest every object it deselects. The active object is
# (scene record). object.select's compensation restores both exactly anyway;
# a call that changes only the selection reports mutated=false.


@tool(
    "object.duplicate",
    description="Duplicate an object into the same collections: a full copy (new mesh/camera/light data named after the copy) or, with linked, sharing the original's data. Keeps parent, modifiers and material slots; does not change selection or the active object.",
    schema={
        "type": "object",
        "properties": {
            "name": NAME,
            "new_name": NAME,
            "linked": {"type": "boolean", "default": False},
            "location": VEC3,
        },
        "required": ["name", "new_name"],
        "additionalProperties": False,
    },
    safety_level="safe_write",
    idempotence_class="keyed",
    rollback_method="compensation",
    blender_versions=">=3.4",
)


def tool_object_duplicate(tx, args):
    src = get_object(args["name"])
    new_name = args["new_name"]
    check_new_object_name(new_name)
    linked = bool(args.get("linked", False))
    data = src.data
    copy_data = data is not None and not linked
    if copy_data and data_collection(data) is None:
        raise ToolError("invalid_input", "cannot copy the data of a %s object; use linked" % src.type)

    new_data_ = None
    if copy_data:
        coll_name = data_collection(data)
        new_data_ = data.copy()
        tx.on_undo(lambda: getattr(bpy.data, coll_name).remove(new_data_))
        name_free(new_data_, coll_name, new_name)
        touch_data(tx, new_data_)
    ob = src.copy()
    INDEX.new_object(ob)
    INDEX.parented(ob)  # the copy has the source's parent
    tx.on_undo(lambda: bpy.data.objects.remove(ob, do_unlink=True))
    tx.touch("object", new_name)
    rename(ob, new_name, "object")
    if new_data_ is not None:
        ob.data = new_data_
    if "location" in args:
        ob.location = args["location"]
    for c in INDEX.collections_of(src):
        link_object(c, ob)
    tx.checkpoint("object.duplicate:linked")
    tx.set_undo({"object": new_name, "data": created_data_record(new_data_) if new_data_ is not None else None})
    return {"name": new_name, "data": ob.data.name if ob.data is not None else None, "linked": not copy_data}


@undoer("object.duplicate")
def undo_object_duplicate(tx, rec):
    undo_remove_created(tx, rec, "object.duplicate")


@tool(
    "object.rename",
    description="Rename an object (its data keeps its name). References to it (parents, scene camera, active object) follow.",
    schema={"type": "object", "properties": {"name": NAME, "new_name": NAME}, "required": ["name", "new_name"],
            "additionalProperties": False},
    safety_level="safe_write",
    idempotence_class="keyed",
    rollback_method="compensation",
    blender_versions=">=3.4",
)


def tool_object_rename(tx, args):
    ob = get_object(args["name"])
    old, new = ob.name, args["new_name"]
    if new == old:  # as when another object has the name: nothing to rename
        raise ToolError("conflict", "an object named %r already exists" % new)
    check_new_object_name(new)
    tx.set_undo({"object": new, "name_before": old})
    do_rename(tx, ob, old, new)
    tx.checkpoint("object.rename:renamed")
    return {"name": new, "name_before": old}


def do_rename(tx, ob, old, new):
    tx.gone("object", old)  # no object has it after the rename: no lookup (a scan)
    tx.touch("object", new)
    for c in INDEX.children_of(ob):
        if not is_tomb(c.name):
            tx.touch("object", c.name)
    for sc in bpy.data.scenes:
        tx.touch("scene", sc.name)  # camera / active object names
    tx.on_undo(lambda: setattr(ob, "name", old))
    rename(ob, new, "object")


@undoer("object.rename")
def undo_object_rename(tx, rec):
    ob = live_object(field(rec, "object", str))
    old = field(rec, "name_before", str)
    # Not check_new_object_name: the name was the object's before, reserved
    # prefix or not (an import may bring one). On 4.5 do_rename refuses a
    # name another object took meanwhile.
    check_object_name_free(old, "cannot undo rename: an object")
    tx.fault_point("object.rename:checked")
    do_rename(tx, ob, ob.name, old)
    tx.checkpoint("undo.object.rename:renamed")


def would_cycle(ob, parent):
    p = parent
    while p is not None:
        if p == ob:
            return True
        p = p.parent
    return False


@tool(
    "object.set_parent",
    description="Parent an object to another (parent null clears). keep_transform (default) keeps the world transform; false keeps location/rotation/scale as the transform relative to the parent (parent inverse identity).",
    schema={
        "type": "object",
        "properties": {
            "name": NAME,
            "parent": dict(NAME, type=["string", "null"]),
            "keep_transform": {"type": "boolean", "default": True},
        },
        "required": ["name", "parent"],
        "additionalProperties": False,
    },
    safety_level="safe_write",
    idempotence_class="idempotent",
    rollback_method="compensation",
    blender_versions=">=3.4",
)


def tool_object_set_parent(tx, args):
    ob = get_object(args["name"])
    pname = args["parent"]
    parent = get_object(pname, "parent object") if pname is not None else None
    if parent is not None and would_cycle(ob, parent):
        raise ToolError("conflict", "parenting %r to %r would make a cycle" % (ob.name, parent.name))
    keep = bool(args.get("keep_transform", True))
    had_parent = ob.parent is not None
    old_world = world_matrix(ob)
    rec = {"object": ob.name, "parent": ob.parent.name if had_parent else None,
           "matrix_parent_inverse": matrix_rows(ob.matrix_parent_inverse)}
    rec.update(basis_state(ob))
    new_pinv = Matrix.Identity(4)
    if keep and parent is not None:
        new_pinv = world_matrix(parent).inverted_safe()
    tx.set_undo(rec)
    tx.touch("object", ob.name)
    st = basis_state(ob)
    old_parent, old_pinv = ob.parent, ob.matrix_parent_inverse.copy()
    tx.on_undo(lambda: (set_parent(ob, old_parent), setattr(ob, "matrix_parent_inverse", old_pinv),
                        restore_basis(ob, st)))
    set_parent(ob, parent)
    ob.matrix_parent_inverse = new_pinv
    if keep and had_parent:
        # world = parent_world @ pinv @ basis = basis (or basis alone without a
        # parent): the old world matrix becomes the basis.
        set_basis_from_matrix(ob, old_world)
    tx.checkpoint("object.set_parent:set")
    return {"name": ob.name, "parent": parent.name if parent is not None else None, "location": qv(ob.location),
            "rotation_euler": qv(ob.rotation_euler), "scale": qv(ob.scale)}


@undoer("object.set_parent")
def undo_object_set_parent(tx, rec):
    ob = live_object(field(rec, "object", str))
    pname = field(rec, "parent", str, optional=True)
    parent = live_object(pname, "parent") if pname else None
    if parent is not None and would_cycle(ob, parent):
        raise ToolError("conflict", "cannot undo: parenting %r to %r would make a cycle" % (ob.name, pname))
    pinv = matrix_from_record(field(rec, "matrix_parent_inverse", list))
    want = basis_from_record(rec)
    tx.touch("object", ob.name)
    st = basis_state(ob)
    old_parent, old_pinv = ob.parent, ob.matrix_parent_inverse.copy()
    tx.on_undo(lambda: (set_parent(ob, old_parent), setattr(ob, "matrix_parent_inverse", old_pinv),
                        restore_basis(ob, st)))
    set_parent(ob, parent)
    tx.fault_point("object.set_parent:parent")
    tx.checkpoint("undo.object.set_parent:parent")
    ob.matrix_parent_inverse = pinv
    restore_basis(ob, want)


@tool(
    "object.select",
    description="Select exactly the named objects in the scene's view layer (others are deselected) and optionally set the active object. Selection is not part of the scene hash; the active object is.",
    schema={
        "type": "object",
        "properties": {
            "names": {"type": "array", "items": NAME, "minItems": 0, "maxItems": 1000},
            "active": NAME,
        },
        "required": ["names"],
        "additionalProperties": False,
    },
    safety_level="safe_write",
    idempotence_class="idempotent",
    rollback_method="compensation",
    blender_versions=">=3.4",
)


def tool_object_select(tx, args):
    sc = current_scene()
    vl = active_view_layer(sc)
    if vl is None:
        raise ToolError("conflict", "the scene has no view layer")
    synced(vl)  # its selection is read below
    want = {}
    for n in args["names"]:
        ob = get_object(n)
        if not in_view_layer(ob, vl):
            raise ToolError("conflict", "object %r is not in the scene's view layer" % n)
        want[n] = ob
    active = None
    if "active" in args:
        active = get_object(args["active"])
        if not in_view_layer(active, vl):
            raise ToolError("conflict", "object %r is not in the scene's view layer" % active.name)
    before = sorted(o.name for o in vl.objects.selected if o is not None)
    prev = active_of(vl)
    tx.set_undo({"scene": sc.name, "view_layer": vl.name, "selected": before,
                 "active": prev.name if prev is not None else None})
    tx.touch("scene", sc.name)
    apply_selection(tx, vl, want, active if "active" in args else prev)
    tx.checkpoint("object.select:selected")
    active = active_of(vl)
    return {"selected": sorted(want), "active": active.name if active else None}


def apply_selection(tx, vl, want, active):
    """Select exactly the objects of want (name -> object, each with a base
    in vl) in vl, and make active the active object. It walks the current
    selection and want, never the whole view layer, so its cost follows the
    selection, not the scene."""
    for o in [o for o in vl.objects.selected if o is not None]:
        if o.name not in want:
            tx.on_undo(lambda o=o: o.select_set(True, view_layer=vl))
            o.select_set(False, view_layer=vl)
    for n in sorted(want):
        o = want[n]
        if not o.select_get(view_layer=vl):
            tx.on_undo(lambda o=o: o.select_set(False, view_layer=vl))
            o.select_set(True, view_layer=vl)
    cur = active_of(vl)
    if cur != active:
        tx.on_undo(lambda: set_active(vl, cur))
        set_active(vl, active)


@undoer("object.select")
def undo_object_select(tx, rec):
    sc, vl = resolve_view_layer(field(rec, "scene", str), field(rec, "view_layer", str))
    if vl is None:
        raise ToolError("conflict", "cannot undo select: view layer %r is gone" % rec.get("view_layer"))
    synced(vl)  # its selection is read by apply_selection
    names = field(rec, "selected", list)
    if not all(isinstance(n, str) for n in names):
        raise ToolError("invalid_input", "undo record: bad 'selected'")
    want = {}
    for n in names:
        ob = INDEX.get("objects", n)
        if ob is None or is_tomb(n) or not in_view_layer(ob, vl):
            raise ToolError("conflict", "cannot undo select: %r is not in the view layer" % n)
        want[n] = ob
    an = field(rec, "active", str, optional=True)
    active = None
    if an:
        active = live_object(an, "previously active object")
        if not in_view_layer(active, vl):
            raise ToolError("conflict", "cannot undo select: %r is not in the view layer" % an)
    tx.touch("scene", sc.name)
    tx.fault_point("object.select:checked")
    apply_selection(tx, vl, want, active)
    tx.checkpoint("undo.object.select:selected")
