"""Modifier tools: modifier.add, modifier.remove.

The object record (records.record_object) lists the modifiers in stack order
with name, type, visibility and, for the five types below, the settings in
records.MODIFIER_FIELDS. modifier.add pins every one of those to a fixed
default before applying its args, so 3.4 and 4.5 give the same records.

Undo records (``v`` = 1):

    {"v":1,"tool":"modifier.add","object":O,"modifier":N,"type":T}   -> remove N
    {"v":1,"tool":"modifier.remove","object":O,"index":i,
     "modifier":{"name":N,"type":T,"props":{rna identifier: value},
                 "ids":{rna identifier: {"collection":C,"name":X}}}}
                                      -> recreate N with every writable RNA
                                         property and move it back to i

modifier.remove's record keeps every writable RNA property of the modifier
(exact floats), not only the hashed ones, and ID pointers (mirror_object,
offset_object, ...) by name. Not restored: non-ID pointer contents (a bevel's
custom profile curve) and ID properties (geometry-nodes inputs); those types
cannot be added by these tools.
"""

import math

import bpy

from compat import move_modifier
from registry import ToolError, field, tool, undoer
from schema import NAME, is_number
from records import record_modifier
from .datablocks import free_name_in, get_object, live_object

TYPES = {
    # tool type: (Blender type, default name, allowed settings)
    "subdivision": ("SUBSURF", "Subdivision", ("levels",)),
    "bevel": ("BEVEL", "Bevel", ("width", "segments")),
    "array": ("ARRAY", "Array", ("count", "relative_offset")),
    "mirror": ("MIRROR", "Mirror", ("axis",)),
    "solidify": ("SOLIDIFY", "Solidify", ("thickness",)),
}
SETTINGS = ("levels", "width", "segments", "count", "relative_offset", "axis", "thickness")

# Every hashed field pinned to Blender's default (the same on 3.4 and 4.5
# today; pinned so that a future default change cannot split the hashes).
PINNED = {
    "SUBSURF": {"levels": 1, "render_levels": 2, "quality": 3, "subdivision_type": "CATMULL_CLARK",
                "uv_smooth": "PRESERVE_BOUNDARIES", "boundary_smooth": "ALL", "use_creases": True,
                "use_custom_normals": False, "use_limit_surface": True},
    "BEVEL": {"width": 0.1, "segments": 1, "limit_method": "ANGLE", "angle_limit": math.radians(30.0),
              "offset_type": "OFFSET", "affect": "EDGES", "profile": 0.5, "use_clamp_overlap": True,
              "harden_normals": False},
    "ARRAY": {"count": 2, "fit_type": "FIXED_COUNT", "use_relative_offset": True,
              "relative_offset_displace": (1.0, 0.0, 0.0), "use_constant_offset": False,
              "constant_offset_displace": (1.0, 0.0, 0.0), "use_merge_vertices": False, "merge_threshold": 0.01},
    "MIRROR": {"use_axis": (True, False, False), "use_bisect_axis": (False, False, False),
               "use_bisect_flip_axis": (False, False, False), "use_clip": False, "use_mirror_merge": True,
               "merge_threshold": 0.001},
    "SOLIDIFY": {"thickness": 0.01, "offset": -1.0, "use_even_offset": False, "use_rim": True,
                 "use_rim_only": False, "use_flip_normals": False, "solidify_mode": "EXTRUDE"},
}

BIG = 1.0e6
NUM = {"type": "number", "minimum": -BIG, "maximum": BIG}


def settings_of(kind, args):
    """The RNA values modifier.add sets for args (after the pinned defaults)."""
    out = {}
    if "levels" in args:
        out["levels"] = out["render_levels"] = int(args["levels"])
    if "width" in args:
        out["width"] = float(args["width"])
    if "segments" in args:
        out["segments"] = int(args["segments"])
    if "count" in args:
        out["count"] = int(args["count"])
    if "relative_offset" in args:
        out["relative_offset_displace"] = tuple(float(x) for x in args["relative_offset"])
    if "axis" in args:
        out["use_axis"] = tuple(a == args["axis"] for a in "xyz")
    if "thickness" in args:
        out["thickness"] = float(args["thickness"])
    return out


