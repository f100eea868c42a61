"""World tools: world.set (the scene's background color and strength).

The background is the world's Background node (the one feeding the World
Output's Surface): world.set turns the world's nodes on when they are off
(Blender then creates Background + World Output) and writes the node's Color
and Strength; it also sets ``world.color`` (the viewport / node-less color)
to the same color. A scene without a world gets a new world "World" (or
"World.001", ...). A world whose Surface is driven by something other than a
Background node is refused (conflict): world.set does not rewire shaders.

Undo record (``v`` = UNDO_VERSION):

    {"v":1,"tool":"world.set","scene":S,"world":W,"created":bool,
     "use_nodes":bool|null,"color":[3],"background":{"color":[4],"strength":x}|null,
     "added_nodes":[names]}
        created    -> unassign and remove the world
        otherwise  -> put the Background node values back (or remove the
                      nodes world.set added), restore use_nodes and color
"""

import bpy

from compat import world_background_node, world_output_node
from registry import ToolError, field, tool, undoer
from schema import is_number
from baseline import current_scene, live_scene

from .datablocks import free_name_in

COLOR = {"type": "array", "items": {"type": "number", "minimum": 0, "maximum": 1}, "minItems": 3, "maxItems": 3}


def ensure_background(tx, world):
    """The world's Background node, creating/enabling what is missing; every
    step registers its reversal. Returns (node, names of nodes added)."""
    added = []
    if hasattr(world, "use_nodes") and not world.use_nodes:
        tx.on_undo(lambda: setattr(world, "use_nodes", False))
        world.use_nodes = True
    if world.node_tree is None:
        raise ToolError("internal_error", "world %r has no node tree after enabling nodes" % world.name)
    bg = world_background_node(world)
    if bg is not None:
        return bg, added
    nodes, links = world.node_tree.nodes, world.node_tree.links
    out = world_output_node(world)
    if out is not None and out.inputs["Surface"].is_linked:
        src = out.inputs["Surface"].links[0].from_node
        raise ToolError("conflict", "the world's surface comes from a %s node, not a Background node" % src.type)
    if out is None:
        out = nodes.new("ShaderNodeOutputWorld")
        name = out.name
        tx.on_undo(lambda: nodes.remove(nodes[name]))
        added.append(name)
    bg = nodes.new("ShaderNodeBackground")
    bg_name = bg.name
    tx.on_undo(lambda: nodes.remove(nodes[bg_name]))
    added.append(bg_name)
    links.new(bg.outputs["Background"], out.inputs["Surface"])
    return bg, added


@tool(
    "world.set",
    description="Set the scene world's background color (linear RGB, 0..1) and/or strength (the Background node; creates the world when the scene has none).",
    schema={
        "type": "object",
        "properties": {
            "color": COLOR,
            "strength": {"type": "number", "minimum": 0, "maximum": 1000000},
        },
        "minProperties": 1,
        "additionalProperties": False,
    },
    safety_level="safe_write",
    idempotence_class="idempotent",
    rollback_method="compensation",
    blender_versions=">=3.4",
)
def tool_world_set(tx, args):
    if "color" not in args and "strength" not in args:
        raise ToolError("invalid_input", "give color and/or strength")
    sc = current_scene()
    world = sc.world
    created = world is None
    if created:
        world = bpy.data.worlds.new(free_name_in(bpy.data.worlds, "World"))
        wname = world.name
        tx.touch("world", wname)
        tx.on_undo(lambda: bpy.data.worlds.remove(bpy.data.worlds[wname]))
        tx.touch_settings(sc.name)
        tx.on_undo(lambda: setattr(sc, "world", None))
        sc.world = world
    tx.touch("world", world.name)
    old_use = bool(world.use_nodes) if hasattr(world, "use_nodes") else None
    old_color = list(world.color)
    old_bg = None
    if (old_use is None or old_use) and world.node_tree is not None:
        n = world_background_node(world)
        if n is not None:
            old_bg = {"color": list(n.inputs["Color"].default_value), "strength": n.inputs["Strength"].default_value}
    bg, added = ensure_background(tx, world)
    tx.checkpoint("world.set:nodes")
    cur_bg = (tuple(bg.inputs["Color"].default_value), bg.inputs["Strength"].default_value)
    tx.on_undo(lambda: (setattr(bg.inputs["Color"], "default_value", cur_bg[0]),
                        setattr(bg.inputs["Strength"], "default_value", cur_bg[1])))
    tx.on_undo(lambda: setattr(world, "color", old_color))
    if "color" in args:
        c = [float(x) for x in args["color"]]
        world.color = c
        bg.inputs["Color"].default_value = c + [1.0]
    if "strength" in args:
        bg.inputs["Strength"].default_value = float(args["strength"])
    tx.checkpoint("world.set:set")
    tx.set_undo({"scene": sc.name, "world": world.name, "created": created, "use_nodes": old_use,
                 "color": old_color, "background": old_bg, "added_nodes": added})
    return {
        "world": world.name,
        "color": [round(x, 6) for x in bg.inputs["Color"].default_value[:3]],
        "strength": round(bg.inputs["Strength"].default_value, 6),
        "created": created,
    }


