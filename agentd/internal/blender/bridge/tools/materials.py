"""Material tools: material.create, material.assign.

material.create builds a node material (use_nodes: Principled BSDF into
Material Output, as Blender makes it) and pins every value the material
record holds: the Principled inputs base color, metallic, roughness, emission
color and strength (the emission socket is "Emission" on 3.4, "Emission
Color" on 4.x, and its defaults differ: compat.principled_emission_color), and
the viewport values (diffuse_color, metallic, roughness) set to the same.

Undo records (``v`` = 1):

    {"v":1,"tool":"material.create","material":M}        -> remove M (unused)
    {"v":1,"tool":"material.assign","object":O,"slot":i,
     "material_before":name|null,"slots_before":n,
     "data":{"collection":C,"name":D}|null}
        -> put material_before back in slot i, then drop the slots the call
           added (pop the data's materials back to n)
"""

import bpy

from common import is_tomb
from compat import principled_emission_color, set_material_use_nodes
from registry import ToolError, field, tool, undoer
from schema import NAME, check_new_name
from records import principled_node, record_principled
from trash import discard

from .datablocks import clear_own_material, data_collection, get_object, live_object, new_exact, touch_data

UNIT = {"type": "number", "minimum": 0, "maximum": 1}
COLOR4 = {"type": "array", "items": UNIT, "minItems": 4, "maxItems": 4}
COLOR3 = {"type": "array", "items": {"type": "number", "minimum": 0, "maximum": 1000000}, "minItems": 3, "maxItems": 3}
MAX_SLOTS = 32


@tool(
    "material.create",
    description="Create a node material (Principled BSDF). Defaults: base_color [0.8,0.8,0.8,1], metallic 0, roughness 0.5, emission_color [0,0,0], emission_strength 0.",
    schema={
        "type": "object",
        "properties": {
            "name": NAME,
            "base_color": COLOR4,
            "metallic": UNIT,
            "roughness": UNIT,
            "emission_color": COLOR3,
            "emission_strength": {"type": "number", "minimum": 0, "maximum": 1000000},
        },
        "required": ["name"],
        "additionalProperties": False,
    },
    safety_level="safe_write",
    idempotence_class="keyed",
    rollback_method="compensation",
    blender_versions=">=3.4",
)


def tool_material_create(tx, args):
    name = args["name"]
    check_new_name(name, bpy.data.materials, "a material")
    base = [float(x) for x in args.get("base_color", (0.8, 0.8, 0.8, 1.0))]
    metallic = float(args.get("metallic", 0.0))
    roughness = float(args.get("roughness", 0.5))
    emission = [float(x) for x in args.get("emission_color", (0.0, 0.0, 0.0))]
    strength = float(args.get("emission_strength", 0.0))

    m = new_exact(tx, "materials", "material", name, "material")
    set_material_use_nodes(m, True)
    n = principled_node(m)
    if n is None:  # Blender always makes one; be safe if a version does not
        n = m.node_tree.nodes.new("ShaderNodeBsdfPrincipled")
        n.name = "Principled BSDF"
        out = next((x for x in m.node_tree.nodes if x.type == "OUTPUT_MATERIAL"), None)
        if out is None:
            out = m.node_tree.nodes.new("ShaderNodeOutputMaterial")
        m.node_tree.links.new(n.outputs[0], out.inputs[0])
    n.inputs["Base Color"].default_value = base
    n.inputs["Metallic"].default_value = metallic
    n.inputs["Roughness"].default_value = roughness
    em = principled_emission_color(n)
    em.default_value = emission + [1.0]
    n.inputs["Emission Strength"].default_value = strength
    m.diffuse_color = base
    m.metallic = metallic
    m.roughness = roughness
    tx.checkpoint("material.create:created")
    tx.set_undo({"material": name})
    out = record_principled(n)
    out["name"] = name
    return out


@undoer("material.create")
def undo_material_create(tx, rec):
    name = field(rec, "material", str)
    m = bpy.data.materials.get(name)
    if m is None or is_tomb(name):
        raise ToolError("conflict", "cannot undo: material %r is gone" % name)
    if m.users > (1 if m.use_fake_user else 0):
        raise ToolError("conflict", "cannot undo: material %r is in use" % name)
    tx.touch("material", name)
    tx.fault_point("material.create:checked")
    tx.checkpoint("undo.material.create:checked")
    discard([m])


def slot_users(data):
    """Live objects whose material slots follow data's material list."""
    if data.users <= 1:
        return []
    return [o for o in bpy.data.objects if o.data == data and not is_tomb(o.name)]


@tool(
    "material.assign",
    description="Put a material in an object's material slot (default 0), adding empty slots up to it as needed. Slots belong to the object's data (mesh), so objects sharing the data see them too.",
    schema={
        "type": "object",
        "properties": {
            "object": NAME,
            "material": NAME,
            "slot": {"type": "integer", "minimum": 0, "maximum": MAX_SLOTS - 1, "default": 0},
        },
        "required": ["object", "material"],
        "additionalProperties": False,
    },
    safety_level="safe_write",
    idempotence_class="idempotent",
    rollback_method="compensation",
    blender_versions=">=3.4",
)


