"""Version adapters: every Blender 3.4 / 4.5 difference lives here.

A tool that needs an API that differs between versions calls an adapter from
this module instead of testing bpy.app.version itself; a tool that cannot
work on some version declares a ``blender_versions`` range (see registry.py),
which ``version_in_range`` evaluates.
"""

import re
import sys
from array import array

import bpy

from layers import flush_actives, pending_active


def blender_version():
    return tuple(bpy.app.version)


def rename_takes_names():
    """Whether giving an ID a name another ID of its kind has renames that
    other ID (Blender 3.4: "Box" becomes "Box.001" when "Crate" is renamed
    "Box"), rather than giving the renamed ID a .001 suffix (4.5). Versions
    between are taken to be like 3.4."""
    return blender_version() < (4, 5, 0)


def object_types_of(objects):
    """The type of each object of an object collection, in its order.
    Blender 4.5 reads them all at once (foreach_get, enum values); 3.4's
    foreach_get does not read enums (it gives other numbers), so there each
    object is asked."""
    if blender_version() < (4, 5, 0):
        return [ob.type for ob in objects]
    values = array("i", bytes(4 * len(objects)))
    objects.foreach_get("type", values)
    if not _TYPES:
        _TYPES.update((e.value, e.identifier) for e in bpy.types.Object.bl_rna.properties["type"].enum_items)
    return [_TYPES[v] for v in values]


_TYPES = {}  # Object.type's enum value -> identifier


def faces_are_offsets():
    """Whether a mesh keeps its faces as offsets into its loops (4.0 on), so
    that each face's loop_start is the sum of the sizes before it; 3.4 keeps
    a start per face, which need not follow."""
    return _FACES_ARE_OFFSETS


_FACES_ARE_OFFSETS = tuple(bpy.app.version) >= (4, 0, 0)  # asked per mesh


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


def disable_file_previews():
    """No preview in saved .blend files, and so no thumbnail under
    ~/.cache/thumbnails (outside the session's directories). 3.4 and 4.5
    have filepaths.file_preview_type; older 3.x had use_save_preview_images."""
    fp = bpy.context.preferences.filepaths
    if hasattr(fp, "file_preview_type"):
        fp.file_preview_type = "NONE"
    elif hasattr(fp, "use_save_preview_images"):
        fp.use_save_preview_images = False


def world_use_nodes(world):
    # World.use_nodes is deprecated after 4.5; absent means node-less is impossible.
    return bool(getattr(world, "use_nodes", False))


def set_world_use_nodes(world, value):
    if hasattr(world, "use_nodes"):
        world.use_nodes = value


def material_use_nodes(mat):
    # Material.use_nodes is deprecated after 4.5 (always node-based there).
    return bool(getattr(mat, "use_nodes", True))


def set_material_use_nodes(mat, value):
    if hasattr(mat, "use_nodes"):
        mat.use_nodes = value


def principled_emission_color(node):
    """The Principled BSDF's emission color input: "Emission" on 3.x,
    "Emission Color" on 4.x (whose default is white with strength 0, where
    3.4's is black with strength 1; tools pin both)."""
    return node.inputs.get("Emission Color") or node.inputs.get("Emission")


def move_modifier(ob, name, index):
    """Move modifier name of ob to index in its stack. ObjectModifiers.move
    exists from 3.5; 3.4 has only the operator, run on ob through a context
    override (works headless, touches nothing but the stack)."""
    mods = ob.modifiers
    cur = mods.find(name)
    if cur < 0:
        raise KeyError(name)
    if cur == index:
        return
    if hasattr(mods, "move"):
        mods.move(cur, index)
    else:
        from animation import animated_values, restore_animated  # (it imports this module)
        import window  # (it imports this module)
        window.wake()
        animated = animated_values()  # the operator evaluates the animation
        with bpy.context.temp_override(object=ob, active_object=ob):
            bpy.ops.object.modifier_move_to_index(modifier=name, index=index)
        restore_animated(animated)
    if mods.find(name) != index:
        raise RuntimeError("could not move modifier %r to %d" % (name, index))