@tool(
    "modifier.add",
    description="Add a modifier at the end of a mesh object's stack: subdivision (levels sets viewport and render levels), bevel (width, segments), array (count, relative_offset), mirror (axis), solidify (thickness). Settings of another type are refused.",
    schema={
        "type": "object",
        "properties": {
            "object": NAME,
            "type": {"type": "string", "enum": sorted(TYPES)},
            "name": dict(NAME, description="Modifier name; default the type's Blender name (Bevel, Bevel.001, ...)."),
            "levels": {"type": "integer", "minimum": 0, "maximum": 6},
            "width": {"type": "number", "minimum": 0, "maximum": BIG},
            "segments": {"type": "integer", "minimum": 1, "maximum": 100},
            "count": {"type": "integer", "minimum": 1, "maximum": 1000},
            "relative_offset": {"type": "array", "items": NUM, "minItems": 3, "maxItems": 3},
            "axis": {"type": "string", "enum": ["x", "y", "z"]},
            "thickness": NUM,
        },
        "required": ["object", "type"],
        "additionalProperties": False,
    },
    safety_level="safe_write",
    idempotence_class="keyed",
    rollback_method="compensation",
    blender_versions=">=3.4",
)


def tool_modifier_add(tx, args):
    ob = get_object(args["object"])
    btype, base, allowed = TYPES[args["type"]]
    extra = sorted(k for k in SETTINGS if k in args and k not in allowed)
    if extra:
        raise ToolError("invalid_input", "%s does not apply to a %s modifier" % (", ".join(extra), args["type"]))
    if ob.type != "MESH":
        raise ToolError("invalid_input", "%r is a %s object; modifiers need a mesh" % (ob.name, ob.type))
    name = args.get("name")
    if name is None:
        name = free_name_in(ob.modifiers, base)
    elif ob.modifiers.get(name) is not None:
        raise ToolError("conflict", "%r already has a modifier named %r" % (ob.name, name))
    values = dict(PINNED[btype])
    values.update(settings_of(args["type"], args))

    tx.touch("object", ob.name)
    m = ob.modifiers.new(name, btype)
    tx.on_undo(lambda: ob.modifiers.remove(ob.modifiers[name]))
    if m.name != name:
        raise ToolError("conflict", "could not name the modifier %r" % name)
    for k, v in values.items():
        setattr(m, k, v)
    tx.checkpoint("modifier.add:added")
    tx.set_undo({"object": ob.name, "modifier": name, "type": btype})
    out = record_modifier(m)
    out["object"] = ob.name
    out["index"] = len(ob.modifiers) - 1
    return out


@undoer("modifier.add")
def undo_modifier_add(tx, rec):
    ob = live_object(field(rec, "object", str))
    name = field(rec, "modifier", str)
    m = ob.modifiers.get(name)
    if m is None or m.type != field(rec, "type", str):
        raise ToolError("conflict", "cannot undo: %r has no %s modifier %r" % (ob.name, rec.get("type"), name))
    tx.touch("object", ob.name)
    tx.fault_point("modifier.add:checked")
    tx.checkpoint("undo.modifier.add:checked")
    ob.modifiers.remove(m)  # last step: nothing after it can fail


# ---------------------------------------------------------------------------
# Exact dump / restore of a modifier's RNA properties.

SKIP_PROPS = {"rna_type", "name", "type", "is_override_data", "persistent_uid", "execution_time", "is_active",
              "use_pin_to_last"}
ID_COLLECTIONS = {"Object": "objects", "Collection": "collections", "Texture": "textures", "Image": "images",
                  "Material": "materials", "NodeTree": "node_groups", "Mesh": "meshes", "Curve": "curves"}


def dump_modifier(m):
    props, ids = {}, {}
    for p in m.bl_rna.properties:
        k = p.identifier
        if k in SKIP_PROPS or p.is_readonly:
            continue
        v = getattr(m, k)
        if p.type == "POINTER":
            coll = ID_COLLECTIONS.get(p.fixed_type.identifier)
            if coll is not None:
                ids[k] = {"collection": coll, "name": v.name} if v is not None else None
            continue
        if p.type == "COLLECTION":
            continue
        if p.type == "ENUM" and p.is_enum_flag:
            v = sorted(v)
        elif p.type in ("FLOAT", "INT", "BOOLEAN") and getattr(p, "array_length", 0):
            v = [x for x in v] if not hasattr(v[0], "__len__") else [list(r) for r in v]
        props[k] = v
    return {"name": m.name, "type": m.type, "props": props, "ids": ids,
            "use_pin_to_last": bool(getattr(m, "use_pin_to_last", False))}


def active_modifier(ob):
    for m in ob.modifiers:
        if getattr(m, "is_active", False):
            return m.name
    return None


