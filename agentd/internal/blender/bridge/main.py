"""Blendplane bridge: runs inside Blender's Python and serves agentd.

Entry point of the bridge package (agentd writes the package to the cache
its Blenders share, <data dir>/cache/bridge-<digest>/, or to <WorkDir>/bridge/
without one, and runs this file). Module map:

    main.py      transport, request loop and the methods below
    common.py    ToolError, log, canonical JSON, reserved names
    compat.py    every Blender 3.4 / 4.5 difference; version ranges
    baseline.py  the baseline scene (reset)
    records.py   the scene_state_v1 records (KINDS)
    index.py     lookups by name and membership that cost what the change costs
    trash.py     datablocks an undo removed, freed later in one walk
    state.py     per-record digests and the scene hash (STATE); full snapshot
    animation.py animated properties kept across Blender's evaluations
    window.py    the window's scene, parked while checkpoints are saved
    schema.py    the JSON-Schema subset checker; schema fragments
    registry.py  the tool registry and the tool-module API (Tx) -- read it
                 before writing a tool
    sandbox.py   file names inside the session sandbox
    phases.py    time per phase of each execute, for a benchmark (off by default)
    tools/       one module per tool family, listed in tools/__init__.py

Transport
---------
JSON lines over two inherited file descriptors: requests arrive on ``--fd-in``
(fd 3), responses leave on ``--fd-out`` (fd 4). Never stdout, which Blender
writes to. Diagnostics (with correlation ids) go to stderr, one line each.

    request:  {"id": N, "method": "hello|reset|execute|undo|save_checkpoint|
                                    load_checkpoint|scene_hash|snapshot|shutdown|
                                    phases",
               "params": {...}}
    response: {"id": N, "ok": true, "result": {...}}
              {"id": N, "ok": false, "error": {"code": "...", "message": "...",
                                                "scene_hash": "..."}}
    progress: {"id": N, "progress": {...}}   (zero or more, before the response
                                              of an execute; see Tx.progress)

Error codes (seed-001): invalid_input, not_found, conflict, policy_refused,
capability_missing, timeout, nondeterministic_refused, internal_error. A bad
request never stops the bridge; an unexpected Python exception becomes
``internal_error`` with a one-line message, and its traceback goes to stderr.
Every request is answered with its id, even a line that is not valid JSON
or nests too deep for Python's decoder (invalid_input): Go writes ``"id"``
first, and the id is read from the start of such a line. A RecursionError
anywhere (args nested too deep for a recursive step) is invalid_input too.
A MemoryError (an allocation over the session's memory ceiling) is answered
with the protocol code ``out_of_memory``, without a rollback: agentd stops
this Blender and rebuilds the session from its journal.
An error's ``scene_hash`` is always the scene's current hash: after a failed
execute whose rollback could not restore the scene (python.exec has none) it
differs from the hash before, and agentd rebuilds the session.

execute answers ``{"result": {...}, "undo": record|null, "files": [names],
"scene_hash_before", "scene_hash_after", "mutated", "records_changed"}``:
``files`` are the plain names (sorted) of the files the call wrote into the
sandbox (Tx.wrote); ``records_changed`` counts the scene's records the call
made, changed or removed (STATE.changed), which agentd weighs a session's
refresh by. The tool's part (result, undo record, files) is encoded inside
the tool's transaction: a result that is not JSON (NaN) fails with
internal_error, and one larger than MAX_RESULT_BYTES (16 MiB of compact JSON;
scene.snapshot of 10,000 planes is 4.6 MB) with invalid_input, and either
way the call is rolled back like any failed tool, files included.

Requests are served one at a time, in order, but agentd may write several
before reading the responses (pipelining). ``execute`` params may carry
``"batch": "<id>"``: after an execute of a batch fails, every later execute
of the same batch is refused without running, with the protocol code
``not_run`` (not a tool error code), so a failure stops the batch as if agentd
had waited for each response.

Run it as ``blender -b --factory-startup --python bridge/main.py -- --fd-in 3 --fd-out 4``
or ``python -I bridge/main.py --fd-in 3 --fd-out 4`` (a Python that can import bpy),
with ``--pycache-prefix DIR`` where the bytecode of its modules is kept.
It puts its own directory first on sys.path and imports the other modules
from there.

hello (``{"sandbox_dir", "storage_limit_mib", "min_free_disk_mib", "runtime", "faults", "debug"}``; ``debug`` true
turns on the per-call diagnostic lines) loads the baseline scene and
returns the profile and the registry: only the tools whose
``blender_versions`` include this Blender.

phases returns where the executes since its last call spent their time
(phases.py), only in a Blender whose hello named the "phases" test fault
(BenchmarkBridgePhases); elsewhere it is refused with invalid_input.

Nothing of a session is written outside its directories: Go points HOME,
XDG_* and TMPDIR into the work dir, and save_checkpoint turns Blender's file
previews off before every save (compat.disable_file_previews; hello and
reset reload the factory preferences, which have them on), so a save writes
no thumbnail under ~/.cache/thumbnails.

Checkpoints
-----------
``save_checkpoint`` ``{"path": abs}`` writes the whole file with
``wm.save_as_mainfile(copy=True, compress=False, relative_remap=False)``: the
session's file path and state stay as they are. The bridge state (tomb
counter) and the scene hash travel in the scene custom property
``__bp_bridge_state_2``, set only for the duration of the save (custom
properties are not in scene_state_v1); ``__bp_bridge_state``, where bridges
before the parked window (window.py) read it, holds a hash no scene has, so
that they refuse the file rather than load it with the window parked.
Datablocks nothing uses (which a save would drop) get a fake user for the
save, taken back after it and after the load (their names travel in the
state as ``held``). Go writes ``path.tmp`` through this, fsyncs it, renames
it over the target and fsyncs the directory.
``load_checkpoint`` ``{"path": abs}`` runs ``wm.open_mainfile(load_ui=True,
use_scripts=False)``, takes the bridge state out of the scene, points its
images at files of the sandbox it was saved from (the state's ``sandbox``)
at this session's sandbox (rebase_images), rebuilds the
incremental hash from scratch, and fails with ``internal_error`` (scene loaded
anyway) if the result differs from the hash recorded at save time. It loads the
file's UI too, so the file's window manager replaces the running one, and with
it Blender's queue of notifiers, which a Blender without an event loop never
empties (one entry per datablock a script set a property of): every later free
walks that queue, 0.8 ms per datablock at 10,000 script-built objects with the
old queue against 0.03 with the file's. References python.exec code kept to the
old window, screen or window manager are gone after it (agentd loads
checkpoints only into Blenders that ran nothing before). Replaying the same
calls on a loaded checkpoint reproduces the same hashes and the same undo
records: every tool is a function of the scene and its args.
"""

