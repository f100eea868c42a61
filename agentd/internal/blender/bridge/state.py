"""Scene state: the baseline scene, the scene_state_v1 records, per-datablock
digests and the running multiset hash (STATE), and the full snapshot.

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
objects, meshes, cameras, lights, materials, collections, worlds, scenes,
curves and actions (render settings live in the scene record: engine, with
4.x's BLENDER_EEVEE_NEXT recorded as BLENDER_EEVEE, resolution, frame range,
fps, film transparency, Cycles and EEVEE samples; a world that renders through
nodes adds its Background node's color and strength; an animated object adds
``"animation": {"action": name}``; a curve records its type, extrusion and,
for text, body and size; an action its F-Curves with their keyframes), plus
per scene a small record of its active object (section ``active_objects``,
kind ``active``: ``{"scene": name, "active_object": name|null}``), kept out of
the scene record so that making an object active does not re-digest the
render settings; touching a scene re-digests both. Keys are
``"<kind>:<name>"``.
Floats are rounded to 5 decimal places (a 1e-5 tolerance) and -0.0 becomes
0.0; mesh vertex coordinates enter as integers ``round(x * 1e5)`` through a
SHA-256 digest, together with the face topology (each face's vertex indices
rotated to start at the lowest index, faces sorted, so face order and a face's
first loop do not matter). Object membership in
collections is stored on the object (the scene's master collection is named
``"<scene>:<scene name>"``), so adding an object re-digests only that object.
The object record also holds its modifier stack in order (name, type,
visibility and, for subdivision/bevel/array/mirror/solidify, the settings in
MODIFIER_FIELDS), its material slots (effective material per slot) and, when
parented, its ``matrix_parent_inverse``; a material record holds its
Principled BSDF inputs (base color, metallic, roughness, emission color and
strength); a light record its type's own settings (point/spot radius, spot
cone, area shape and size, sun angle); a camera record lens, sensor, clip,
shift and ortho scale. The collection hierarchy is each collection record's
``children`` plus the scene record's ``collection_children``. Selection is not
recorded (view-layer UI state; tools/objects.py, object.select).
Each record is encoded as JSON with sorted keys, separators ``(",", ":")`` and
ASCII escapes; its digest is the SHA-256 of that encoding.

    acc        = sum(int(sha256(key + "\\0" + digest), 16) for every record) mod 2**256
    scene_hash = sha256("scene_state_v1:" + "%064x" % acc)   (lowercase hex)

``acc`` is a multiset hash: a tool reports the keys it touched, and only those
records are re-digested (subtract the old term, add the new one). ``snapshot``
recomputes everything from scratch. Tombstones (tools/objects.py) are not in the state.
"""

import hashlib

import bpy

from common import TOMB_PREFIX, canonical, is_tomb, sha256_hex
from compat import (has_cycles, material_use_nodes, principled_emission_color, set_world_use_nodes, stamp_flags,
                    world_use_nodes)
from compat import action_fcurve_collections, canonical_engine, remove_ids, world_background_node, world_uses_nodes

SCHEMA = "scene_state_v1"
BRIDGE = {"tomb_counter": 0}  # per-session bridge state; saved inside checkpoints


# ---------------------------------------------------------------------------
# Canonical records.

def qf(x):
    r = round(float(x), 5)
    return r + 0.0 if r != 0 else 0.0  # folds -0.0 into 0.0


def qv(v):
    return [qf(x) for x in v]


def collection_label(coll):
    for sc in bpy.data.scenes:
        if sc.collection == coll:
            return "<scene>:" + sc.name
    return coll.name


# Modifier settings in the object record, per modifier type (the ones
# modifier.add sets or pins; tools/modifiers.py). Other types record only
# name, type and visibility.
MODIFIER_FIELDS = {
    "SUBSURF": ("levels", "render_levels", "quality", "subdivision_type", "uv_smooth", "boundary_smooth",
                "use_creases", "use_custom_normals", "use_limit_surface"),
    "BEVEL": ("width", "segments", "limit_method", "angle_limit", "offset_type", "affect", "profile",
              "use_clamp_overlap", "harden_normals"),
    "ARRAY": ("count", "fit_type", "use_relative_offset", "relative_offset_displace", "use_constant_offset",
              "constant_offset_displace", "use_merge_vertices", "merge_threshold"),
    "MIRROR": ("use_axis", "use_bisect_axis", "use_bisect_flip_axis", "use_clip", "use_mirror_merge",
               "merge_threshold"),
    "SOLIDIFY": ("thickness", "offset", "use_even_offset", "use_rim", "use_rim_only", "use_flip_normals",
                 "solidify_mode"),
}


