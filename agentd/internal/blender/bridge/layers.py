"""View layers and their bases.

Blender resyncs a view layer's bases (one per object of its included
collections) lazily, 3.4 and 4.5 alike: a link or unlink only marks the layer, and the next
read that asks for it resyncs every base (0.4 ms at 10,000 objects). Reading
or setting ``vl.objects.active`` and the per-object getters
(``ob.select_get(view_layer=vl)``, ...) ask for it; iterating ``vl.objects``,
``vl.objects.selected`` and ``vl.objects.get`` do not, and see the bases of
before the change. The tools read what they need through the former (or
synced first), so a call that only links or unlinks leaves the resync to the
next call that needs the bases (tools.datablocks.note_active_objects), and
several changes share one. What a call needs to know before it changes
anything, the scene's active object, it takes from the scene's state
(state.SceneState.active_name, tools.datablocks.active_before), and a link that
unlinks nothing reads no bases at all (collection.link). Before code that walks
bases its own way runs (an operator, python.exec), window.wake brings every
view layer up to date.

Setting the active object needs its base, so Blender resyncs the layer a
create just linked to (0.2 ms at 10,000 objects). The tools set it with
set_active instead, which keeps the value here until something needs
Blender's: active_of reads it from here, and synced (so every sync, wake,
the idle pass), a checkpoint's save and a full snapshot give it to Blender
first (flush_actives), and so do a free and an unlink of a pending object
(compat.remove_ids, index.unlink_object), which could take away the base it
needs: the tools read an object's bases (a sync) before they unlink or free
it, and these keep that true for any that does not. A plan of creates
then resyncs once, when something reads the bases, and the undo of a
create puts the object active before back without one.
"""

import bpy

from common import log

# View layer (pointer) -> (view layer, object or None): actives set by the
# tools, not given to Blender yet.
PENDING = {}


def set_active(vl, ob):
    """Make ob (None: none) the active object of vl, which ob has a base in
    (or will have, once Blender resyncs vl after a link)."""
    PENDING[vl.as_pointer()] = (vl, ob)


def active_of(vl):
    """vl's active object, as the tools last set it."""
    p = PENDING.get(vl.as_pointer())
    return p[1] if p is not None else vl.objects.active


def pending_active(ob):
    """Whether ob is an active object Blender has not been given yet."""
    return any(a == ob for _, a in PENDING.values())


def flush_actives():
    """Give Blender the actives set since the last flush."""
    while PENDING:
        _, (vl, ob) = PENDING.popitem()
        try:
            vl.objects.active = ob
        except (ReferenceError, ValueError, RuntimeError) as e:
            # A bug of ours: the object left the layer, or was freed, with
            # the flush skipped. The hash checks will tell; say why here.
            log("active object not set", error=str(e))


def forget_actives():
    """A new file replaced every view layer."""
    PENDING.clear()


def synced(vl):
    """vl, brought up to date with its own scene (the getters below would
    resync it with the context's), with the actives set (flush_actives)."""
    flush_actives()
    vl.objects.active  # reading it resyncs vl
    return vl


def sync_view_layers():
    for sc in bpy.data.scenes:
        for vl in sc.view_layers:
            synced(vl)


def in_view_layer(ob, vl):
    """Whether ob has a base in view layer vl. vl.objects.get(name) scans
    every base (0.08 ms at 10,000 objects), so the per-base getters answer
    first: each finds the base through the view layer's hash, and a True
    from any of them proves there is one. Only an object none of them sees
    (not in vl, or in it but kept out of the viewport by its own or its
    collection's restrictions) takes the scan, by name, and by identity when
    another object of that name (linked from a library) comes first."""
    synced(vl)
    if ob.select_get(view_layer=vl) or ob.visible_get(view_layer=vl) or ob.hide_get(view_layer=vl):
        return True
    first = vl.objects.get(ob.name)
    if first is None or first == ob:
        return first == ob
    return any(o == ob for o in vl.objects)