def floats(rec, key, n):
    v = field(rec, key, list)
    if len(v) != n or not all(is_number(x) for x in v):
        raise ToolError("invalid_input", "undo record: %r must be %d finite numbers" % (key, n))
    return [float(x) for x in v]


@undoer("world.set")
def undo_world_set(tx, rec):
    wname = field(rec, "world", str)
    world = bpy.data.worlds.get(wname)
    if world is None:
        raise ToolError("conflict", "cannot undo: world %r is gone" % wname)
    if field(rec, "created", bool):
        sc = live_scene(field(rec, "scene", str))
        if sc is None or sc.world != world or world.users != 1:
            raise ToolError("conflict", "cannot undo: world %r is no longer only the scene's" % wname)
        tx.touch_settings(sc.name)
        tx.touch("world", wname)
        tx.on_undo(lambda: setattr(sc, "world", world))
        sc.world = None
        tx.fault_point("world.set:unassigned")
        tx.checkpoint("undo.world.set:unassigned")
        bpy.data.worlds.remove(world)
        return
    color = floats(rec, "color", 3)
    use = field(rec, "use_nodes", bool, optional=True)
    old_bg = field(rec, "background", dict, optional=True)
    bg_color = floats(old_bg, "color", 4) if old_bg is not None else None
    bg_strength = float(field(old_bg, "strength", float)) if old_bg is not None else None
    added = field(rec, "added_nodes", list)
    tree = world.node_tree
    if tree is None and (added or old_bg is not None):
        raise ToolError("conflict", "cannot undo: world %r lost its nodes" % wname)
    for n in added:
        if not isinstance(n, str):
            raise ToolError("invalid_input", "undo record: bad added_nodes")
        if tree.nodes.get(n) is None:
            raise ToolError("conflict", "cannot undo: world node %r is gone" % n)
    bg = world_background_node(world) if tree is not None else None
    if old_bg is not None and bg is None:
        raise ToolError("conflict", "cannot undo: world %r has no Background node" % wname)
    tx.touch("world", wname)
    if old_bg is not None:
        cur = (tuple(bg.inputs["Color"].default_value), bg.inputs["Strength"].default_value)
        tx.on_undo(lambda: (setattr(bg.inputs["Color"], "default_value", cur[0]),
                            setattr(bg.inputs["Strength"], "default_value", cur[1])))
        bg.inputs["Color"].default_value = bg_color
        bg.inputs["Strength"].default_value = bg_strength
    tx.fault_point("world.set:background")
    tx.checkpoint("undo.world.set:background")
    cur_color = list(world.color)
    tx.on_undo(lambda: setattr(world, "color", cur_color))
    world.color = color
    if use is not None and hasattr(world, "use_nodes"):
        cur_use = world.use_nodes
        tx.on_undo(lambda: setattr(world, "use_nodes", cur_use))
        world.use_nodes = use
    # Irreversible and validated above: node removal comes last.
    for n in reversed(added):
        tree.nodes.remove(tree.nodes[n])
