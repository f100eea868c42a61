"""Render tools: render.still, render.animation (files only) and
render.settings (the scene's render settings, with a compensation).

render.settings undo record (``v`` = UNDO_VERSION):

    {"v":1,"tool":"render.settings","scene":S,"settings":{K: previous value}}
        K in engine, resolution_x, resolution_y, fps, fps_base,
        film_transparent, frame_start, frame_end, cycles_samples, eevee_samples
        (exactly the settings the call wrote) -> write them back.

render.animation renders frame by frame (``scene.frame_set``; the Cycles
settings of render.still, seed not animated, so equal frames give equal
bytes), writes each frame to a temporary file and renames all of them at the
end (a failure leaves no frame behind), reports ``{"done", "total", "frame"}``
after each frame, then restores the current frame, every setting it touched
and every animated property (frame_set evaluated the animation).

Both render tools refuse an output file name that a directory in the sandbox
has (conflict, before rendering) and report the PNGs they wrote in execute's
``"files"`` (Tx.wrote).
"""

import os
import time

import bpy

import window
from animation import animated_values, restore_animated
from common import log
from compat import eevee_engine, has_cycles, stamp_flags
from registry import ToolError, field, tool, undoer
from sandbox import MAX_FILE_NAME, SANDBOX_PATH, check_storage, file_name_schema, output_path, plain, require_plain_name
from baseline import current_scene, live_scene

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

# Args shared by render.still and render.animation.
RENDER_RESOLUTION = {
    "type": "array",
    "items": {"type": "integer", "minimum": 16, "maximum": 4096},
    "minItems": 2,
    "maxItems": 2,
    "default": [640, 480],
}
RENDER_SAMPLES = {"type": "integer", "minimum": 1, "maximum": 4096, "default": 16}
RENDER_SEED = {"type": "integer", "minimum": 0, "maximum": 2147483647, "default": 0}


def require_cycles():
    if not has_cycles():
        raise ToolError("capability_missing", "this Blender has no Cycles")


def render_options(sc, args):
    """(width, height, samples, seed) of render.still/render.animation args;
    conflict when the scene has no camera."""
    w, h = [int(x) for x in args.get("resolution", [640, 480])]
    samples = int(args.get("samples", 16))
    seed = int(args.get("seed", 0))
    if sc.camera is None:
        raise ToolError("conflict", "the scene has no camera")
    return w, h, samples, seed


def pin_cycles(saved, sc, w, h, samples, seed):
    """Set the deterministic Cycles CPU settings of render.still/animation
    through saved (which puts them back), and save the output path that
    render_png changes."""
    r = sc.render
    saved.set(r, "engine", "CYCLES")
    saved.set(r, "resolution_x", w)
    saved.set(r, "resolution_y", h)
    saved.set(r, "resolution_percentage", 100)
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
    saved.set(r, "filepath", r.filepath)


def partial_path(path, what):
    """The temporary file a render goes to before it is renamed to path: a
    stale one (file or symlink) is removed, so the render cannot write
    through a symlink; conflict when a directory has its name."""
    tmp = path + ".partial.png"
    if os.path.isdir(tmp) and not os.path.islink(tmp):
        raise ToolError("conflict", "%s: the temporary file %r is a directory in the sandbox" % (what, os.path.basename(tmp)))
    if os.path.lexists(tmp):
        os.remove(tmp)
    return tmp


def render_png(sc, tmp, missing):
    """Render sc's current frame to the PNG tmp, without its volatile chunks;
    internal_error missing when Blender wrote nothing."""
    sc.render.filepath = tmp
    window.wake()
    bpy.ops.render.render(write_still=True, scene=sc.name)
    if not os.path.exists(tmp):
        raise ToolError("internal_error", missing)
    strip_png_metadata(tmp)


