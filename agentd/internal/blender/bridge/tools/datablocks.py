"""Datablock helpers shared by the tool modules: names (free, exact,
checked), objects and their data (lookup, creation, removal and its undo),
collections and view layers by reference, and transforms as records.

Every function here is a function of the scene and its arguments, so a
replay after recovery makes the same choices (names, references) as the
first run.
"""

import bpy  # first: the bpy module provides mathutils
from mathutils import Matrix

from baseline import current_scene, live_scene, live_scenes
from common import is_tomb
from compat import remove_ids, rename_takes_names
from index import INDEX, link_object, set_parent, unlink_object
from layers import active_of, in_view_layer, set_active
from records import KINDS, active_record
from registry import ToolError, field
from schema import check_name, check_name_free, is_number
from state import STATE
from trash import discard, void_mesh


def free_name_in(coll, base, but=None):
    """The lowest free name of base, base.001, base.002, ... in coll (a
    bpy.data collection, an object's modifiers, ...), the name of but not
    counted: a function of the scene alone, so a replay after recovery picks
    the same names."""
    if base not in coll or (but is not None and but.name == base):
        return base
    taken = set(coll.keys())
    if but is not None:
        taken.discard(but.name)
    i = 1
    while "%s.%03d" % (base, i) in taken:
        i += 1
    return "%s.%03d" % (base, i)


def naming_tells():
    """Whether naming an ID tells if the name was free: Blender 4.5 gives a
    taken name a suffix, found through its name map. Blender 3.4 takes the
    name from the other ID instead, and an ID linked from a library may
    carry a name without making a local one take a suffix: there the name
    must be looked up first (`name in bpy.data.<kind>`, a scan of the kind)."""
    return not rename_takes_names() and not len(bpy.data.libraries)


# Blender 4.5's name map numbers a new ID base.001, base.002, ... with the
# lowest number it finds free below this, and with the highest + 1 above.
NAME_MAP_NUMBERS = 1024


def blender_named(idb, coll, base):
    """Where naming tells: idb was just made in coll under the name base, and
    Blender named it from its name map, without a scan: base or the lowest
    free base.NNN, as free_name_in(coll, base) would, but that the map
    counts every number however written, so a name like base.1 takes number
    1 and base.001 is skipped (Blender's own name still, as object.create's
    schema promises; the same names give the same one). From
    NAME_MAP_NUMBERS up Blender takes the highest number + 1: there
    free_name_in (a scan) looks for a gap and idb takes its name. Returns
    idb's name."""
    name = idb.name
    number = name[len(base) + 1:] if name.startswith(base + ".") else None
    if name != base and not (number and number.isdigit() and int(number) < NAME_MAP_NUMBERS):
        idb.name = free_name_in(coll, base, but=idb)
    return idb.name


def took_name(idb, coll, name):
    """Give idb (of bpy.data collection coll) name when no other ID of coll
    has it; whether it did."""
    if not naming_tells() and name in coll:
        return False
    idb.name = name
    return idb.name == name


def name_free(idb, coll_name, base):
    """Give idb, just made in bpy.data.<coll_name>, the name
    free_name_in(coll, base) picks, base without a scan when it is free
    (took_name), and note it in INDEX: the record of the new name is read
    next, and a miss would scan the collection."""
    coll = getattr(bpy.data, coll_name)
    if not took_name(idb, coll, base):
        idb.name = free_name_in(coll, base, but=idb)
    INDEX.put(coll_name, idb)


def collection_ref(coll):
    for sc in bpy.data.scenes:
        if sc.collection == coll:
            return {"scene": sc.name}
    return {"collection": coll.name}


def resolve_collection(ref):
    if "scene" in ref:
        sc = live_scene(ref["scene"])
        return sc.collection if sc is not None else None
    return bpy.data.collections.get(ref.get("collection", ""))


def resolve_view_layer(scene_name, vl_name):
    sc = live_scene(scene_name or "")
    if sc is None:
        return None, None
    return sc, sc.view_layers.get(vl_name or "")


