"""Version adapters: every Blender 3.4 / 4.5 difference lives here.

A tool that needs an API that differs between versions calls an adapter from
this module instead of testing bpy.app.version itself; a tool that cannot
work on some version declares a ``blender_versions`` range (see registry.py),
which ``version_in_range`` evaluates.
"""

import re
import sys

import bpy


def blender_version():
    return tuple(bpy.app.version)


def build_string(value):
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return value


def build_platform():
    p = build_string(bpy.app.build_platform)
    if not p or p == "Unknown":  # Debian's 3.4 build does not record it
        p = sys.platform
    return p.lower()


def eevee_engine():
    items = bpy.types.RenderSettings.bl_rna.properties["engine"].enum_items.keys()
    for name in ("BLENDER_EEVEE_NEXT", "BLENDER_EEVEE"):  # 4.2-4.5 renamed EEVEE
        if name in items:
            return name
    return None


def has_cycles():
    return hasattr(bpy.types.Scene, "cycles")


def world_use_nodes(world):
    # World.use_nodes is deprecated after 4.5; absent means node-less is impossible.
    return bool(getattr(world, "use_nodes", False))


def set_world_use_nodes(world, value):
    if hasattr(world, "use_nodes"):
        world.use_nodes = value


def stamp_flags(render):
    return sorted(p for p in dir(render) if p == "use_stamp" or p.startswith("use_stamp_"))


# ---------------------------------------------------------------------------
# Version ranges: ">=3.4", ">=3.4,<5.0", "==4.5", ">=4.2.1,!=4.3".
# Comma means "and". A version compares as (major, minor, patch), missing
# parts are 0 (so "<5.0" excludes 5.0.0 and "<4.5" admits 4.4.9).

_CLAUSE = re.compile(r"^\s*(>=|<=|==|!=|>|<)\s*(\d+(?:\.\d+){0,2})\s*$")
_OPS = {
    ">=": lambda a, b: a >= b,
    "<=": lambda a, b: a <= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    ">": lambda a, b: a > b,
    "<": lambda a, b: a < b,
}


def _version_tuple(text):
    parts = [int(x) for x in text.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


def parse_version_range(spec):
    """[(op, (major, minor, patch)), ...]; ValueError for a malformed spec."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError("empty version range")
    clauses = []
    for part in spec.split(","):
        m = _CLAUSE.match(part)
        if m is None:
            raise ValueError("bad version range clause %r in %r" % (part, spec))
        clauses.append((m.group(1), _version_tuple(m.group(2))))
    return clauses


def version_in_range(spec, version=None):
    """Whether version (default: this Blender) satisfies spec."""
    v = tuple(version if version is not None else blender_version())[:3]
    v = tuple(v) + (0,) * (3 - len(v))
    return all(_OPS[op](v, bound) for op, bound in parse_version_range(spec))