@tool(
    "render.still",
    description="Render the scene camera with Cycles on the CPU to a PNG in the session sandbox; same seed, same bytes. Leaves the scene unchanged.",
    schema={
        "type": "object",
        "properties": {
            "output": file_name_schema("png"),
            "resolution": RENDER_RESOLUTION,
            "samples": RENDER_SAMPLES,
            "seed": RENDER_SEED,
        },
        "required": ["output"],
        "additionalProperties": False,
    },
    safety_level="safe_write",
    idempotence_class="idempotent",
    rollback_method="not_needed",
    determinism_class="seeded",
    blender_versions=">=3.4",
    writes_files=True,
)


def tool_render_still(tx, args):
    require_cycles()
    path = output_path(args["output"], "output")
    sc = current_scene()
    w, h, samples, seed = render_options(sc, args)
    tmp = partial_path(path, "output")
    animated = animated_values()  # the render operator evaluates the animation
    saved = Saved()
    try:
        pin_cycles(saved, sc, w, h, samples, seed)
        t0 = time.time()
        render_png(sc, tmp, "Blender did not write the render output")
        check_storage(leaving=[path])  # before it replaces a file of its name, which a failure would lose
        os.replace(tmp, path)
        tx.wrote(path)
        log("render done", seconds=round(time.time() - t0, 3), path=path)
    finally:
        saved.restore()
        restore_animated(animated)
        if os.path.exists(tmp):
            os.remove(tmp)
    return {"path": plain(path), "sha256": tx.sha256(path), "seed": seed, "samples": samples, "resolution": [w, h]}


# ---------------------------------------------------------------------------
# render.settings: the scene's render settings (a compensation restores them).

ENGINES = ("cycles", "eevee", "workbench")
MAX_FRAME = 1048574  # Blender's MAXFRAME
RESOLUTION = {
    "type": "array",
    "items": {"type": "integer", "minimum": 16, "maximum": 8192},
    "minItems": 2,
    "maxItems": 2,
}
FRAME = {"type": "integer", "minimum": 0, "maximum": MAX_FRAME}


def engine_id(engine):
    if engine == "cycles":
        require_cycles()
        return "CYCLES"
    if engine == "eevee":
        e = eevee_engine()
        if e is None:
            raise ToolError("capability_missing", "this Blender has no EEVEE")
        return e
    return "BLENDER_WORKBENCH"


def samples_owner(sc, engine):
    """(owner, attribute) of the render sample count of engine, or None."""
    if engine == "CYCLES":
        return sc.cycles, "samples"
    if engine in ("BLENDER_EEVEE", "BLENDER_EEVEE_NEXT"):
        return sc.eevee, "taa_render_samples"
    return None


# (owner path, attribute) pairs a render.settings undo record may restore.
SETTINGS_ATTRS = {
    "engine": ("render", "engine"),
    "resolution_x": ("render", "resolution_x"),
    "resolution_y": ("render", "resolution_y"),
    "fps": ("render", "fps"),
    "fps_base": ("render", "fps_base"),
    "film_transparent": ("render", "film_transparent"),
    "frame_start": ("", "frame_start"),
    "frame_end": ("", "frame_end"),
    "cycles_samples": ("cycles", "samples"),
    "eevee_samples": ("eevee", "taa_render_samples"),
}


def setting_ref(sc, key):
    """(owner, attribute) of render setting key (SETTINGS_ATTRS) of sc."""
    path, attr = SETTINGS_ATTRS[key]
    return (getattr(sc, path) if path else sc), attr


def write_setting(tx, sc, key, value):
    """Set render setting key of sc, registering the reversal."""
    owner, attr = setting_ref(sc, key)
    cur = getattr(owner, attr)
    tx.on_undo(lambda: setattr(owner, attr, cur))
    setattr(owner, attr, value)


def write_order(values, sc):
    """The keys of values in a safe write order: Blender pushes frame_end when
    frame_start passes it (and the reverse), so the frame range is written
    end first when the new start lies beyond the current end."""
    end_first = values.get("frame_start", sc.frame_start) > sc.frame_end
    rank = {"frame_end": 0, "frame_start": 1} if end_first else {"frame_start": 0, "frame_end": 1}
    return sorted(values, key=lambda k: (rank.get(k, -1), k))