import os
import sys


def parse_argv(argv):
    if "--" in argv:  # blender binary: our arguments follow "--"
        argv = argv[argv.index("--") + 1:]
    else:
        argv = argv[1:]
    opts = {"fd_in": 3, "fd_out": 4, "pycache_prefix": None}
    i = 0
    while i < len(argv):
        if argv[i] in ("--fd-in", "--fd-out") and i + 1 < len(argv):
            opts[argv[i][2:].replace("-", "_")] = int(argv[i + 1])
            i += 2
        elif argv[i] == "--pycache-prefix" and i + 1 < len(argv):
            opts["pycache_prefix"] = argv[i + 1]
            i += 2
        else:
            i += 1
    return opts


OPTS = parse_argv(sys.argv)
sys.dont_write_bytecode = True  # until the bridge's own imports (below)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import json  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import select  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402

import bpy  # noqa: E402

# The bridge's own bytecode goes to the cache agentd shares between its
# Blenders (its pycache prefix, blender/cache.go), for its own imports only
# (restored below): what Python and Blender import keeps the bytecode it was
# installed with. Without a cache, the package is rewritten at every start
# and none is kept.
_BYTECODE = (sys.pycache_prefix, sys.dont_write_bytecode)
if OPTS["pycache_prefix"]:
    sys.pycache_prefix = OPTS["pycache_prefix"]
    sys.dont_write_bytecode = False

import phases  # noqa: E402
import registry  # noqa: E402
from animation import keep_animated, open_file_as_saved  # noqa: E402
import sandbox  # noqa: E402
import tools  # noqa: E402,F401  (registers every tool)
from tools.io import rebase_images  # noqa: E402
import window  # noqa: E402
from common import (LOG, NOT_RUN, OLD_STATE, OLD_STATE_PROPS, OUT_OF_MEMORY, PROTOCOL_VERSION,  # noqa: E402
                    STATE_PROP, STATE_PROPS, Encoded, ToolError, canonical, clear_correlation, compact, debug,
                    is_tomb, log, one_line, set_correlation, tomb_key)
