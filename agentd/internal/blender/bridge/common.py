"""Shared basics of the bridge: ToolError, logging with correlation ids, the
canonical JSON encoding and the names the bridge reserves for itself.

Imports nothing from Blender, so every other module can import it.
"""

import hashlib
import json
import sys

PROTOCOL_VERSION = 1
MAX_NAME_BYTES = 63  # Blender truncates longer ID names (MAX_ID_NAME - 2 - 1).
RESERVED_PREFIX = "__bp_"  # names the bridge keeps for itself; tools refuse them
TOMB_PREFIX = "__bp_tomb_"  # tombstoned (deleted, restorable) objects and their data
TOMB_OF = "__bp_tomb_of"  # custom property on a tombstone: the object's live name
STATE_PROP = "__bp_bridge_state"  # scene custom property, only inside checkpoints

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
)

_corr = {}  # correlation ids of the request being served, for log lines


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


def set_correlation(params):
    _corr.clear()
    for k in ("request_id", "operation_id", "mcp_call_id", "mutation_id"):
        if isinstance(params.get(k), str):
            _corr[k] = params[k]


def clear_correlation():
    _corr.clear()


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def sha256_hex(data):
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def sha256_file(path):
    with open(path, "rb") as f:
        return sha256_hex(f.read())


def one_line(e):
    msg = ("%s: %s" % (type(e).__name__, e)).strip()
    return msg.splitlines()[0][:500] if msg else type(e).__name__


def is_tomb(name):
    return name.startswith(TOMB_PREFIX)
