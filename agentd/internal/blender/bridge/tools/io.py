"""Scene import/export: scene.export, scene.import.

Both run Blender's importers/exporters (operators; they run headless on 3.4
and 4.5). Formats and their operators (compat.io_operators):

    format  extensions            export / import operators
    gltf    .glb .gltf            export_scene.gltf / import_scene.gltf (add-on
                                  io_scene_gltf2; needs numpy, which Debian's
                                  Blender 3.4 lacks: capability_missing there)
    obj     .obj                  wm.obj_export / wm.obj_import (C++, 3.3+)
    fbx     .fbx                  export_scene.fbx / import_scene.fbx
    usd     .usd .usda .usdc      wm.usd_export / wm.usd_import (only in builds
                                  with USD: the 4.5 wheel yes, Debian's 3.4 no)

A format this Blender lacks fails with capability_missing (the schema is the
same on every runtime; the tool description lists the formats available).

Files are plain names in the session sandbox (sandbox.py). Exports also write
companion files next to the output, which must be plain sandbox names too:
``<stem>.mtl`` (OBJ materials) and ``<stem>.bin`` (.gltf buffers). The
textures travel inside glTF files (a .gltf's as data: URIs) and .fbx files
(embedded); .obj and .usd write no texture files: an .mtl names each
texture by the file name it was imported from. Determinism: the same calls
export the same bytes, in one Blender process and across processes
(another session, a restart, a replay on another agent) of the same
Blender version (the files embed the version), in every format but binary
USD (.usd, .usdc). Three things made them differ between processes, each
fixed where it arises: create_uvsphere ordered a sphere's faces by memory
address (object.create builds its primitives in one canonical face order),
the USD exporter orders sibling prims by address (canonical_usda sorts a
.usda's by name; a binary layer keeps the exporter's order), and the FBX
exporter took ids from Python's salted string hashes, the time of day and
the agent's path of each texture (fbx_stable). The tool's determinism
class is about the scene, which it leaves unchanged.
USD exports leave out textures and the world (4.5 would otherwise write a
textures/ directory with the world's dome-light image).

scene.export leaves the scene unchanged (checked: a full recomputation of
the scene hash must equal the running one). scene.import diffs every
bpy.data collection before and after the importer and records every
datablock it created; it puts back the active object, the selection and
the frame range/fps the importer may have changed, so only the new
datablocks differ. Before importing it checks the references a file makes
to other files (every glTF "uri"; the OBJ statements mtllib, maplib, call,
shadow_obj and trace_obj, and the texture statements of the MTL files it
loads, <stem>.mtl included, parsed as Blender parses them: see OBJ_REFS;
USDA asset paths, in every layer they name): each must be a plain file name
inside the sandbox (or a data: URI), else policy_refused; a USD layer must be
text (binary crate or .usdz layers can name files the bridge cannot read the
names of: policy_refused); after importing, every file path of a new image,
library, sound, movie clip, volume or cache file must resolve inside the
sandbox too (.fbx is only checked this way). The images it read are then
packed into the scene (pack_images): a checkpoint carries their pixels.

scene.export refuses an output (or companion) name that a directory in the
sandbox has (conflict), removes stale copies of the output and its
companions first, and reports the files it wrote in execute's ``"files"``.

Undo record of scene.import (``v`` = UNDO_VERSION):

    {"v":1,"tool":"scene.import","created":{"objects":[names],"meshes":[...],...},
     "touched":[[kind,name]],"scene":S,"view_layer":VL}
        -> remove every created datablock (bpy.data.batch_remove)
"""

import base64
import contextlib
import datetime
import hashlib
import json
import os
import re
import tempfile
import urllib.parse

import bpy

import window
from animation import animated_values, restore_animated
from common import is_tomb, one_line, sha256_file
from compat import io_operators
from compat import remove_ids as compat_remove_ids
from registry import ToolError, field, tool, undoer
from sandbox import SANDBOX, file_name_schema, output_path, plain, sandbox_path
from baseline import active_view_layer, current_scene
from index import INDEX
from layers import active_of, set_active
from records import KINDS
from state import STATE, full_snapshot, record_digest
from trash import empty_trash


FORMATS = {"gltf": ("glb", "gltf"), "obj": ("obj",), "fbx": ("fbx",), "usd": ("usd", "usda", "usdc")}
ALL_EXTS = tuple(e for exts in FORMATS.values() for e in exts)
PLAIN_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}\Z")  # with match(): the whole string
KIND_OF = {coll: kind for kind, _, _, coll in KINDS}
SKIP_COLLECTIONS = ("window_managers", "screens", "workspaces")
FILE_IDS = ("images", "libraries", "sounds", "movieclips", "volumes", "cache_files")


