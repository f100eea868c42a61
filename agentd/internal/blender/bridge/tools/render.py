"""Render tools: render.still."""

import os
import time

import bpy

from common import log, sha256_hex
from compat import has_cycles, stamp_flags
from registry import ToolError, tool
from sandbox import OUTPUT_PATTERN, sandbox_path
from state import current_scene

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PNG_VOLATILE_CHUNKS = (b"tEXt", b"zTXt", b"iTXt", b"tIME")


def strip_png_metadata(path):
    """Drop text and time chunks: Cycles on 3.4 writes render times there even
    with every stamp off, which would make equal pixels differ in bytes."""
    with open(path, "rb") as f:
        data = f.read()
    if not data.startswith(PNG_SIGNATURE):
        raise ToolError("internal_error", "render output is not a PNG")
    out = [PNG_SIGNATURE]
    i = len(PNG_SIGNATURE)
    while i + 8 <= len(data):
        n = int.from_bytes(data[i:i + 4], "big")
        kind = data[i + 4:i + 8]
        end = i + 12 + n
        if end > len(data):
            raise ToolError("internal_error", "render output is a truncated PNG")
        if kind not in PNG_VOLATILE_CHUNKS:
            out.append(data[i:end])
        i = end
    with open(path, "wb") as f:
        f.write(b"".join(out))


class Saved:
    """Remembers attribute values so a tool can put them back."""

    def __init__(self):
        self.items = []

    def set(self, owner, attr, value):
        self.items.append((owner, attr, getattr(owner, attr)))
        setattr(owner, attr, value)

    def restore(self):
        for owner, attr, value in reversed(self.items):
            setattr(owner, attr, value)

@tool(
    "render.still",
    description="Render the scene camera with Cycles on the CPU to a PNG in the session sandbox; same seed, same bytes. Leaves the scene unchanged.",
    schema={
        "type": "object",
        "properties": {
            "output": {"type": "string", "pattern": OUTPUT_PATTERN},
            "resolution": {
                "type": "array",
                "items": {"type": "integer", "minimum": 16, "maximum": 4096},
                "minItems": 2,
                "maxItems": 2,
                "default": [640, 480],
            },
            "samples": {"type": "integer", "minimum": 1, "maximum": 4096, "default": 16},
            "seed": {"type": "integer", "minimum": 0, "maximum": 2147483647, "default": 0},
        },
        "required": ["output"],
        "additionalProperties": False,
    },
    safety_level="safe_write",
    idempotence_class="idempotent",
    rollback_method="not_needed",
    determinism_class="seeded",
    blender_versions=">=3.4",
)


def tool_render_still(tx, args):
    if not has_cycles():
        raise ToolError("capability_missing", "this Blender has no Cycles")
    path = sandbox_path(args["output"])
    w, h = [int(x) for x in args.get("resolution", [640, 480])]
    samples = int(args.get("samples", 16))
    seed = int(args.get("seed", 0))
    sc = current_scene()
    if sc.camera is None:
        raise ToolError("conflict", "the scene has no camera")
    r = sc.render
    saved = Saved()
    try:
        saved.set(r, "engine", "CYCLES")
        saved.set(r, "resolution_x", w)
        saved.set(r, "resolution_y", h)
        saved.set(r, "resolution_percentage", 100)
        saved.set(r, "filepath", path)
        saved.set(r, "use_file_extension", True)
        saved.set(r, "use_compositing", False)
        saved.set(r, "use_sequencer", False)
        saved.set(r, "use_persistent_data", False)
        saved.set(r, "use_border", False)
        saved.set(r.image_settings, "file_format", "PNG")
        for f in stamp_flags(r):
            saved.set(r, f, False)
        cy = sc.cycles
        saved.set(cy, "device", "CPU")
        saved.set(cy, "samples", samples)
        saved.set(cy, "seed", seed)
        saved.set(cy, "use_animated_seed", False)
        saved.set(cy, "use_adaptive_sampling", False)
        saved.set(cy, "use_denoising", False)
        tmp = path + ".partial.png"
        saved.set(r, "filepath", tmp)
        t0 = time.time()
        bpy.ops.render.render(write_still=True, scene=sc.name)
        if not os.path.exists(tmp):
            raise ToolError("internal_error", "Blender did not write the render output")
        strip_png_metadata(tmp)
        os.replace(tmp, path)
        log("render done", seconds=round(time.time() - t0, 3), path=path)
    finally:
        saved.restore()
        if os.path.exists(path + ".partial.png"):
            os.remove(path + ".partial.png")
    with open(path, "rb") as f:
        digest = sha256_hex(f.read())
    return {"path": path, "sha256": digest, "seed": seed, "samples": samples, "resolution": [w, h]}