def remove_ids(ids):
    """Free the datablocks ids (None entries skipped). Every ID deletion walks
    all of Main to clear references to it; bpy.data.batch_remove (3.4 and 4.5
    have it) frees the whole list with one walk instead of one per ID (each
    freed ID still costs its own walks: trash.py)."""
    ids = [i for i in ids if i is not None]
    if not ids:
        return
    if any(pending_active(i) for i in ids):
        flush_actives()  # while it still exists
    if hasattr(bpy.data, "batch_remove"):
        bpy.data.batch_remove(ids)
        return
    for idb in ids:  # a Blender without batch_remove: one walk per ID
        coll = collection_of(idb)
        if coll is None:
            raise TypeError("cannot remove %r" % (idb,))
        getattr(bpy.data, coll).remove(idb)


def collection_of(idb):
    """The name of the bpy.data collection that holds idb (of the kinds
    undos discard), or None (ID.id_type is 4.x only)."""
    for cls, coll in _ID_COLLECTIONS:
        t = getattr(bpy.types, cls, None)
        if t is not None and isinstance(idb, t):
            return coll
    return None


_ID_COLLECTIONS = (("Object", "objects"), ("Mesh", "meshes"), ("Camera", "cameras"), ("Light", "lights"),
                   ("Curve", "curves"), ("Material", "materials"), ("Collection", "collections"),
                   ("World", "worlds"), ("Action", "actions"), ("Image", "images"), ("VectorFont", "fonts"),
                   ("NodeTree", "node_groups"), ("Texture", "textures"))
ID_COLLECTIONS = frozenset(coll for _, coll in _ID_COLLECTIONS)


_STAMP_FLAGS = {}  # RNA type -> its stamp flags (dir() is slow; the list is per type)


def stamp_flags(render):
    t = type(render)
    flags = _STAMP_FLAGS.get(t)
    if flags is None:
        flags = _STAMP_FLAGS[t] = tuple(sorted(p for p in dir(render) if p == "use_stamp" or p.startswith("use_stamp_")))
    return flags


# ---------------------------------------------------------------------------
# Version ranges: ">=3.4", ">=3.4,<5.0", "==4.5", ">=4.2.1,!=4.3".
# Comma means "and". A version compares as (major, minor, patch), missing
# parts are 0 (so "<5.0" excludes 5.0.0 and "<4.5" admits 4.4.9).

_CLAUSE = re.compile(r"^\s*(>=|<=|==|!=|>|<)\s*(\d+(?:\.\d+){0,2})\s*$")
_OPS = {
    ">=": lambda a, b: a >= b,
    "<=": lambda a, b: a <= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    ">": lambda a, b: a > b,
    "<": lambda a, b: a < b,
}


