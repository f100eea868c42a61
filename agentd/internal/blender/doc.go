// Package blender owns agentd's Blender subprocesses: finding a Blender
// runtime (a blender binary or a Python that can import bpy), the embedded
// Python bridge package (bridge/, see BridgeFS) that implements the tools and
// the scene hash inside Blender, the supervisor that starts and stops Blender, and the
// JSON-lines protocol spoken over the inherited file descriptors 3 (requests)
// and 4 (responses).
//
// A Process is one Blender; calls on it are serialized. Start returns once the
// bridge has answered hello, with the baseline scene loaded (see the docstrings
// of bridge/baseline.py for the baseline, bridge/records.py for the
// scene_state_v1 records and bridge/state.py for the hash).
//
// The bridge package: bridge/main.py (transport, methods, checkpoints),
// common.py, compat.py (Blender 3.4 / 4.5 differences, version ranges),
// baseline.py, records.py, index.py, trash.py and state.py (the baseline
// scene, the records, lookups, deferred frees, the hash), animation.py and
// window.py (animated values and the window's scene across Blender's
// evaluations), schema.py (argument checker),
// registry.py (the tool registry and the API tool modules use: read its
// docstring before adding a tool), sandbox.py (file names inside the session
// sandbox) and tools/ (one module per tool family, listed in
// tools/__init__.py). Start writes it to WorkDir/bridge/, or once to the
// CacheDir the agent's Blenders share, with their Python bytecode (cache.go),
// and runs bridge/main.py. A tool may report progress while it runs (Call.OnProgress)
// and reports the files it wrote into SandboxDir (Outcome.Files). Blender
// writes nothing outside WorkDir, SandboxDir and CacheDir: HOME, the XDG base
// directories and TMPDIR point into WorkDir, and checkpoints carry no
// preview (no thumbnail cache).
//
// Crash safety and rollback: Execute returns, for every mutating tool, a
// compensation (Outcome.Undo) that Process.Undo applies at the cost of the
// change; object.delete tombstones objects instead of freeing them so that
// it can be undone (tombstones are hidden from the hash and the tools and
// live until the session ends). SaveCheckpoint and LoadCheckpoint write and
// read atomic .blend checkpoints that hash exactly as when saved, so a
// session can load its last checkpoint and replay its journal.
//
// Hardening: no .blend file runs code (the binary gets --disable-autoexec,
// the bridge keeps the auto-run preference off and reports it, Start refuses
// a Blender that has it on, checkpoints load with use_scripts=False); and
// Options.MemoryLimitMiB caps Blender's memory with a cgroup (v2, else v1)
// or RLIMIT_DATA (memcap.go). Over the cap Blender is stopped and the call
// fails with ErrMemoryExceeded.
package blender
