'''The tool registry and the API tool modules use.

Writing a tool
--------------
A tool family is one module in ``tools/`` (e.g. ``tools/materials.py``),
listed in ``tools/__init__.py``. A tool is a function ``fn(tx, args) ->
result dict``, registered with the ``tool`` decorator::

    import bpy

    from common import is_tomb
    from registry import ToolError, field, tool, undoer
    from schema import NAME, VEC3

    @tool(
        "object.set_transform",                  # unique, "<family>.<verb>"
        description="Set an object's location, rotation and/or scale.",
        schema={"type": "object", "properties": {...}, "required": [...],
                "additionalProperties": False},  # JSON Schema subset, schema.py
        safety_level="safe_write",      # read_only | safe_write | destructive
        idempotence_class="idempotent", # idempotent | keyed | read_only
        rollback_method="compensation", # none | compensation | not_needed
        determinism_class="deterministic",  # deterministic | seeded (default deterministic)
        safety_mode="headless_safe",    # headless_safe | ui_assisted | unsafe_ops (default headless_safe)
        blender_versions=">=3.4",       # version range (default ">=3.4"), compat.py
        version="1.0.0",                # tool version (default TOOL_VERSION)
        writes_files=False,             # writes files into the sandbox (Tx.wrote; default False)
    )
    def set_transform(tx, args):
        ...

``register(name, fn, **same keywords)`` is the same without a decorator.
Registration checks the metadata and raises on a mistake, so a bad tool
module stops the bridge at start-up (tests catch it at once).

Metadata:

- ``safety_level``: read_only never changes the scene; safe_write changes it
  in a way the user can see and undo; destructive removes things.
- ``idempotence_class``: ``idempotent`` = the same args twice give the same
  state (set_transform, render.still); ``keyed`` = a retry is only safe
  through the journal's idempotency key (create makes a second object, delete
  fails with not_found); ``read_only`` = changes nothing (required for, and
  only for, safety_level read_only).
- ``rollback_method``: ``none`` for read_only tools, and for unsafe_ops tools
  that change the scene in ways no compensation can capture (python.exec: the
  controlplane keeps them out of atomic plans); ``compensation`` when the
  tool changes the scene (it sets an undo record and registers an undoer for
  it, below); ``not_needed`` when it writes only files, never the scene.
- ``determinism_class``: ``deterministic`` = same scene + same args give the
  same scene and result; ``seeded`` = the output also depends on a seed
  argument, which the result records; ``nondeterministic`` = no such
  promise (python.exec): the controlplane refuses these tools unless the
  session negotiated the ``nondeterministic_tools`` flag.
- ``safety_mode``: ``headless_safe`` runs in ``blender -b`` (every tool
  today); ``ui_assisted`` needs a UI context; ``unsafe_ops`` runs operators
  (bpy.ops) that may touch state outside the scene_state_v1 model.
- ``blender_versions``: comma-separated clauses with >=, >, <=, <, ==, !=
  (">=3.4", ">=3.4,<5.0"). hello reports only the tools whose range includes
  the running Blender, and execute refuses the others (capability_missing).
- ``writes_files``: the tool writes files into the sandbox (Tx.wrote
  refuses a tool without it): agentd holds uploads off while it runs, so
  that none lands under a call that writes its name. Not part of the tool
  registry the control plane sees.

The tool function
-----------------
``args`` is already checked against ``schema`` (defaults are NOT filled in:
use ``args.get("size", 2.0)``). Return a JSON-able dict: execute encodes it
with the undo record and the files inside the transaction, and a result with
NaN (internal_error) or over main.MAX_RESULT_BYTES (16 MiB of JSON,
invalid_input) fails the call, which is rolled back. Fail by raising
``ToolError(code, message)``; codes (common.ERROR_CODES):

    invalid_input            args make no sense beyond the schema
    not_found                a named object/datablock/file does not exist
    conflict                 the scene forbids it (name taken, no camera, ...)
    policy_refused           not allowed (file outside the sandbox, ...)
    capability_missing       this Blender cannot do it (no Cycles, add-on, version)
    timeout                  the tool gave up on a time budget
    nondeterministic_refused the result would not be reproducible
    internal_error           anything else; any other exception becomes this

Validate everything you can before the first mutation. ``tx`` (class Tx)
gives the tool:

- ``tx.touch(kind, name)``: declare every datablock whose record may change,
  be created or disappear (kind: object, mesh, camera, light, material,
  collection, world, scene, active; see records.KINDS). Only touched records
  are re-digested for the incremental hash: a missed touch makes
  ``snapshot``'s full hash differ from the running one (the tests check that
  after every tool). Touching too much is harmless but costs time. Changing
  scene.camera touches the scene (``tx.touch_settings``: a change of the
  scene's own settings, which leaves its active object as it is); changing
  only the active object touches ``("active", scene name)``, which is
  cheaper (touching the scene covers the active object too).
- ``tx.touch_record(kind, name, rec)``, ``tx.gone(kind, name)``,
  ``tx.unchanged(kind, name)``: a touch whose record the tool knows (made,
  removed, or left as it was), so that it is not read back from Blender.
  Reading a scene's active object after a link or unlink makes Blender
  resync the view layer (layers.py): tools that link or unlink say what it
  is instead (tools.datablocks.note_active_objects). The tests' "incremental
  == full" check holds them to it.
- ``tx.on_undo(fn)``: right after (or before) each mutation, register a
  zero-argument function that reverses it. If the tool raises, the
  registered functions run in reverse order and the scene must hash as
  before (else the call fails with internal_error). Bind loop variables
  (``lambda c=c: ...``), and refer to datablocks by name when the step
  before may have removed them.
- ``tx.set_undo(record)``: the compensation returned to agentd as
  ``Outcome.Undo`` (tools with rollback_method compensation must set it on
  success). A plain JSON dict, computed before mutating; "v" (UNDO_VERSION)
  and "tool" (this tool's name) are added. Keep floats exact (``list(ob.location)``,
  not rounded) so the restore is bit-identical.
- ``tx.progress(dict)``: report progress while running (e.g. ``{"frame": 3,
  "frames": 10}``); agentd receives each one before the result (Go
  ``Call.OnProgress``). Cheap; do not call it more than a few times a second.
- ``tx.checkpoint(label)``: a test hook; execute's ``inject_failure`` param
  fails the tool there (label ``"<tool>:<step>"``), after partial work, to
  test the rollback. Put one after the last mutation.
- ``tx.wrote(path)``: declare a file the tool wrote into the sandbox (a
  path from sandbox.sandbox_path / output_path). Call it once the file is in
  place, or just before an operator writes it in place (an exporter): if the
  call fails, the rollback removes the file, so a failed call leaves none of
  the files it declared; if it succeeds, execute reports the name, size and
  SHA-256 of those that exist as ``"files"`` (agentd records them as
  artifacts) and links each under its hash (sandbox.keep). Every tool that
  writes files must declare them (python.exec cannot: its files are not
  reported), and must write each as a new file (os.replace of a partial
  file, or after set_aside), never into the one there: that one may be a
  version a receipt names, kept by its link.
- ``tx.sha256(path)``: the SHA-256 of a file the tool wrote, for its
  result, once the file is final: read once, the report of its files
  (above) takes it too.
- ``tx.set_aside(paths)``: before a tool writes files anew (an export, whose
  exporter writes the output and its companions in place), move the ones
  there aside: a failed call puts them back instead of leaving none.
  ``tx.on_success(fn)`` runs fn once the call succeeded.
- ``tx.mutation_id``: the journal's mutation id (or None), for names that
  must be the same when a journal is replayed (see tools/objects.py tombstones).
- ``tx.tool``: the running tool's name.

The undo applier of a compensation is registered with ``@undoer(tool_name)``:
``fn(tx, record)``. It validates the record first (``field`` below; conflict
when it no longer fits the scene, invalid_input when malformed), then mutates
with ``tx.touch`` / ``tx.on_undo`` exactly like a tool, so a failure midway
leaves the scene as it was, and calls ``tx.fault_point(label)`` once midway
(the "undo" test fault). It returns nothing.

Example::

    @tool("light.set_energy", description="Set a light's power in watts.",
          schema={"type": "object", "properties": {"name": NAME,
                  "energy": {"type": "number", "minimum": 0}},
                  "required": ["name", "energy"], "additionalProperties": False},
          safety_level="safe_write", idempotence_class="idempotent",
          rollback_method="compensation")
    def light_set_energy(tx, args):
        ob = bpy.data.objects.get(args["name"])
        if ob is None or is_tomb(ob.name) or ob.type != "LIGHT":
            raise ToolError("not_found", "no light object named %r" % args["name"])
        light = ob.data
        tx.set_undo({"light": light.name, "energy": light.energy})
        tx.touch("light", light.name)
        old = light.energy
        tx.on_undo(lambda: setattr(light, "energy", old))
        light.energy = args["energy"]
        tx.checkpoint("light.set_energy:set")
        return {"name": ob.name, "energy": light.energy}

    @undoer("light.set_energy")
    def undo_light_set_energy(tx, rec):
        light = bpy.data.lights.get(field(rec, "light", str))
        if light is None:
            raise ToolError("conflict", "cannot undo: light is gone")
        energy = field(rec, "energy", float)
        tx.touch("light", light.name)
        old = light.energy
        tx.on_undo(lambda: setattr(light, "energy", old))
        tx.fault_point("light.set_energy:energy")
        light.energy = energy

Compensations (``execute`` -> ``undo``)
---------------------------------------
Every tool with ``rollback_method: compensation`` computes, before it mutates,
a plain JSON undo record that reverses it exactly, and ``execute`` returns it
as ``"undo"`` (``null`` for read-only tools and for render.still, which writes
only a file). ``undo`` (params ``{"undo": record}`` plus correlation ids)
applies one; right after the call that produced it, it returns that call's
``scene_hash_before``. Records of several calls apply in reverse order. An
applier validates first (``conflict`` when the record no longer fits the
scene, ``invalid_input`` when it is malformed), then mutates in steps that
each register their own reversal, so a failure midway leaves the scene as it
was. It touches only the keys of the change: cost follows the change, not the
scene. Floats in records are exact (float32 values as JSON doubles), so a
restore is bit-identical. Shapes (``v`` = UNDO_VERSION = 1) of the object
tools' records: tools/objects.py.

Test faults (hello ``"faults": [...]``; never in production)
-----------------------------------------------------------
``"undo"``: every ``undo`` stops after part of its work (after unlinking for
object.create, after the location for set_transform, after the renames for
object.delete) and fails with ``internal_error`` WITHOUT rolling back; the
error's ``scene_hash`` is the honest hash of that partial scene. An agentd
built with the ``faults`` tag enables it through ``BLENDPLANE_TEST_FAULTS=undo``.

``"inject"``: execute's and undo's ``inject_failure`` param names a
``Tx.checkpoint`` label to fail at, after which the normal rollback runs
(tests of "no partial effect"), and execute's ``inject_progress`` param (an
integer n) makes execute report n progress events ``{"injected": i, "of": n}``
before the tool runs. Without this fault both params are ignored.
'''