def format_of(filename):
    """The format a file's extension names."""
    ext = filename.rsplit(".", 1)[-1].lower()
    for f, exts in sorted(FORMATS.items()):
        if ext in exts:
            return f
    raise ToolError("invalid_input", "%r: its extension names no format (take .%s)" % (filename, ", .".join(ALL_EXTS)))


def available_formats():
    return [f for f in sorted(FORMATS) if io_operators(f)[2] is None]


def check_format(fmt, filename, what):
    """(export operator, import operator, extension, sandbox path) of file
    filename in format fmt on this Blender; what names the argument."""
    ext = filename.rsplit(".", 1)[-1].lower()
    if ext not in FORMATS[fmt]:
        raise ToolError("invalid_input", "%s %r: format %s needs a .%s file" % (what, filename, fmt, " or .".join(FORMATS[fmt])))
    exp, imp, reason = io_operators(fmt)
    if reason is not None:
        raise ToolError("capability_missing", "format %s: %s" % (fmt, reason))
    path = sandbox_path(filename)
    return exp, imp, ext, path


def restore_frame(sc, frame, animated):
    """Put back sc's (frame, subframe) and the animated properties (animation.
    animated_values) after an operator that may have stepped through frames."""
    if animated or (sc.frame_current, sc.frame_subframe) != frame:
        sc.frame_set(frame[0], subframe=frame[1])
        restore_animated(animated)


def restore_settings(settings):
    """Write back the (owner, attribute, value) triples that changed."""
    for owner, attr, v in settings:
        if getattr(owner, attr) != v:
            setattr(owner, attr, v)


def op_call(idname, **kw):
    """bpy.ops.<idname>(**kw), passing only the keywords and enum values
    this version knows. An enum whose items are made when the operator runs
    (4.5's glTF export_format) lists none here: its value is passed."""
    mod, _, name = idname.partition(".")
    op = getattr(getattr(bpy.ops, mod), name)
    props = op.get_rna_type().properties
    kw = {k: v for k, v in kw.items() if k in props}
    window.wake()
    for k, v in list(kw.items()):
        p = props[k]
        if p.type == "ENUM" and len(p.enum_items) and v not in p.enum_items.keys():
            del kw[k]
    return op(**kw)


def changed_keys(snap):
    """The state keys whose record in snap differs from the running state."""
    keys = []
    seen = set()
    for kind, section, _, _ in KINDS:
        for name, rec in snap.get(section, {}).items():
            key = kind + ":" + name
            seen.add(key)
            if STATE.digests.get(key) != record_digest(rec):
                keys.append(key)
    keys += [k for k in STATE.digests if k not in seen]
    return sorted(keys)


# ---------------------------------------------------------------------------
# scene.export