def plain(v):
    """An RNA value as canonical JSON: floats rounded (qf), arrays as lists."""
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return qf(v)
    if isinstance(v, str):
        return v
    if isinstance(v, (set, frozenset)):
        return sorted(v)
    return [plain(x) for x in v]


def record_modifier(m):
    rec = {"name": m.name, "type": m.type, "show_viewport": bool(m.show_viewport), "show_render": bool(m.show_render)}
    for f in MODIFIER_FIELDS.get(m.type, ()):
        rec[f] = plain(getattr(m, f))
    return rec


def record_object(ob, collections=None):
    """ob's record; collections: its sorted collection labels when the caller
    has them (one-pass snapshot), else INDEX.labels(ob)."""
    rec = {
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
        "collections": list(collections) if collections is not None else INDEX.labels(ob),
        "materials": [s.material.name if s.material else None for s in ob.material_slots],
        "modifiers": [record_modifier(m) for m in ob.modifiers],
    }
    if ob.parent is not None:  # the parent inverse matters only with a parent
        rec["matrix_parent_inverse"] = [qv(row) for row in ob.matrix_parent_inverse]
    ad = ob.animation_data
    if ad is not None and ad.action is not None:  # keyframes: the "action" record (tools/anim.py)
        rec["animation"] = {"action": ad.action.name}
    return rec


def mesh_geometry_digest(me):
    n = len(me.vertices)
    co = [0.0] * (3 * n)
    me.vertices.foreach_get("co", co)
    h = hashlib.sha256()
    h.update(",".join([str(round(x * 100000)) for x in co]).encode("ascii"))  # round(float) is an int
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


def record_mesh(me):
    return {
        "name": me.name,
        "vertices": len(me.vertices),
        "edges": len(me.edges),
        "polygons": len(me.polygons),
        "loops": len(me.loops),
        "geometry_sha256": mesh_geometry_digest(me),
        "materials": [m.name if m else None for m in me.materials],
    }


def record_camera(c):
    return {
        "name": c.name,
        "type": c.type,
        "lens": qf(c.lens),
        "lens_unit": c.lens_unit,
        "ortho_scale": qf(c.ortho_scale),
        "sensor_width": qf(c.sensor_width),
        "sensor_height": qf(c.sensor_height),
        "sensor_fit": c.sensor_fit,
        "clip_start": qf(c.clip_start),
        "clip_end": qf(c.clip_end),
        "shift": [qf(c.shift_x), qf(c.shift_y)],
    }


def record_light(l):
    rec = {
        "name": l.name,
        "type": l.type,
        "energy": qf(l.energy),
        "color": qv(l.color),
    }
    # The radius means nothing to sun and area lights, and 3.4 stores an area
    # light's size in the same field (4.x does not): point and spot only.
    if l.type in ("POINT", "SPOT"):
        rec["shadow_soft_size"] = qf(l.shadow_soft_size)
    if l.type == "SPOT":
        rec["spot"] = [qf(l.spot_size), qf(l.spot_blend)]
    elif l.type == "AREA":
        rec["area"] = [l.shape, qf(l.size), qf(l.size_y)]
    elif l.type == "SUN":
        rec["angle"] = qf(l.angle)
    return rec


def principled_node(m):
    """The material's Principled BSDF: the one named "Principled BSDF", else the
    first by name; None without nodes."""
    if not material_use_nodes(m) or m.node_tree is None:
        return None
    nodes = m.node_tree.nodes
    n = nodes.get("Principled BSDF")
    if n is not None and n.type == "BSDF_PRINCIPLED":
        return n
    found = sorted((n.name, n) for n in nodes if n.type == "BSDF_PRINCIPLED")
    return found[0][1] if found else None


