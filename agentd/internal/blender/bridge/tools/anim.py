"""Animation tools: keyframe.insert.

``keyframe.insert`` keys an object's location, rotation_euler or scale (all
three channels) at a frame with ``Object.keyframe_insert`` (an RNA method,
not an operator), after setting the property to ``value`` when given. Blender
creates the animation data, the action ("<object>Action"; on 4.4+ also its
layer, strip and slot) and the F-Curves when missing; a key already at that
frame gets the new value.

Undo record (``v`` = UNDO_VERSION):

    {"v":1,"tool":"keyframe.insert","object":O,"data_path":P,"frame":F,
     "value":[3]|null,               # the property before, when value was set
     "action":A,"action_created":bool,"anim_data_created":bool,
     "groups_created":[names],
     "channels":[{"index":i,"fcurve_created":bool,
                  "key":{"co":[2],"handle_left":[2],"handle_right":[2],
                         "handle_left_type":T,"handle_right_type":T,
                         "interpolation":I,"easing":E,"type":K}|null}]}
        -> remove exactly the inserted keys (or put the overwritten ones
           back), the F-Curves / groups / action / animation data the insert
           created, and restore the property.
"""

import bpy

from common import is_tomb
from compat import fcurve_groups, object_fcurves
from registry import ToolError, field, tool, undoer
from schema import NAME, VEC3, is_number
from index import INDEX
from trash import discard

DATA_PATHS = ("location", "rotation_euler", "scale")
MAX_FRAME = 1048574  # Blender's MAXFRAME
KEY_FIELDS = ("handle_left_type", "handle_right_type", "interpolation", "easing", "type")


def key_at(fc, frame):
    for k in fc.keyframe_points:
        if abs(k.co[0] - frame) < 1e-4:
            return k
    return None


def key_state(k):
    d = {"co": list(k.co), "handle_left": list(k.handle_left), "handle_right": list(k.handle_right)}
    for f in KEY_FIELDS:
        d[f] = getattr(k, f)
    return d


def set_key_state(k, d):
    for f in KEY_FIELDS:
        setattr(k, f, d[f])
    k.co = d["co"]
    k.handle_left = d["handle_left"]
    k.handle_right = d["handle_right"]


def find_fcurve(ob, data_path, index):
    fcs = object_fcurves(ob)
    return fcs.find(data_path, index=index) if fcs is not None else None


def revert(ob, rec):
    """Reverse an insert described by rec (validated); returns nothing."""
    data_path, frame = rec["data_path"], rec["frame"]
    if rec["action_created"]:
        act = ob.animation_data.action
        if rec["anim_data_created"]:
            ob.animation_data_clear()
        else:
            ob.animation_data.action = None
        discard([act])
    else:
        fcs = object_fcurves(ob)
        for ch in rec["channels"]:
            fc = fcs.find(data_path, index=ch["index"])
            if ch["fcurve_created"]:
                fcs.remove(fc)
                continue
            k = key_at(fc, frame)
            if ch["key"] is None:
                fc.keyframe_points.remove(k)
            else:
                set_key_state(k, ch["key"])
            fc.update()
        groups = fcurve_groups(ob)
        for g in rec["groups_created"]:
            grp = groups.get(g) if groups is not None else None
            if grp is not None and len(grp.channels) == 0:
                groups.remove(grp)
    if rec["value"] is not None:
        setattr(ob, data_path, rec["value"])


def check_revertible(ob, rec):
    """conflict unless rec still fits ob's animation."""
    ad = ob.animation_data
    if ad is None or ad.action is None or ad.action.name != rec["action"]:
        raise ToolError("conflict", "cannot undo: %r is no longer animated by action %r" % (ob.name, rec["action"]))
    if rec["action_created"]:
        if ad.action.users != 1:
            raise ToolError("conflict", "cannot undo: action %r is used by others now" % rec["action"])
        return
    fcs = object_fcurves(ob)
    for ch in rec["channels"]:
        fc = fcs.find(rec["data_path"], index=ch["index"]) if fcs is not None else None
        if fc is None or key_at(fc, rec["frame"]) is None:
            raise ToolError("conflict", "cannot undo: the key of %s[%d] at frame %s is gone" % (rec["data_path"], ch["index"], rec["frame"]))


