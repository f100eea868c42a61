"""Shared basics of the bridge: ToolError, logging with correlation ids, the
canonical JSON encoding and the names the bridge reserves for itself.

Imports nothing from Blender, so every other module can import it.
"""

import hashlib
import json
import re
import sys

PROTOCOL_VERSION = 1
MAX_NAME_BYTES = 63  # Blender truncates longer ID names (MAX_ID_NAME - 2 - 1).
RESERVED_PREFIX = "__bp_"  # names the bridge keeps for itself; tools refuse them
# Tombstoned (deleted, restorable) objects and their data, and what undos
# discard (trash.py). A control character starts it: no tool takes such a
# name (NAME_PATTERN), and as Blender keeps every ID list sorted by name,
# case-insensitively, these names come after every ASCII one, so renaming a
# datablock to one finds its place at once. "__bp_tomb_" came before every
# letter: each such rename walked the whole list (0.15 ms at 10,000 objects).
TOMB_PREFIX = "\x7fbp_tomb_"
OLD_TOMB_PREFIX = "__bp_tomb_"  # the tombstones of older bridges, in their checkpoints
TOMB_OF = "__bp_tomb_of"  # custom property on a tombstone: the object's live name
STATE_PROP = "__bp_bridge_state_3"  # scene custom property, only inside checkpoints
# Where older bridges read their state, newest first: "_2", bridges before
# the pile's data travelled in checkpoints (trash.py: they would keep it
# for good); "", bridges before the parked window (window.py). A checkpoint
# holds a hash there that no scene has, so that such a bridge refuses the
# file instead of loading what it would get wrong; a checkpoint of theirs
# loads here.
OLD_STATE_PROPS = ("__bp_bridge_state_2", "__bp_bridge_state")
STATE_PROPS = (STATE_PROP,) + OLD_STATE_PROPS
OLD_STATE = '{"scene_hash":"(a newer agentd: upgrade this agent to load this checkpoint)"}'

# Tool error codes (seed-001). Go mirrors them as blender.Code* constants.
ERROR_CODES = (
    "invalid_input",             # args or a record are malformed / out of range
    "not_found",                 # a named datablock (or tool, file) does not exist
    "conflict",                  # the scene does not allow it (name taken, no camera, ...)
    "policy_refused",            # not allowed here (path outside the sandbox, ...)
    "capability_missing",        # this Blender cannot (no Cycles, add-on missing, version)
    "timeout",                   # the tool gave up on a time budget
    "nondeterministic_refused",  # the result would not be reproducible
    "internal_error",            # a bug or an unexpected Blender failure
    "quota_exceeded",            # the call's files would take the sandbox over the session's disk ceiling
)

# Not a tool error: the protocol's answer to an execute of a batch whose
# earlier operation failed (main.m_execute). The request did not run.
NOT_RUN = "not_run"
# Not a tool error either: an allocation failed during the request (Python's
# MemoryError, under the session's memory ceiling). agentd stops this Blender
# and recovers the session, so nothing is rolled back here.
OUT_OF_MEMORY = "out_of_memory"

_corr = {}  # correlation ids of the request being served, for log lines
LOG = {"debug": False}  # hello's "debug" param: write debug() lines too


class ToolError(Exception):
    """A failure reported to agentd as {"code", "message"}; code is one of
    ERROR_CODES. Raised by a tool, the scene is rolled back first."""

    def __init__(self, code, message):
        Exception.__init__(self, message)
        self.code = code
        self.message = message


def log(msg, **attrs):
    """One diagnostic line on stderr, with the request's correlation ids."""
    attrs = dict(_corr, **attrs)
    parts = ["blendplane-bridge:", msg]
    parts += ["%s=%s" % (k, json.dumps(v)) for k, v in sorted(attrs.items()) if v not in (None, "")]
    sys.stderr.write(" ".join(parts) + "\n")
    sys.stderr.flush()


def debug(msg, **attrs):
    """log(), only when agentd logs at debug level (hello's "debug" param):
    per-call lines cost a write and a read on every call otherwise."""
    if LOG["debug"]:
        log(msg, **attrs)


def set_correlation(params):
    _corr.clear()
    for k in ("request_id", "operation_id", "mcp_call_id", "mutation_id"):
        if isinstance(params.get(k), str):
            _corr[k] = params[k]


def clear_correlation():
    _corr.clear()


# One encoder each, built once: json.dumps with non-default options builds a
# new JSONEncoder per call.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def _c_encoder(enc):
    """enc's C encoder, built once (JSONEncoder.encode builds one per call:
    a fifth of a record's encoding), with a circular-reference check whose
    marks a failed call clears; None without the C accelerator. A call made
    while one runs (from a value's own code, in a python.exec result) gets
    an encoder of its own, so that neither sees the other's marks."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return None
    marks = {}
    strings = json.encoder.encode_basestring_ascii if enc.ensure_ascii else json.encoder.encode_basestring
    run = make(marks, enc.default, strings, None, enc.key_separator, enc.item_separator, enc.sort_keys,
               enc.skipkeys, enc.allow_nan)
    busy = [False]

    def encode(obj):
        if busy[0]:
            return enc.encode(obj)
        busy[0] = True
        try:
            return "".join(run(obj, 0))
        except BaseException:
            marks.clear()  # the ids of the containers it was inside
            raise
        finally:
            busy[0] = False
    return encode


def canonical(obj):
    """Sorted keys, no spaces, ASCII, no NaN: the encoding records are hashed in."""
    return _canonical(obj)


_canonical = _c_encoder(_CANONICAL) or _CANONICAL.encode
_compact = _c_encoder(_COMPACT) or _COMPACT.encode


def compact(obj):
    """canonical() without sorting keys: for protocol lines, which are not hashed."""
    return _compact(obj)


class Encoded(str):
    """JSON text already encoded with compact(): a response line embeds it as
    it is (main.response_line). execute encodes its result inside the tool's
    transaction, to check it, and a result can be megabytes (scene.snapshot):
    encoding it a second time would cost as much again."""


def sha256_hex(data):
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def sha256_file(path):
    """The file's SHA-256, read a MiB at a time: a model or a render may be
    large, and Blender's memory may be capped."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# The line a Python traceback ends with: "KeyError: 5".
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b")


def one_line(e):
    """e on one line: its type and first line; of an error that wraps a
    traceback (Blender's "Error: Python: Traceback ..." from an importer
    written in Python), the exception the traceback ends with, which says
    what was wrong (its first line says nothing)."""
    msg = ("%s: %s" % (type(e).__name__, e)).strip()
    if not msg:
        return type(e).__name__
    lines = [line.strip() for line in msg.splitlines() if line.strip()]
    if "Traceback (most recent call last)" in lines[0]:
        for line in reversed(lines[1:]):
            if EXCEPTION_LINE.match(line):
                return line[:500]
    return lines[0][:500]


def tomb_key(name):
    """What follows the tombstone prefix of name, either one (None: name is
    not a tombstone's)."""
    for prefix in (TOMB_PREFIX, OLD_TOMB_PREFIX):
        if name.startswith(prefix):
            return name[len(prefix):]
    return None


TOMB_FIRSTS = frozenset(p[0] for p in (TOMB_PREFIX, OLD_TOMB_PREFIX))


def is_tomb(name):
    # The first character rules out nearly every name at once: the
    # snapshot and scene.get_summary ask this of every datablock.
    return name[:1] in TOMB_FIRSTS and tomb_key(name) is not None