def has_base(ob, vl):
    """in_view_layer(ob, vl), without its resync where the scene's master
    collection holds ob: that gives ob a base in every layer of the scene."""
    return vl.id_data.collection in INDEX.collections_of(ob) or in_view_layer(ob, vl)


def bases_of(ob):
    """ob's bases in every view layer of every scene: where it is active,
    selected, hidden (what restore_bases puts back)."""
    out = []
    for sc in bpy.data.scenes:
        for vl in sc.view_layers:
            if in_view_layer(ob, vl):
                out.append({"scene": sc.name, "view_layer": vl.name, "active": active_of(vl) == ob,
                            "select": bool(ob.select_get(view_layer=vl)), "hide": bool(ob.hide_get(view_layer=vl))})
    return out


def set_base(vl, ob, active, select, hide):
    """Make ob (with a base in vl) active in vl when active, and give its
    base that selection and hiding. Only what differs is set: hide_set makes
    Blender resync the view layer (every base) even when nothing changes."""
    if active:
        set_active(vl, ob)
    if bool(ob.select_get(view_layer=vl)) != select:
        ob.select_set(select, view_layer=vl)
    if bool(ob.hide_get(view_layer=vl)) != hide:
        ob.hide_set(hide, view_layer=vl)


def note_active_objects(tx, leaving=None):
    """Before a change that links or unlinks (objects or collections): give
    tx each scene's active object as it will be after it, read now. Read
    after it, it would make Blender resync every base of the view layer
    first (0.4 ms at 10,000 objects; the next call that needs the bases pays
    that instead, once for any number of such changes). Nothing but an
    object leaving every collection (leaving) changes which object is
    active: its scenes are left with none. Scenes without records (the
    parked window's, linked ones) are left out, as the snapshot leaves them."""
    for sc in live_scenes():
        if sc.library is not None:
            continue
        a = active_of(sc.view_layers[0]) if len(sc.view_layers) else None
        tx.touch_record("active", sc.name, active_record(sc.name, None if a == leaving else a))


def restore_bases(ob, bases, tx=None):
    """Put back active/select/hide of ob's bases (bases_of) still present (a
    layer that excludes ob's collections by now holds no base of it). With
    tx, the active objects it replaces come back on rollback."""
    for b in bases:
        sc, vl = resolve_view_layer(b["scene"], b["view_layer"])
        if vl is not None and in_view_layer(ob, vl):
            if tx is not None:
                cur = active_of(vl)
                tx.on_undo(lambda vl=vl, cur=cur: set_active(vl, cur))
            set_base(vl, ob, b["active"], b["select"], b["hide"])


def matrix_rows(m):
    return [list(row) for row in m]


def rename(idb, name, what):
    """Rename an ID, insist on the exact name (named), and let INDEX follow
    it: its next lookups, by either name, and an object's collection labels
    need no scan."""
    old = idb.name
    idb.name = name
    named(idb, name, what)
    coll = "objects" if isinstance(idb, bpy.types.Object) else data_collection(idb)
    if coll is not None:
        INDEX.renamed(coll, idb, old)


def named(idb, name, what):
    """conflict unless idb, just named name, has it: Blender gives a taken
    name a .001 suffix instead (checking with its name map, where a check of
    ours, `name in bpy.data.objects`, would scan every object)."""
    if idb.name != name:
        article = "an" if what[:1] in "aeiou" else "a"
        raise ToolError("conflict", "%s %s named %r already exists" % (article, what, name))


def live_object(name, what="object"):
    ob = INDEX.get("objects", name)
    if ob is None or is_tomb(name):
        raise ToolError("conflict", "cannot undo: %s %r is gone" % (what, name))
    return ob


# bpy.data collection of each object data type, by bpy.types class (ID.id_type
# is 4.x only). Subclasses (SunLight, TextCurve, ...) match their base.
DATA_TYPES = (
    ("Mesh", "meshes"), ("Camera", "cameras"), ("Light", "lights"), ("Curve", "curves"),
    ("MetaBall", "metaballs"), ("Armature", "armatures"), ("Lattice", "lattices"), ("Speaker", "speakers"),
    ("Volume", "volumes"), ("PointCloud", "pointclouds"), ("Curves", "hair_curves"), ("LightProbe", "lightprobes"),
)
DATA_COLLECTIONS = frozenset(c for _, c in DATA_TYPES)