@tool(
    "keyframe.insert",
    description="Insert a keyframe on an object's location, rotation_euler or scale (all 3 channels) at a frame; with value, set the property to it first.",
    schema={
        "type": "object",
        "properties": {
            "object": NAME,
            "data_path": {"type": "string", "enum": list(DATA_PATHS)},
            "frame": {"type": "integer", "minimum": 0, "maximum": MAX_FRAME},
            "value": VEC3,
        },
        "required": ["object", "data_path", "frame"],
        "additionalProperties": False,
    },
    safety_level="safe_write",
    idempotence_class="idempotent",
    rollback_method="compensation",
    blender_versions=">=3.4",
)
def tool_keyframe_insert(tx, args):
    name, data_path, frame = args["object"], args["data_path"], int(args["frame"])
    ob = INDEX.get("objects", name)
    if ob is None or is_tomb(name):
        raise ToolError("not_found", "no object named %r" % name)
    if ob.library is not None:
        raise ToolError("conflict", "object %r is linked from a library" % name)
    ad = ob.animation_data
    had_ad = ad is not None
    action_before = ad.action if had_ad else None
    groups = fcurve_groups(ob)
    groups_before = set(g.name for g in groups) if groups is not None else set()
    channels = []
    for i in range(3):
        fc = find_fcurve(ob, data_path, i)
        k = key_at(fc, frame) if fc is not None else None
        channels.append({"index": i, "fcurve_created": fc is None, "key": key_state(k) if k is not None else None})

    tx.touch("object", name)
    value = None
    if "value" in args:
        value = list(getattr(ob, data_path))
        tx.on_undo(lambda: setattr(ob, data_path, value))
        setattr(ob, data_path, [float(x) for x in args["value"]])
    tx.checkpoint("keyframe.insert:value")
    rec = {"object": name, "data_path": data_path, "frame": frame, "value": value,
           "action": None, "action_created": action_before is None, "anim_data_created": not had_ad,
           "groups_created": [], "channels": channels}
    try:
        ok = ob.keyframe_insert(data_path, frame=frame)
    finally:
        # Whatever the insert did, reverse it on failure (the action name is
        # known only now).
        act = ob.animation_data.action if ob.animation_data is not None else None
        if act is not None:
            rec["action"] = act.name
            tx.touch("action", act.name)
            groups = fcurve_groups(ob)
            rec["groups_created"] = sorted(set(g.name for g in groups) - groups_before) if groups is not None else []
            tx.on_undo(lambda: revert(ob, dict(rec, value=None)))
        elif not had_ad and ob.animation_data is not None:
            tx.on_undo(ob.animation_data_clear)
    if not ok or rec["action"] is None:
        raise ToolError("internal_error", "Blender did not insert the keyframe")
    tx.checkpoint("keyframe.insert:inserted")
    tx.set_undo(rec)
    fcs = [find_fcurve(ob, data_path, i) for i in range(3)]
    return {
        "object": name, "data_path": data_path, "frame": frame, "action": rec["action"],
        "value": [round(x, 6) for x in getattr(ob, data_path)],
        "keyframes": [len(fc.keyframe_points) if fc is not None else 0 for fc in fcs],
    }


def key_record(d):
    if d is None:
        return None
    if not isinstance(d, dict):
        raise ToolError("invalid_input", "undo record: bad key")
    out = {}
    for f in ("co", "handle_left", "handle_right"):
        v = field(d, f, list)
        if len(v) != 2 or not all(is_number(x) for x in v):
            raise ToolError("invalid_input", "undo record: bad key %r" % f)
        out[f] = [float(x) for x in v]
    for f in KEY_FIELDS:
        out[f] = field(d, f, str)
    return out


@undoer("keyframe.insert")
def undo_keyframe_insert(tx, rec):
    name = field(rec, "object", str)
    data_path = field(rec, "data_path", str)
    if data_path not in DATA_PATHS:
        raise ToolError("invalid_input", "undo record: bad data_path")
    frame = field(rec, "frame", int)
    value = field(rec, "value", list, optional=True)
    if value is not None and (len(value) != 3 or not all(is_number(x) for x in value)):
        raise ToolError("invalid_input", "undo record: bad value")
    channels = []
    for ch in field(rec, "channels", list):
        if not isinstance(ch, dict):
            raise ToolError("invalid_input", "undo record: bad channel")
        idx = field(ch, "index", int)
        if idx not in (0, 1, 2):
            raise ToolError("invalid_input", "undo record: bad channel index")
        channels.append({"index": idx, "fcurve_created": field(ch, "fcurve_created", bool), "key": key_record(ch.get("key"))})
    groups = field(rec, "groups_created", list)
    if not all(isinstance(g, str) for g in groups):
        raise ToolError("invalid_input", "undo record: bad groups_created")
    r = {"data_path": data_path, "frame": frame, "value": value, "action": field(rec, "action", str),
         "action_created": field(rec, "action_created", bool), "anim_data_created": field(rec, "anim_data_created", bool),
         "groups_created": groups, "channels": channels}
    ob = INDEX.get("objects", name)
    if ob is None or is_tomb(name):
        raise ToolError("conflict", "cannot undo: object %r is gone" % name)
    check_revertible(ob, r)
    tx.touch("object", name)
    tx.touch("action", r["action"])
    if value is not None:
        cur = list(getattr(ob, data_path))
        tx.on_undo(lambda: setattr(ob, data_path, cur))
        setattr(ob, data_path, value)
    tx.fault_point("keyframe.insert:value")
    tx.checkpoint("undo.keyframe.insert:value")
    # Validated above; removing keys/curves/the action is the last step.
    revert(ob, dict(r, value=None))
