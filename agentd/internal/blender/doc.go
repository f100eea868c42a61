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
package blender
