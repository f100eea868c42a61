"""Camera tools: camera.create, camera.set_active, camera.look_at.

camera.create makes new camera data and an object (data named like the
object, or the lowest free name.NNN), linked to the scene's master collection,
with every recorded value pinned: perspective, lens (default 50 mm) in
millimetres, sensor 36 x 24 mm, fit AUTO, clip 0.1-1000 m (Blender's default
for new cameras; the baseline camera has 100 m), shift 0, ortho scale 6. It
does not change the active object or the selection; set_active makes it the
scene camera.

camera.look_at sets a camera's rotation_euler (mode XYZ; set if the object
had another rotation mode) so that its local -Z axis (its view) points at the
target and its local +Y axis is as close to world +Z as possible (the camera
"track to" convention: mathutils Vector.to_track_quat("-Z", "Y")). Positions
are world positions from the parent chain; for a parented camera the rotation
is expressed relative to the parent's rotation. Other object types are
refused (invalid_input, as camera.set_active refuses a non-camera): a light
is aimed when it is created (light.create's target, with the same
convention), a mesh is rotated by object.set_transform.

Undo records (``v`` = 1):

    {"v":1,"tool":"camera.create","object":O,
     "data":{"kind":"camera","collection":"cameras","name":D},
     "camera_before":{"scene":S,"camera":name|null}|absent} -> remove O and D
    {"v":1,"tool":"camera.set_active","scene":S,"camera_before":name|null}
    {"v":1,"tool":"camera.look_at","object":O,"rotation_mode":M,
     "rotation_euler":[3],"rotation_quaternion":[4],"rotation_axis_angle":[4]}
"""

import bpy
from mathutils import Vector

from registry import ToolError, field, tool, undoer
from schema import NAME, VEC3, is_number
from baseline import current_scene, live_scene
from records import qv

from .datablocks import (check_new_object_name, created_data_record, get_object, live_object, new_data,
                      new_data_object, undo_remove_created, world_matrix)

ROT_KEYS = ("rotation_mode", "rotation_euler", "rotation_quaternion", "rotation_axis_angle")
ROT_LENS = {"rotation_euler": 3, "rotation_quaternion": 4, "rotation_axis_angle": 4}
ROT_MODES = ("QUATERNION", "AXIS_ANGLE", "XYZ", "XZY", "YXZ", "YZX", "ZXY", "ZYX")


def rotation_state(ob):
    return {k: (ob.rotation_mode if k == "rotation_mode" else list(getattr(ob, k))) for k in ROT_KEYS}


def restore_rotation(ob, st):
    for k in ROT_KEYS:  # the mode first: changing it converts the values
        setattr(ob, k, st[k])


@tool(
    "camera.create",
    description="Create a perspective camera in the scene collection (lens default 50 mm); set_active makes it the scene camera.",
    schema={
        "type": "object",
        "properties": {
            "name": NAME,
            "lens": {"type": "number", "minimum": 1, "maximum": 5000, "default": 50},
            "location": VEC3,
            "rotation_euler": VEC3,
            "set_active": {"type": "boolean", "default": False},
        },
        "required": ["name"],
        "additionalProperties": False,
    },
    safety_level="safe_write",
    idempotence_class="keyed",
    rollback_method="compensation",
    blender_versions=">=3.4",
)


def tool_camera_create(tx, args):
    name = args["name"]
    check_new_object_name(name)
    sc = current_scene()
    cam = new_data(tx, "cameras", "camera", name)
    cam.type = "PERSP"
    cam.lens_unit = "MILLIMETERS"
    cam.lens = float(args.get("lens", 50.0))
    cam.sensor_width = 36.0
    cam.sensor_height = 24.0
    cam.sensor_fit = "AUTO"
    cam.clip_start = 0.1
    cam.clip_end = 1000.0
    cam.shift_x = 0.0
    cam.shift_y = 0.0
    cam.ortho_scale = 6.0
    ob = new_data_object(tx, name, cam, args.get("location"), args.get("rotation_euler"))
    rec = {"object": name, "data": created_data_record(cam)}
    if args.get("set_active", False):
        prev = sc.camera
        rec["camera_before"] = {"scene": sc.name, "camera": prev.name if prev is not None else None}
        tx.touch_settings(sc.name)
        tx.on_undo(lambda: setattr(sc, "camera", prev))
        sc.camera = ob
    tx.checkpoint("camera.create:linked")
    tx.set_undo(rec)
    return {"name": ob.name, "data": cam.name, "lens": cam.lens, "active": sc.camera == ob}


@undoer("camera.create")
def undo_camera_create(tx, rec):
    undo_remove_created(tx, rec, "camera.create")