def data_collection(idb):
    """The bpy.data collection name holding object data idb, or None."""
    for cls_name, coll in DATA_TYPES:
        cls = getattr(bpy.types, cls_name, None)
        if cls is not None and isinstance(idb, cls):
            return coll
    return None


def get_object(name, what="object"):
    """The live object named name, else not_found (tombstones included)."""
    ob = INDEX.get("objects", name)
    if ob is None or is_tomb(name):
        raise ToolError("not_found", "no %s named %r" % (what, name))
    return ob


def data_ref(idb):
    """(kind or None, bpy.data collection name) of object data idb; kind is the
    scene_state_v1 kind tracking it (records.KINDS), None when untracked."""
    coll = data_collection(idb)
    for kind, _, _, c in KINDS:
        if c == coll:
            return kind, coll
    return None, coll


def touch_data(tx, idb):
    kind, _ = data_ref(idb)
    if kind is not None:
        tx.touch(kind, idb.name)


def world_matrix(ob, depth=0):
    """ob's world matrix from its parent chain, basis and parent inverses:
    independent of depsgraph evaluation (matrix_world is stale after bpy.data
    edits in background mode). Object parenting only."""
    m = ob.matrix_basis.copy()
    if ob.parent is None or depth > 1000:
        return m
    return world_matrix(ob.parent, depth + 1) @ ob.matrix_parent_inverse @ m


def set_basis_from_matrix(ob, m):
    """Set location, rotation (in ob's rotation mode) and scale from matrix m."""
    loc, rot, scale = m.decompose()
    ob.location = loc
    mode = ob.rotation_mode
    if mode == "QUATERNION":
        ob.rotation_quaternion = rot
    elif mode == "AXIS_ANGLE":
        axis, angle = rot.to_axis_angle()
        ob.rotation_axis_angle = (angle, axis[0], axis[1], axis[2])
    else:
        ob.rotation_euler = rot.to_euler(mode, ob.rotation_euler)
    ob.scale = scale


BASIS_KEYS = ("location", "rotation_mode", "rotation_euler", "rotation_quaternion", "rotation_axis_angle", "scale")


def basis_state(ob):
    """Exact local transform of ob, JSON-able."""
    return {k: (getattr(ob, k) if k == "rotation_mode" else list(getattr(ob, k))) for k in BASIS_KEYS}


def restore_basis(ob, st):
    for k in BASIS_KEYS:
        setattr(ob, k, st[k])


def basis_from_record(rec):
    st = {}
    for k, n in (("location", 3), ("rotation_euler", 3), ("rotation_quaternion", 4), ("rotation_axis_angle", 4), ("scale", 3)):
        v = field(rec, k, list)
        if len(v) != n or not all(is_number(x) for x in v):
            raise ToolError("invalid_input", "undo record: %r must be %d finite numbers" % (k, n))
        st[k] = tuple(float(x) for x in v)
    mode = field(rec, "rotation_mode", str)
    if mode not in ("QUATERNION", "AXIS_ANGLE", "XYZ", "XZY", "YXZ", "YZX", "ZXY", "ZYX"):
        raise ToolError("invalid_input", "undo record: bad rotation_mode")
    st["rotation_mode"] = mode
    return st


def matrix_from_record(rows):
    if not isinstance(rows, list) or len(rows) != 4 or not all(
            isinstance(r, list) and len(r) == 4 and all(map(is_number, r)) for r in rows):
        raise ToolError("invalid_input", "undo record: bad matrix")
    return Matrix(rows)


