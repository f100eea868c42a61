"""Animated properties, and putting them back after Blender evaluates them.

Blender writes an animation's value at the current frame into every
animated property whenever it evaluates the scene: ``frame_set``, every
operator call (``bpy.ops`` updates the view layers before and after the
operator, a save included) and the load of a file. A property the tools left
elsewhere (``keyframe.insert`` at another frame with a ``value``) would
change under the scene hash; callers take the values before and write them
back after.
"""

import bpy
from bpy.app.handlers import persistent

from common import log
from compat import action_fcurve_collections
from layers import synced

ANIMATABLE = ("objects", "scenes", "worlds", "materials", "cameras", "lights", "meshes", "curves")


def animated_values():
    """(id, data_path, value) of every property an action animates."""
    out = []
    for attr in ANIMATABLE:
        for idb in getattr(bpy.data, attr):
            ad = getattr(idb, "animation_data", None)
            if ad is None or ad.action is None:
                continue
            for fcs in action_fcurve_collections(ad.action):
                for fc in fcs:
                    try:
                        v = idb.path_resolve(fc.data_path)
                    except (ValueError, TypeError):
                        continue
                    if hasattr(v, "__len__") and not isinstance(v, str):
                        v = tuple(v)
                    out.append((idb, fc.data_path, v))
    return out


def restore_animated(values):
    for idb, data_path, v in values:
        head, _, attr = data_path.rpartition(".")
        try:
            owner = idb.path_resolve(head) if head else idb
            setattr(owner, attr, v)
        except (ValueError, TypeError, AttributeError) as e:
            log("could not restore animated property", id=idb.name, path=data_path, err=str(e))


def keep_animated():
    """Evaluate the scene now, as the next operator (bpy.ops) would, and put
    the animated properties back: no evaluation is left pending that would
    overwrite them, so a save writes them as they are."""
    values = animated_values()
    if not values:
        return
    for sc in bpy.data.scenes:
        for vl in sc.view_layers:
            synced(vl).update()
    restore_animated(values)


def open_file_as_saved(path):
    """wm.open_mainfile, with every animated property as the file holds it:
    the values are read in load_post, which runs before the evaluation that
    would overwrite them."""
    saved = []

    @persistent
    def keep(*_):
        saved[:] = animated_values()

    bpy.app.handlers.load_post.append(keep)
    try:
        # With its UI: the file's window manager replaces the running one and
        # its queue of notifiers (main.py, load_checkpoint).
        bpy.ops.wm.open_mainfile(filepath=path, load_ui=True, use_scripts=False)
    finally:
        bpy.app.handlers.load_post.remove(keep)
    restore_animated(saved)