from compat import (blender_version, build_platform, build_string, disable_file_previews, eevee_engine,  # noqa: E402
                    has_cycles)
from schema import check  # noqa: E402
from baseline import current_scene, reset_scene  # noqa: E402
from records import KINDS  # noqa: E402
from state import BRIDGE, SCHEMA, STATE, full_snapshot  # noqa: E402
from layers import flush_actives, forget_actives, sync_view_layers  # noqa: E402
from trash import (RECLAIM_CHUNK, empty_trash, forget_trash, reclaim, trash_counter, trash_waiting,  # noqa: E402
                   written)

sys.pycache_prefix, sys.dont_write_bytecode = _BYTECODE
registry.validate()


# ---------------------------------------------------------------------------
# Methods.

def features():
    f = {"workbench"}
    if has_cycles():
        f.add("cycles")
    if eevee_engine():
        f.add("eevee")
    try:
        for mod in bpy.context.preferences.addons.keys():
            if mod.startswith("io_"):
                f.add(mod)
    except Exception:
        pass
    return sorted(f)


def profile():
    return {
        "version": "%d.%d.%d" % blender_version(),
        "version_string": build_string(bpy.app.version_string),
        "build_hash": build_string(bpy.app.build_hash),
        "platform": build_platform(),
        "python_version": platform.python_version(),
        "features": features(),
    }


def m_hello(params):
    LOG["debug"] = params.get("debug") is True
    sandbox.configure(params.get("sandbox_dir"), params.get("storage_limit_mib"), params.get("min_free_disk_mib") or 0)
    registry.FAULTS.clear()
    registry.FAULTS.update(f for f in (params.get("faults") or []) if isinstance(f, str))
    if registry.FAULTS:
        log("test faults enabled", faults=sorted(registry.FAULTS))
    phases.ON = "phases" in registry.FAULTS
    h = new_scene()
    return {"protocol_version": PROTOCOL_VERSION, "profile": profile(), "tools": registry.tool_list(), "scene_hash": h,
            "script_autoexec": bpy.context.preferences.filepaths.use_scripts_auto_execute}


def m_adopt(params):
    """A Blender started ahead (a spare, on the baseline scene) gets its
    session's sandbox and its ceiling: hello's settings, without resetting
    the scene."""
    sandbox.configure(params.get("sandbox_dir"), params.get("storage_limit_mib"))
    return {"scene_hash": STATE.scene_hash()}


def m_reset(params):
    return {"scene_hash": new_scene()}


def new_scene():
    """The baseline scene (reset_scene), shown parked, as a loaded
    checkpoint's is (window.py): a session that never needs the window
    never evaluates its scene."""
    h = reset_scene()
    window.park()
    return h


def m_scene_hash(params):
    return {"scene_hash": STATE.scene_hash()}


def m_snapshot(params):
    snap, h = full_snapshot()
    return {"scene_hash": h, "incremental_scene_hash": STATE.scene_hash(), "snapshot": snap}

def roll_back(tx, before, what, name):
    """Roll back a failed tool (what "") or undo (what "undo "), then
    internal_error when the scene does not hash as before; else the caller
    re-raises the failure."""
    try:
        tx.rollback()
    finally:
        tx.apply_touches()
    after = STATE.scene_hash()
    if after != before:
        log(what + "rollback left the scene changed", before=before, after=after)
        raise ToolError("internal_error", "rollback after a failed %s%s left the scene changed" % (what, name))


BATCH = {"failed": None}  # the batch id of the last execute that failed

# The largest tool part of an execute answer (result, undo record and file
# list, as compact JSON). scene.snapshot of 10,000 planes is 4.6 MB; agentd's
# gRPC messages carry up to 64 MiB.
MAX_RESULT_BYTES = 16 << 20


def m_execute(params):
    """execute, with batches: requests carrying the same "batch" id are a
    sequence agentd may write ahead of the responses (pipelining). Once one of
    them fails, the later ones are refused without running, with code not_run,
    so a failure stops the batch exactly as if agentd had waited for it."""
    batch = params.get("batch")
    if batch is None:
        return execute(params)
    if batch == BATCH["failed"]:
        raise ToolError(NOT_RUN, "not run: an earlier operation of its batch failed")
    try:
        return execute(params)
    except BaseException:
        BATCH["failed"] = batch
        raise