import os
import stat
import traceback

from common import ToolError, canonical, log, sha256_file  # noqa: F401  (re-exported for tool modules)
from compat import parse_version_range, version_in_range
from sandbox import SANDBOX, aside_path, keep
from state import STATE

TOOL_VERSION = "1.0.0"
UNDO_VERSION = 1

SAFETY_LEVELS = ("read_only", "safe_write", "destructive")
SAFETY_MODES = ("headless_safe", "ui_assisted", "unsafe_ops")
IDEMPOTENCE_CLASSES = ("idempotent", "keyed", "read_only")
DETERMINISM_CLASSES = ("deterministic", "seeded", "nondeterministic")
ROLLBACK_METHODS = ("none", "compensation", "not_needed")

TOOLS = {}    # name -> metadata dict plus "fn"
UNDOERS = {}  # tool name -> applier fn(tx, record)
FAULTS = set()  # test hooks from hello's "faults" param


def register(name, fn, description, schema, safety_level, idempotence_class=None, rollback_method=None,
             determinism_class="deterministic", safety_mode="headless_safe", blender_versions=">=3.4",
             version=TOOL_VERSION, writes_files=False):
    """Register fn(tx, args) as tool name; see the module docstring."""
    read_only = safety_level == "read_only"
    if idempotence_class is None and read_only:
        idempotence_class = "read_only"
    if rollback_method is None and read_only:
        rollback_method = "none"

    def bad(msg):
        raise ValueError("tool %r: %s" % (name, msg))

    if not isinstance(name, str) or "." not in name:
        bad("name must look like family.verb")
    if name in TOOLS:
        bad("registered twice")
    if not callable(fn):
        bad("fn is not callable")
    if not description:
        bad("description is empty")
    if not isinstance(schema, dict) or schema.get("type") != "object" or schema.get("additionalProperties") is not False:
        bad("schema must be an object schema with additionalProperties false")
    for key, value, allowed in (
        ("safety_level", safety_level, SAFETY_LEVELS),
        ("safety_mode", safety_mode, SAFETY_MODES),
        ("idempotence_class", idempotence_class, IDEMPOTENCE_CLASSES),
        ("determinism_class", determinism_class, DETERMINISM_CLASSES),
        ("rollback_method", rollback_method, ROLLBACK_METHODS),
    ):
        if value not in allowed:
            bad("%s %r is not one of %s" % (key, value, ", ".join(allowed)))
    if read_only != (idempotence_class == "read_only"):
        bad("safety_level read_only goes with idempotence_class read_only, and only with it")
    if read_only and rollback_method != "none":
        bad("safety_level read_only goes with rollback_method none")
    if not read_only and rollback_method == "none" and safety_mode != "unsafe_ops":
        bad("rollback_method none on a mutating tool needs safety_mode unsafe_ops (python.exec)")
    if not isinstance(writes_files, bool):
        bad("writes_files must be a bool")
    try:
        parse_version_range(blender_versions)
    except ValueError as e:
        bad(str(e))
    TOOLS[name] = {
        "name": name,
        "version": version,
        "description": description,
        "safety_level": safety_level,
        "safety_mode": safety_mode,
        "idempotence_class": idempotence_class,
        "input_schema": schema,
        "determinism_class": determinism_class,
        "rollback_method": rollback_method,
        "blender_versions": blender_versions,
        "writes_files": writes_files,
        "fn": fn,
    }
    return fn


