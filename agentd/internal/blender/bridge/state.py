"""The scene's state: per-datablock digests of the scene_state_v1 records
(records.py) and the running multiset hash (STATE), and the full snapshot.

Each record is encoded as JSON with sorted keys, separators ``(",", ":")`` and
ASCII escapes; its digest is the SHA-256 of that encoding.

    acc        = sum(int(sha256(key + "\\0" + digest), 16) for every record) mod 2**256
    scene_hash = sha256("scene_state_v1:" + "%064x" % acc)   (lowercase hex)

``acc`` is a multiset hash: a tool reports the keys it touched, and only those
records are re-digested (subtract the old term, add the new one). ``snapshot``
recomputes everything from scratch. Tombstones (tools/objects.py) are not in the state.
"""

import hashlib

import bpy

import phases
from common import canonical, sha256_hex
from index import INDEX, memberships
from layers import flush_actives
from records import KINDS, all_records, all_records_with, record_of

SCHEMA = "scene_state_v1"
BRIDGE = {"tomb_counter": 0}  # per-session bridge state; saved inside checkpoints


def record_digest(rec):
    """A record's digest: the SHA-256 of its canonical JSON."""
    return sha256_hex(canonical(rec))


def term(key, digest):
    return int.from_bytes(hashlib.sha256((key + "\0" + digest).encode("utf-8")).digest(), "big")


def hash_from_acc(acc):
    return sha256_hex(SCHEMA + ":" + "%064x" % acc)


def full_snapshot():
    """Recompute every record from scratch: (snapshot, scene_hash)."""
    flush_actives()  # Blender's own, not the tools' last word (layers.py)
    snap = {"schema": SCHEMA}
    for _, section, _, _ in KINDS:
        snap[section] = {}
    acc = 0
    for kind, section, name, rec in all_records():
        snap[section][name] = rec
        acc += term(kind + ":" + name, record_digest(rec))
    return snap, hash_from_acc(acc % (1 << 256))


class SceneState:
    """Per-datablock digests and the running multiset hash; and each scene's
    active object as its "active" record last said (active_name)."""

    def __init__(self):
        self.digests = {}
        # Each record's term, kept so that replacing or removing the record
        # takes it out of acc without hashing its old digest again.
        self.terms = {}
        self.acc = 0
        self.hashed = (None, None)  # (acc, scene hash): an execute asks for the hash its predecessor ended with
        self.actives = {}
        # How many records changed digest (made, changed or gone) since the
        # bridge started: what a call changed in Blender's datablocks, which
        # agentd weighs a session's Blender by (its refresh).
        self.changed = 0

    def active_name(self, scene_name):
        """(known, name): the name of the active object of the scene's first
        view layer, as of the end of the last call (what the scene's hash
        holds; the tests' "incremental == full snapshot" check holds it to
        Blender's). Reading it from Blender instead makes Blender resync
        every base of a view layer that a link or unlink left stale
        (layers.py): 0.2-0.4 ms at 10,000 objects."""
        if scene_name in self.actives:
            return True, self.actives[scene_name]
        return False, None

    def rebuild(self):
        """Every digest from scratch, in one pass; refills INDEX."""
        INDEX.invalidate()
        old, changed = self.digests, self.changed
        self.actives = {}
        members = memberships()
        for kind, _, _, coll in KINDS:
            m = INDEX.names.setdefault(coll, {})
            for db in getattr(bpy.data, coll):
                m.setdefault(db.name, db)
        INDEX.refresh_members(members)
        new, terms, acc = {}, {}, 0
        try:
            for kind, _, name, rec in all_records_with(members):  # _record's work, without its updates
                key = kind + ":" + name
                digest = record_digest(rec)
                t = term(key, digest)  # both before either is kept: the two dicts hold the same keys
                new[key], terms[key] = digest, t
                acc += t
                if kind == "active":
                    self.actives[name] = rec["active_object"]
        finally:
            # A record that cannot be hashed (a NaN python.exec wrote) stops
            # the pass: what was hashed so far stands, so the scene hashes
            # as changed (execute's rollback check), never as before.
            self.digests, self.terms, self.acc = new, terms, acc % (1 << 256)
            self.changed = changed + sum(1 for k, d in new.items() if old.get(k) != d) + sum(1 for k in old if k not in new)

    def _set(self, key, digest):
        old = self.digests.get(key)
        if old == digest:
            if old is not None:
                self.digests[key] = self.digests.pop(key)  # moved last, as a new record is; acc and the term stand
            return
        t = term(key, digest) if digest is not None else None  # before any change: it may raise
        self.changed += 1
        if old is not None:
            del self.digests[key]
            self.acc = (self.acc - self.terms.pop(key)) % (1 << 256)
        if digest is not None:
            self.digests[key], self.terms[key] = digest, t
            self.acc = (self.acc + t) % (1 << 256)

    def touch(self, kind, name):
        self._record(kind, name, record_of(kind, name))

    def set_record(self, kind, name, rec):
        """touch(kind, name) with the record in hand (Tx.touch_record), or
        None when there is none (Tx.gone)."""
        self._record(kind, name, rec)

    def _record(self, kind, name, rec):
        t = phases.now() if phases.ON else 0
        self._set(kind + ":" + name, record_digest(rec) if rec is not None else None)
        if t:
            phases.nested(phases.now() - t)
        if kind == "active":
            if rec is None:
                self.actives.pop(name, None)
            else:
                self.actives[name] = rec["active_object"]

    def scene_hash(self):
        acc, h = self.hashed
        if acc != self.acc:
            h = hash_from_acc(self.acc)
            self.hashed = (self.acc, h)
        return h


STATE = SceneState()