def new_data_object(tx, name, data, location=None, rotation_euler=None, scale=None):
    """Create object name for the new datablock data (already touched and with
    its removal registered), link it to the scene collection; set the
    transform. Returns the object."""
    ob = bpy.data.objects.new(name, data)
    tx.on_undo(lambda: bpy.data.objects.remove(ob, do_unlink=True))
    named(ob, name, "object")
    INDEX.new_object(ob)
    tx.touch("object", name)
    if location is not None:
        ob.location = location
    if rotation_euler is not None:
        ob.rotation_euler = rotation_euler
    if scale is not None:
        ob.scale = scale
    link_object(current_scene().collection, ob)
    return ob


def active_before(sc, vl):
    """The name of vl's active object (None: none, or vl is None), read
    before a call changes the view layer: from the scene's state when vl is
    the scene's first view layer (state.active_name), else from Blender."""
    if vl is None:
        return None
    if len(sc.view_layers) and vl == sc.view_layers[0]:
        known, name = STATE.active_name(sc.name)
        if known:
            return name
    prev = active_of(vl)
    return prev.name if prev is not None else None


def make_active(tx, sc, vl, ob):
    """Make ob the active object of view layer vl of scene sc (nothing when
    vl is None); returns the name of the object active before, or None."""
    if vl is None:
        return None
    prev_name = active_before(sc, vl)
    tx.touch("active", sc.name)
    tx.on_undo(lambda: set_active(vl, bpy.data.objects.get(prev_name) if prev_name else None))
    set_active(vl, ob)
    return prev_name


def new_exact(tx, coll_name, kind, name, what):
    """A new datablock in bpy.data.<coll_name> named exactly name (conflict
    "could not name the <what>" otherwise), touched, with its removal
    registered."""
    coll = getattr(bpy.data, coll_name)
    idb = coll.new(name)
    tx.touch(kind, name)
    tx.on_undo(lambda: coll.remove(coll[name]))
    if idb.name != name:
        raise ToolError("conflict", "could not name the %s %r" % (what, name))
    return idb


def new_data(tx, coll_name, kind, base, *args):
    """A new datablock in bpy.data.<coll_name> named base (or the lowest free
    base.NNN), touched, with its removal registered."""
    coll = getattr(bpy.data, coll_name)
    data = coll.new(free_name_in(coll, base), *args)
    dname = data.name
    tx.touch(kind, dname)
    tx.on_undo(lambda: coll.remove(coll[dname]))
    return data


def check_new_object_name(name):
    """The prologue of tools that name an object: a valid name that no other
    object has. A local object having it is left to Blender where it can
    answer (4.5: rename and new_data_object insist on the exact name; a check
    here would scan every object); Blender 3.4 would rename the other object,
    and a linked object may share a local object's name while tools find
    objects by name: then the name is looked up."""
    check_name(name)
    check_object_name_free(name, "an object")


def check_object_name_free(name, what):
    """conflict when an object has name, where Blender itself cannot tell
    (check_new_object_name)."""
    check_id_name_free(name, bpy.data.objects, what)


def check_id_name_free(name, coll, what):
    """conflict when an ID of coll (a bpy.data collection) has name, where
    Blender itself cannot tell: elsewhere rename() insists on the exact name,
    and a check here would scan every ID of the kind."""
    if not naming_tells():
        check_name_free(name, coll, what)


def check_removable(ob, data, kind, data_name, verb):
    """Before undoing the creation of ob with its data (kind data_name): ob
    must still solely own data, and nothing may refer to ob."""
    if data is None or ob.data != data or data.users != 1:
        raise ToolError("conflict", "cannot undo %s: %r no longer solely owns %s %r" % (verb, ob.name, kind, data_name))
    if any(not is_tomb(c.name) for c in INDEX.children_of(ob)) or any(sc.camera == ob for sc in bpy.data.scenes):
        raise ToolError("conflict", "cannot undo %s: other datablocks now refer to %r" % (verb, ob.name))