def tool(name, **meta):
    """Decorator form of register: @tool(name, description=..., schema=..., ...)."""
    def deco(fn):
        return register(name, fn, **meta)
    return deco


def undoer(tool_name):
    """Decorator: fn(tx, record) applies the undo records of tool_name."""
    def deco(fn):
        if tool_name in UNDOERS:
            raise ValueError("undoer for %r registered twice" % tool_name)
        UNDOERS[tool_name] = fn
        return fn
    return deco


def validate():
    """Cross-checks once every tool module is imported."""
    for name, t in TOOLS.items():
        if (t["rollback_method"] == "compensation") != (name in UNDOERS):
            raise ValueError("tool %r: rollback_method compensation needs an @undoer, and only it" % name)
    for name in UNDOERS:
        if name not in TOOLS:
            raise ValueError("undoer for unknown tool %r" % name)


_AVAILABLE = {}  # blender_versions -> whether this Blender is in range (fixed per process)


def available(t, version=None):
    if version is not None:
        return version_in_range(t["blender_versions"], version)
    spec = t["blender_versions"]
    ok = _AVAILABLE.get(spec)
    if ok is None:
        ok = _AVAILABLE[spec] = version_in_range(spec)
    return ok


def tool_list(version=None):
    """The registry hello reports: tools whose blender_versions include version."""
    return [{k: v for k, v in t.items() if k != "fn"} for _, t in sorted(TOOLS.items()) if available(t, version)]