def _version_tuple(text):
    parts = [int(x) for x in text.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


def parse_version_range(spec):
    """[(op, (major, minor, patch)), ...]; ValueError for a malformed spec."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError("empty version range")
    clauses = []
    for part in spec.split(","):
        m = _CLAUSE.match(part)
        if m is None:
            raise ValueError("bad version range clause %r in %r" % (part, spec))
        clauses.append((m.group(1), _version_tuple(m.group(2))))
    return clauses


def version_in_range(spec, version=None):
    """Whether version (default: this Blender) satisfies spec."""
    v = tuple(version if version is not None else blender_version())[:3]
    v = tuple(v) + (0,) * (3 - len(v))
    return all(_OPS[op](v, bound) for op, bound in parse_version_range(spec))


# ---------------------------------------------------------------------------
# Render engines, world background, animation, importers/exporters
# (tools/render.py, world.py, anim.py, io.py).

def canonical_engine(engine):
    """The engine name in scene_state_v1: 4.2-4.5's BLENDER_EEVEE_NEXT is
    recorded as BLENDER_EEVEE, so the same scene hashes the same on 3.4."""
    return "BLENDER_EEVEE" if engine == "BLENDER_EEVEE_NEXT" else engine


def world_output_node(world):
    """The active World Output node of world's node tree, or None."""
    if world.node_tree is None:
        return None
    outs = [n for n in world.node_tree.nodes if n.type == "OUTPUT_WORLD"]
    for n in outs:
        if getattr(n, "is_active_output", False):
            return n
    return outs[0] if outs else None


def world_background_node(world):
    """The Background node feeding the world output's Surface, or None. Only
    meaningful while the world uses nodes (world_use_nodes)."""
    out = world_output_node(world)
    if out is None or not out.inputs["Surface"].is_linked:
        return None
    n = out.inputs["Surface"].links[0].from_node
    return n if n.type == "BACKGROUND" else None


def world_uses_nodes(world):
    """Whether the world renders through its node tree (always after 4.5)."""
    return bool(getattr(world, "use_nodes", True)) and world.node_tree is not None


def has_operator(idname):
    """Whether bpy.ops.<idname> ("wm.obj_export") is registered."""
    mod, _, name = idname.partition(".")
    try:
        getattr(getattr(bpy.ops, mod), name).get_rna_type()
        return True
    except (AttributeError, KeyError):
        return False


def has_module(name):
    import importlib.util
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def numpy_aliases():
    """Blender 3.4's glTF importer uses np.bool, which NumPy 1.24 (Debian's)
    removed; it was always an alias of the builtin bool, so restore it."""
    import numpy
    if "bool" not in numpy.__dict__:
        numpy.bool = bool


def io_operators(fmt):
    """(export op idname, import op idname, reason) of a scene.export/import
    format on this Blender; an op is None when missing, reason says why.
    OBJ: the C++ wm.obj_export/wm.obj_import (3.3+; 4.x has no other).
    glTF: the io_scene_gltf2 add-on, which needs numpy (Debian's 3.4 lacks it).
    USD: wm.usd_export/wm.usd_import, only in builds with USD (not Debian's)."""
    if fmt == "obj":
        ops = ("wm.obj_export", "wm.obj_import")
    elif fmt == "gltf":
        ops = ("export_scene.gltf", "import_scene.gltf")
        if not has_module("numpy"):
            return None, None, "the glTF add-on needs numpy, which this Blender's Python lacks"
        numpy_aliases()
    elif fmt == "fbx":
        ops = ("export_scene.fbx", "import_scene.fbx")
    elif fmt == "usd":
        ops = ("wm.usd_export", "wm.usd_import")
    else:
        return None, None, "unknown format %r" % fmt
    exp, imp = [op if has_operator(op) else None for op in ops]
    reason = None if exp and imp else "this Blender has no %s" % " / ".join(op for op in ops if not has_operator(op))
    return exp, imp, reason


def action_fcurve_collections(action):
    """Every F-Curve collection of action: action.fcurves on 3.4; on 4.4+
    (slotted/layered actions) the channelbag of each slot in each strip."""
    if hasattr(action, "layers"):
        out = []
        for layer in action.layers:
            for strip in layer.strips:
                for cb in getattr(strip, "channelbags", ()):
                    out.append(cb.fcurves)
        if out or len(action.layers):
            return out
    return [action.fcurves] if hasattr(action, "fcurves") else []


def fcurves_owner(ob):
    """What holds ob's F-Curves and their groups: its action (3.4), or on
    4.4+ its slot's channelbag; None when ob is not animated."""
    ad = ob.animation_data
    if ad is None or ad.action is None:
        return None
    act = ad.action
    if hasattr(ad, "action_slot") and hasattr(act, "layers"):
        slot = ad.action_slot
        if slot is None:
            return None
        for layer in act.layers:
            for strip in layer.strips:
                cb = strip.channelbag(slot) if hasattr(strip, "channelbag") else None
                if cb is not None:
                    return cb
        return None
    return act


def object_fcurves(ob):
    """The F-Curve collection animating ob (its action, and on 4.4+ its slot's
    channelbag), or None."""
    owner = fcurves_owner(ob)
    return owner.fcurves if owner is not None else None


def fcurve_groups(ob):
    """The action groups of ob's F-Curves (the channelbag's on 4.4+), or None."""
    owner = fcurves_owner(ob)
    return owner.groups if owner is not None else None