def remove_created_object(tx, ob, label, vl=None, prev=None, data=None, fresh=True, inactive=False):
    """The last steps of undoing the creation of ob, validated before: make
    prev the active object of vl again (when vl is given), unlink ob from its
    collections (each step reversible), stop at the "undo" fault point and
    checkpoint of label, then remove ob and its data (when given)
    (irreversible, cannot fail). What refers to nothing outside them is
    discarded (freed later with others, trash.discard): a made object as it
    was made (as_made), or a copy, or a made mesh object, once it let go of
    what later calls gave it when its creation is undone before them
    (released). Otherwise they are freed now, so that what they refer to
    counts its users right. inactive: the caller found ob active in no view
    layer, so no scene's active object changes."""
    if vl is not None:
        cur = active_of(vl)
        if cur != prev:
            if prev is not None and not has_base(prev, vl):
                raise ToolError("conflict", "cannot undo %s: %r, active before it, is not in view layer %r any more"
                                % (label, prev.name, vl.name))
            tx.on_undo(lambda: set_active(vl, cur))
            set_active(vl, prev)
    if inactive:
        # Reading the active objects (note_active_objects) would make
        # Blender resync a layer the create left stale.
        for sc in bpy.data.scenes:
            tx.unchanged("active", sc.name)
    else:
        note_active_objects(tx, leaving=ob)
    for c in INDEX.collections_of(ob):
        tx.on_undo(lambda c=c: link_object(c, ob))
        unlink_object(c, ob)
    tx.fault_point(label + ":unlinked")
    tx.checkpoint("undo." + label + ":unlinked")
    gone = [("object", ob.name)]
    data_kind = data_ref(data)[0] if data is not None else None
    if data_kind is not None:
        gone.append((data_kind, data.name))
    if fresh and ob.type not in RELEASABLE:
        waits = as_made(ob, data)
    else:
        waits = released(ob, data) if data is not None else released_linked(ob)
    if waits:
        discard([ob, data])
    else:
        remove_ids([ob, data])
    for kind, name in gone:
        tx.gone(kind, name)


# Object types whose copy (with its own copy of the data) released can make
# refer to nothing outside the pair.
RELEASABLE = ("MESH", "CURVE", "SURFACE")


def released(ob, data):
    """Let a copy (ob, with data its own copy of the source's data) drop every
    reference that counts a user of another datablock (materials, actions,
    modifiers' and constraints' datablocks), so that discarding the pair
    leaves every other user count true. False, and nothing changed, when the
    copy may refer to something this does not drop (shape keys, particles,
    a force field's texture, light linking, ID custom properties, other
    object types; a linked copy's shared data: released_linked): it is freed
    at once then. Cannot fail."""
    if data is None or ob.data != data or not object_releasable(ob):
        return False
    if getattr(data, "shape_keys", None) is not None or holds_ids(data):
        return False
    # Each only when there is something to drop: these calls make Blender
    # rebuild the scene's dependency relations.
    drop_own_materials(ob)
    if len(data.materials):
        data.materials.clear()
    for idb in (ob, data):
        if idb.animation_data is not None:
            idb.animation_data_clear()
    if len(ob.modifiers):
        ob.modifiers.clear()
    if len(ob.constraints):
        ob.constraints.clear()
    if ob.parent is not None:
        set_parent(ob, None)
    return True


def as_made(ob, data):
    """Whether a made object of a type released does not take (a light, a
    camera, a text) still refers only to what its tool made it with: no
    animation, material, modifier, constraint, parent or ID property, all
    of which only a later call gives it."""
    if ob.animation_data is not None or ob.parent is not None or len(ob.modifiers) or len(ob.constraints):
        return False
    if data is not None and getattr(data, "animation_data", None) is not None:
        return False
    if any(slot.material is not None for slot in ob.material_slots):
        return False
    return not holds_ids(ob) and (data is None or not holds_ids(data))


def object_releasable(ob):
    """Whether released can make ob refer to nothing but its data."""
    if ob.type not in RELEASABLE or len(ob.particle_systems) or ob.instance_collection is not None:
        return False
    if ob.field is not None and ob.field.texture is not None:
        return False
    ll = getattr(ob, "light_linking", None)  # Blender 4: counted collections
    if ll is not None and (ll.receiver_collection is not None or ll.blocker_collection is not None):
        return False
    return not holds_ids(ob)