@tool(
    "scene.export",
    description="Export the scene to a file in the session sandbox: gltf (.glb/.gltf), obj, fbx or usd (.usd/.usda/.usdc); "
                "format may be left out, the file's extension says it. "
                "Formats on this Blender: %s. Textures travel inside .glb, .gltf (as data: URIs) and .fbx files; "
                ".obj (its .mtl) and .usd name them but write no texture files. Leaves the scene unchanged."
                % ", ".join(available_formats()),
    schema={
        "type": "object",
        "properties": {
            "format": {"type": "string", "enum": sorted(FORMATS)},
            "output": file_name_schema(*ALL_EXTS),
        },
        "required": ["output"],
        "additionalProperties": False,
    },
    safety_level="safe_write",
    idempotence_class="idempotent",
    rollback_method="not_needed",
    blender_versions=">=3.4",
    writes_files=True,
)
def tool_scene_export(tx, args):
    # Exporters may read all of bpy.data (FBX writes every action of
    # bpy.data.actions): what an undo discarded must not be in the file.
    empty_trash()
    # The scene is evaluated below: shown in the window first, with its
    # animated properties as they are (a parked window's scene may have an
    # evaluation pending since the park, which would write them over).
    window.wake()
    output = args["output"]
    fmt = args.get("format") or format_of(output)
    exp, _, ext, path = check_format(fmt, output, "output")
    stem = output[: -(len(ext) + 1)]
    companions = []
    if fmt == "obj":
        companions.append(stem + ".mtl")
    elif ext == "gltf":
        companions.append(stem + ".bin")
    path = output_path(output, "output")
    extra = [output_path(c, "output: companion file") for c in companions]
    # The export rewrites the output and its companions: those there go
    # aside first, so "files" names only what this export wrote, and a failed
    # export (which removes the files it declared) puts them back.
    tx.set_aside([path] + extra)
    for p in [path] + extra:
        tx.wrote(p)
    before = STATE.scene_hash()
    sc = current_scene()
    frame = (sc.frame_current, sc.frame_subframe)
    animated = animated_values()
    slots = {db.as_pointer(): len(db.materials) for coll in ("meshes", "curves") for db in getattr(bpy.data, coll)}
    for vl in sc.view_layers:
        vl.update()  # exporters read evaluated visibility: evaluate first, same output every time
    ob_slots = {ob.as_pointer(): len(ob.material_slots) for ob in bpy.data.objects}
    try:
        if fmt == "gltf":
            # A .gltf's images go to a directory of the bridge's own first
            # (outside the sandbox: their names are the images'), then into
            # the .gltf as data: URIs.
            with tempfile.TemporaryDirectory() as textures:
                # export_apply: the meshes as modified, as the other formats
                # write them (the glTF exporter's default left modifiers out).
                res = op_call(exp, filepath=path, export_format="GLB" if ext == "glb" else "GLTF_SEPARATE", export_apply=True,
                              use_selection=False, export_image_format="AUTO", export_texture_dir=textures,
                              export_extras=False, will_save_settings=False, export_cameras=False, export_lights=False)
                if ext == "gltf" and "FINISHED" in res and os.path.isfile(path):
                    inline_images(path, textures)
        elif fmt == "obj":
            res = op_call(exp, filepath=path, export_selected_objects=False, export_animation=False,
                          export_materials=True, path_mode="AUTO")
        elif fmt == "fbx":
            # Textures inside the file, as glTF's: COPY is the mode that
            # embeds (into the file, writing no .fbm directory).
            with fbx_stable():
                res = op_call(exp, filepath=path, use_selection=False, path_mode="COPY", embed_textures=True)
        else:
            # No textures directory, no world dome-light image (4.5 writes
            # textures/ for both by default): exports stay one file.
            res = op_call(exp, filepath=path, selected_objects_only=False, visible_objects_only=False, export_textures=False,
                          export_textures_mode="KEEP", convert_world_material=False, relative_paths=True,
                          export_animation=False)
    except RuntimeError as e:
        raise ToolError("internal_error", "export failed: " + one_line(e))
    finally:
        # Exporters of animation step through frames: put the frame and the
        # animated properties back.
        restore_frame(sc, frame, animated)
        # The FBX exporter (animation baking) gives meshes without materials
        # an empty slot: drop it, and resync the objects' slot counts.
        for coll in ("meshes", "curves"):
            for db in getattr(bpy.data, coll):
                n = slots.get(db.as_pointer())
                while n is not None and len(db.materials) > n and db.materials[len(db.materials) - 1] is None:
                    db.materials.pop()
        for ob in bpy.data.objects:
            n = ob_slots.get(ob.as_pointer())
            if n is not None and len(ob.material_slots) != n and ob.data is not None:
                ob.data = ob.data  # re-runs Blender's slot-count sync with the data
    if "FINISHED" not in res or not os.path.isfile(path):
        raise ToolError("internal_error", "the %s exporter wrote no file" % fmt)
    if fmt == "obj" and os.path.isfile(extra[0]):
        forget_blend_name(extra[0])
    elif ext == "usda":
        canonical_usda(path)
    snap, full = full_snapshot()
    if full != before:
        changed = changed_keys(snap)
        STATE.rebuild()
        raise ToolError("internal_error", "the %s exporter changed the scene (%s)" % (fmt, ", ".join(changed[:5])))
    files = [plain(p) for p in [path] + extra if os.path.isfile(p)]
    return {"path": plain(path), "sha256": tx.sha256(path), "bytes": os.path.getsize(path), "format": fmt, "files": files}