def execute(params):
    ph = phases.Marks() if phases.ON else None  # the "phases" test fault
    name = params.get("tool")
    args = params.get("args")
    if args is None:
        args = {}
    tool = registry.TOOLS.get(name) if isinstance(name, str) else None
    before = STATE.scene_hash()
    if ph:
        ph.mark("hashing")
    if tool is None:
        raise ToolError("not_found", "unknown tool %r" % (name,))
    if not registry.available(tool):
        raise ToolError("capability_missing", "%s needs Blender %s" % (name, tool["blender_versions"]))
    check(tool["input_schema"], args)
    if ph:
        ph.mark("schema")
    inject = test_hook(params, "inject_failure")
    mid = params.get("mutation_id")
    tx = registry.Tx(name, inject if isinstance(inject, str) else None, mid if isinstance(mid, str) else None,
                     progress=emit_progress)
    t0, changed = time.time(), STATE.changed
    try:
        n = test_hook(params, "inject_progress")
        if isinstance(n, int) and not isinstance(n, bool):
            for i in range(n):
                tx.progress({"injected": i + 1, "of": n})
        result = tool["fn"](tx, args)
        if tx.written:
            sandbox.check_storage()
        if ph:
            ph.mark("tool")
        reply = encode_reply(name, result, tx)
        if ph:
            ph.mark("reply")
    except MemoryError:
        raise  # agentd stops this Blender (OUT_OF_MEMORY): no rollback here
    except BaseException:
        roll_back(tx, before, "", name)
        raise
    tx.apply_touches()
    for fn in tx.succeeded:
        try:
            fn()
        except Exception:
            log("an execute's success step failed", tool=name, trace=traceback.format_exc())
    if ph:
        ph.mark("records")
    after = STATE.scene_hash()
    if ph:
        ph.mark("hashing")
    if LOG["debug"]:
        debug("tool done", tool=name, ms=round((time.time() - t0) * 1000, 3), mutated=after != before)
    # The hashes are lowercase hex: nothing in them needs escaping.
    out = Encoded('%s,"scene_hash_before":"%s","scene_hash_after":"%s","mutated":%s,"records_changed":%d}' % (
        reply[:-1], before, after, "true" if after != before else "false", STATE.changed - changed))
    if ph:
        ph.mark("answer")
        ph.done()
    return out


def test_hook(params, key):
    """params[key] when hello enabled the "inject" test fault, else None: a
    production bridge ignores the tests' injected failures and progress."""
    return params.get(key) if "inject" in registry.FAULTS else None


def encode_reply(name, result, tx):
    """The compact JSON of what the tool made (result, undo record, files),
    encoded inside the tool's transaction so that a reply that cannot be
    sent rolls the call back (module docstring)."""
    try:
        reply = compact({"result": result, "undo": tx.undo_record, "files": tx.files()})
    except (TypeError, ValueError) as e:  # NaN, a non-JSON value: the tool's bug
        raise ToolError("internal_error", "%s returned a result that is not JSON: %s" % (name, one_line(e)))
    if len(reply) > MAX_RESULT_BYTES:
        # invalid_input: the args asked for more than one answer may carry,
        # as the bridge's other limits on what a call asks for (frames of
        # render.animation, python.exec's code) are invalid_input.
        raise ToolError("invalid_input", "%s: the result is %d bytes of JSON, over the limit of %d" %
                        (name, len(reply), MAX_RESULT_BYTES))
    return reply


def m_undo(params):
    rec = params.get("undo")
    if not isinstance(rec, dict) or rec.get("v") != registry.UNDO_VERSION or rec.get("tool") not in registry.UNDOERS:
        raise ToolError("invalid_input", "not an undo record of version %d" % registry.UNDO_VERSION)
    inject = test_hook(params, "inject_failure")
    tx = registry.Tx(rec["tool"], inject if isinstance(inject, str) else None, fault="undo" in registry.FAULTS)
    before = STATE.scene_hash()
    t0 = time.time()
    try:
        registry.UNDOERS[rec["tool"]](tx, rec)
    except registry.InjectedFault as e:
        # Test hook: keep the partial work and report it honestly.
        tx.apply_touches()
        log("undo fault injected", tool=rec["tool"], before=before, after=STATE.scene_hash())
        raise ToolError("internal_error", str(e))
    except BaseException:
        roll_back(tx, before, "undo ", rec["tool"])
        raise
    tx.apply_touches()
    after = STATE.scene_hash()
    debug("undo done", tool=rec["tool"], ms=round((time.time() - t0) * 1000, 3))
    return {"scene_hash_before": before, "scene_hash_after": after}