def record_principled(n):
    if n is None:
        return None
    em = principled_emission_color(n)
    return {
        "base_color": qv(n.inputs["Base Color"].default_value),
        "metallic": qf(n.inputs["Metallic"].default_value),
        "roughness": qf(n.inputs["Roughness"].default_value),
        "emission_color": qv(em.default_value[:3]) if em is not None else None,
        "emission_strength": qf(n.inputs["Emission Strength"].default_value),
    }


def record_material(m):
    return {
        "name": m.name,
        "diffuse_color": qv(m.diffuse_color),
        "metallic": qf(m.metallic),
        "roughness": qf(m.roughness),
        "use_nodes": material_use_nodes(m),
        "principled": record_principled(principled_node(m)),
    }


def record_collection(c):
    return {
        "name": c.name,
        "children": sorted(ch.name for ch in c.children),
        "hide_viewport": bool(c.hide_viewport),
        "hide_render": bool(c.hide_render),
    }


def record_world(w):
    rec = {"name": w.name, "color": qv(w.color), "use_nodes": world_use_nodes(w)}
    if world_uses_nodes(w):  # the background the renderers use (tools/world.py)
        bg = world_background_node(w)
        rec["background"] = None if bg is None else {
            "color": qv(bg.inputs["Color"].default_value),
            "strength": qf(bg.inputs["Strength"].default_value),
        }
    return rec


def record_curve(c):
    """Curve datablocks; text (FONT) curves record their text (tools/text.py)."""
    rec = {
        "name": c.name,
        "type": c.bl_rna.identifier,  # Curve, TextCurve, SurfaceCurve
        "dimensions": c.dimensions,
        "extrude": qf(c.extrude),
        "bevel_depth": qf(c.bevel_depth),
        "splines": len(c.splines),
        "materials": [m.name if m else None for m in c.materials],
    }
    if rec["type"] == "TextCurve":
        rec["body"] = c.body
        rec["size"] = qf(c.size)
        rec["align"] = [c.align_x, c.align_y]
        # Blender's built-in font is "Bfont" on 3.4 and "Bfont Regular" on 4.x.
        rec["font"] = None if c.font is None else "<builtin>" if c.font.filepath == "<builtin>" else c.font.name
    return rec


def record_action(a):
    """Keyframes: every F-Curve (data path, array index) with its keys
    (frame, value, interpolation), sorted (tools/anim.py). Handles are left
    out: they are derived from the keys (auto handles)."""
    curves = []
    for fcs in action_fcurve_collections(a):
        for fc in fcs:
            curves.append({
                "data_path": fc.data_path,
                "index": fc.array_index,
                "keyframes": [[qf(k.co[0]), qf(k.co[1]), k.interpolation] for k in fc.keyframe_points],
            })
    curves.sort(key=lambda c: (c["data_path"], c["index"], canonical(c["keyframes"])))
    return {"name": a.name, "fcurves": curves}


def record_active(sc):
    """The scene's active object, a record of its own ("active:<scene>"): it
    changes with nearly every create, and re-digesting the whole scene record
    (render settings and all) for it would cost more than the create."""
    active = None
    if len(sc.view_layers):
        a = sc.view_layers[0].objects.active
        active = a.name if a is not None else None
    return {"scene": sc.name, "active_object": active}