def get_camera(name):
    ob = get_object(name)
    if ob.type != "CAMERA":
        raise ToolError("invalid_input", "%r is a %s object, not a camera" % (name, ob.type))
    return ob


TARGET_SCHEMA = dict(NAME, type=["string", "array"], items={"type": "number"}, minItems=3, maxItems=3,
                     description="An object name or a world point [x, y, z].")


def target_point(target):
    """The world point of a target arg: an object's origin or [x, y, z]."""
    if isinstance(target, str):
        return world_matrix(get_object(target, "target object")).to_translation()
    return Vector([float(x) for x in target])


def aim_rotation(name, origin, point):
    """The world rotation (quaternion) that points an object's local -Z axis
    from origin at point, +Z up; conflict when they coincide."""
    d = point - origin
    if d.length < 1e-9:
        raise ToolError("conflict", "%r is at the target point" % name)
    return d.to_track_quat("-Z", "Y")


@tool(
    "camera.set_active",
    description="Make a camera object the scene camera.",
    schema={"type": "object", "properties": {"name": NAME}, "required": ["name"], "additionalProperties": False},
    safety_level="safe_write",
    idempotence_class="idempotent",
    rollback_method="compensation",
    blender_versions=">=3.4",
)


def tool_camera_set_active(tx, args):
    ob = get_camera(args["name"])
    sc = current_scene()
    prev = sc.camera
    tx.set_undo({"scene": sc.name, "camera_before": prev.name if prev is not None else None})
    tx.touch_settings(sc.name)
    tx.on_undo(lambda: setattr(sc, "camera", prev))
    sc.camera = ob
    tx.checkpoint("camera.set_active:set")
    return {"camera": ob.name, "camera_before": prev.name if prev is not None else None}


@undoer("camera.set_active")
def undo_camera_set_active(tx, rec):
    sc = live_scene(field(rec, "scene", str))
    if sc is None:
        raise ToolError("conflict", "cannot undo: scene %r is gone" % rec.get("scene"))
    pn = field(rec, "camera_before", str, optional=True)
    prev = live_object(pn, "previous camera") if pn else None
    tx.touch_settings(sc.name)
    cur = sc.camera
    tx.on_undo(lambda: setattr(sc, "camera", cur))
    tx.fault_point("camera.set_active:checked")
    sc.camera = prev
    tx.checkpoint("undo.camera.set_active:set")


@tool(
    "camera.look_at",
    description="Rotate a camera object so that its view direction (local -Z) points at a target object's origin or a point [x,y,z], with +Z world up. Sets rotation_euler (XYZ). Other object types are refused (aim a light with light.create's target).",
    schema={
        "type": "object",
        "properties": {
            "name": NAME,
            "target": TARGET_SCHEMA,
        },
        "required": ["name", "target"],
        "additionalProperties": False,
    },
    safety_level="safe_write",
    idempotence_class="idempotent",
    rollback_method="compensation",
    blender_versions=">=3.4",
)


def tool_camera_look_at(tx, args):
    ob = get_camera(args["name"])
    point = target_point(args["target"])
    rot = aim_rotation(ob.name, world_matrix(ob).to_translation(), point)
    if ob.parent is not None:
        pm = world_matrix(ob.parent) @ ob.matrix_parent_inverse
        rot = pm.to_quaternion().inverted() @ rot
    euler = rot.to_euler("XYZ")
    st = rotation_state(ob)
    tx.set_undo(dict(st, object=ob.name))
    tx.touch("object", ob.name)
    tx.on_undo(lambda: restore_rotation(ob, st))
    ob.rotation_mode = "XYZ"
    ob.rotation_euler = euler
    tx.checkpoint("camera.look_at:rotated")
    return {"name": ob.name, "rotation_euler": qv(ob.rotation_euler), "target": qv(point)}


@undoer("camera.look_at")
def undo_camera_look_at(tx, rec):
    ob = live_object(field(rec, "object", str))
    want = {"rotation_mode": field(rec, "rotation_mode", str)}
    if want["rotation_mode"] not in ROT_MODES:
        raise ToolError("invalid_input", "undo record: bad rotation_mode")
    for k, n in ROT_LENS.items():
        v = field(rec, k, list)
        if len(v) != n or not all(is_number(x) for x in v):
            raise ToolError("invalid_input", "undo record: %r must be %d finite numbers" % (k, n))
        want[k] = [float(x) for x in v]
    tx.touch("object", ob.name)
    st = rotation_state(ob)
    tx.on_undo(lambda: restore_rotation(ob, st))
    ob.rotation_mode = want["rotation_mode"]
    tx.fault_point("camera.look_at:rotation")
    tx.checkpoint("undo.camera.look_at:rotation")
    restore_rotation(ob, want)