def load_dump(d):
    """Validate a dump from an undo record: (name, type, props, ids, flags)."""
    name, mtype = field(d, "name", str), field(d, "type", str)
    props, ids = field(d, "props", dict), field(d, "ids", dict)
    resolved = {}
    for k, ref in ids.items():
        if ref is None:
            resolved[k] = None
            continue
        if not isinstance(ref, dict) or ref.get("collection") not in ID_COLLECTIONS.values():
            raise ToolError("invalid_input", "undo record: bad ID reference %r" % k)
        idb = getattr(bpy.data, ref["collection"]).get(field(ref, "name", str))
        if idb is None:
            raise ToolError("conflict", "cannot undo: %s %r referenced by the modifier is gone" % (ref["collection"], ref["name"]))
        resolved[k] = idb
    for k, v in props.items():
        if not (isinstance(v, (bool, str, list)) or is_number(v)):
            raise ToolError("invalid_input", "undo record: bad modifier property %r" % k)
    return name, mtype, props, resolved, bool(d.get("use_pin_to_last"))


@tool(
    "modifier.remove",
    description="Remove a modifier from an object's stack (undo recreates it with the same settings at the same position).",
    schema={"type": "object", "properties": {"object": NAME, "name": NAME}, "required": ["object", "name"],
            "additionalProperties": False},
    safety_level="destructive",
    idempotence_class="keyed",
    rollback_method="compensation",
    blender_versions=">=3.4",
)


def tool_modifier_remove(tx, args):
    ob = get_object(args["object"])
    m = ob.modifiers.get(args["name"])
    if m is None:
        raise ToolError("not_found", "%r has no modifier named %r" % (ob.name, args["name"]))
    index = ob.modifiers.find(m.name)
    dump = dump_modifier(m)
    active = active_modifier(ob)
    tx.set_undo({"object": ob.name, "index": index, "modifier": dump, "active": active})
    tx.touch("object", ob.name)
    # Reversal: recreate from the dump (the same applier as the undo).
    tx.on_undo(lambda: recreate(ob, index, *load_dump(dump), active=active))
    tx.checkpoint("modifier.remove:checked")
    ob.modifiers.remove(m)
    tx.checkpoint("modifier.remove:removed")
    return {"object": ob.name, "name": dump["name"], "type": dump["type"], "index": index}


def recreate(ob, index, name, mtype, props, ids, pin, active=None):
    m = ob.modifiers.new(name, mtype)
    if m.name != name:
        ob.modifiers.remove(m)
        raise ToolError("conflict", "cannot recreate modifier %r" % name)
    for k, v in props.items():
        try:
            setattr(m, k, set(v) if isinstance(v, list) and m.bl_rna.properties[k].type == "ENUM" else v)
        except (AttributeError, TypeError, ValueError, KeyError):
            pass  # a property this Blender does not have or derives itself
    for k, v in ids.items():
        try:
            setattr(m, k, v)
        except (AttributeError, TypeError, ValueError):
            pass
    move_modifier(ob, name, index)
    if pin and hasattr(m, "use_pin_to_last"):
        m.use_pin_to_last = True
    a = ob.modifiers.get(active) if active else None
    if a is not None and hasattr(a, "is_active"):
        a.is_active = True  # UI state only (new() made m active)
    return m


@undoer("modifier.remove")
def undo_modifier_remove(tx, rec):
    ob = live_object(field(rec, "object", str))
    index = field(rec, "index", int)
    name, mtype, props, ids, pin = load_dump(field(rec, "modifier", dict))
    active = field(rec, "active", str, optional=True)
    if ob.modifiers.get(name) is not None:
        raise ToolError("conflict", "cannot undo: %r has a modifier named %r again" % (ob.name, name))
    if index < 0 or index > len(ob.modifiers):
        raise ToolError("conflict", "cannot undo: %r's stack is too short for position %d" % (ob.name, index))
    if mtype not in bpy.types.Modifier.bl_rna.properties["type"].enum_items.keys():
        raise ToolError("invalid_input", "undo record: unknown modifier type %r" % mtype)
    tx.touch("object", ob.name)
    tx.on_undo(lambda: ob.modifiers.remove(ob.modifiers[name]) if ob.modifiers.get(name) else None)
    tx.fault_point("modifier.remove:checked")
    recreate(ob, index, name, mtype, props, ids, pin, active=active)
    tx.checkpoint("undo.modifier.remove:recreated")
