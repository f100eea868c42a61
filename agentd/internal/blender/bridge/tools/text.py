"""Text tools: text.create (a FONT curve object).

Undo record (``v`` = UNDO_VERSION):

    {"v":1,"tool":"text.create","object":O,"curve":C,"fonts_created":[F],
     "scene":S,"view_layer":VL,"active_before":name|null}
        -> reactivate, unlink and remove O, C and the fonts the curve loaded
           (Blender's built-in font, "Bfont" / "Bfont Regular", when it was
           not loaded yet)
"""

import bpy

from common import is_tomb
from registry import ToolError, field, tool, undoer
from schema import NAME, VEC3, check_name
from state import active_view_layer, current_scene

MAX_BODY = 1024


@tool(
    "text.create",
    description="Create a text object (a FONT curve) in the scene collection and make it active.",
    schema={
        "type": "object",
        "properties": {
            "name": NAME,
            "body": {"type": "string", "minLength": 1, "maxLength": MAX_BODY},
            "size": {"type": "number", "exclusiveMinimum": 0, "maximum": 10000, "default": 1.0},
            "extrude": {"type": "number", "minimum": 0, "maximum": 10000, "default": 0.0},
            "location": VEC3,
            "rotation_euler": VEC3,
        },
        "required": ["name", "body"],
        "additionalProperties": False,
    },
    safety_level="safe_write",
    idempotence_class="keyed",
    rollback_method="compensation",
    blender_versions=">=3.4",
)
def tool_text_create(tx, args):
    name, body = args["name"], args["body"]
    check_name(name)
    if name in bpy.data.objects:
        raise ToolError("conflict", "an object named %r already exists" % name)
    if "\x00" in body:
        raise ToolError("invalid_input", "body contains a NUL character")
    sc = current_scene()
    vl = active_view_layer(sc)
    fonts_before = set(f.as_pointer() for f in bpy.data.fonts)

    cu = bpy.data.curves.new(name, "FONT")
    cname = cu.name
    tx.touch("curve", cname)
    tx.on_undo(lambda: bpy.data.curves.remove(bpy.data.curves[cname]))
    fonts = [f.name for f in bpy.data.fonts if f.as_pointer() not in fonts_before]
    for fn in fonts:
        tx.on_undo(lambda fn=fn: bpy.data.fonts.remove(bpy.data.fonts[fn]))
    cu.body = body
    cu.size = float(args.get("size", 1.0))
    cu.extrude = float(args.get("extrude", 0.0))
    ob = bpy.data.objects.new(name, cu)
    tx.touch("object", name)
    tx.on_undo(lambda: bpy.data.objects.remove(bpy.data.objects[name], do_unlink=True))
    if "location" in args:
        ob.location = args["location"]
    if "rotation_euler" in args:
        ob.rotation_euler = args["rotation_euler"]
    sc.collection.objects.link(ob)
    prev_name = None
    if vl is not None:
        prev = vl.objects.active
        prev_name = prev.name if prev is not None else None
        tx.touch("scene", sc.name)
        tx.on_undo(lambda: setattr(vl.objects, "active", bpy.data.objects.get(prev_name) if prev_name else None))
        vl.objects.active = ob
    tx.checkpoint("text.create:linked")
    tx.set_undo({
        "object": name, "curve": cname, "fonts_created": fonts,
        "scene": sc.name, "view_layer": vl.name if vl is not None else None, "active_before": prev_name,
    })
    return {"name": ob.name, "curve": cname, "body": cu.body, "size": round(cu.size, 6), "extrude": round(cu.extrude, 6)}


@undoer("text.create")
def undo_text_create(tx, rec):
    name = field(rec, "object", str)
    cname = field(rec, "curve", str)
    fonts = field(rec, "fonts_created", list)
    if not all(isinstance(f, str) for f in fonts):
        raise ToolError("invalid_input", "undo record: bad fonts_created")
    prev_name = field(rec, "active_before", str, optional=True)
    ob = bpy.data.objects.get(name)
    if ob is None or is_tomb(name):
        raise ToolError("conflict", "cannot undo: object %r is gone" % name)
    cu = bpy.data.curves.get(cname)
    if cu is None or ob.data != cu or cu.users != 1:
        raise ToolError("conflict", "cannot undo text.create: %r no longer solely owns curve %r" % (name, cname))
    if any(not is_tomb(c.name) for c in ob.children) or any(sc.camera == ob for sc in bpy.data.scenes):
        raise ToolError("conflict", "cannot undo text.create: other datablocks now refer to %r" % name)
    prev = None
    if prev_name:
        prev = bpy.data.objects.get(prev_name)
        if prev is None or is_tomb(prev_name):
            raise ToolError("conflict", "cannot undo: previously active object %r is gone" % prev_name)
    sc = bpy.data.scenes.get(field(rec, "scene", str))
    vl = sc.view_layers.get(field(rec, "view_layer", str, optional=True) or "") if sc is not None else None
    tx.touch("object", name)
    tx.touch("curve", cname)
    for s in bpy.data.scenes:
        tx.touch("scene", s.name)
    if vl is not None:
        cur = vl.objects.active
        tx.on_undo(lambda: setattr(vl.objects, "active", cur))
        vl.objects.active = prev
    for coll in list(ob.users_collection):
        tx.on_undo(lambda coll=coll: coll.objects.link(ob))
        coll.objects.unlink(ob)
    tx.fault_point("text.create:unlinked")
    tx.checkpoint("undo.text.create:unlinked")
    # Irreversible and validated above: nothing after this point can fail.
    bpy.data.objects.remove(ob)
    bpy.data.curves.remove(cu)
    for fn in fonts:
        f = bpy.data.fonts.get(fn)
        if f is not None and not font_in_use(f):
            bpy.data.fonts.remove(f)


def font_in_use(f):
    """Whether a text curve uses font f (users is no help: 3.4 keeps one on
    the built-in font after its last curve is gone)."""
    for c in bpy.data.curves:
        if c.bl_rna.identifier == "TextCurve" and f in (c.font, c.font_bold, c.font_italic, c.font_bold_italic):
            return True
    return False