def inline_images(path, textures):
    """Put the images the .gltf at path refers to, which its exporter wrote
    into directory textures, into the .gltf itself as data: URIs: the export
    carries its textures (as a .glb does) in its own two files."""
    with open(path, "rb") as f:
        doc = json.loads(f.read().decode("utf-8"))
    images = [im for im in doc.get("images") or [] if isinstance(im, dict) and "uri" in im]
    if not images:
        return
    root = os.path.realpath(textures)
    for im in images:
        src = os.path.realpath(os.path.join(os.path.dirname(path), urllib.parse.unquote(im["uri"])))
        if os.path.commonpath([root, src]) != root or not os.path.isfile(src):
            raise ToolError("internal_error", "the glTF exporter wrote image %r where it was not asked to" % im["uri"])
        with open(src, "rb") as f:
            data = base64.b64encode(f.read()).decode("ascii")
        im["uri"] = "data:%s;base64,%s" % (im.get("mimeType") or "application/octet-stream", data)
    with open(path, "wb") as f:
        f.write(json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


@contextlib.contextmanager
def fbx_stable():
    """The FBX exporter with the same bytes for the same scene in every
    process and session. It derives an object's id from Python's hash() of
    a string key, which Python salts per process (hash randomization; the
    bpy module runs isolated from the environment, so PYTHONHASHSEED cannot
    pin it), stamps the file with the time of day, names each texture by
    its absolute path (the agent's sandbox) as well as by its relative one,
    and names the open .blend. For the length of one export, each key's id starts from a SHA-256
    of the key instead (the exporter's own collision handling kept: integer
    keys are used as ids), the time is the exporter's own placeholder
    epoch, which its other date fields already carry, and a texture's
    FileName is its relative name (its pixels are embedded); the header
    names no .blend (a restored session's was its checkpoint). Where the
    add-on lacks one of these functions (a Blender not tested here), the
    export runs as the add-on wrote it."""
    try:
        from io_scene_fbx import export_fbx_bin, fbx_utils
    except ImportError:
        yield
        return
    key_to_uuid = getattr(fbx_utils, "_key_to_uuid", None)
    header = getattr(export_fbx_bin, "fbx_header_elements", None)
    vid_path = getattr(export_fbx_bin, "_gen_vid_path", None)
    if key_to_uuid is None or header is None or vid_path is None:
        yield
        return

    def stable_uuid(uuids, key):
        if not (isinstance(key, int) and 0 <= key < 2**63):
            digest = hashlib.sha256(repr(key).encode("utf-8", "surrogatepass")).digest()
            key = int.from_bytes(digest[:8], "big") >> 1
        return key_to_uuid(uuids, key)

    def stable_header(root, scene_data, time=None):
        # The header names the open .blend (ApplicationNativeFile): a
        # restored session's is the agent's checkpoint path. It is written
        # as a fresh session's, none.
        real = export_fbx_bin.bpy
        export_fbx_bin.bpy = _NoBlendFile(real)
        try:
            return header(root, scene_data, datetime.datetime(1970, 1, 1))
        finally:
            export_fbx_bin.bpy = real

    def relative_vid_path(img, scene_data):
        _, rel = vid_path(img, scene_data)
        return rel, rel

    saved = (key_to_uuid, header, vid_path)
    fbx_utils._key_to_uuid, export_fbx_bin.fbx_header_elements, export_fbx_bin._gen_vid_path = (
        stable_uuid, stable_header, relative_vid_path)
    try:
        yield
    finally:
        fbx_utils._key_to_uuid, export_fbx_bin.fbx_header_elements, export_fbx_bin._gen_vid_path = saved


class _NoBlendFile:
    """bpy as it looks with no .blend file open (bpy.data.filepath empty),
    for the FBX exporter's header; everything else is bpy's."""

    class _Data:
        filepath = ""

        def __init__(self, real):
            self._real = real

        def __getattr__(self, name):
            return getattr(self._real, name)

    def __init__(self, real):
        self._real = real
        self.data = self._Data(real.data)

    def __getattr__(self, name):
        return getattr(self._real, name)


_USDA_PRIM = re.compile(r'( *)(?:def|over|class) [^"\n]*"([^"]*)"')


class _Prim:
    def __init__(self, name, indent):
        self.name, self.indent = name, indent
        self.head, self.children, self.tail = [], [], []

    def lines(self):
        out = list(self.head)
        for k, child in enumerate(sorted(self.children, key=lambda c: c.name)):
            if k:
                out.append("")
            out.extend(child.lines())
        return out + self.tail


def canonical_usda(path):
    """Rewrite the .usda at path as the same layer in one canonical form:

    - Its sibling prims in the order of their names. Blender's USD exporter
      orders them by memory address (a set of pointers), which differs from
      one process to the next; the order of a layer's children means
      nothing to USD. The file is Blender's own text: a prim is a line
      '<indent>def|over|class ... "name"' whose block closes at
      '<indent>}', its properties before its children, the children
      separated by one blank line; lines inside a multi-line (triple
      quoted) string are text. A file that is not so keeps its order.
    - A texture named by its plain file name: the exporter names a packed
      image './textures/<name>', a directory it was told not to write, so
      the file could not be imported back (its references must be plain
      names in the sandbox, where an uploaded texture of that name is)."""
    with open(path, "r", encoding="utf-8", newline="") as f:
        text = f.read()
    canonical = _USDA_TEXTURE.sub(r"@\1@", text)
    canonical = _sorted_prims(canonical) or canonical
    if canonical != text:
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(canonical)


_USDA_TEXTURE = re.compile(r"@\./textures/([^@/\\\n]+)@")


def _sorted_prims(text):
    """text with its sibling prims sorted by name (canonical_usda), or None
    where it is not as expected."""
    if "\r" in text or not text.endswith("\n"):
        return None
    top = _Prim("", -4)  # the layer: its header, then its root prims
    stack = [top]
    body = text.rstrip("\n")
    quote = None  # the triple quote of the multi-line string a line is in
    for line in body.split("\n"):
        cur = stack[-1]
        inside, quote = quote is not None, _quote_after(line, quote)
        m = None if inside else _USDA_PRIM.match(line)
        if m and len(m.group(1)) == cur.indent + 4:
            prim = _Prim(m.group(2), len(m.group(1)))
            prim.head.append(line)
            cur.children.append(prim)
            stack.append(prim)
        elif not inside and cur is not top and line == " " * cur.indent + "}":
            cur.tail.append(line)
            stack.pop()
        elif not cur.children:
            cur.head.append(line)
        elif line != "" or inside:
            return None  # text after a prim's children
    if len(stack) != 1 or quote is not None or any(len({c.name for c in p.children}) != len(p.children) for p in _prims(top)):
        return None
    return "\n".join(top.lines()) + text[len(body):]


def _quote_after(line, quote):
    """The triple quote a multi-line string is open with after line, given
    the one open before it (None: none)."""
    i = 0
    while True:
        if quote is None:
            hits = [(j, q) for q in ('"""', "'''") for j in [line.find(q, i)] if j >= 0]
            if not hits:
                return None
            i, quote = min(hits)
        else:
            j = line.find(quote, i)
            if j < 0:
                return quote
            i, quote = j, None
        i += 3


def _prims(prim):
    todo = [prim]
    while todo:
        p = todo.pop()
        yield p
        todo.extend(p.children)


# The OBJ exporter names the open .blend in its .mtl's first line ("# Blender
# 4.5.15 MTL File: 'checkpoint-00000003.blend'"; 'None' before any load).
MTL_HEADER = re.compile(rb"\A(# Blender [^\n]* MTL File: )'[^\n]*'")


def forget_blend_name(mtl):
    """Write the .mtl's header as a fresh session's exporter does: the same
    scene exports the same bytes whether its session was restored from a
    checkpoint or not, and the agent's file name stays on the agent."""
    with open(mtl, "rb") as f:
        data = f.read()
    fixed = MTL_HEADER.sub(rb"\1'None'", data, count=1)
    if fixed != data:
        with open(mtl, "wb") as f:
            f.write(fixed)


# ---------------------------------------------------------------------------
# scene.import: reference checks

def check_ref(ref, what):
    """A file another file refers to must be a plain name inside the
    sandbox; its path (none for a data: URI)."""
    if ref.startswith("data:"):
        return []
    name = urllib.parse.unquote(ref)
    if not PLAIN_NAME.match(name):
        raise ToolError("policy_refused", "%s refers to %r, which is not a plain file name in the sandbox" % (what, ref))
    return [sandbox_path(name, PLAIN_NAME.pattern, "a plain file name")]


def gltf_json(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] == b"glTF":
        if len(data) < 20 or data[16:20] != b"JSON":
            raise ToolError("invalid_input", "not a valid .glb file")
        n = int.from_bytes(data[12:16], "little")
        data = data[20:20 + n]
    try:
        doc = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise ToolError("invalid_input", "not a valid glTF file: " + one_line(e))
    if not isinstance(doc, dict):
        raise ToolError("invalid_input", "not a valid glTF file")
    return doc


def gltf_uris(doc):
    """Every "uri" string anywhere in a glTF document (buffers, images and
    any extension's), walked without recursion."""
    out, todo = [], [doc]
    while todo:
        v = todo.pop()
        if isinstance(v, dict):
            for k, x in v.items():
                if k == "uri" and isinstance(x, str):
                    out.append(x)
                else:
                    todo.append(x)
        elif isinstance(v, list):
            todo.extend(v)
    return out


# OBJ and MTL files as Blender's importer reads them (io/wavefront_obj,
# obj_import_file_reader.cc): a line ends at "\n" only; a statement is a
# keyword after leading blanks, followed by a blank or the end of the line,
# where a blank is any byte <= 0x20 and, since C's char is signed there, any
# byte >= 0x80. The rest of the line is the statement's argument: mtllib
# takes it whole (outer quotes dropped) as one file name, other readers split
# it at blanks; a texture statement (map_*, refl, bump, ...) takes options
# (-bm 1.0, -o u v w, ...) and then the rest as its file name. Blender also
# loads <obj stem>.mtl when it exists. In an OBJ file a backslash followed by
# blanks and a newline joins two lines: a statement still starts at the
# start of a line, and one whose line ends in a continuation contains a
# backslash, which a reference may not, so reading plain lines finds every
# file reference under any reading of the continuations.
BLANK = rb"[\x00-\x20\x80-\xff]"
# Keywords match in any case: other readers may, and it only refuses more.
OBJ_REFS = re.compile(BLANK + rb"*(mtllib|maplib|call|shadow_obj|trace_obj)(?:" + BLANK + rb"|\Z)", re.I)
MTL_REFS = re.compile(BLANK + rb"*(map_[^\x00-\x20\x80-\xff]*|refl|bump|disp|decal|norm)(?:" + BLANK + rb"|\Z)", re.I)
PLAIN_NAME_BYTES = re.compile(PLAIN_NAME.pattern.encode("ascii"))


def file_refs(path, statements):
    """(keyword, argument) of every statement of the file at path that
    refers to files; statements is OBJ_REFS or MTL_REFS."""
    with open(path, "rb") as f:
        data = f.read()
    out = []
    for line in data.split(b"\n"):
        m = statements.match(line)
        if m is not None:
            out.append((m.group(1).decode("ascii", "replace"), line[m.end():]))
    return out


def check_file_ref(keyword, arg, what):
    """The sandbox paths of the readings of the file name in the argument
    arg of an OBJ/MTL statement keyword of file what: the whole argument and
    each blank-separated word. Every word must be a plain name (PLAIN_NAME,
    so no quotes, slashes or dots alone) and every reading must stay in the
    sandbox (symlinks); policy_refused otherwise."""
    words = [w for w in re.split(rb"[\x00-\x20]+", arg) if w]
    whole = arg.strip(bytes(range(33)))  # words are plain: no quotes to drop
    if b"/" in arg or b"\\" in arg or not all(PLAIN_NAME_BYTES.match(w) for w in words):
        raise ToolError("policy_refused", "%s: %r %r is not a plain file name in the sandbox" %
                        (what, keyword, arg.decode("utf-8", "replace")[:200]))
    root = os.path.realpath(SANDBOX["dir"])
    paths = []
    for name in sorted(set(words + [whole])):  # sorted: the same name refused first in every process
        if not name:
            continue
        p = os.path.join(root, os.fsdecode(name))
        if os.path.dirname(os.path.realpath(p)) != root:
            raise ToolError("policy_refused", "%s: %r %r resolves outside the sandbox" %
                            (what, keyword, os.fsdecode(name)))
        paths.append(p)
    return sorted(paths)


def check_obj_references(path, name):
    """policy_refused unless every file the OBJ at path and the MTL files it
    loads refer to is a plain name in the sandbox (see OBJ_REFS); the paths
    they name."""
    mtls, named = [], []
    for keyword, arg in file_refs(path, OBJ_REFS):
        paths = check_file_ref(keyword, arg, name)
        named += paths
        if keyword == "mtllib":
            mtls += paths
    default = os.path.splitext(path)[0] + ".mtl"
    if os.path.lexists(default):
        if os.path.dirname(os.path.realpath(default)) != os.path.dirname(path):
            raise ToolError("policy_refused", "%s: its .mtl %r resolves outside the sandbox" % (name, os.path.basename(default)))
        mtls.append(default)
    named += mtls
    for mtl in sorted(set(mtls)):
        if os.path.isfile(mtl):
            for keyword, arg in file_refs(mtl, MTL_REFS):
                named += check_file_ref(keyword, arg, os.path.basename(mtl))
    return named


def check_references(fmt, path, name):
    """policy_refused unless every file the file at path refers to is in the
    sandbox; the files of the sandbox the import may read, by name, with the
    SHA-256 of their content (a control plane that rebuilds the session
    elsewhere gives its replay these versions, not newer uploads)."""
    named = [path]
    if fmt == "gltf":
        for uri in gltf_uris(gltf_json(path)):
            named += check_ref(uri, name)
    elif fmt == "obj":
        named += check_obj_references(path, name)
    elif fmt == "usd":
        named += check_usd_layer(path, name, set())
    return {os.path.basename(p): sha256_file(p) for p in sorted(set(named)) if os.path.isfile(p)}


USD_LAYERS = (".usd", ".usda", ".usdc", ".usdz")


def check_usd_layer(path, name, seen):
    """Every layer a USD import reads must be text (.usda) whose asset paths
    are plain names in the sandbox, the layers they name checked the same
    way. A binary layer (crate, .usdz) can name files anywhere, in a form
    read here by no one but USD, and the importer follows them: the meshes
    it brings in carry no file path for the check after the import. The
    paths the layers name."""
    real = os.path.realpath(path)
    if real in seen:
        return []
    seen.add(real)
    with open(path, "rb") as f:
        head = f.read(5)
    if head != b"#usda":
        raise ToolError("policy_refused", "%s is not a text USD layer (#usda): binary USD (.usdc, .usdz) is not imported, "
                        "since the files it refers to cannot be checked; export it as .usda" % name)
    with open(path, "r", encoding="utf-8", errors="replace") as f:
        text = f.read()
    named = []
    for ref in re.findall(r"@([^@\n]*)@", text):
        named += check_ref(ref, name)
        ref_name = urllib.parse.unquote(ref)
        if ref_name.lower().endswith(USD_LAYERS):
            ref_path = sandbox_path(ref_name)
            if os.path.isfile(ref_path):
                named += check_usd_layer(ref_path, ref_name, seen)
    return named


def rebase_images(old_root):
    """Point the images of a loaded checkpoint that named files of the
    sandbox it was saved from (old_root) at this session's sandbox, by their
    plain names: a session moved to another agent, restored or forked
    refers to its own files, not to another sandbox's, which another agent
    lacks and a fork's parent may change. (Their pixels are packed, but for
    a texture the import did not find; the path is what exports name.)"""
    root = SANDBOX["dir"]
    if not old_root or not root or os.path.realpath(root) == old_root:
        return
    root = os.path.realpath(root)
    for im in bpy.data.images:
        raw = im.filepath_raw
        if raw and os.path.dirname(os.path.normpath(bpy.path.abspath(raw))) == old_root:
            im.filepath_raw = os.path.join(root, os.path.basename(raw))


def outside_sandbox(filepath):
    if not filepath:
        return False
    root = os.path.realpath(SANDBOX["dir"])
    p = os.path.realpath(bpy.path.abspath(filepath))
    return os.path.commonpath([root, p]) != root


# ---------------------------------------------------------------------------
# scene.import

def id_collections():
    out = []
    for prop in bpy.types.BlendData.bl_rna.properties:
        if prop.type == "COLLECTION" and prop.identifier not in SKIP_COLLECTIONS:
            out.append(prop.identifier)
    return out


def id_pointers():
    return {attr: set(db.as_pointer() for db in getattr(bpy.data, attr)) for attr in id_collections()}


def created_since(before):
    out = {}
    for attr, ptrs in before.items():
        new = [db for db in getattr(bpy.data, attr) if db.as_pointer() not in ptrs]
        if new:
            out[attr] = new
    return out


def remove_ids(ids):
    compat_remove_ids(ids)
    INDEX.refresh_members()  # removed collections took objects' memberships along


@tool(
    "scene.import",
    description="Import a file from the session sandbox into the scene: gltf (.glb/.gltf), obj, fbx or usd (.usd/.usda/.usdc); "
                "format may be left out, the file's extension says it. "
                "Formats on this Blender: %s. Returns the new objects." % ", ".join(available_formats()),
    schema={
        "type": "object",
        "properties": {
            "format": {"type": "string", "enum": sorted(FORMATS)},
            "input": file_name_schema(*ALL_EXTS),
        },
        "required": ["input"],
        "additionalProperties": False,
    },
    safety_level="safe_write",
    idempotence_class="keyed",
    rollback_method="compensation",
    blender_versions=">=3.4",
)
def tool_scene_import(tx, args):
    name = args["input"]
    fmt = args.get("format") or format_of(name)
    _, imp, _, path = check_format(fmt, name, "input")
    if not os.path.isfile(path):
        raise ToolError("not_found", "no file %r in the sandbox" % name)
    read = check_references(fmt, path, name)

    sc = current_scene()
    vl = active_view_layer(sc)
    r = sc.render
    settings = [(sc, "frame_start", sc.frame_start), (sc, "frame_end", sc.frame_end),
                (r, "fps", r.fps), (r, "fps_base", r.fps_base)]
    frame = (sc.frame_current, sc.frame_subframe)
    active = active_of(vl) if vl is not None else None
    selected = [ob for ob in vl.objects if ob.select_get(view_layer=vl)] if vl is not None else []
    before = id_pointers()
    animated = animated_values()
    created = {}

    def rollback():
        remove_ids([db for dbs in created_since(before).values() for db in dbs])
        restore_settings(settings)
        if vl is not None:
            set_active(vl, active)
    tx.on_undo(rollback)
    tx.touch("scene", sc.name)
    # Importers reuse an image loaded before from the same file (Blender's
    # "load exists"), which an earlier import packed as the file was then:
    # the scene's images hide their paths meanwhile, so each import reads
    # the files as they are now.
    hidden = [(im, im.filepath_raw) for im in bpy.data.images if im.filepath_raw]
    try:
        for im, _ in hidden:
            im.filepath_raw = ""
        if fmt == "usd":
            res = op_call(imp, filepath=path, import_textures_mode="IMPORT_NONE")
        else:
            res = op_call(imp, filepath=path)
    except RuntimeError as e:
        raise ToolError("invalid_input", "could not import %r: %s" % (name, one_line(e)))
    finally:
        for im, raw in hidden:
            im.filepath_raw = raw
        # The importer linked objects (and maybe collections), and parented
        # some, behind INDEX's back: recompute every membership in one pass,
        # and the children when next asked.
        INDEX.refresh_members()
        INDEX.forget_children()
        created = created_since(before)
        for attr, dbs in created.items():
            kind = KIND_OF.get(attr)
            if kind is not None:
                for db in dbs:
                    tx.touch(kind, db.name)
    if "FINISHED" not in res:
        raise ToolError("invalid_input", "the %s importer refused %r" % (fmt, name))

    # Put back what importers change besides adding datablocks.
    restore_settings(settings)
    restore_frame(sc, frame, animated)
    if vl is not None:
        set_active(vl, active)
        new_objects = set(db.as_pointer() for db in created.get("objects", []))
        for ob in vl.objects:
            if ob.as_pointer() not in new_objects:
                ob.select_set(ob in selected, view_layer=vl)
    for attr in FILE_IDS:
        for db in created.get(attr, []):
            if getattr(db, "packed_file", None) is None and outside_sandbox(getattr(db, "filepath", "")):
                raise ToolError("policy_refused", "%r refers to a file outside the sandbox (%s %r)" % (name, attr, db.name))
    missing = pack_images(name, created.get("images", []))
    tx.checkpoint("scene.import:imported")

    # Pre-existing records that changed anyway (a new collection linked under
    # an existing one): touched now and by the undo.
    touched = []
    for kind, _, fn, coll in KINDS:
        for db in getattr(bpy.data, coll):
            if db.as_pointer() in before.get(coll, ()) and db.library is None and not is_tomb(db.name):
                key = kind + ":" + db.name
                if STATE.digests.get(key) != record_digest(fn(db)):
                    tx.touch(kind, db.name)
                    touched.append([kind, db.name])
    tx.set_undo({
        "created": {attr: [db.name for db in dbs] for attr, dbs in sorted(created.items())},
        "touched": touched, "scene": sc.name, "view_layer": vl.name if vl is not None else None,
    })
    objects = sorted(db.name for db in created.get("objects", []))
    return {"objects": objects, "format": fmt, "path": plain(path), "files_read": read,
            "created": {attr: len(dbs) for attr, dbs in sorted(created.items())}, "textures_not_found": missing}


def pack_images(name, images):
    """Take the pixels of every image the import of file name read from the
    sandbox into the scene (pack them), as a .glb's already are: the scene
    is then what the import read, and a checkpoint holds it whole, so it
    renders the same when loaded on an agent with another data directory,
    in a fork whose parent closed, and after the texture's name was
    uploaded again. An image whose file is not there (a texture the model
    names but no one uploaded, or a name Blender's parser read wrong) stays
    a reference, as do the other kinds of FILE_IDS, which Blender cannot
    pack: the file names of those images are returned, sorted, so the
    import says which textures it did not find."""
    missing = set()
    for im in images:
        if im.packed_file is not None or im.source not in ("FILE", "TILED"):
            continue
        if not os.path.isfile(bpy.path.abspath(im.filepath)):
            if im.filepath:
                missing.add(os.path.basename(im.filepath))
            continue
        try:
            im.pack()
        except RuntimeError as e:
            raise ToolError("invalid_input", "could not read image %r of %r: %s" % (im.name, name, one_line(e)))
    return sorted(missing)


@undoer("scene.import")
def undo_scene_import(tx, rec):
    created = field(rec, "created", dict)
    touched = field(rec, "touched", list)
    field(rec, "scene", str)
    colls = set(id_collections())
    ids = []
    for attr, names in sorted(created.items()):
        if attr not in colls or not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ToolError("invalid_input", "undo record: bad created %r" % attr)
        for n in names:
            db = getattr(bpy.data, attr).get(n)
            if db is None:
                raise ToolError("conflict", "cannot undo import: %s %r is gone" % (attr, n))
            ids.append((attr, db))
    for t in touched:
        if not (isinstance(t, list) and len(t) == 2 and t[0] in KIND_OF.values() and isinstance(t[1], str)):
            raise ToolError("invalid_input", "undo record: bad touched entry")
    new_obs = set(db.as_pointer() for attr, db in ids if attr == "objects")
    for sc in bpy.data.scenes:
        if sc.camera is not None and sc.camera.as_pointer() in new_obs:
            raise ToolError("conflict", "cannot undo import: scene %r uses imported camera %r" % (sc.name, sc.camera.name))
    for ob in bpy.data.objects:
        if ob.as_pointer() not in new_obs and ob.parent is not None and ob.parent.as_pointer() in new_obs:
            raise ToolError("conflict", "cannot undo import: %r is parented to imported %r" % (ob.name, ob.parent.name))
    for attr, db in ids:
        kind = KIND_OF.get(attr)
        if kind is not None:
            tx.touch(kind, db.name)
    for kind, name in touched:
        tx.touch(kind, name)
    for sc in bpy.data.scenes:
        tx.touch("scene", sc.name)
        for vl in sc.view_layers:
            a = active_of(vl)
            if a is not None and a.as_pointer() in new_obs:
                tx.on_undo(lambda vl=vl, a=a: set_active(vl, a))
                set_active(vl, None)
    tx.fault_point("scene.import:deactivated")
    tx.checkpoint("undo.scene.import:deactivated")
    # Validated above; removal is the last, irreversible step.
    remove_ids([db for _, db in ids])
