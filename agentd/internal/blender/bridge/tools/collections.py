"""Collection tools: collection.create, collection.link.

The hierarchy is in scene_state_v1 as each collection record's sorted
``children`` and the scene record's ``collection_children`` (the master
collection's); membership is on the object record (``collections``, with the
master collection as ``"<scene>:<scene name>"``). collection.link accepts that
label for the master collection, so collection names starting with
``<scene>:`` are refused.

Undo records (``v`` = 1):

    {"v":1,"tool":"collection.create","collection":C,"parent":P|null,"scene":S}
        -> unlink C from P (null: S's master collection) and remove it
    {"v":1,"tool":"collection.link","object":O,
     "collections":[{"scene":S}|{"collection":C}],
     "bases":[{"scene":S,"view_layer":VL,"active":b,"select":b,"hide":b}]}
        -> relink O to exactly those collections and restore its bases
"""

import bpy

from common import is_tomb
from registry import ToolError, field, tool, undoer
from schema import NAME, check_name, check_name_free
from baseline import current_scene, live_scene, live_scenes
from index import INDEX, collection_label, link_object, unlink_object
from trash import discard

from .datablocks import (bases_of, collection_ref, get_object, live_object, new_exact, resolve_collection, resolve_view_layer,
                         restore_bases)

MASTER_PREFIX = "<scene>:"


def get_collection(name, what="collection"):
    """A collection by name, or a scene's master collection by its label."""
    if name.startswith(MASTER_PREFIX):
        sc = live_scene(name[len(MASTER_PREFIX):])
        if sc is not None:
            return sc.collection
    c = bpy.data.collections.get(name)
    if c is None or is_tomb(name) or c.library is not None:
        raise ToolError("not_found", "no %s named %r" % (what, name))
    return c


def touch_parent(tx, coll):
    """Before an empty collection is linked to coll or unlinked from it:
    touch the record that lists coll's children. No object comes or goes,
    so the scene's active object stays (Tx.unchanged)."""
    for sc in bpy.data.scenes:
        if sc.collection == coll:
            tx.touch_settings(sc.name)
            return
    tx.touch("collection", coll.name)


@tool(
    "collection.create",
    description="Create a collection inside parent (a collection name; default the scene's master collection).",
    schema={
        "type": "object",
        "properties": {"name": NAME, "parent": NAME},
        "required": ["name"],
        "additionalProperties": False,
    },
    safety_level="safe_write",
    idempotence_class="keyed",
    rollback_method="compensation",
    blender_versions=">=3.4",
)


def tool_collection_create(tx, args):
    name = args["name"]
    check_name(name)
    if name.startswith(MASTER_PREFIX):
        raise ToolError("invalid_input", "collection names starting with %r are reserved" % MASTER_PREFIX)
    check_name_free(name, bpy.data.collections, "a collection")
    sc = current_scene()
    parent = get_collection(args["parent"], "parent collection") if "parent" in args else sc.collection
    c = new_exact(tx, "collections", "collection", name, "collection")
    touch_parent(tx, parent)
    parent.children.link(c)
    tx.on_undo(lambda: parent.children.unlink(c))
    tx.checkpoint("collection.create:linked")
    ref = collection_ref(parent)  # a master collection: by its scene, which need not be the current one
    tx.set_undo({"collection": name, "parent": ref.get("collection"), "scene": ref.get("scene", sc.name)})
    return {"name": name, "parent": collection_label(parent)}


@undoer("collection.create")
def undo_collection_create(tx, rec):
    name = field(rec, "collection", str)
    c = bpy.data.collections.get(name)
    if c is None:
        raise ToolError("conflict", "cannot undo: collection %r is gone" % name)
    pn = field(rec, "parent", str, optional=True)
    if pn is None:
        sc = live_scene(field(rec, "scene", str))
        parent = sc.collection if sc is not None else None
    else:
        parent = bpy.data.collections.get(pn)
    if parent is None or parent.children.get(name) is None:
        raise ToolError("conflict", "cannot undo: %r is not in its parent collection any more" % name)
    if len(c.objects) or len(c.children):
        raise ToolError("conflict", "cannot undo: collection %r is not empty" % name)
    if c.users != 1:
        raise ToolError("conflict", "cannot undo: collection %r is linked elsewhere too" % name)
    tx.touch("collection", name)
    touch_parent(tx, parent)
    tx.on_undo(lambda: parent.children.link(c))
    parent.children.unlink(c)
    tx.fault_point("collection.create:unlinked")
    tx.checkpoint("undo.collection.create:unlinked")
    discard([c])  # validated: cannot fail


