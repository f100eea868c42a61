"""Scene tools: scene.get_summary, scene.snapshot (both read-only)."""

from common import is_tomb
from registry import tool
from schema import NO_ARGS
from baseline import active_view_layer, current_scene
from layers import active_of
from state import full_snapshot


@tool(
    "scene.get_summary",
    description="List the scene's objects (name and type, sorted by name), the active object and the object count.",
    schema=NO_ARGS,
    safety_level="read_only",
    blender_versions=">=3.4",
)


def tool_scene_get_summary(tx, args):
    sc = current_scene()
    objs = sorted(((ob.name, ob.type) for ob in sc.objects if not is_tomb(ob.name)))
    vl = active_view_layer(sc)
    active = active_of(vl) if vl is not None else None
    return {
        "objects": [{"name": n, "type": t} for n, t in objs],
        "active_object": active.name if active is not None else None,
        "object_count": len(objs),
    }


@tool(
    "scene.snapshot",
    description="Return the full canonical scene_state_v1 snapshot and its scene hash.",
    schema=NO_ARGS,
    safety_level="read_only",
    blender_versions=">=3.4",
)


def tool_scene_snapshot(tx, args):
    snap, h = full_snapshot()
    return {"scene_hash": h, "snapshot": snap}
