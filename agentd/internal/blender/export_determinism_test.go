package blender

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestExportsSameAcrossProcesses: the same calls in two sessions (two
// Blender processes, two sandboxes) export the same bytes in every format
// this Blender has. Each process has its own randomized address space, and
// Blender orders some things by address (create_uvsphere's faces, the USD
// exporter's prims); the FBX exporter took its object ids from Python's
// per-process string hashes, its creation time from the clock and its
// textures' FileName from the agent's path: a sphere's OBJ and glTF, every
// FBX and every USD file with more than one object differed between
// sessions.
func TestExportsSameAcrossProcesses(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		outputs := []string{"d.obj", "d.mtl", "d.glb", "d.gltf", "d.bin", "d.fbx", "d.usda"}
		var runs []map[string]string
		for run := 0; run < 2; run++ {
			p, sandbox := startInSandbox(t, rt)
			for i, typ := range []string{"cone", "cube", "cylinder", "ico_sphere", "monkey", "plane", "torus", "uv_sphere"} {
				mustExecute(t, p, "object.create", map[string]any{"type": typ, "name": typ, "location": []any{float64(3 * i), 0, 0}})
			}
			mustExecute(t, p, "material.create", map[string]any{"name": "Red", "base_color": []any{0.8, 0.1, 0.1, 1}})
			mustExecute(t, p, "material.assign", map[string]any{"object": "uv_sphere", "material": "Red"})
			mustExecute(t, p, "modifier.add", map[string]any{"object": "monkey", "type": "subdivision", "levels": 1})
			mustExecute(t, p, "text.create", map[string]any{"name": "Label", "body": "Same"})
			// A textured model, imported: its texture is in each session's
			// own sandbox, at another path on the agent.
			writePNG(t, filepath.Join(sandbox, "shot.png"))
			writeFile(t, filepath.Join(sandbox, "tex.obj"), "mtllib tex.mtl\no Tex\nv 0 0 0\nv 1 0 0\nv 0 1 0\nvt 0 0\nvt 1 0\nvt 0 1\nusemtl Paint\nf 1/1 2/2 3/3\n")
			writeFile(t, filepath.Join(sandbox, "tex.mtl"), "newmtl Paint\nKd 1 0 0\nmap_Kd shot.png\n")
			mustExecute(t, p, "scene.import", map[string]any{"input": "tex.obj"})
			// Custom properties with multi-line strings: the USD exporter
			// writes them triple-quoted, lines the prims' sort must read as
			// text.
			execResult(t, p, `bpy.data.objects["cube"]["note"] = 'one\n    }\n    def Xform "zz"\n    {'`+"\n"+`bpy.data.objects["torus"]["note"] = "a\nb"`)
			got := map[string]string{}
			for _, out := range []string{"d.obj", "d.glb", "d.gltf", "d.fbx", "d.usda"} {
				if _, err := p.Execute(callCtx(t), Call{Tool: "scene.export", Args: map[string]any{"output": out}}); err != nil {
					if isCode(err, CodeCapabilityMissing) {
						continue // Debian's 3.4: no USD (and no glTF without numpy)
					}
					t.Fatalf("export %s: %v", out, err)
				}
			}
			for _, out := range outputs {
				if path := filepath.Join(sandbox, out); exists(path) {
					got[out] = fileSHA(t, path)
				}
			}
			if got["d.usda"] != "" { // still the scene: its prims sorted, the strings whole
				objects := fmt.Sprint(mustExecute(t, p, "scene.import", map[string]any{"input": "d.usda"}).Fields()["objects"])
				for _, name := range []string{"cone", "cube", "cylinder", "torus", "uv_sphere", "Tex"} {
					if !strings.Contains(objects, name+".001") {
						t.Errorf("the .usda imported again lacks %s: %s", name, objects)
					}
				}
			}
			runs = append(runs, got)
		}
		if len(runs[0]) < 3 {
			t.Fatalf("only %d files exported: %v", len(runs[0]), runs[0])
		}
		for _, out := range outputs {
			if a, b := runs[0][out], runs[1][out]; a != b {
				t.Errorf("%s: %s in one process, %s in another", out, a, b)
			} else if a != "" {
				t.Logf("%s: %s", out, a)
			}
		}
	})
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
