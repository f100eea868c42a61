"""Special tools: ui.highlight (needs a UI) and python.exec (unsafe).

ui.highlight (safety_mode ui_assisted, read-only) selects and frames an
object in a Blender UI. Sessions run Blender in the background, so it always
fails there with capability_missing (the controlplane refuses ui_assisted
tools before they reach a session anyway).

python.exec (safety_mode unsafe_ops, destructive, rollback_method none) runs
arbitrary Python with ``bpy`` in its globals, in the bridge's process: it can
change anything, including state outside scene_state_v1, the bridge itself,
files and the process. It exists for what no tool covers; the controlplane
offers it only to sessions that negotiated the unsafe_ops feature flag and
keeps it out of atomic plans (no compensation is possible).

- ``result``: if the code sets a global ``result``, its value (JSON-able:
  dict, list, str, number, bool, None; no NaN) is returned as ``result``;
  anything else fails with invalid_input. What the code prints is returned as
  ``stdout`` (at most 64 KiB; the rest is cut).
- The scene hash: since the code may touch anything, the running state is
  rebuilt from scratch afterwards (STATE.rebuild, O(scene)).
- Failures: an exception (or SystemExit) in the code fails with invalid_input
  and the exception's one-line message (no traceback; that goes to the
  bridge's log). What the code changed before raising stays changed: if it
  changed the scene, the call reports internal_error instead ("rollback ...
  left the scene changed") with the honest hash of the changed scene.
- Determinism: "deterministic" means a replay of the same code on the same
  scene gives the same scene, which holds only for deterministic code (no
  time, randomness without a seed, or environment reads): replaying a journal
  that contains python.exec requires that.
"""

import contextlib
import io
import traceback

import bpy

import window
from common import canonical, log, one_line
from registry import ToolError, tool
from schema import NAME
from state import STATE
from trash import empty_trash

from .datablocks import get_object

MAX_CODE = 65536
MAX_STDOUT = 65536


@tool(
    "ui.highlight",
    description="Select and frame an object in Blender's UI. Needs a UI: headless sessions refuse it (capability_missing).",
    schema={"type": "object", "properties": {"name": NAME}, "required": ["name"], "additionalProperties": False},
    safety_level="read_only",
    safety_mode="ui_assisted",
    blender_versions=">=3.4",
)
def tool_ui_highlight(tx, args):
    if bpy.app.background or bpy.context.window_manager is None or not bpy.context.window_manager.windows:
        raise ToolError("capability_missing", "ui.highlight needs a UI; sessions are headless")
    ob = get_object(args["name"])
    ob.select_set(True)  # selection is not part of scene_state_v1
    return {"name": ob.name, "highlighted": True}


class _Limited(io.StringIO):
    def write(self, s):
        room = MAX_STDOUT - self.tell()
        if room > 0:
            io.StringIO.write(self, s[:room])
        return len(s)


@tool(
    "python.exec",
    description="Run Python code in Blender with bpy in its globals (unsafe: may change anything, cannot be undone). "
                "Set a global `result` to return a JSON value; printed output is returned as stdout.",
    schema={
        "type": "object",
        "properties": {"code": {"type": "string", "minLength": 1, "maxLength": MAX_CODE}},
        "required": ["code"],
        "additionalProperties": False,
    },
    safety_level="destructive",
    idempotence_class="keyed",
    rollback_method="none",
    determinism_class="nondeterministic",  # arbitrary code: replay may differ
    safety_mode="unsafe_ops",
    blender_versions=">=3.4",
)
def tool_python_exec(tx, args):
    code = args["code"]
    if "\x00" in code:
        raise ToolError("invalid_input", "code contains a NUL character")
    try:
        compiled = compile(code, "<python.exec>", "exec")
    except SyntaxError as e:
        raise ToolError("invalid_input", one_line(e))
    empty_trash()  # the code could free them under us
    window.wake()  # the code may work through the window's context
    g = {"bpy": bpy, "__name__": "__python_exec__", "__builtins__": __builtins__}
    out = _Limited()
    try:
        with contextlib.redirect_stdout(out):
            exec(compiled, g)
    except MemoryError:
        raise  # the bridge answers out_of_memory and agentd stops this Blender
    except BaseException as e:  # noqa: B902 -- SystemExit too: the bridge must survive
        log("python.exec raised", trace=traceback.format_exc())
        raise ToolError("invalid_input", one_line(e))
    finally:
        # The code may have changed anything: hash the scene from scratch.
        STATE.rebuild()
    result = g.get("result")
    try:
        canonical(result)
    except (TypeError, ValueError) as e:
        raise ToolError("invalid_input", "result is not JSON-able: " + one_line(e))
    return {"result": result, "stdout": out.getvalue()}
