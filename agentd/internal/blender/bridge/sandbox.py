"""File paths inside the session sandbox (Options.SandboxDir in Go).

Every file a tool writes or reads (renders, imports, exports) is named by a
plain file name that must resolve, after realpath, directly inside the
sandbox directory: no sub-directories, no symlinks out, no absolute paths.
Without a sandbox (hello's sandbox_dir empty) every file access is refused.

A plain file name is the control plane's (internal/filename, Problem): not
empty, not "." or "..", and without "/", "\\", control characters or
bidirectional controls (BIDI_CONTROLS). Tool schemas mark such arguments
with ``"x-sandbox-path": True`` (SANDBOX_PATH) and enforce in their
``pattern`` only the extension (file_pattern) and the absence of control
characters (U+0000-U+001F, U+007F: invalid_input, like a datablock name with
one), so a name that leaves the sandbox passes the schema and is refused by
the path gate: POLICY_REFUSED in the control plane before the plan runs, and
here, as a second line, with ToolError("policy_refused", ...), as is a name
that a symlink in the sandbox points outside it.

    "output": file_name_schema("png")                           # schema
    path = output_path(args["output"], "output")                # in the tool

A file a tool is going to write goes through output_path, which also refuses
a name taken by a directory (conflict, before anything changes: writing
would fail midway); the tool declares the file with Tx.wrote (registry.py).

The files in the sandbox may take at most the session's disk ceiling (hello's
and adopt's ``storage_limit_mib``; absent or 0: none), and must leave the
disk agentd keeps free for its journal (hello's ``min_free_disk_mib``).
execute checks both after every call that declared a file (check_storage):
over either, the call fails with quota_exceeded and its rollback removes
its files. A tool that writes many (render.animation) checks after each
one, so that it stops at the first file over the ceiling rather than
filling the disk first.
"""

import os
import re

from common import ToolError, log
from schema import CONTROL_CHARS

SANDBOX = {"dir": None, "limit": 0, "min_free": 0}  # set by hello and adopt; bytes, 0: none

MAX_FILE_NAME = 128  # characters; the schemas' maxLength for a whole file name is this plus the extension
# UTF-8 bytes of a file-name argument (x-max-bytes, schema.py): file systems
# allow 255, and tools add suffixes ("_0001.png", ".partial.png") to names.
MAX_FILE_BYTES = 200
NO_CONTROL = "^[^%s]*" % CONTROL_CHARS  # the start of every file-name pattern
SANDBOX_PATH = {"type": "string", "minLength": 1, "x-sandbox-path": True, "x-max-bytes": MAX_FILE_BYTES,
                "pattern": NO_CONTROL + "$"}


def file_pattern(*extensions):
    """The JSON-Schema pattern of a file name with one of extensions and no
    control characters (the path gate checks the rest)."""
    exts = "|".join(re.escape(e.lstrip(".")) for e in extensions)
    if len(extensions) > 1:
        exts = "(?:%s)" % exts
    return NO_CONTROL + r"\." + exts + "$"


def file_name_schema(*extensions):
    """The schema of a sandbox file-name argument with one of extensions."""
    longest = max(len(e.lstrip(".")) for e in extensions)
    return dict(SANDBOX_PATH, maxLength=MAX_FILE_NAME + 1 + longest, pattern=file_pattern(*extensions))


def configure(sandbox_dir, storage_limit_mib=None, min_free_disk_mib=None):
    """hello's settings (adopt keeps hello's min_free_disk_mib: the agent's)."""
    SANDBOX["dir"] = sandbox_dir or None
    SANDBOX["limit"] = _mib(storage_limit_mib)
    if min_free_disk_mib is not None:
        SANDBOX["min_free"] = _mib(min_free_disk_mib)


def _mib(v):
    """v MiB in bytes; 0 unless a positive integer."""
    return v << 20 if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0


# ASIDE is the directory beside the sandbox (the session's own) where a call
# sets aside the files it rewrites (Tx.set_aside); agentd puts back what a
# call that died left there (Go: sessions.asideDir).
ASIDE = "aside"


def aside_path(path):
    """Where the sandbox file at path goes while a call rewrites it."""
    return os.path.join(os.path.dirname(os.path.dirname(path)), ASIDE, os.path.basename(path))


# KEPT is the directory beside the sandbox where each file a successful call
# wrote is linked under its SHA-256 (Go: sessions.keptDir, which says how
# long). The control plane takes a receipt's files once the receipt reaches
# it, and by then a later call of the batch or an upload may have replaced
# the name: agentd serves the version a receipt names from here. A link
# takes no room while the sandbox holds the file; every tool writes a new
# file, never into the one there.
KEPT = "kept"