def checkpoint_path(params):
    path = params.get("path")
    if not isinstance(path, str) or not os.path.isabs(path) or "\x00" in path:
        raise ToolError("invalid_input", "path must be an absolute file path")
    return path


def m_save_checkpoint(params):
    path = checkpoint_path(params)
    flush_actives()
    h = STATE.scene_hash()
    for stale in (path, path + "1", path + "@"):  # target, Blender's backup and temp file
        if os.path.exists(stale):
            os.remove(stale)
    sc = current_scene()
    disable_file_previews()  # before every save: reset and python.exec can turn them back on
    t0 = time.time()
    held = []
    try:
        hold_unused(held)
        sc[STATE_PROP] = canonical({"schema": SCHEMA, "scene_hash": h, "tomb_counter": BRIDGE["tomb_counter"],
                                    "trash_counter": trash_counter(), "trash": written(), "held": held,
                                    "sandbox": os.path.realpath(sandbox.SANDBOX["dir"]) if sandbox.SANDBOX["dir"] else ""})
        for prop in OLD_STATE_PROPS:
            sc[prop] = OLD_STATE
        # The file loads without evaluating the scene, and the window stays
        # parked after the save, as after a load (window.py): waking it
        # here would evaluate the whole scene at every checkpoint. One that
        # was awake wakes in the next pause (idle).
        if window.park(rewake=True) is None:
            keep_animated()  # the save's own evaluation would write the animation over them
        res = bpy.ops.wm.save_as_mainfile(filepath=path, copy=True, compress=False,
                                          relative_remap=False, check_existing=False)
    finally:
        for prop in STATE_PROPS:
            sc.pop(prop, None)
        release(held)
    if "FINISHED" not in res or not os.path.isfile(path):
        raise ToolError("internal_error", "Blender did not write the checkpoint")
    ms = round((time.time() - t0) * 1000, 3)
    log("checkpoint saved", path=path, ms=ms, scene_hash=h)
    return {"scene_hash": h, "bytes": os.path.getsize(path), "ms": ms}


def hold_unused(held):
    """Give every tracked datablock that nothing uses a fake user for the
    save, listing them in held as [collection, name] pairs: a save drops
    datablocks without users (a material made and not yet assigned, one a
    material.assign replaced), which the records count, so the checkpoint
    would load as another scene. The fake users are taken back after the
    save (release) and after the load (the pairs travel in the bridge
    state): tools read user counts, which must stay as they were.
    Tombstones are left to go: those a checkpoint keeps have a fake user
    (an object.delete's) or a user, and the rest are the pile's (trash.py)."""
    for coll in sorted({c for _, _, _, c in KINDS} - {"scenes"}):
        for db in getattr(bpy.data, coll):
            if db.users == 0 and db.library is None and not db.use_fake_user and not is_tomb(db.name):
                db.use_fake_user = True
                held.append([coll, db.name])


def release(held):
    """Take back the fake users hold_unused gave."""
    for coll, name in held:
        db = getattr(bpy.data, coll).get(name) if isinstance(coll, str) and hasattr(bpy.data, coll) else None
        if db is not None:
            db.use_fake_user = False


def tomb_counter_floor():
    n = 0
    for ob in bpy.data.objects:
        key = tomb_key(ob.name)
        if key is not None and key.isdecimal():
            n = max(n, int(key) + 1)
    return n