@tool(
    "render.settings",
    description="Set the scene's render settings: engine (cycles, eevee, workbench), resolution, samples (of the engine that renders), frame range, fps, film transparency.",
    schema={
        "type": "object",
        "properties": {
            "engine": {"type": "string", "enum": list(ENGINES)},
            "resolution": RESOLUTION,
            "samples": {"type": "integer", "minimum": 1, "maximum": 4096},
            "frame_start": FRAME,
            "frame_end": FRAME,
            "fps": {"type": "integer", "minimum": 1, "maximum": 240},
            "film_transparent": {"type": "boolean"},
        },
        "minProperties": 1,
        "additionalProperties": False,
        "x-span": {"start": "frame_start", "end": "frame_end"},
    },
    safety_level="safe_write",
    idempotence_class="idempotent",
    rollback_method="compensation",
    blender_versions=">=3.4",
)
def tool_render_settings(tx, args):
    if not args:
        raise ToolError("invalid_input", "give at least one setting")
    sc = current_scene()
    r = sc.render
    want = {}
    engine = engine_id(args["engine"]) if "engine" in args else r.engine
    if "engine" in args:
        want["engine"] = engine
    if "resolution" in args:
        want["resolution_x"], want["resolution_y"] = [int(x) for x in args["resolution"]]
    if "samples" in args:
        owner = samples_owner(sc, engine)
        if owner is None:
            raise ToolError("invalid_input", "the %s engine has no sample count" % engine)
        want["cycles_samples" if engine == "CYCLES" else "eevee_samples"] = int(args["samples"])
    start = int(args.get("frame_start", sc.frame_start))
    end = int(args.get("frame_end", sc.frame_end))
    if start > end:
        raise ToolError("invalid_input", "frame_start %d is after frame_end %d" % (start, end))
    if "frame_start" in args:
        want["frame_start"] = start
    if "frame_end" in args:
        want["frame_end"] = end
    if "fps" in args:
        want["fps"] = int(args["fps"])
        want["fps_base"] = 1.0
    if "film_transparent" in args:
        want["film_transparent"] = bool(args["film_transparent"])
    old = {k: getattr(*setting_ref(sc, k)) for k in want}
    tx.set_undo({"scene": sc.name, "settings": old})
    tx.touch_settings(sc.name)
    # Frame range: write in the order that never crosses (Blender clamps
    # start/end against each other).
    order = write_order(want, sc)
    for k in order:
        write_setting(tx, sc, k, want[k])
        tx.checkpoint("render.settings:" + k)
    so = samples_owner(sc, r.engine)
    return {
        "engine": {"CYCLES": "cycles", "BLENDER_WORKBENCH": "workbench"}.get(r.engine, "eevee"),
        "resolution": [r.resolution_x, r.resolution_y],
        "samples": getattr(so[0], so[1]) if so is not None else None,
        "frame_start": sc.frame_start, "frame_end": sc.frame_end,
        "fps": r.fps, "film_transparent": bool(r.film_transparent),
    }


@undoer("render.settings")
def undo_render_settings(tx, rec):
    sc = live_scene(field(rec, "scene", str))
    if sc is None:
        raise ToolError("conflict", "cannot undo: scene %r is gone" % rec.get("scene"))
    settings = field(rec, "settings", dict)
    types = {"engine": str, "film_transparent": bool, "fps_base": float}
    for k, v in settings.items():
        if k not in SETTINGS_ATTRS:
            raise ToolError("invalid_input", "undo record: unknown setting %r" % k)
        field(settings, k, types.get(k, int))
    engines = {"BLENDER_WORKBENCH", eevee_engine()} | ({"CYCLES"} if has_cycles() else set())
    if "engine" in settings and settings["engine"] not in engines:
        raise ToolError("conflict", "cannot undo: engine %r is not available" % settings["engine"])
    tx.touch_settings(sc.name)
    order = write_order(settings, sc)
    for i, k in enumerate(order):
        write_setting(tx, sc, k, settings[k])
        if i == 0:
            tx.fault_point("render.settings:" + k)
            tx.checkpoint("undo.render.settings:first")


