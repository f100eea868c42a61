"""Tool modules. Importing this package registers every tool.

Add a new tool family as tools/<family>.py (see registry.py for the API) and
list it here: explicit imports, no discovery, so the registry is the same on
every run. Order does not matter (the registry is sorted by name).
Helpers that several families use (names, objects and their data,
collection references, transforms) are in datablocks.py, which registers
no tool.
"""

from . import objects, render, scene  # noqa: F401
from . import cameras, collections, lights, materials, modifiers  # noqa: F401  (scene building)
from . import anim, io, special, text, world  # noqa: F401  (world, animation, text, import/export, special)