def set_membership(tx, ob, want):
    """Link ob to exactly the collections in want (link first, then unlink,
    so it never drops out of a scene it stays in)."""
    have = INDEX.collections_of(ob)
    for c in want:
        if c not in have:
            link_object(c, ob)
            tx.on_undo(lambda c=c: unlink_object(c, ob))
    for c in have:
        if c not in want:
            unlink_object(c, ob)
            tx.on_undo(lambda c=c: link_object(c, ob))


@tool(
    "collection.link",
    description="Link an object into a collection (or a scene's master collection as \"<scene>:Scene\"); unlink_others removes it from every other collection. Already linked: no change.",
    schema={
        "type": "object",
        "properties": {"object": NAME, "collection": NAME, "unlink_others": {"type": "boolean", "default": False}},
        "required": ["object", "collection"],
        "additionalProperties": False,
    },
    safety_level="safe_write",
    idempotence_class="idempotent",
    rollback_method="compensation",
    blender_versions=">=3.4",
)


def tool_collection_link(tx, args):
    ob = get_object(args["object"])
    coll = get_collection(args["collection"])
    before = INDEX.collections_of(ob)
    others = [c for c in before if c != coll]
    unlinks = bool(others) and args.get("unlink_others", False)
    want = [coll] + ([] if unlinks else others)
    # Only an unlink can take a base away, and with it a scene's active
    # object and the base's selection and hiding. A link that unlinks
    # nothing needs neither the bases nor the active objects read, each of
    # which would make Blender resync every base of a view layer the last
    # link or unlink left stale (layers.py).
    bases = bases_of(ob) if unlinks else []
    tx.set_undo({"object": ob.name, "collections": [collection_ref(c) for c in before], "bases": bases})
    tx.touch("object", ob.name)
    for sc in bpy.data.scenes:
        tx.touch("scene", sc.name)  # leaving a scene clears its active object
        if not unlinks:
            tx.unchanged("active", sc.name)
    if unlinks:
        tx.on_undo(lambda: restore_bases(ob, bases))  # runs last on rollback
    set_membership(tx, ob, want)
    tx.checkpoint("collection.link:linked")
    return {"object": ob.name, "collections": INDEX.labels(ob)}


@undoer("collection.link")
def undo_collection_link(tx, rec):
    ob = live_object(field(rec, "object", str))
    want = []
    for ref in field(rec, "collections", list):
        c = resolve_collection(ref) if isinstance(ref, dict) else None
        if c is None:
            raise ToolError("conflict", "cannot undo: collection %r is gone" % (ref,))
        want.append(c)
    bases = []
    for b in field(rec, "bases", list):
        if not isinstance(b, dict):
            raise ToolError("invalid_input", "undo record: bad base")
        sc, vl = resolve_view_layer(field(b, "scene", str), field(b, "view_layer", str))
        if vl is None:
            raise ToolError("conflict", "cannot undo: view layer %r is gone" % b.get("view_layer"))
        bases.append({"scene": sc.name, "view_layer": vl.name, "active": bool(b.get("active")),
                      "select": bool(b.get("select")), "hide": bool(b.get("hide"))})
    tx.touch("object", ob.name)
    # An object a scene's master collection holds has a base in each of its
    # view layers (no layer can exclude that collection), whatever else it
    # leaves. Where every scene's does and it keeps them, this unlink takes
    # no base away: ob's bases are not read (the read resyncs the view layer
    # the link left stale, layers.py). A master collection that makes its
    # objects unselectable is left to the full path.
    stays = all(sc.collection in want and not sc.collection.hide_select for sc in live_scenes())
    now = [] if stays and not bases else bases_of(ob)
    # An unlink changes a scene's active object only when it is ob, and
    # restore_bases only with bases to put back; otherwise the active
    # objects are not read again after the unlink (a resync, layers.py).
    keep_active = not bases and not any(b["active"] for b in now)
    for sc in bpy.data.scenes:
        tx.touch("scene", sc.name)
        if keep_active:
            tx.unchanged("active", sc.name)
    tx.on_undo(lambda: restore_bases(ob, now))
    set_membership(tx, ob, want)
    tx.fault_point("collection.link:relinked")
    tx.checkpoint("undo.collection.link:relinked")
    restore_bases(ob, bases)
