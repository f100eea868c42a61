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
"""

import bpy


def synced(vl):
    """vl, brought up to date with its own scene (the getters below would
    resync it with the context's)."""
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