def m_load_checkpoint(params):
    path = checkpoint_path(params)
    if not os.path.isfile(path):
        raise ToolError("not_found", "no checkpoint at %r" % path)
    t0 = time.time()
    try:
        open_file_as_saved(path)
        window.REWAKE["due"] = False  # the file's window: parked, and no call woke it yet
        forget_trash()  # freed with the file it was in (a failed load keeps both)
        forget_actives()
    except RuntimeError as e:
        forget_actives()  # the load may have replaced the view layers before it failed
        STATE.rebuild()  # whatever Blender kept, hash it honestly
        raise ToolError("internal_error", "could not load checkpoint: " + one_line(e))
    saved = {}
    for sc in bpy.data.scenes:
        # An older bridge's checkpoint: its state where it wrote it (the
        # newest of the names it knows; older ones hold a refusal).
        raw = next((sc[p] for p in STATE_PROPS if p in sc), None)
        if raw is not None:
            try:
                saved = json.loads(raw)
            except ValueError:
                saved = {}
        for prop in STATE_PROPS:
            sc.pop(prop, None)
    BRIDGE["tomb_counter"] = max(int(saved.get("tomb_counter", 0)), tomb_counter_floor())
    trash_counter(saved.get("trash_counter"))
    reclaim(saved.get("trash"))
    release([h for h in saved.get("held") or [] if isinstance(h, list) and len(h) == 2])
    if isinstance(saved.get("sandbox"), str):
        rebase_images(saved["sandbox"])
    STATE.rebuild()
    h = STATE.scene_hash()
    ms = round((time.time() - t0) * 1000, 3)
    log("checkpoint loaded", path=path, ms=ms, scene_hash=h)
    want = saved.get("scene_hash")
    if want and want != h:
        raise ToolError("internal_error", "checkpoint hashed %s when saved but %s after loading" % (want, h))
    return {"scene_hash": h, "saved_scene_hash": want, "ms": ms}


class Shutdown(Exception):
    pass


def m_phases(params):
    """The time of the executes since the last call, phase by phase
    (phases.py); only where hello named the "phases" test fault."""
    if not phases.ON:
        raise ToolError("invalid_input", "phases needs the \"phases\" test fault (hello's faults)")
    return phases.take()


def m_shutdown(params):
    raise Shutdown()


METHODS = {
    "hello": m_hello,
    "adopt": m_adopt,
    "reset": m_reset,
    "scene_hash": m_scene_hash,
    "snapshot": m_snapshot,
    "execute": m_execute,
    "undo": m_undo,
    "save_checkpoint": m_save_checkpoint,
    "load_checkpoint": m_load_checkpoint,
    "shutdown": m_shutdown,
    "phases": m_phases,
}


# ---------------------------------------------------------------------------
# Transport.

OUT = {"stream": None, "id": None}  # the response stream and the request being served


def write_line(obj):
    OUT["stream"].write(compact(obj).encode("ascii") + b"\n")
    OUT["stream"].flush()


def response_line(resp):
    """The JSON line of a response, embedding an Encoded result as it is."""
    result = resp.get("result")
    if isinstance(result, Encoded):
        rid = resp["id"]  # Go's ids are integers, whose JSON is str()'s
        return '{"id":%s,"ok":true,"result":%s}' % (str(rid) if type(rid) is int else compact(rid), result)
    return compact(resp)


# Go writes every request as {"id":N,"method":...}: the id of a line that
# json cannot decode (truncated, or nested deeper than Python's recursion
# limit) is read from its start, so that its caller gets an answer.
REQUEST_ID = re.compile(rb'\s*\{\s*"id"\s*:\s*(\d+)\s*[,}]')


def error_response(rid, code, message):
    return {"id": rid, "ok": False, "error": {"code": code, "message": sandbox.hide_sandbox(message), "scene_hash": STATE.scene_hash()}}


def emit_progress(info):
    """Write {"id": N, "progress": info} for the request being served."""
    write_line({"id": OUT["id"], "progress": info})


def handle(line):
    """Serve one request line (bytes); returns (response dict, stop flag)."""
    rid = None
    OUT["id"] = None
    clear_correlation()
    try:
        try:
            # Decoded here as UTF-8, which is what Go writes: json.loads of
            # bytes first guesses among UTF-8, -16 and -32 (a third of its time).
            req = json.loads(line.decode("utf-8", "surrogatepass"))
        except (ValueError, RecursionError) as e:  # ValueError includes UnicodeDecodeError
            m = REQUEST_ID.match(line)
            rid = int(m.group(1)) if m else None
            raise ToolError("invalid_input", "request is not valid JSON: " + one_line(e))
        if not isinstance(req, dict):
            raise ToolError("invalid_input", "request must be a JSON object")
        rid = req.get("id")
        OUT["id"] = rid
        method = req.get("method")
        params = req.get("params") or {}
        if not isinstance(params, dict):
            raise ToolError("invalid_input", "params must be an object")
        set_correlation(params)
        fn = METHODS.get(method) if isinstance(method, str) else None
        if fn is None:
            raise ToolError("invalid_input", "unknown method %r" % (method,))
        return {"id": rid, "ok": True, "result": fn(params)}, False
    except Shutdown:
        return {"id": rid, "ok": True, "result": {}}, True
    except ToolError as e:
        if e.code != NOT_RUN:
            log("request failed", code=e.code, message=e.message)
        return error_response(rid, e.code, e.message), False
    except MemoryError:
        return error_response(rid, OUT_OF_MEMORY, "out of memory"), False
    except RecursionError as e:  # input nested too deep for a recursive step: bad input
        log("request failed", code="invalid_input", message=one_line(e))
        return error_response(rid, "invalid_input", "nested too deep: " + one_line(e)), False
    except Exception as e:
        log("unexpected error", trace=traceback.format_exc())
        return error_response(rid, "internal_error", one_line(e)), False


