"""Tool modules. Importing this package registers every tool.

Add a new tool family as tools/<family>.py (see registry.py for the API) and
list it here: explicit imports, no discovery, so the registry is the same on
every run. Order does not matter (the registry is sorted by name).
"""

from . import objects, render, scene  # noqa: F401
