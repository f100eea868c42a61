"""Lookups that cost what the change costs (INDEX).

In Blender 4.5 ``bpy.data.objects.get(name)`` is a linear scan of the ID list
and ``ob.users_collection`` (a Python property of bpy_types) builds a tuple
of every object of every collection: at 10,000 objects each costs about as
much as everything else a set_transform does, ten times over. INDEX keeps

- names: per bpy.data collection, name -> datablock. A hit is served only
  after checking that the datablock is still valid (a removed ID's Python
  object raises ReferenceError: Blender invalidates it when it frees the ID,
  whatever frees it, on 3.4 and 4.5) and still has that name; anything else
  drops the entry and falls back to bpy.data.<coll>.get(name) (the scan),
  which refreshes it. A miss always scans, so a datablock created behind the
  index's back is found.
- members: object name -> (the object, its sorted collection labels). Served
  only when the entry holds this very object (identity: one Python object per
  ID) and its user count still equals the number of collections (+1 for a
  fake user): a link or unlink the index missed changes the count, and the
  entry is recomputed from users_collection. Tools link and unlink objects
  through link_object / unlink_object, which keep the entry up to date; an
  operator or python.exec that may move objects is followed by a rebuild or
  INDEX.refresh_members().

- children: parent object's pointer -> the objects that had it as parent
  when last seen. Blender has no list of an object's children
  (Object.children scans every object: 1.1 ms at 10,000), so the first
  question builds the whole map in one pass, and tools that give an object
  a parent note it (set_parent, object.duplicate). An entry is served only
  after checking that the child is still valid and still has that parent,
  so children lost behind the index's back drop out; children gained behind
  its back come only from operators and python.exec, which invalidate it.

SceneState.rebuild fills names and members in its single pass; reset,
checkpoint load, python.exec and scene.import rebuild or invalidate them. full_snapshot never
reads INDEX (it recomputes membership in its own pass), so the tests'
"incremental == full" check after every tool also checks the index.
"""

import bpy

from layers import flush_actives, pending_active


def collection_label(coll):
    for sc in bpy.data.scenes:
        if sc.collection == coll:
            return "<scene>:" + sc.name
    return coll.name


class Index:
    def __init__(self):
        self.names = {}    # bpy.data collection name -> {name: ID}
        self.members = {}  # object name -> (object, [labels])
        self.children = None  # parent pointer -> [objects]; None: not built

    def invalidate(self):
        self.names = {}
        self.members = {}
        self.children = None

    def forget_children(self):
        """Parents changed behind the index's back (an importer)."""
        self.children = None

    def children_of(self, ob):
        """ob.children (tombstones included), sorted by name, without a scan
        of every object once the map is built."""
        if self.children is None:
            m = {}
            for c in bpy.data.objects:
                if c.parent is not None:
                    m.setdefault(c.parent.as_pointer(), []).append(c)
            self.children = m
        key = ob.as_pointer()
        out, seen = [], set()
        for c in self.children.get(key, ()):
            try:
                if c.parent == ob and c.as_pointer() not in seen:
                    seen.add(c.as_pointer())
                    out.append(c)
            except ReferenceError:  # freed
                pass
        if out:
            self.children[key] = out
        else:
            self.children.pop(key, None)
        return sorted(out, key=lambda c: c.name)

    def parented(self, ob):
        """Note ob's parent (after ob.parent changed or ob was copied)."""
        if self.children is not None and ob.parent is not None:
            self.children.setdefault(ob.parent.as_pointer(), []).append(ob)

    def get(self, coll, name):
        """bpy.data.<coll>.get(name), from the cache when it is still true."""
        m = self.names.setdefault(coll, {})
        db = m.get(name)
        if db is not None:
            try:
                if db.name == name:
                    return db
            except ReferenceError:  # freed
                pass
            del m[name]
        db = getattr(bpy.data, coll).get(name)
        if db is not None:
            m[name] = db
        return db

    def put(self, coll, db):
        """Note a datablock a tool just created (saves the scan of a miss)."""
        self.names.setdefault(coll, {})[db.name] = db

    def renamed(self, coll, db, old):
        """Note that db, of bpy.data.<coll>, was just renamed from old: its
        next lookups, and its collection labels, need no scan."""
        m = self.names.setdefault(coll, {})
        m.pop(old, None)
        m[db.name] = db
        if coll == "objects":
            e = self.members.pop(old, None)
            if e is not None and e[0] is db:
                self.members[db.name] = e

    def new_object(self, ob):
        """Note an object a tool just created, before it links it anywhere."""
        self.put("objects", ob)
        self.members[ob.name] = (ob, [])

    def labels(self, ob):
        """ob's collection labels, sorted (what users_collection gives)."""
        e = self.members.get(ob.name)
        if e is not None and e[0] is ob and ob.users == len(e[1]) + (1 if ob.use_fake_user else 0):
            return list(e[1])
        labels = sorted(collection_label(c) for c in ob.users_collection)
        self.members[ob.name] = (ob, labels)
        return list(labels)

    def collections_of(self, ob):
        """The collections ob is linked to (users_collection, through labels)."""
        out = []
        for label in self.labels(ob):
            if label.startswith("<scene>:"):
                sc = self.get("scenes", label[len("<scene>:"):])
                c = sc.collection if sc is not None and self.get("collections", label) is None else None
            else:
                c = self.get("collections", label)
            if c is None:  # a label the index cannot resolve: ask Blender
                return list(ob.users_collection)
            out.append(c)
        return out

    def linked(self, ob, coll, linked):
        e = self.members.get(ob.name)
        if e is None or e[0] is not ob:
            return  # unknown: computed when next needed
        label = collection_label(coll)
        labels = [x for x in e[1] if x != label] + ([label] if linked else [])
        self.members[ob.name] = (ob, sorted(labels))

    def refresh_members(self, members=None):
        """Recompute every object's labels in one pass (after an operator)."""
        if members is None:
            members = memberships()
        self.members = {}
        for ob in bpy.data.objects:
            self.members.setdefault(ob.name, (ob, members.get(ob.as_pointer(), [])))


INDEX = Index()


def set_parent(ob, parent):
    """ob.parent = parent, keeping INDEX up to date."""
    ob.parent = parent
    INDEX.parented(ob)


def link_object(coll, ob):
    """coll.objects.link(ob), keeping INDEX up to date."""
    coll.objects.link(ob)
    INDEX.linked(ob, coll, True)


def unlink_object(coll, ob):
    """coll.objects.unlink(ob), keeping INDEX up to date."""
    if pending_active(ob):
        flush_actives()  # while ob still has its base: the unlink may take it away
    coll.objects.unlink(ob)
    INDEX.linked(ob, coll, False)


def memberships():
    """Object pointer -> sorted collection labels, in one pass over the scenes'
    master collections and bpy.data.collections (users_collection for all)."""
    out = {}
    for sc in bpy.data.scenes:
        label = "<scene>:" + sc.name
        for o in sc.collection.objects:
            out.setdefault(o.as_pointer(), []).append(label)
    for c in bpy.data.collections:
        label = collection_label(c)
        for o in c.objects:
            out.setdefault(o.as_pointer(), []).append(label)
    for labels in out.values():
        labels.sort()
    return out
