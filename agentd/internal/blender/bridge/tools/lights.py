"""Light tools: light.create.

light.create makes new light data and an object (both named after the
object; the data gets the lowest free name.NNN when that light data name is
taken), linked to the scene's master collection, and pins every value the
light record holds, since bpy.data defaults differ between versions (point
radius 0.25 on 3.4, 0 on 4.5):

    energy       point/spot/area 1000 W, sun 1.0 W/m^2 (args: energy)
    color        [1, 1, 1]
    radius       shadow_soft_size 0.1 m (point/spot: size); not recorded for
                 sun/area (3.4 keeps an area light's size in that field)
    spot         spot_size 45 deg, spot_blend 0.15
    area         shape SQUARE, size = size_y = size (default 1 m)
    sun          angle 0.00918043 rad (0.526 deg, Blender's default)

With ``target`` (an object name or a point), the light is rotated so that
it shines at it (its local -Z axis points there, +Z up), as camera.look_at
aims a camera.

It does not change the active object or the selection.

Undo record (``v`` = 1):

    {"v":1,"tool":"light.create","object":O,
     "data":{"kind":"light","collection":"lights","name":D}} -> remove O and D
"""

import math

from mathutils import Vector

from registry import ToolError, tool, undoer
from schema import NAME, VEC3

from .cameras import TARGET_SCHEMA, aim_rotation, target_point
from .datablocks import check_new_object_name, created_data_record, new_data, new_data_object, undo_remove_created

LIGHT_TYPES = {"point": "POINT", "sun": "SUN", "spot": "SPOT", "area": "AREA"}


@tool(
    "light.create",
    description="Create a light (point, sun, spot or area) in the scene collection. size is the radius of a point/spot light or the side of a square area light (sun: not allowed). target (an object name or a point) aims it there instead of rotation_euler. Defaults: 1000 W (sun 1.0), white, radius 0.1 m, area 1 m.",
    schema={
        "type": "object",
        "properties": {
            "name": NAME,
            "type": {"type": "string", "enum": sorted(LIGHT_TYPES), "default": "point"},
            "energy": {"type": "number", "minimum": 0, "maximum": 1.0e9},
            "color": {"type": "array", "items": {"type": "number", "minimum": 0, "maximum": 1000000}, "minItems": 3, "maxItems": 3},
            "size": {"type": "number", "exclusiveMinimum": 0, "maximum": 1000000},
            "location": VEC3,
            "rotation_euler": VEC3,
            "target": TARGET_SCHEMA,
        },
        "required": ["name"],
        "additionalProperties": False,
    },
    safety_level="safe_write",
    idempotence_class="keyed",
    rollback_method="compensation",
    blender_versions=">=3.4",
)


def tool_light_create(tx, args):
    name = args["name"]
    check_new_object_name(name)
    ltype = LIGHT_TYPES[args.get("type", "point")]
    if ltype == "SUN" and "size" in args:
        raise ToolError("invalid_input", "size does not apply to a sun light")
    rotation = args.get("rotation_euler")
    if "target" in args:
        if rotation is not None:
            raise ToolError("invalid_input", "give rotation_euler or target, not both")
        origin = Vector([float(x) for x in args.get("location", (0.0, 0.0, 0.0))])
        rotation = list(aim_rotation(name, origin, target_point(args["target"])).to_euler("XYZ"))
    light = new_data(tx, "lights", "light", name, ltype)
    light.energy = float(args.get("energy", 1.0 if ltype == "SUN" else 1000.0))
    light.color = [float(x) for x in args.get("color", (1.0, 1.0, 1.0))]
    size = float(args["size"]) if "size" in args else None
    if ltype in ("POINT", "SPOT"):
        light.shadow_soft_size = size if size is not None else 0.1
    if ltype == "SPOT":
        light.spot_size = math.radians(45.0)
        light.spot_blend = 0.15
    elif ltype == "AREA":
        light.shape = "SQUARE"
        light.size = size if size is not None else 1.0
        light.size_y = light.size
    elif ltype == "SUN":
        light.angle = math.radians(0.526)
    ob = new_data_object(tx, name, light, args.get("location"), rotation)
    tx.checkpoint("light.create:linked")
    tx.set_undo({"object": name, "data": created_data_record(light)})
    return {"name": ob.name, "data": light.name, "type": args.get("type", "point"), "energy": light.energy}


@undoer("light.create")
def undo_light_create(tx, rec):
    undo_remove_created(tx, rec, "light.create")