def record_scene(sc):
    r = sc.render
    vs = sc.view_settings
    rec = {
        "name": sc.name,
        "camera": sc.camera.name if sc.camera else None,
        "world": sc.world.name if sc.world else None,
        "view_layers": [vl.name for vl in sc.view_layers],
        "collection_children": sorted(c.name for c in sc.collection.children),
        "frame": [sc.frame_current, sc.frame_start, sc.frame_end],
        "render": {
            "engine": canonical_engine(r.engine),
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
    if hasattr(sc, "eevee"):
        rec["eevee"] = {"taa_render_samples": sc.eevee.taa_render_samples}
    return rec


KINDS = [
    # kind, snapshot section, record function, bpy.data collection name
    ("action", "actions", record_action, "actions"),
    ("active", "active_objects", record_active, "scenes"),
    ("camera", "cameras", record_camera, "cameras"),
    ("collection", "collections", record_collection, "collections"),
    ("curve", "curves", record_curve, "curves"),
    ("light", "lights", record_light, "lights"),
    ("material", "materials", record_material, "materials"),
    ("mesh", "meshes", record_mesh, "meshes"),
    ("object", "objects", record_object, "objects"),
    ("scene", "scenes", record_scene, "scenes"),
    ("world", "worlds", record_world, "worlds"),
]
RECORDERS = {k: f for k, _, f, _ in KINDS}  # kind -> fn(datablock) -> record
COLLECTIONS = {k: c for k, _, _, c in KINDS}  # kind -> bpy.data collection name


# ---------------------------------------------------------------------------
# Lookups that cost what the change costs (INDEX).
#
# In Blender 4.5 ``bpy.data.objects.get(name)`` is a linear scan of the ID list
# and ``ob.users_collection`` (a Python property of bpy_types) builds a tuple
# of every object of every collection: at 10,000 objects each costs about as
# much as everything else a set_transform does, ten times over. INDEX keeps
#
# - names: per bpy.data collection, name -> datablock. A hit is served only
#   after checking that the datablock is still valid (a removed ID's Python
#   object raises ReferenceError: Blender invalidates it when it frees the ID,
#   whatever frees it, on 3.4 and 4.5) and still has that name; anything else
#   drops the entry and falls back to bpy.data.<coll>.get(name) (the scan),
#   which refreshes it. A miss always scans, so a datablock created behind the
#   index's back is found.
# - members: object name -> (the object, its sorted collection labels). Served
#   only when the entry holds this very object (identity: one Python object per
#   ID) and its user count still equals the number of collections (+1 for a
#   fake user): a link or unlink the index missed changes the count, and the
#   entry is recomputed from users_collection. Tools link and unlink objects
#   through link_object / unlink_object, which keep the entry up to date; an
#   operator or python.exec that may move objects is followed by a rebuild or
#   INDEX.refresh_members().
#
# - children: parent object's pointer -> the objects that had it as parent
#   when last seen. Blender has no list of an object's children
#   (Object.children scans every object: 1.1 ms at 10,000), so the first
#   question builds the whole map in one pass, and tools that give an object
#   a parent note it (set_parent, object.duplicate). An entry is served only
#   after checking that the child is still valid and still has that parent,
#   so children lost behind the index's back drop out; children gained behind
#   its back come only from operators and python.exec, which invalidate it.
#
# SceneState.rebuild fills names and members in its single pass; reset,
# checkpoint load, python.exec and scene.import rebuild or invalidate them. full_snapshot never
# reads INDEX (it recomputes membership in its own pass), so the tests'
# "incremental == full" check after every tool also checks the index.

class Index:
    def __init__(self):
        self.names = {}    # bpy.data collection name -> {name: ID}
        self.members = {}  # object name -> (object, [labels])
        self.children = None  # parent pointer -> [objects]; None: not built

    def invalidate(self):
        self.names = {}
        self.members = {}
        self.children = None

    def forget_children(self):
        """Parents changed behind the index's back (an importer)."""
        self.children = None

    def children_of(self, ob):
        """ob.children (tombstones included), sorted by name, without a scan
        of every object once the map is built."""
        if self.children is None:
            m = {}
            for c in bpy.data.objects:
                if c.parent is not None:
                    m.setdefault(c.parent.as_pointer(), []).append(c)
            self.children = m
        key = ob.as_pointer()
        out, seen = [], set()
        for c in self.children.get(key, ()):
            try:
                if c.parent == ob and c.as_pointer() not in seen:
                    seen.add(c.as_pointer())
                    out.append(c)
            except ReferenceError:  # freed
                pass
        if out:
            self.children[key] = out
        else:
            self.children.pop(key, None)
        return sorted(out, key=lambda c: c.name)

    def parented(self, ob):
        """Note ob's parent (after ob.parent changed or ob was copied)."""
        if self.children is not None and ob.parent is not None:
            self.children.setdefault(ob.parent.as_pointer(), []).append(ob)

    def get(self, coll, name):
        """bpy.data.<coll>.get(name), from the cache when it is still true."""
        m = self.names.setdefault(coll, {})
        db = m.get(name)
        if db is not None:
            try:
                if db.name == name:
                    return db
            except ReferenceError:  # freed
                pass
            del m[name]
        db = getattr(bpy.data, coll).get(name)
        if db is not None:
            m[name] = db
        return db

    def put(self, coll, db):
        """Note a datablock a tool just created (saves the scan of a miss)."""
        self.names.setdefault(coll, {})[db.name] = db

    def new_object(self, ob):
        """Note an object a tool just created, before it links it anywhere."""
        self.put("objects", ob)
        self.members[ob.name] = (ob, [])

    def labels(self, ob):
        """ob's collection labels, sorted (what users_collection gives)."""
        e = self.members.get(ob.name)
        if e is not None and e[0] is ob and ob.users == len(e[1]) + (1 if ob.use_fake_user else 0):
            return list(e[1])
        labels = sorted(collection_label(c) for c in ob.users_collection)
        self.members[ob.name] = (ob, labels)
        return list(labels)

    def collections_of(self, ob):
        """The collections ob is linked to (users_collection, through labels)."""
        out = []
        for label in self.labels(ob):
            if label.startswith("<scene>:"):
                sc = self.get("scenes", label[len("<scene>:"):])
                c = sc.collection if sc is not None and self.get("collections", label) is None else None
            else:
                c = self.get("collections", label)
            if c is None:  # a label the index cannot resolve: ask Blender
                return list(ob.users_collection)
            out.append(c)
        return out

    def linked(self, ob, coll, linked):
        e = self.members.get(ob.name)
        if e is None or e[0] is not ob:
            return  # unknown: computed when next needed
        label = collection_label(coll)
        labels = [x for x in e[1] if x != label] + ([label] if linked else [])
        self.members[ob.name] = (ob, sorted(labels))

    def refresh_members(self, members=None):
        """Recompute every object's labels in one pass (after an operator)."""
        if members is None:
            members = memberships()
        self.members = {}
        for ob in bpy.data.objects:
            self.members.setdefault(ob.name, (ob, members.get(ob.as_pointer(), [])))


INDEX = Index()


# Datablocks an undo removed, freed later. Freeing one makes Blender walk all
# of Main to clear references to it (12 ms at 10,000 objects), so undoing a
# create would grow with the scene. discard renames them out of sight (a
# tombstone name: left out of the snapshot, the hash and every tool) and
# empty_trash frees the pile in one walk: once TRASH_MAX have gathered,
# before a checkpoint is saved and before scene.export (no file ever holds
# one), and before python.exec (which could free them under us). A new file
# (reset, checkpoint load) has freed them already: forget_trash. Only what
# refers to nothing outside the pile is discarded (an undo runs in reverse
# order, so a create's object and data are as fresh as when made), so every
# other datablock's user count stays true.
TRASH = {"ids": [], "n": 0}
TRASH_MAX = 256


def discard(ids):
    """Remove the datablocks ids (None entries skipped; already unlinked and
    unused) from the scene now, and free them with the next empty_trash."""
    for db in ids:
        if db is None:
            continue
        TRASH["n"] += 1
        db.name = "%sx%d" % (TOMB_PREFIX, TRASH["n"])
        TRASH["ids"].append(db)
    if len(TRASH["ids"]) >= TRASH_MAX:
        empty_trash()


def empty_trash():
    ids, TRASH["ids"] = TRASH["ids"], []
    remove_ids(ids)


def forget_trash():
    TRASH["ids"] = []


def set_parent(ob, parent):
    """ob.parent = parent, keeping INDEX up to date."""
    ob.parent = parent
    INDEX.parented(ob)


def link_object(coll, ob):
    """coll.objects.link(ob), keeping INDEX up to date."""
    coll.objects.link(ob)
    INDEX.linked(ob, coll, True)


def unlink_object(coll, ob):
    """coll.objects.unlink(ob), keeping INDEX up to date."""
    coll.objects.unlink(ob)
    INDEX.linked(ob, coll, False)


def memberships():
    """Object pointer -> sorted collection labels, in one pass over the scenes'
    master collections and bpy.data.collections (users_collection for all)."""
    out = {}
    for sc in bpy.data.scenes:
        label = "<scene>:" + sc.name
        for o in sc.collection.objects:
            out.setdefault(o.as_pointer(), []).append(label)
    for c in bpy.data.collections:
        label = collection_label(c)
        for o in c.objects:
            out.setdefault(o.as_pointer(), []).append(label)
    for labels in out.values():
        labels.sort()
    return out


def record_of(kind, name):
    """The record of datablock kind:name, or None when there is none."""
    if is_tomb(name):
        return None
    db = INDEX.get(COLLECTIONS[kind], name)
    return RECORDERS[kind](db) if db is not None else None


def all_records():
    """(kind, section, datablock, record) for every tracked datablock, in one
    pass: each record is built from the datablock in hand (no lookup by name)
    and membership comes from one pass over the collections, so this is
    O(scene), not O(scene^2)."""
    return all_records_with(memberships())


def all_records_with(members):
    for kind, section, fn, coll in KINDS:
        for db in getattr(bpy.data, coll):
            if db.library is not None or is_tomb(db.name):
                continue
            if kind == "object":
                rec = record_object(db, members.get(db.as_pointer(), []))
            else:
                rec = fn(db)
            yield kind, section, db, rec


def term(key, digest):
    return int(sha256_hex(key + "\0" + digest), 16)


def hash_from_acc(acc):
    return sha256_hex(SCHEMA + ":" + "%064x" % acc)


def full_snapshot():
    """Recompute every record from scratch: (snapshot, scene_hash)."""
    snap = {"schema": SCHEMA}
    for _, section, _, _ in KINDS:
        snap[section] = {}
    acc = 0
    for kind, section, db, rec in all_records():
        snap[section][db.name] = rec
        acc = (acc + term(kind + ":" + db.name, sha256_hex(canonical(rec)))) % (1 << 256)
    return snap, hash_from_acc(acc)


class SceneState:
    """Per-datablock digests and the running multiset hash."""

    def __init__(self):
        self.digests = {}
        self.acc = 0

    def rebuild(self):
        """Every digest from scratch, in one pass; refills INDEX."""
        INDEX.invalidate()
        self.digests = {}
        self.acc = 0
        members = memberships()
        for kind, _, _, coll in KINDS:
            m = INDEX.names.setdefault(coll, {})
            for db in getattr(bpy.data, coll):
                m.setdefault(db.name, db)
        INDEX.refresh_members(members)
        for kind, _, db, rec in all_records_with(members):
            self._set(kind + ":" + db.name, sha256_hex(canonical(rec)))

    def _set(self, key, digest):
        old = self.digests.pop(key, None)
        if old is not None:
            self.acc = (self.acc - term(key, old)) % (1 << 256)
        if digest is not None:
            self.digests[key] = digest
            self.acc = (self.acc + term(key, digest)) % (1 << 256)

    def touch(self, kind, name):
        rec = record_of(kind, name)
        self._set(kind + ":" + name, sha256_hex(canonical(rec)) if rec is not None else None)
        if kind == "scene":  # a scene touch covers its active object too
            self.touch("active", name)

    def set_record(self, kind, name, rec):
        """touch(kind, name) with the record in hand (Tx.touch_record), or
        None when there is none (Tx.gone)."""
        self._set(kind + ":" + name, sha256_hex(canonical(rec)) if rec is not None else None)

    def scene_hash(self):
        return hash_from_acc(self.acc)


STATE = SceneState()

# ---------------------------------------------------------------------------
# Baseline scene.

TRACKED_COLLECTIONS = ("objects", "meshes", "cameras", "lights", "materials", "worlds", "collections", "curves",
                       "actions")


def reset_scene():
    INDEX.invalidate()
    forget_trash()
    bpy.ops.wm.read_factory_settings(use_empty=True)
    # Factory settings may bring the preference back: no .blend file may run
    # its scripts or Python drivers (checkpoints load with use_scripts=False
    # too). Setting it also clears Blender's global auto-exec flag.
    bpy.context.preferences.filepaths.use_scripts_auto_execute = False
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
    if hasattr(sc, "eevee"):
        sc.eevee.taa_render_samples = 64
    STATE.rebuild()
    return STATE.scene_hash()


def current_scene():
    return bpy.data.scenes.get("Scene") or bpy.data.scenes[0]


def active_view_layer(sc):
    return sc.view_layers[0] if len(sc.view_layers) else None
