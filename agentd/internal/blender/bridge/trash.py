"""Datablocks an undo removed, freed later. Freeing one makes Blender walk all
of Main to clear references to it (12 ms at 10,000 objects), so undoing a
create would grow with the scene. discard renames them out of sight (a
tombstone name: left out of the snapshot, the hash and every tool) and
empty_trash frees the pile in one walk: once TRASH_MAX have gathered,
before a checkpoint is saved and before scene.export (no file ever holds
one), and before python.exec (which could free them under us). A new file
(reset, checkpoint load) has freed them already: forget_trash. Only what
refers to nothing outside the pile is discarded (an undo runs in reverse
order, so a create's object and data are as fresh as when made), so every
other datablock's user count stays true.
"""

from common import TOMB_PREFIX
from compat import remove_ids

TRASH = {"ids": [], "n": 0}
TRASH_MAX = 256


def discard(ids):
    """Remove the datablocks ids (None entries skipped; already unlinked and
    unused) from the scene now, and free them with the next empty_trash."""
    for db in ids:
        if db is None:
            continue
        TRASH["n"] += 1
        db.name = "%sx%d" % (TOMB_PREFIX, TRASH["n"])
        TRASH["ids"].append(db)
    if len(TRASH["ids"]) >= TRASH_MAX:
        empty_trash()


def empty_trash():
    ids, TRASH["ids"] = TRASH["ids"], []
    remove_ids(ids)


def forget_trash():
    TRASH["ids"] = []
