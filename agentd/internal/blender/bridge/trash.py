"""Datablocks an undo removed, freed later. Freeing makes Blender walk all of
Main to clear references (about 10 ms at 10,000 objects, once per call of
bpy.data.batch_remove), and then, for every ID it frees, walk its queue of
notifiers, which a Blender without an event loop never empties (one entry
per object a script touched since the process started), and, for every
object, every object (0.1 to 0.9 ms per ID at 10,000 objects). So undoing a
create would grow with the scene. discard renames them out of sight (a
tombstone name: left out of the snapshot, the hash and every tool) instead,
and they are freed later, off the calls that made them where possible:

- empty_trash(RECLAIM_CHUNK), a few at a time, in the pauses between requests
  (main.idle): a session driven by a person or a model frees its pile
  between calls;
- empty_trash, all at once: when TRASH_MAX have gathered (a busy stream of
  calls pays then, one walk of Main for the pile), before scene.export (no
  export holds one), and before python.exec (which could free them under
  us).

A checkpoint's save frees none (it would cost the session a walk per
freed ID at every checkpoint): Blender writes no datablock without users,
so the file holds none of the pile's objects, only what they use (a made
object's mesh); its load puts that back on the pile (written, reclaim).
So a Blender that is replaced (a session refreshed, parked, closed or
recovered) never frees what is left of its pile: the process goes with
it. The pile's names go on from the checkpoint's (trash_counter), so that
no new one meets one of those. Otherwise a new file (reset, checkpoint
load) has freed the pile already: forget_trash.

Only what refers to nothing outside the pile is discarded (what the undo of
a create or copy checks, or makes so first:
tools.datablocks.remove_created_object), so every other datablock's user
count stays true; a part of the pile freed before the rest at most clears
references within the pile. The one exception, the void mesh an undone
linked copy takes (void_mesh), is the bridge's own and is freed with the
last of the pile.
"""

import bpy

from common import TOMB_PREFIX
from compat import ID_COLLECTIONS, collection_of, remove_ids

TRASH = {"ids": [], "n": 0}
VOID = {}  # "mesh": void_mesh's, while its file is loaded
TRASH_MAX = 256
RECLAIM_CHUNK = 8  # per step: a request that comes meanwhile waits for one step


def discard(ids):
    """Remove the datablocks ids (None entries skipped; already unlinked and
    unused) from the scene now, and free them with the next empty_trash."""
    for db in ids:
        if db is None:
            continue
        TRASH["n"] += 1
        db.name = "%sx%d" % (TOMB_PREFIX, TRASH["n"])
        TRASH["ids"].append(db)
    _bound()


def void_mesh():
    """An empty mesh of ours, named as a tombstone (left out of every record),
    that a linked copy takes before it is discarded, in place of the mesh it
    shares (tools.datablocks.released_linked). Made when first needed, and
    freed with the last of the pile (empty_trash), so that no python.exec
    meets it (a checkpoint saved meanwhile holds it, as the pile's data)."""
    m = _live_void()
    if m is None:
        m = VOID["mesh"] = bpy.data.meshes.new(TOMB_PREFIX + "void")
    return m


def _live_void():
    m = VOID.get("mesh")
    if m is not None:
        try:
            m.name
            return m
        except ReferenceError:  # freed with its file (reset, load)
            VOID.pop("mesh", None)
    return None


def park(ids):
    """Put datablocks whose name is read-only on the pile as they are: the
    fonts an undone text loaded, which no record or tool names (a curve's
    record names Blender's built-in font by its path). Blender finds its
    built-in font again by that path, so the next text may take one back
    before the pile is freed: take_back."""
    TRASH["ids"].extend(db for db in ids if db is not None)
    _bound()


def take_back(db):
    """Take db off the pile, where park put it; whether it was there."""
    for i, x in enumerate(TRASH["ids"]):
        if x == db:
            del TRASH["ids"][i]
            return True
    return False


def _bound():
    if len(TRASH["ids"]) >= TRASH_MAX:
        empty_trash()


def empty_trash(n=None):
    """Free the n oldest datablocks of the pile; by default all of it, and
    the void mesh with it (in the same walk of Main)."""
    if n is None:
        ids, TRASH["ids"] = TRASH["ids"] + [_live_void()], []
        VOID.pop("mesh", None)
    else:
        ids, TRASH["ids"] = TRASH["ids"][:n], TRASH["ids"][n:]
    remove_ids(ids)


def trash_waiting():
    return bool(TRASH["ids"])


def written():
    """The pile's datablocks a save writes, as [collection, name] pairs for
    the checkpoint's state: those with users, which only the pile's own
    datablocks are."""
    out = []
    for db in TRASH["ids"] + [_live_void()]:
        try:
            coll = collection_of(db) if db is not None and db.users > 0 else None
            if coll is not None:
                out.append([coll, db.name])
        except ReferenceError:  # freed under us (a bug): the save goes on without it
            continue
    return out


def reclaim(pairs):
    """Put back on the pile what written listed, in the checkpoint just
    loaded: it loaded with no users but each other. One pass over each
    collection it names (a lookup by name walks the list: 1 ms each at
    10,000 meshes, a pass 5 ms)."""
    wanted = {}
    for pair in pairs if isinstance(pairs, list) else []:
        if isinstance(pair, list) and len(pair) == 2 and pair[0] in ID_COLLECTIONS and isinstance(pair[1], str):
            wanted.setdefault(pair[0], set()).add(pair[1])
    for coll in sorted(wanted):
        names = wanted[coll]
        TRASH["ids"].extend(db for db in getattr(bpy.data, coll) if db.name in names and not db.use_fake_user)


def trash_counter(at_least=None):
    """The number of the pile's last tombstone name, raised first to
    at_least (the counter saved in a checkpoint being loaded)."""
    if isinstance(at_least, int) and at_least > TRASH["n"]:
        TRASH["n"] = at_least
    return TRASH["n"]


def forget_trash():
    TRASH["ids"] = []
    VOID.pop("mesh", None)