def released_linked(ob):
    """released for a linked copy, a mesh object that shares its mesh with
    its source: it drops the materials of its own slots while they are in
    sight, lets go of the shared mesh for the void mesh (trash.void_mesh),
    which counts the shared mesh's users right at once, and then drops the
    rest as released does. False, and nothing changed, where released would
    refuse the object."""
    if ob.type != "MESH" or ob.data is None or not object_releasable(ob):
        return False
    drop_own_materials(ob)
    ob.data = void_mesh()
    return released(ob, ob.data)


def drop_own_materials(ob):
    """Empty the materials ob holds of its own in its slots, leaving every
    slot linked to the object."""
    for slot in ob.material_slots:
        clear_own_material(slot)


def clear_own_material(slot):
    """Empty the material an object's slot holds of its own, leaving the
    slot linked to the object; returns the slot's link before and that
    material (or None). An object keeps its own material in a slot linked
    to its data too, out of sight: it is looked at through the object
    link."""
    link = slot.link
    if link != "OBJECT":
        slot.link = "OBJECT"
    own = slot.material
    if own is not None:
        slot.material = None
    return link, own


def holds_ids(idblock):
    """Whether idblock's custom properties refer to a datablock (such a
    reference counts a user)."""
    stack = [v for _, v in idblock.items()]
    while stack:
        v = stack.pop()
        if isinstance(v, bpy.types.ID):
            return True
        if hasattr(v, "items"):  # a group
            stack.extend(x for _, x in v.items())
        elif isinstance(v, (list, tuple)):  # a list of groups
            stack.extend(v)
    return False


def undo_remove_created(tx, rec, label):
    """Shared applier: remove an object a tool created (and its data when the
    tool created that too), putting back the scene cameras the tool changed.
    rec: {"object", "data": {"kind"?, "collection", "name"}|null,
          "camera_before": {"scene": S, "camera": name|null}|absent}"""
    name = field(rec, "object", str)
    ob = live_object(name)
    d = field(rec, "data", dict, optional=True)
    data = None
    if d is not None:
        cname = field(d, "collection", str)
        if cname not in DATA_COLLECTIONS:
            raise ToolError("invalid_input", "undo record: bad data collection %r" % cname)
        data = INDEX.get(cname, field(d, "name", str))
        if data is None or ob.data != data or data.users != 1:
            raise ToolError("conflict", "cannot undo: %r no longer solely owns its data %r" % (name, d.get("name")))
    if any(not is_tomb(c.name) for c in INDEX.children_of(ob)):
        raise ToolError("conflict", "cannot undo: %r has children now" % name)
    cam = field(rec, "camera_before", dict, optional=True)
    cam_scene, cam_prev = None, None
    if cam is not None:
        cam_scene = live_scene(field(cam, "scene", str))
        if cam_scene is None:
            raise ToolError("conflict", "cannot undo: scene %r is gone" % cam.get("scene"))
        prev = field(cam, "camera", str, optional=True)
        cam_prev = live_object(prev, "previous scene camera") if prev else None
    for sc in live_scenes():
        if sc.camera == ob and sc != cam_scene:
            raise ToolError("conflict", "cannot undo: %r is the camera of scene %r now" % (name, sc.name))
        for vl in sc.view_layers:
            if active_before(sc, vl) == name:
                raise ToolError("conflict", "cannot undo: %r is the active object now" % name)
    tx.touch("object", name)
    if data is not None:
        touch_data(tx, data)
    if cam_scene is not None:
        tx.touch("scene", cam_scene.name)
        cur = cam_scene.camera
        tx.on_undo(lambda: setattr(cam_scene, "camera", cur))
        cam_scene.camera = cam_prev
    remove_created_object(tx, ob, label, data=data, fresh=label != "object.duplicate", inactive=True)  # checked above


def created_data_record(data):
    kind, coll = data_ref(data)
    return {"kind": kind, "collection": coll, "name": data.name}
