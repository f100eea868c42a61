// Package blender owns agentd's Blender subprocesses: finding a Blender
// runtime (a blender binary or a Python that can import bpy), the embedded
// Python bridge (bridge.py) that implements the tools and the scene hash
// inside Blender, the supervisor that starts and stops Blender, and the
// JSON-lines protocol spoken over the inherited file descriptors 3 (requests)
// and 4 (responses).
//
// A Process is one Blender; calls on it are serialized. Start returns once the
// bridge has answered hello, with the baseline scene loaded (see the docstring
// at the top of bridge.py for the baseline and the scene_state_v1 hash).
//
// Crash safety and rollback: Execute returns, for every mutating tool, a
// compensation (Outcome.Undo) that Process.Undo applies at the cost of the
// change; object.delete tombstones objects instead of freeing them so that
// it can be undone (tombstones are hidden from the hash and the tools and
// live until the session ends). SaveCheckpoint and LoadCheckpoint write and
// read atomic .blend checkpoints that hash exactly as when saved, so a
// session can load its last checkpoint and replay its journal.
package blender
