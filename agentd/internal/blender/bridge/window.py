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
between a load and the wake.
"""

import bpy

from animation import animated_values, restore_animated
from baseline import current_scene
from common import TOMB_PREFIX

PARKED = TOMB_PREFIX + "window"


def park():
    """Show the parked scene in the window: None when there is no window
    (nothing parked), else whether it was parked already."""
    win = bpy.context.window
    if win is None:
        return None
    if win.scene.name == PARKED:
        return True
    win.scene = bpy.data.scenes.get(PARKED) or bpy.data.scenes.new(PARKED)
    return False


def wake():
    """Show the session's scene in the window again, if it is parked, with
    every animated property as it was."""
    win = bpy.context.window
    if win is None or win.scene.name != PARKED:
        return
    values = animated_values()
    win.scene = current_scene()
    restore_animated(values)
    parked = bpy.data.scenes.get(PARKED)
    if parked is not None:
        bpy.data.scenes.remove(parked)
