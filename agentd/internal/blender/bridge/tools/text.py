"""Text tools: text.create (a FONT curve object).

Undo record (``v`` = UNDO_VERSION):

    {"v":1,"tool":"text.create","object":O,"curve":C,"fonts_created":[F],
     "scene":S,"view_layer":VL,"active_before":name|null}
        -> reactivate, unlink and remove O, C and the fonts the curve loaded
           (Blender's built-in font, "Bfont" / "Bfont Regular", when it was
           not loaded yet, or only parked by an earlier undo: trash.park)
"""

import bpy

from common import is_tomb
from registry import ToolError, field, tool, undoer
from schema import NAME, VEC3
from trash import park, take_back
from baseline import active_view_layer, current_scene, live_scene

from .datablocks import check_new_object_name, check_removable, live_object, make_active, new_data_object, remove_created_object

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
    check_new_object_name(name)
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
    # The built-in font an undone text parked is this text's again.
    fonts += [f.name for f in curve_fonts(cu) if take_back(f)]
    for fn in fonts:
        tx.on_undo(lambda fn=fn: bpy.data.fonts.remove(bpy.data.fonts[fn]))
    cu.body = body
    cu.size = float(args.get("size", 1.0))
    cu.extrude = float(args.get("extrude", 0.0))
    ob = new_data_object(tx, name, cu, args.get("location"), args.get("rotation_euler"))
    prev_name = make_active(tx, sc, vl, ob)
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
    ob = live_object(name)
    cu = bpy.data.curves.get(cname)
    check_removable(ob, cu, "curve", cname, "text.create")
    prev = live_object(prev_name, "previously active object") if prev_name else None
    sc = live_scene(field(rec, "scene", str))
    vl = sc.view_layers.get(field(rec, "view_layer", str, optional=True) or "") if sc is not None else None
    tx.touch("object", name)
    tx.touch("curve", cname)
    for s in bpy.data.scenes:
        tx.touch("scene", s.name)
    # Fonts the text brought that no other text uses go too. A font's name is
    # read-only, so it cannot become a tombstone; it goes on the pile as it
    # is (trash.park), freed with the object and its curve, unless a new
    # text takes it back first. Freeing it now made Blender walk all of Main
    # in the undo (20-30 ms at 10,000 objects).
    gone = [f for f in (bpy.data.fonts.get(fn) for fn in fonts) if f is not None and not font_in_use(f, but=cu)]
    remove_created_object(tx, ob, "text.create", vl, prev, data=cu)
    park(gone)


def curve_fonts(cu):
    """The distinct fonts text curve cu uses."""
    out = []
    for f in (cu.font, cu.font_bold, cu.font_italic, cu.font_bold_italic):
        if f is not None and f not in out:
            out.append(f)
    return out


def font_in_use(f, but=None):
    """Whether a text curve other than but uses font f (users is no help: 3.4
    keeps one on the built-in font after its last curve is gone). Discarded
    curves do not count."""
    for c in bpy.data.curves:
        if c != but and c.bl_rna.identifier == "TextCurve" and not is_tomb(c.name) and f in (c.font, c.font_bold, c.font_italic, c.font_bold_italic):
            return True
    return False