# ---------------------------------------------------------------------------
# render.animation: a frame range to PNGs in the sandbox.

MAX_ANIMATION_FRAMES = 500


@tool(
    "render.animation",
    description="Render a frame range with Cycles on the CPU to <output_prefix>_<frame:04d>.png in the session sandbox (at most 500 frames); same seed, same bytes. Reports progress per frame. Leaves the scene unchanged. With distribute: true (and frame_start, frame_end) the control plane splits the range across its agents, each rendering on a read-only copy of the session; the frames are the same bytes.",
    schema={
        "type": "object",
        "properties": {
            "output_prefix": dict(SANDBOX_PATH, maxLength=MAX_FILE_NAME),
            "frame_start": FRAME,
            "frame_end": FRAME,
            "resolution": RENDER_RESOLUTION,
            "samples": RENDER_SAMPLES,
            "seed": RENDER_SEED,
            # Read by the control plane, which sends each agent its part of
            # the range without it; here it changes nothing.
            "distribute": {"type": "boolean", "default": False},
        },
        "required": ["output_prefix"],
        "additionalProperties": False,
        "x-span": {"start": "frame_start", "end": "frame_end", "max": MAX_ANIMATION_FRAMES, "unit": "frames"},
    },
    safety_level="safe_write",
    idempotence_class="idempotent",
    rollback_method="not_needed",
    determinism_class="seeded",
    blender_versions=">=3.4",
    writes_files=True,
)
def tool_render_animation(tx, args):
    require_cycles()
    sc = current_scene()
    start = int(args.get("frame_start", sc.frame_start))
    end = int(args.get("frame_end", sc.frame_end))
    if start > end:
        raise ToolError("invalid_input", "frame_start %d is after frame_end %d" % (start, end))
    n = end - start + 1
    if n > MAX_ANIMATION_FRAMES:
        raise ToolError("invalid_input", "%d frames; render.animation renders at most %d" % (n, MAX_ANIMATION_FRAMES))
    prefix = args["output_prefix"]
    require_plain_name(prefix, "a plain file-name prefix")
    paths = [output_path("%s_%04d.png" % (prefix, f), "output_prefix: frame file") for f in range(start, end + 1)]
    w, h, samples, seed = render_options(sc, args)
    tmps = [partial_path(p, "output_prefix") for p in paths]
    frame_before = sc.frame_current
    subframe_before = sc.frame_subframe
    animated = animated_values()
    saved = Saved()
    ok = False
    t0 = time.time()
    try:
        pin_cycles(saved, sc, w, h, samples, seed)
        for k, f in enumerate(range(start, end + 1)):
            sc.frame_set(f)
            render_png(sc, tmps[k], "Blender did not write frame %d" % f)
            check_storage(leaving=paths[:k + 1])  # stop at the first frame over the ceiling
            tx.progress({"done": k + 1, "total": n, "frame": f})
        for tmp, path in zip(tmps, paths):
            os.replace(tmp, path)
            tx.wrote(path)
        ok = True
        log("animation rendered", frames=n, seconds=round(time.time() - t0, 3), prefix=prefix)
    finally:
        saved.restore()
        sc.frame_set(frame_before, subframe=subframe_before)
        restore_animated(animated)
        if not ok:
            for tmp in tmps:
                if os.path.exists(tmp):
                    os.remove(tmp)
    return {"paths": [plain(p) for p in paths], "sha256": [tx.sha256(p) for p in paths], "frames": list(range(start, end + 1)),
            "seed": seed, "samples": samples, "resolution": [w, h]}
