"""File paths inside the session sandbox (Options.SandboxDir in Go).

Every file a tool writes or reads (renders, imports, exports) is named by a
plain file name that must resolve, after realpath, directly inside the
sandbox directory: no sub-directories, no symlinks out, no absolute paths.
Without a sandbox (hello's sandbox_dir empty) every file access is refused.

    path = sandbox_path(args["output"])                       # a .png
    path = sandbox_path(args["file"], file_pattern("glb", "gltf"), "a .glb or .gltf file name")

A refusal is ToolError("policy_refused", ...).
"""

import os
import re

from common import ToolError

SANDBOX = {"dir": None}  # set by hello


def file_pattern(*extensions):
    """The JSON-Schema pattern of a plain file name with one of extensions."""
    exts = "|".join(re.escape(e.lstrip(".")) for e in extensions)
    if len(extensions) > 1:
        exts = "(?:%s)" % exts
    return r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}\." + exts + "$"


OUTPUT_PATTERN = file_pattern("png")  # == r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}\.png$"


def configure(sandbox_dir):
    SANDBOX["dir"] = sandbox_dir or None


def sandbox_path(output, pattern=OUTPUT_PATTERN, what="a plain .png file name"):
    """The absolute path of file name output inside the sandbox."""
    root = SANDBOX["dir"]
    if not root:
        raise ToolError("policy_refused", "no sandbox directory is configured for outputs")
    if not isinstance(output, str) or not re.match(pattern, output):
        raise ToolError("policy_refused", "output must be " + what)
    root = os.path.realpath(root)
    path = os.path.realpath(os.path.join(root, output))
    if os.path.commonpath([root, path]) != root or os.path.dirname(path) != root:
        raise ToolError("policy_refused", "output %r resolves outside the sandbox" % output)
    return path
