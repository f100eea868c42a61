"""The window's scene, parked while a checkpoint is saved.

Blender evaluates the scene of the window (background mode has one) at every
file load and around every operator, the save included: at 10,000 objects
that evaluation is 0.6-0.8 s of a checkpoint's 0.8-1.0 s load, and most tools
never need it (they work on ``bpy.data``; records and hashes read original
data, never evaluated data). So a checkpoint is saved with the window showing
an empty scene of the bridge's own (PARKED, a tombstone name: out of the
state, the snapshot and every tool), and loads showing it. The session's
scene is given back to the window (wake) just before the first operator that
works through the window's context: renders, imports and exports, Blender
3.4's modifier move, python.exec. The switch evaluates the scene, which
writes every animation over its property: they are put back (animation.py).
The parked scene is removed then, so it exists only inside checkpoints and
between a load or a save and the next wake. A new scene (reset) is shown
parked too. A save leaves the window parked rather than wake it: the switch
back rebuilds the scene's dependency graph and evaluates it, which at
10,000 objects made every checkpoint 1.1-1.7 s instead of 0.08 s
(BENCHMARKS.md). If something had woken it, the bridge wakes it again in
the next pause between requests (REWAKE, main.idle), so that a session of
python.exec calls pays for it while idle, not at its next call. It
remembers which scene and view layer the window showed (custom properties
SHOWN_SCENE, SHOWN_VIEW_LAYER, saved with it), and the wake shows them
again: a save changes nothing of the session, whatever python.exec put in
the window.
"""

import bpy

from animation import animated_values, restore_animated
from baseline import current_scene, live_scene
from common import OLD_TOMB_PREFIX
from layers import sync_view_layers

# Names kept from before TOMB_PREFIX changed: checkpoints hold them.
PARKED = OLD_TOMB_PREFIX + "window"
SHOWN_SCENE = OLD_TOMB_PREFIX + "shown_scene"
SHOWN_VIEW_LAYER = OLD_TOMB_PREFIX + "shown_view_layer"

# "due": a save parked the window something had woken; the next pause wakes
# it again (main.idle).
REWAKE = {"due": False}


def park(rewake=False):
    """Show the parked scene in the window: None when there is no window
    (nothing parked), else whether it was parked already. rewake: one that
    showed the session's scene shows it again in the next pause (REWAKE)."""
    win = bpy.context.window
    if win is None:
        return None
    if win.scene.name == PARKED:
        return True
    REWAKE["due"] = rewake
    parked = bpy.data.scenes.get(PARKED) or bpy.data.scenes.new(PARKED)
    parked[SHOWN_SCENE] = win.scene.name
    parked[SHOWN_VIEW_LAYER] = win.view_layer.name
    win.scene = parked
    return False


def wake():
    """Show the session's scene in the window again, if it is parked, with
    every animated property as it was; and bring every view layer up to
    date (layers.py): what runs next may walk their bases its own way."""
    REWAKE["due"] = False
    sync_view_layers()
    win = bpy.context.window
    if win is None or win.scene.name != PARKED:
        return
    parked = win.scene
    sc = live_scene(parked.get(SHOWN_SCENE, "")) or current_scene()
    values = animated_values()
    win.scene = sc
    vl = sc.view_layers.get(parked.get(SHOWN_VIEW_LAYER, ""))
    if vl is not None:
        win.view_layer = vl
    restore_animated(values)
    bpy.data.scenes.remove(parked)