# ---------------------------------------------------------------------------
# Tool transactions: touched keys and compensations for partial work.

class InjectedFault(Exception):
    """The "undo" test fault: stop midway and keep the partial work."""


GONE = object()  # Tx.known: the tool removed the datablock (Tx.gone)
KEPT = object()  # Tx.known: the tool did not change the record (Tx.unchanged)


class Tx:
    def __init__(self, tool=None, inject_failure=None, mutation_id=None, fault=False, progress=None):
        self.tool = tool
        self.touched = []
        self.undo = []
        self.inject_failure = inject_failure
        self.mutation_id = mutation_id or None
        self.fault = fault
        self.undo_record = None  # the compensation a successful tool returns
        self._progress = progress
        self.known = {}  # (kind, name) -> record the tool built itself (touch_record)
        self.written = []  # paths declared with wrote()
        self.hashes = {}  # path -> SHA-256 of a written file (sha256())
        self.succeeded = []  # on_success functions

    def touch(self, kind, name):
        """Declare a datablock whose scene_state_v1 record may change. A
        scene's touch covers its active object too."""
        if (kind, name) not in self.touched:
            self.touched.append((kind, name))
        if kind == "scene":
            self.touch("active", name)

    def touch_record(self, kind, name, rec):
        """touch(kind, name) when the tool knows the record it just made:
        rec must equal what records.RECORDERS[kind] would read from Blender
        (the tests' "incremental == full snapshot" check after every tool
        holds it to that). Saves reading the datablock back. A rollback
        drops these records: the touched keys are then re-read."""
        self.touch(kind, name)
        self.known[(kind, name)] = rec

    def gone(self, kind, name):
        """touch(kind, name) when the tool just removed kind:name, so that no
        datablock of that kind has the name now: its record is dropped
        without a lookup (a lookup of a name that is not there scans every
        datablock of the kind: ~0.5 ms at 10,000 objects)."""
        self.touch(kind, name)
        self.known[(kind, name)] = GONE

    def touch_settings(self, scene_name):
        """touch("scene", scene_name) for a change of the scene's own
        settings (camera, world, render), which leaves its active object as
        it is (unchanged): reading that back could make Blender resync a
        view layer that a link or unlink of the same call left stale."""
        self.touch("scene", scene_name)
        self.unchanged("active", scene_name)

    def unchanged(self, kind, name):
        """Say that kind:name's record, though touched (a scene's touch
        covers its active object), did not change, so it is not read back:
        the record from before the call still holds. For a scene's active
        object after a link or unlink that moves no object, where a read
        would make Blender resync every base of the view layer first (0.4
        ms at 10,000 objects)."""
        self.known[(kind, name)] = KEPT

    def on_undo(self, fn):
        """Register the reversal of the mutation just made (or about to be)."""
        self.undo.append(fn)

    def set_undo(self, record):
        """Set the compensation returned by execute; adds "v" and "tool"."""
        rec = {"v": UNDO_VERSION, "tool": self.tool}
        rec.update(record)
        self.undo_record = rec

    def on_success(self, fn):
        """Register what to do once an execute succeeded (its checks passed,
        its records applied): drop what a rollback would have needed. A
        failure there is logged, not raised."""
        self.succeeded.append(fn)

    def set_aside(self, paths):
        """Move the files at paths, which the tool is about to write anew,
        out of the sandbox into the session's aside directory beside it
        (sandbox.aside_path): a failed call puts them back, a successful one
        drops them, and agentd puts back those of a call that died with its
        Blender before the session's next Blender starts. Only a tool
        registered with writes_files=True may (wrote)."""
        self.require_writes_files()
        for p in paths:
            if not os.path.lexists(p):
                continue
            aside = aside_path(p)
            os.makedirs(os.path.dirname(aside), exist_ok=True)
            os.replace(p, aside)  # same file system: the sandbox's parent
            self.on_undo(lambda p=p, aside=aside: put_back(aside, p))
            self.on_success(lambda aside=aside: remove_file(aside))

    def wrote(self, path):
        """Declare a file the tool wrote (or is writing) in the sandbox: a
        failed call removes it; a successful one reports it (files()). Only
        a tool registered with writes_files=True may: agentd holds uploads
        off while such tools run."""
        self.require_writes_files()
        root = os.path.realpath(SANDBOX["dir"] or "/")
        if os.path.dirname(path) != root:
            raise ValueError("%r is not a file directly in the sandbox" % path)
        if path not in self.written:
            self.written.append(path)
            self.on_undo(lambda: remove_file(path))

    def require_writes_files(self):
        if not TOOLS.get(self.tool, {}).get("writes_files"):
            raise ValueError("%s writes a file but is not registered with writes_files=True" % self.tool)

    def files(self):
        """The declared files that exist, sorted by name: each one's name,
        size and SHA-256, read now (before a later call or an upload may
        replace it), and kept under its hash for the control plane to take
        (sandbox.keep; a failed call drops the link with the file)."""
        out = []
        for p in sorted(self.written, key=os.path.basename):
            try:
                st = os.lstat(p)
                if not stat.S_ISREG(st.st_mode):
                    continue
                sha = self.sha256(p)
            except OSError as e:
                if os.path.lexists(p):
                    log("cannot read a file the call wrote", path=p, err=str(e))
                continue
            link = keep(p, sha)
            if link is not None:
                self.on_undo(lambda link=link: remove_file(link))
            out.append({"name": os.path.basename(p), "size": st.st_size, "sha256": sha})
        return out

    def sha256(self, path):
        """The SHA-256 of a file the tool wrote (for its result), once the
        file is final: read once per call, files() reports it too."""
        sha = self.hashes.get(path)
        if sha is None:
            sha = self.hashes[path] = sha256_file(path)
        return sha

    def progress(self, info):
        """Report progress (a JSON-able dict) to agentd before the result."""
        if not isinstance(info, dict):
            raise TypeError("progress info must be a dict")
        if self._progress is not None:
            self._progress(info)

    def checkpoint(self, label):
        """Tests name a checkpoint in execute's inject_failure param to make the
        tool fail there, after partial work, and check the rollback."""
        if self.inject_failure == label:
            raise RuntimeError("injected failure at " + label)

    def fault_point(self, label):
        """Where the "undo" test fault (hello param faults) stops an undo."""
        if self.fault:
            raise InjectedFault("injected fault: undo stopped after " + label)

    def rollback(self):
        self.known = {}
        for fn in reversed(self.undo):
            try:
                fn()
            except Exception:
                log("rollback step failed", trace=traceback.format_exc())
                raise

    def apply_touches(self):
        known = self.known
        for kind, name in self.touched:
            rec = known.get((kind, name)) if known else None
            if rec is KEPT:
                continue
            if rec is GONE:
                STATE.set_record(kind, name, None)
            elif rec is not None:
                STATE.set_record(kind, name, rec)
            else:
                STATE.touch(kind, name)


def put_back(aside, path):
    """Put a file set aside (Tx.set_aside) back at path; one that cannot be
    is logged, not raised: it must not stop the scene's rollback."""
    try:
        os.replace(aside, path)
    except OSError as e:
        log("could not put back a file a failed call set aside", path=path, err=str(e))


def remove_file(path):
    """Remove a file a failed tool wrote. A file that cannot be removed is
    logged, not raised: it must not stop the scene's rollback."""
    try:
        if os.path.lexists(path):
            os.remove(path)
    except OSError as e:
        log("could not remove a file of a failed call", path=path, err=str(e))


# ---------------------------------------------------------------------------
# Helpers for undo appliers.

def field(rec, key, types, optional=False):
    """rec[key] checked against types (float accepts ints); invalid_input if not."""
    v = rec.get(key)
    if v is None and optional:
        return None
    if types is float:
        types = (int, float)
    if not isinstance(v, types) or (isinstance(v, bool) and bool not in _as_tuple(types)):
        raise ToolError("invalid_input", "undo record: bad or missing %r" % key)
    return v


def _as_tuple(types):
    return types if isinstance(types, tuple) else (types,)