class Requests:
    """The request stream, a line per request, read in large chunks. Unlike
    a buffered file it can tell, without blocking, whether a request is
    waiting: one read already, or bytes in the pipe."""

    def __init__(self, fd):
        self.fd = fd
        self.buf = b""
        self.pos = 0  # where the next line starts in buf

    def waiting(self, timeout):
        """Whether a request is waiting, or comes within timeout seconds."""
        return self.buf.find(b"\n", self.pos) >= 0 or bool(select.select([self.fd], [], [], timeout)[0])

    def readline(self):
        """The next line with its newline; at the end, what is left (b"")."""
        i = self.buf.find(b"\n", self.pos)
        if i >= 0:
            line, self.pos = self.buf[self.pos:i + 1], i + 1
            return line
        parts = [self.buf[self.pos:]]
        while True:
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                self.buf, self.pos = b"", 0
                return b"".join(parts)
            i = chunk.find(b"\n")
            if i >= 0:
                parts.append(chunk[:i + 1])
                self.buf, self.pos = chunk, i + 1
                return b"".join(parts)
            parts.append(chunk)


IDLE_SECONDS = 0.25  # no request for this long: a pause, for idle()'s work
IDLE = {"passes": 0}  # idle() calls so far (the tests wait on it)


def idle():
    """Work for a pause between requests, so that the next call pays for
    none of it: free some of what undos discarded (trash.py), and bring every
    view layer up to date (layers.py: links and unlinks leave them for the
    next read, and frees mark them too); but first, in a pass of its own,
    show the scene again in the window a save parked (window.REWAKE).
    Returns whether work is left. A failure is logged, never the end of the
    bridge: what is not freed goes with the file."""
    IDLE["passes"] += 1
    try:
        if window.REWAKE["due"]:
            window.wake()
            return True
        empty_trash(RECLAIM_CHUNK)
        sync_view_layers()
    except Exception:
        log("idle work failed", trace=traceback.format_exc())
    return trash_waiting()


def serve(fd_in, fd_out):
    requests = Requests(fd_in)
    OUT["stream"] = os.fdopen(fd_out, "wb")
    log("ready", pid=os.getpid(), blender=build_string(bpy.app.version_string))
    pending = False  # idle() has work: there was a request since its last pass
    while True:
        if pending and not requests.waiting(IDLE_SECONDS):
            pending = idle()
            continue
        line = requests.readline()
        pending = True
        if not line:
            log("request stream closed")
            return
        if not line.strip():
            continue
        t0 = phases.now() if phases.ON else 0
        resp, stop = handle(line)
        t1 = phases.now() if t0 else 0
        try:
            data = response_line(resp)
        except (TypeError, ValueError, RecursionError) as e:
            # Not from execute, whose reply is encoded (and checked) inside
            # its transaction: a method's own bug. The scene is as it was.
            data = compact(error_response(resp.get("id"), "internal_error", one_line(e)))
        t2 = phases.now() if t0 else 0
        OUT["stream"].write(data.encode("ascii") + b"\n")
        OUT["stream"].flush()
        if t0:
            phases.served(t0, t1, t2, phases.now())
        if stop:
            log("shutdown")
            return


def main():
    serve(OPTS["fd_in"], OPTS["fd_out"])
    # Exit at once: nothing of Blender's own shutdown is needed (checkpoints
    # are written and synced by agentd), and the bpy module's can hang (4.5,
    # after saving a file with a Python driver).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