def tool_material_assign(tx, args):
    ob = get_object(args["object"])
    mname = args["material"]
    mat = bpy.data.materials.get(mname)
    if mat is None or is_tomb(mname):
        raise ToolError("not_found", "no material named %r" % mname)
    data = ob.data
    if data is None or not hasattr(data, "materials") or data_collection(data) is None:
        raise ToolError("invalid_input", "%r (%s) has no material slots" % (ob.name, ob.type))
    slot = int(args.get("slot", 0))
    n = len(ob.material_slots)
    prev = ob.material_slots[slot].material if slot < n else None
    tx.set_undo({
        "object": ob.name, "slot": slot, "material_before": prev.name if prev is not None else None,
        "slots_before": n, "data": {"collection": data_collection(data), "name": data.name},
    })
    set_slot(tx, ob, slot, mat)
    tx.checkpoint("material.assign:assigned")
    return {"object": ob.name, "material": mat.name, "slot": slot, "slots": len(ob.material_slots)}


def shrink_slots(data, n):
    """Drop data's last material slots down to n. pop() of the last one
    leaves the objects with one empty slot (3.4 and 4.5); clear() does not."""
    if n == 0:
        data.materials.clear()
    while len(data.materials) > n:
        data.materials.pop()


def take_own_material(tx, ob, i):
    """Give back the material ob holds of its own in slot i (link OBJECT, or
    out of sight behind a DATA link) before its data's slots shrink below
    i: Blender drops the object's slot and keeps counting the material's
    user, which a checkpoint's reload then loses."""
    slot = ob.material_slots[i]
    link, own = clear_own_material(slot)
    if link != "OBJECT":
        slot.link = link
    if own is not None:
        tx.on_undo(lambda: put_own_material(ob, i, link, own))


def put_own_material(ob, i, link, mat):
    slot = ob.material_slots[i]
    slot.link = "OBJECT"
    slot.material = mat
    slot.link = link


def set_slot(tx, ob, slot, mat):
    """Grow ob's slots (on its data) to slot + 1 and put mat in slot."""
    data = ob.data
    tx.touch("object", ob.name)
    touch_data(tx, data)
    for o in slot_users(data):
        tx.touch("object", o.name)
    n0 = len(data.materials)
    if len(ob.material_slots) <= slot:
        # A new slot, the data's as new slots are, takes mat as it is
        # appended: every change of a slot makes Blender walk all objects
        # (0.03 ms at 10,000), so one change instead of two.
        tx.on_undo(lambda: shrink_slots(data, n0))
        while len(ob.material_slots) < slot:
            data.materials.append(None)
        data.materials.append(mat)
        return
    cur = ob.material_slots[slot].material
    tx.on_undo(lambda: setattr(ob.material_slots[slot], "material", cur))
    ob.material_slots[slot].material = mat


@undoer("material.assign")
def undo_material_assign(tx, rec):
    ob = live_object(field(rec, "object", str))
    slot = field(rec, "slot", int)
    keep = field(rec, "slots_before", int)
    d = field(rec, "data", dict)
    if ob.data is None or ob.data.name != field(d, "name", str) or not hasattr(ob.data, "materials"):
        raise ToolError("conflict", "cannot undo: %r no longer has data %r" % (ob.name, d.get("name")))
    if not 0 <= slot < MAX_SLOTS or not 0 <= keep <= MAX_SLOTS or slot >= len(ob.material_slots):
        raise ToolError("conflict", "cannot undo: %r has no slot %d" % (ob.name, slot))
    pn = field(rec, "material_before", str, optional=True)
    prev = None
    if pn:
        prev = bpy.data.materials.get(pn)
        if prev is None or is_tomb(pn):
            raise ToolError("conflict", "cannot undo: material %r is gone" % pn)
    # Slots the call added must be empty again except the assigned one.
    for i in range(keep, len(ob.data.materials)):
        if i != slot and ob.data.materials[i] is not None:
            raise ToolError("conflict", "cannot undo: slot %d of %r is in use now" % (i, ob.name))
    tx.fault_point("material.assign:checked")
    # Restore slot, then shrink back to the slots there were.
    data = ob.data
    tx.touch("object", ob.name)
    touch_data(tx, data)
    for o in slot_users(data):
        tx.touch("object", o.name)
    # A slot the call added goes with the shrink below: emptying it first
    # would be one more walk. Unless an object holds its own material there
    # (link OBJECT, set by python.exec): that one is given back here.
    if slot < keep or prev is not None or ob.material_slots[slot].link != "DATA":
        cur = ob.material_slots[slot].material
        tx.on_undo(lambda: setattr(ob.material_slots[slot], "material", cur))
        ob.material_slots[slot].material = prev
    tx.checkpoint("undo.material.assign:restored")
    if len(data.materials) > keep:
        for o in slot_users(data) or [ob]:
            for i in range(keep, len(o.material_slots)):
                take_own_material(tx, o, i)
        extra = [data.materials[i] for i in range(keep, len(data.materials))]
        tx.on_undo(lambda: [data.materials.append(m) for m in extra])
        shrink_slots(data, keep)