def keep(path, sha):
    """Link the regular file a call wrote at path, whose SHA-256 is sha,
    into KEPT under its hash. It returns the link if this made it (None
    when the hash was kept already, or the link failed: the file is then
    served from the sandbox only). The same bytes written again move the
    link to the new file, which the sandbox holds: the old one may be
    replaced, and would then take room of its own."""
    kept = os.path.join(os.path.dirname(os.path.dirname(path)), KEPT)
    link = os.path.join(kept, sha)
    try:
        os.makedirs(kept, exist_ok=True)
        try:
            old = os.lstat(link)
        except FileNotFoundError:
            os.link(path, link, follow_symlinks=False)
            return link
        if not os.path.samestat(old, os.lstat(path)):
            new = link + ".new"
            if os.path.lexists(new):
                os.remove(new)
            os.link(path, new, follow_symlinks=False)
            os.replace(new, link)
    except OSError as e:
        log("cannot keep a file the call wrote", path=path, err=str(e))
    return None


def usage(leaving=()):
    """The bytes the regular files directly in the sandbox take (their
    sizes), but those at the paths in leaving: files a call is about to
    replace, whose new content is already counted."""
    total = 0
    with os.scandir(SANDBOX["dir"]) as entries:
        for e in entries:
            if e.path not in leaving and e.is_file(follow_symlinks=False):
                total += e.stat(follow_symlinks=False).st_size
    return total


def check_storage(leaving=()):
    """quota_exceeded when the sandbox's files (usage) take more than the
    session's ceiling, or the disk has less free than the agent keeps."""
    limit, floor = SANDBOX["limit"], SANDBOX["min_free"]
    if not SANDBOX["dir"]:
        return
    if limit:
        used = usage(leaving)
        if used > limit:
            raise ToolError("quota_exceeded", "the session's files would take %d bytes (%.1f MiB), over its temp_storage_mib of %d MiB" % (
                used, used / float(1 << 20), limit >> 20))
    if floor:
        st = os.statvfs(SANDBOX["dir"])
        free = st.f_bavail * st.f_frsize
        if free < floor:
            raise ToolError("quota_exceeded", "the agent's disk would have %.1f MiB free, under the %d MiB it keeps for its journal" % (
                free / float(1 << 20), floor >> 20))


# The bidirectional controls: in a listed name they make it read as another
# ("evil\u202egnp.exe" shows as "evilexe.png"). Go: filename.IsBidiControl.
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def is_plain_name(name):
    """name is a plain file name (module docstring)."""
    return (isinstance(name, str) and name not in ("", ".", "..")
            and not any(ch in "/\\" or ord(ch) < 32 or ord(ch) == 127 or ch in BIDI_CONTROLS for ch in name))


def require_plain_name(name, what="a plain file name"):
    """policy_refused unless name is a plain file name: for an argument that
    is a part of file names (render.animation's output_prefix), refused on its
    own terms as the control plane does."""
    if not is_plain_name(name):
        raise ToolError("policy_refused", "%r is not %s in the sandbox" % (name, what))


def sandbox_path(name, pattern=None, what="a plain file name"):
    """The absolute path of file name name inside the sandbox; policy_refused
    when it is not a plain file name or resolves outside the sandbox.
    pattern (a regex the name must match, invalid_input otherwise) is for
    names that no schema checked, e.g. derived ones."""
    root = SANDBOX["dir"]
    if not root:
        raise ToolError("policy_refused", "no sandbox directory is configured for files")
    require_plain_name(name, what)
    if pattern is not None and not re.search(pattern, name):
        raise ToolError("invalid_input", "%r must be %s" % (name, what))
    root = os.path.realpath(root)
    path = os.path.realpath(os.path.join(root, name))
    if os.path.commonpath([root, path]) != root or os.path.dirname(path) != root:
        raise ToolError("policy_refused", "%r resolves outside the sandbox" % name)
    return path


def plain(path):
    """How a result names a file of the sandbox: its plain name, never the
    agent's own path (which says how the host is laid out, and differs
    from host to host and session to session)."""
    return os.path.basename(path)


def hide_sandbox(text):
    """text (an error message, Blender's among them) with the sandbox's path
    left out, so a file of it reads as its plain name, and so does a file of
    the session's own directory (its checkpoints, beside the sandbox)."""
    root = SANDBOX["dir"]
    if not root or not isinstance(text, str):
        return text
    roots = {r.rstrip(os.sep) for r in (root, os.path.realpath(root))}
    # The longest first: a path through a symlink may end with another.
    for prefix in sorted({r + os.sep for r in roots} | {os.path.dirname(r) + os.sep for r in roots}, key=len, reverse=True):
        text = text.replace(prefix, "")
    return text


def output_path(name, what):
    """sandbox_path of a file a tool is going to write; conflict when the
    name is taken by a directory. what names the argument in the message
    ("output", "output: companion file")."""
    path = sandbox_path(name)
    if os.path.isdir(path):
        raise ToolError("conflict", "%s %r is a directory in the sandbox" % (what, name))
    return path
