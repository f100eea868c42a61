"""The scene_state_v1 records: one canonical record per datablock a tool
can touch (KINDS), read from Blender or built by the tool that made it.

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
"""

import hashlib
from array import array

import bpy

from common import canonical, is_tomb
from compat import (action_fcurve_collections, canonical_engine, faces_are_offsets, material_use_nodes,
                    principled_emission_color, stamp_flags, world_background_node, world_use_nodes, world_uses_nodes)
from index import INDEX, memberships
from layers import active_of


# qf's results by value: round(x, 5) costs 0.3 us, a lookup a tenth of that,
# and a scene's values repeat (0, 1, a grid's steps). Bounded: emptied when
# full. Equal keys share a result: -0.0 and 0.0 fold to 0.0 either way, and
# 1 and True to 1.0.
_ROUNDED = {}
_ROUNDED_MAX = 1 << 16


def qf(x):
    r = _ROUNDED.get(x)
    if r is None:
        if len(_ROUNDED) >= _ROUNDED_MAX:
            _ROUNDED.clear()
        r = _ROUNDED[x] = round(float(x), 5) or 0.0  # folds -0.0 into 0.0
    return r


def qv(v):
    # v[:] reads a Blender vector in one go; iterating reads it per element.
    get = _ROUNDED.get
    return [r if (r := get(x)) is not None else qf(x) for x in v[:]]


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
    data, parent = ob.data, ob.parent  # each read of an RNA pointer makes a new Python object
    rec = {
        "name": ob.name,
        "type": ob.type,
        "data": data.name if data is not None else None,
        "parent": parent.name if parent is not None else None,
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
    if parent is not None:  # the parent inverse matters only with a parent
        rec["matrix_parent_inverse"] = [qv(row) for row in ob.matrix_parent_inverse]
    ad = ob.animation_data
    if ad is not None and ad.action is not None:  # keyframes: the "action" record (tools/anim.py)
        rec["animation"] = {"action": ad.action.name}
    return rec


# Geometry digests by the arrays they digest (exact bytes, so equal keys
# digest equally). A scene's meshes often share their geometry (a primitive's
# shape, moved by its object), and reading the arrays costs half of digesting
# them in Python. Bounded: emptied when its keys reach _GEOMETRY_BYTES;
# meshes larger than _GEOMETRY_KEY_MAX bytes of arrays are not kept.
_GEOMETRY = {}
_GEOMETRY_SIZE = {"bytes": 0}
_GEOMETRY_BYTES = 16 << 20
_GEOMETRY_KEY_MAX = 1 << 16


def mesh_geometry_digest(me, counts=None):
    """geometry_sha256 of mesh me; counts: its (vertices, loops, polygons)
    when the caller has read them."""
    nv, nl, nf = counts if counts is not None else (len(me.vertices), len(me.loops), len(me.polygons))
    co = array("f", bytes(4 * 3 * nv))  # foreach_get fills a buffer without a float object per element
    me.vertices.foreach_get("co", co)
    loops = array("i", bytes(4 * nl))
    me.loops.foreach_get("vertex_index", loops)
    sizes = array("i", bytes(4 * nf))
    me.polygons.foreach_get("loop_total", sizes)
    # Where faces are offsets into the loops (faces_are_offsets), their
    # sizes say where they start: the key needs no starts.
    starts = None if faces_are_offsets() else face_starts(me, nf)
    key = None
    if 4 * (3 * nv + nl + 2 * nf) <= _GEOMETRY_KEY_MAX:
        key = (nv, nl, co.tobytes() + loops.tobytes() + sizes.tobytes() + (starts.tobytes() if starts is not None else b""))
        digest = _GEOMETRY.get(key)
        if digest is not None:
            return digest
    digest = geometry_digest(co, loops, starts if starts is not None else face_starts(me, nf), sizes)
    if key is not None:
        if _GEOMETRY_SIZE["bytes"] + len(key[2]) > _GEOMETRY_BYTES:
            _GEOMETRY.clear()
            _GEOMETRY_SIZE["bytes"] = 0
        _GEOMETRY[key] = digest
        _GEOMETRY_SIZE["bytes"] += len(key[2])
    return digest


def face_starts(me, nf):
    starts = array("i", bytes(4 * nf))
    me.polygons.foreach_get("loop_start", starts)
    return starts


def geometry_digest(co, loops, starts, sizes):
    """The digest of a mesh's vertex coordinates (flat) and faces (each
    face's loops[start:start + size] are its vertex indices)."""
    h = hashlib.sha256()
    h.update(",".join([str(round(x * 100000)) for x in co]).encode("ascii"))  # round(float) is an int
    h.update(b"|")
    faces = []
    for s, n in zip(starts, sizes):
        f = loops[s:s + n].tolist()
        k = f.index(min(f)) if f else 0
        faces.append(tuple(f[k:] + f[:k]))  # same winding, lowest vertex first
    # Face order and the first loop of a face differ between Blender versions
    # for the same primitive (UV sphere on 3.4 vs 4.5); the shape does not.
    faces.sort()
    h.update(";".join(",".join(map(str, f)) for f in faces).encode("ascii"))
    return h.hexdigest()


def record_mesh(me):
    nv, nl, nf = len(me.vertices), len(me.loops), len(me.polygons)
    return {
        "name": me.name,
        "vertices": nv,
        "edges": len(me.edges),
        "polygons": nf,
        "loops": nl,
        "geometry_sha256": mesh_geometry_digest(me, (nv, nl, nf)),
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
    return active_record(sc.name, active_of(sc.view_layers[0]) if len(sc.view_layers) else None)


def active_record(scene_name, ob):
    """The "active:<scene>" record of a scene whose active object is ob (or
    None)."""
    return {"scene": scene_name, "active_object": ob.name if ob is not None else None}


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


def record_of(kind, name):
    """The record of datablock kind:name, or None when there is none."""
    if is_tomb(name):
        return None
    db = INDEX.get(COLLECTIONS[kind], name)
    return RECORDERS[kind](db) if db is not None else None


def all_records():
    """(kind, section, name, record) for every tracked datablock, in one
    pass: each record is built from the datablock in hand (no lookup by name)
    and membership comes from one pass over the collections, so this is
    O(scene), not O(scene^2)."""
    return all_records_with(memberships())


def all_records_with(members):
    for kind, section, fn, coll in KINDS:
        for db in getattr(bpy.data, coll):
            name = db.name
            if db.library is not None or is_tomb(name):
                continue
            if kind == "object":
                rec = record_object(db, members.get(db.as_pointer(), []))
            else:
                rec = fn(db)
            yield kind, section, name, rec
