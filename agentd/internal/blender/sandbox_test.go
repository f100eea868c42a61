package blender

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// Tests of the files tools read and write in the session sandbox
// (bridge/sandbox.py, the reference checks of bridge/tools/io.py, Tx.wrote).

const triangleOBJ = "v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n"

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func writePNG(t *testing.T, path string) {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewGray(image.Rect(0, 0, 2, 2))); err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, b.String())
}

// startInSandbox is startTestProcess with the path of its sandbox (results
// name files by their plain names only).
func startInSandbox(t *testing.T, rt Runtime) (*Process, string) {
	t.Helper()
	p, dir := startWith(t, rt, func(*Options) {})
	return p, filepath.Join(dir, "sandbox")
}

// TestImportReferenceParsing: scene.import reads OBJ and MTL files as
// Blender's importer does to find the files they refer to (leading blanks
// and tabs, bytes Blender counts as blanks, line continuations, several
// names on one statement, quotes, texture options, other statements that
// name files, the default <stem>.mtl, symlinks) and refuses, before the
// importer reads anything, every reference that leaves the sandbox; files
// that stay inside still import.
func TestImportReferenceParsing(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p, sandbox := startInSandbox(t, rt)
		outside := filepath.Dir(sandbox) // "../" from the sandbox
		writeFile(t, filepath.Join(outside, "evil.mtl"), "newmtl Evil\nKd 1 0 0\n")
		writePNG(t, filepath.Join(outside, "evil.png"))
		writePNG(t, filepath.Join(outside, "evil b.png"))
		if err := os.Symlink(filepath.Join(outside, "evil.mtl"), filepath.Join(sandbox, "link.mtl")); err != nil {
			t.Fatal(err)
		}

		objs := map[string]string{
			"tab":          "\tmtllib\t../evil.mtl\n",
			"exported":     "o x\n\tmtllib\t../evil.mtl\n", // an object named "x\n\tmtllib\t../evil.mtl"
			"blank_bytes":  "\xc2\xa0mtllib ../evil.mtl\n",
			"continuation": "mtllib ok.mtl \\\n  ../evil.mtl\n",
			"two_names":    "mtllib ok.mtl ../evil.mtl\n",
			"quoted":       "mtllib \"../evil.mtl\"\n",
			"upper":        "MTLLIB ../evil.mtl\n",
			"crlf":         "mtllib ../evil.mtl\r\n",
			"dotdot":       "mtllib ..\n",
			"call":         "call ../evil.obj\n",
			"symlink":      "mtllib link.mtl\n",
		}
		mtls := map[string]string{
			"bm":          "map_Kd -bm 1.0 ../evil.png\n",
			"bump":        "  bump -bm 0.5 ../evil.png\n",
			"disp":        "disp ../evil.png\n",
			"refl":        "refl -type sphere ../evil.png\n",
			"space":       "map_Kd ../evil b.png\n", // Blender reads "../evil b.png"
			"tab_map":     "\tmap_Ks\t../evil.png\n",
			"option_only": "map_Kd -o 1 1 1 /abs/evil.png\n",
		}
		for name, mtl := range mtls {
			writeFile(t, filepath.Join(sandbox, "m_"+name+".mtl"), "newmtl M\nKd 1 1 1\n"+mtl)
			objs["mtl_"+name] = "mtllib m_" + name + ".mtl\nusemtl M\n"
		}
		// Blender loads <stem>.mtl without any mtllib.
		writeFile(t, filepath.Join(sandbox, "stem.mtl"), "newmtl M\nmap_Kd ../evil.png\n")
		writeFile(t, filepath.Join(sandbox, "stem.obj"), "usemtl M\n"+triangleOBJ)
		if err := os.Symlink(filepath.Join(outside, "evil.mtl"), filepath.Join(sandbox, "stemlink.mtl")); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(sandbox, "stemlink.obj"), triangleOBJ)

		var inputs []string
		for name, head := range objs {
			writeFile(t, filepath.Join(sandbox, "o_"+name+".obj"), head+triangleOBJ)
			inputs = append(inputs, "o_"+name+".obj")
		}
		sort.Strings(inputs)
		inputs = append(inputs, "stem.obj", "stemlink.obj")
		for _, in := range inputs {
			te := wantToolError(t, p, "scene.import", kv{"format": "obj", "input": in}, CodePolicyRefused)
			if strings.Contains(te.Message, "refers to a file outside") { // the check after importing
				t.Errorf("%s: refused only after the importer read it: %s", in, te.Message)
			}
		}

		// Inside the sandbox: options, several statements, the default .mtl.
		writePNG(t, filepath.Join(sandbox, "tex.png"))
		writeFile(t, filepath.Join(sandbox, "good.mtl"), "newmtl Good\nKd 1 1 1\nmap_Kd -bm 1.0 -o 0 0 0 tex.png\n\tbump -bm 0.5 tex.png\n")
		writeFile(t, filepath.Join(sandbox, "good.obj"), "# a comment\n  mtllib good.mtl\nusemtl Good\n"+triangleOBJ)
		out := mustExecute(t, p, "scene.import", kv{"format": "obj", "input": "good.obj"})
		if !reflect.DeepEqual(out.Fields()["objects"], []any{"good"}) {
			t.Errorf("good.obj imported %v", out.Fields())
		}
		s := assertIncrementalMatchesFull(t, p)
		if record(t, s, "materials", "Good") == nil {
			t.Errorf("good.mtl not loaded")
		}
	})
}

// TestOutputDirectoryConflict: an output file name that a directory in the
// sandbox has is refused with conflict, naming the argument, before
// anything changes, by every tool that writes files.
func TestOutputDirectoryConflict(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p, sandbox := startInSandbox(t, rt)
		for _, d := range []string{"still.png", "anim_0002.png", "shot.png.partial.png", "scene.obj", "comp.mtl", "scene.glb"} {
			if err := os.Mkdir(filepath.Join(sandbox, d), 0o700); err != nil {
				t.Fatal(err)
			}
		}
		small := kv{"resolution": []any{16, 16}, "samples": 1}
		with := func(extra kv) kv {
			out := kv{}
			for k, v := range small {
				out[k] = v
			}
			for k, v := range extra {
				out[k] = v
			}
			return out
		}
		for _, c := range []struct {
			tool string
			args kv
			arg  string
		}{
			{"render.still", with(kv{"output": "still.png"}), "output"},
			{"render.still", with(kv{"output": "shot.png"}), "output"}, // its temporary file
			{"render.animation", with(kv{"output_prefix": "anim", "frame_start": 1, "frame_end": 2}), "output_prefix"},
			{"scene.export", kv{"format": "obj", "output": "scene.obj"}, "output"},
			{"scene.export", kv{"format": "obj", "output": "comp.obj"}, "output"}, // its .mtl
			{"scene.export", kv{"format": "gltf", "output": "scene.glb"}, "output"},
		} {
			if c.args["format"] == "gltf" && rt.Kind == RuntimeBinary {
				continue // Debian's 3.4 may lack glTF: capability_missing first
			}
			te := wantToolError(t, p, c.tool, c.args, CodeConflict)
			if !strings.HasPrefix(te.Message, c.arg) || !strings.Contains(te.Message, "directory") {
				t.Errorf("%s %v: message %q does not name %s", c.tool, c.args, te.Message, c.arg)
			}
		}
		for _, f := range []string{"anim_0001.png", "comp.obj", "shot.png"} {
			if _, err := os.Stat(filepath.Join(sandbox, f)); err == nil {
				t.Errorf("a refused call left %s behind", f)
			}
		}
	})
}

// TestFilesReported: Outcome.Files names the files a call wrote into the
// sandbox (Execute and ExecuteBatch) with their sizes and hashes, each
// linked under its hash in the kept directory beside the sandbox; other
// tools report none. A call that fails after writing leaves no file:
// TestBridgeTransactions.
func TestFilesReported(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p, dir := startWith(t, rt, func(*Options) {})
		// reported checks the names of what a call reported and that each is
		// the sandbox's file, kept.
		reported := func(what string, files []File, want ...string) {
			t.Helper()
			var names []string
			for _, f := range files {
				names = append(names, f.Name)
				path := filepath.Join(dir, "sandbox", f.Name)
				fi, err := os.Stat(path)
				if err != nil || fi.Size() != f.Size || fileSHA(t, path) != f.SHA256 || fileSHA(t, filepath.Join(dir, "kept", f.SHA256)) != f.SHA256 {
					t.Errorf("%s: %+v is not the sandbox's file, kept: %v", what, f, err)
				}
			}
			if !reflect.DeepEqual(names, want) {
				t.Errorf("%s files %v, want %v", what, names, want)
			}
		}
		small := kv{"resolution": []any{16, 16}, "samples": 1}
		still := mustExecute(t, p, "render.still", kv{"output": "a.png", "resolution": small["resolution"], "samples": 1})
		reported("render.still", still.Files, "a.png")
		anim := mustExecute(t, p, "render.animation", kv{"output_prefix": "f", "frame_start": 3, "frame_end": 4, "resolution": small["resolution"], "samples": 1})
		reported("render.animation", anim.Files, "f_0003.png", "f_0004.png")
		exp := mustExecute(t, p, "scene.export", kv{"format": "obj", "output": "x.obj"})
		reported("scene.export", exp.Files, "x.mtl", "x.obj")
		if out := mustExecute(t, p, "object.create", kv{"type": "cube"}); out.Files != nil {
			t.Errorf("object.create files %v", out.Files)
		}
		var got []BatchResult
		p.ExecuteBatch(callCtx(t), []Call{
			{Tool: "scene.get_summary"},
			{Tool: "render.still", Args: kv{"output": "b.png", "resolution": small["resolution"], "samples": 1}},
		}, func(i int, r BatchResult) bool { got = append(got, r); return true })
		if len(got) != 2 || got[1].Err != nil || got[0].Outcome.Files != nil {
			t.Fatalf("batch files: %+v", got)
		}
		reported("the batch's render.still", got[1].Outcome.Files, "b.png")
	})
}

// TestFilesKept: a version of a file that a later call replaced stays
// linked under its hash, with its content, for the control plane to take
// (bridge/sandbox.py, keep); the same bytes written again are kept as the
// sandbox's file, not as the one it replaced, which would then take room
// of its own (agentd trims what the sandbox no longer holds:
// sessions.TestKeptWithinTheCeiling).
func TestFilesKept(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p, dir := startWith(t, rt, func(*Options) {})
		mustExecute(t, p, "object.create", kv{"type": "cube", "name": "Box"})
		var versions [][]File
		for i := range 2 {
			mustExecute(t, p, "object.set_transform", kv{"name": "Box", "location": []any{float64(i), 0, 0}})
			versions = append(versions, mustExecute(t, p, "scene.export", kv{"format": "obj", "output": "x.obj"}).Files)
		}
		// x.mtl, then x.obj, each time: the material library is the same
		// bytes, the model is not.
		if len(versions[0]) != 2 || versions[0][0] != versions[1][0] || versions[0][1].SHA256 == versions[1][1].SHA256 {
			t.Fatalf("exports: %+v", versions)
		}
		kept := func(f File) os.FileInfo {
			t.Helper()
			path := filepath.Join(dir, "kept", f.SHA256)
			fi, err := os.Stat(path)
			if err != nil || fileSHA(t, path) != f.SHA256 {
				t.Fatalf("%s kept: %v", f.Name, err)
			}
			return fi
		}
		kept(versions[0][1]) // the first model, which the sandbox no longer holds
		for _, f := range versions[1] {
			fi, err := os.Stat(filepath.Join(dir, "sandbox", f.Name))
			if err != nil || !os.SameFile(kept(f), fi) {
				t.Errorf("%s kept is not the sandbox's file: %v", f.Name, err)
			}
		}
	})
}

// TestFilesNamedPlainly: results and errors name a file of the sandbox by
// its plain name, never by the agent's path to it (the host's layout,
// which differs between hosts and sessions): an export's file and its
// companions, and an error whose text (Blender's or a script's) holds
// such a path.
func TestFilesNamedPlainly(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p, sandbox := startInSandbox(t, rt)
		mustExecute(t, p, "object.create", kv{"type": "cube", "name": "Box"})
		mustExecute(t, p, "material.create", kv{"name": "Paint"})
		mustExecute(t, p, "material.assign", kv{"object": "Box", "material": "Paint"})
		out := mustExecute(t, p, "scene.export", kv{"format": "obj", "output": "box.obj"})
		if got := fmt.Sprint(out.Fields()["path"], " ", out.Fields()["files"]); got != "box.obj [box.obj box.mtl]" {
			t.Errorf("export result: path and files %s, want box.obj [box.obj box.mtl]", got)
		}
		in := mustExecute(t, p, "scene.import", kv{"format": "obj", "input": "box.obj"})
		if in.Fields()["path"] != "box.obj" {
			t.Errorf("import result: path %v, want box.obj", in.Fields()["path"])
		}
		te := wantToolError(t, p, "python.exec", kv{"code": `import os, sandbox; raise RuntimeError("cannot read " + os.path.join(sandbox.SANDBOX["dir"], "x.png"))`}, CodeInvalidInput)
		if !strings.Contains(te.Message, "cannot read x.png") || strings.Contains(te.Message, sandbox) {
			t.Errorf("an error naming a file of the sandbox: %q", te.Message)
		}
		te = wantToolError(t, p, "python.exec", kv{"code": `import os, sandbox; raise RuntimeError("cannot load " + os.path.join(os.path.dirname(sandbox.SANDBOX["dir"]), "checkpoint-00000001.blend"))`}, CodeInvalidInput)
		if !strings.Contains(te.Message, "cannot load checkpoint-00000001.blend") || strings.Contains(te.Message, filepath.Dir(sandbox)) {
			t.Errorf("an error naming a file of the session's directory: %q", te.Message)
		}
	})
}

// TestExportsNameNoAgentPath: an OBJ's .mtl names its texture by its name,
// and its header names no checkpoint file, in a session restored from one
// as in a fresh one; an FBX names its texture by its name too (the
// exporter writes an absolute FileName whatever its path mode).
func TestExportsNameNoAgentPath(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p, sandbox := startInSandbox(t, rt)
		writePNG(t, filepath.Join(sandbox, "shot.png"))
		writeFile(t, filepath.Join(sandbox, "tex.obj"), "mtllib tex.mtl\no Tex\nv 0 0 0\nv 1 0 0\nv 0 1 0\nvt 0 0\nvt 1 0\nvt 0 1\nusemtl Paint\nf 1/1 2/2 3/3\n")
		writeFile(t, filepath.Join(sandbox, "tex.mtl"), "newmtl Paint\nKd 1 0 0\nmap_Kd shot.png\n")
		mustExecute(t, p, "scene.import", kv{"format": "obj", "input": "tex.obj"})
		mtl := func(p *Process, dir string) []byte {
			t.Helper()
			mustExecute(t, p, "scene.export", kv{"format": "obj", "output": "same.obj"})
			raw, err := os.ReadFile(filepath.Join(dir, "same.mtl"))
			if err != nil {
				t.Fatal(err)
			}
			return raw
		}
		fresh := mtl(p, sandbox)
		if bytes.Contains(fresh, []byte(sandbox)) || !bytes.Contains(fresh, []byte("map_Kd shot.png")) {
			t.Errorf("the .mtl names the agent's path, or not its texture:\n%s", fresh)
		}
		mustExecute(t, p, "scene.export", kv{"output": "same.fbx"})
		if raw, err := os.ReadFile(filepath.Join(sandbox, "same.fbx")); err != nil || bytes.Contains(raw, []byte(filepath.Dir(sandbox))) || !bytes.Contains(raw, []byte("shot.png")) {
			t.Errorf("the .fbx names the agent's path, or not its texture (%v)", err)
		}
		q, dir := startWith(t, rt, func(*Options) {})
		path := filepath.Join(t.TempDir(), "checkpoint-00000007.blend")
		if _, err := p.SaveCheckpoint(callCtx(t), path); err != nil {
			t.Fatal(err)
		}
		if _, err := q.LoadCheckpoint(callCtx(t), path); err != nil {
			t.Fatal(err)
		}
		header := func(raw []byte) string { line, _, _ := bytes.Cut(raw, []byte("\n")); return string(line) }
		if restored := mtl(q, filepath.Join(dir, "sandbox")); header(restored) != header(fresh) || !strings.HasSuffix(header(fresh), "MTL File: 'None'") {
			t.Errorf("a restored session's .mtl header %q, a fresh one's %q", header(restored), header(fresh))
		}
		// An FBX of the restored session names no checkpoint either: the
		// same bytes as the fresh session's (the header named the .blend).
		mustExecute(t, q, "scene.export", kv{"output": "same.fbx"})
		fromFresh, _ := os.ReadFile(filepath.Join(sandbox, "same.fbx"))
		fromRestored, err := os.ReadFile(filepath.Join(dir, "sandbox", "same.fbx"))
		if err != nil || !bytes.Equal(fromFresh, fromRestored) || bytes.Contains(fromRestored, []byte("checkpoint-")) {
			t.Errorf("a restored session's .fbx differs from a fresh one's, or names its checkpoint (%v)", err)
		}
		// A .usda names the texture by its plain name, and imports again
		// (it named ./textures/shot.png, which no export writes: refused).
		if _, err := p.Execute(callCtx(t), Call{Tool: "scene.export", Args: kv{"output": "tex.usda"}}); err == nil {
			raw, _ := os.ReadFile(filepath.Join(sandbox, "tex.usda"))
			if !bytes.Contains(raw, []byte("@shot.png@")) || bytes.Contains(raw, []byte("textures/")) {
				t.Errorf("the .usda names its texture:\n%s", raw)
			}
			mustExecute(t, p, "scene.import", kv{"input": "tex.usda"})
		} else if !isCode(err, CodeCapabilityMissing) {
			t.Fatal(err)
		}
	})
}

// TestImportedImagesTravel: the pixels of a texture an import read are in
// the scene (packed), so a checkpoint loaded where the texture's file is
// gone (another agent, a fork whose parent closed) still has them, and so
// do its exports to formats that carry textures (.glb, .gltf, .fbx), in
// the export's own files.
func TestImportedImagesTravel(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p, sandbox := startInSandbox(t, rt)
		writeColorPNG(t, filepath.Join(sandbox, "shot.png"), color.RGBA{R: 255, A: 255})
		writeFile(t, filepath.Join(sandbox, "tex.obj"), "mtllib tex.mtl\no Tex\nv 0 0 0\nv 1 0 0\nv 0 1 0\nvt 0 0\nvt 1 0\nvt 0 1\nusemtl Paint\nf 1/1 2/2 3/3\n")
		writeFile(t, filepath.Join(sandbox, "tex.mtl"), "newmtl Paint\nKd 1 0 0\nmap_Kd shot.png\n")
		if out := mustExecute(t, p, "scene.import", kv{"format": "obj", "input": "tex.obj"}); fmt.Sprint(out.Fields()["textures_not_found"]) != "[]" {
			t.Errorf("an import whose texture is there: textures_not_found %v", out.Fields()["textures_not_found"])
		}
		// A texture no one uploaded: the import says so.
		writeFile(t, filepath.Join(sandbox, "bare.obj"), "mtllib bare.mtl\no Bare\nv 0 0 0\nv 1 0 0\nv 0 1 0\nusemtl Bare\nf 1 2 3\n")
		writeFile(t, filepath.Join(sandbox, "bare.mtl"), "newmtl Bare\nmap_Kd missing.png\n")
		if out := mustExecute(t, p, "scene.import", kv{"format": "obj", "input": "bare.obj"}); fmt.Sprint(out.Fields()["textures_not_found"]) != "[missing.png]" {
			t.Errorf("an import whose texture is missing: textures_not_found %v", out.Fields()["textures_not_found"])
		}
		if err := os.Remove(filepath.Join(sandbox, "shot.png")); err != nil {
			t.Fatal(err)
		}

		path := filepath.Join(t.TempDir(), "checkpoint-00000003.blend")
		if _, err := p.SaveCheckpoint(callCtx(t), path); err != nil {
			t.Fatal(err)
		}
		q, dir := startWith(t, rt, func(*Options) {})
		if _, err := q.LoadCheckpoint(callCtx(t), path); err != nil {
			t.Fatal(err)
		}
		// Its images name this session's files now (a texture the import
		// did not find is taken from here once uploaded).
		named := string(execResult(t, q, `
import os, sandbox
result = sorted(im.filepath_raw == os.path.join(os.path.realpath(sandbox.SANDBOX["dir"]), os.path.basename(im.filepath_raw)) for im in bpy.data.images if im.filepath_raw)`))
		if named != "[true,true]" {
			t.Errorf("after the load, the images name this sandbox's files: %s, want [true,true]", named)
		}
		if rt.Kind != RuntimeBinary { // 3.4's OBJ importer makes a missing texture a generated image, which no file fills
			writeColorPNG(t, filepath.Join(dir, "sandbox", "missing.png"), color.RGBA{G: 255, A: 255})
			if late := string(execResult(t, q, `result = [round(v, 3) for v in bpy.data.images["missing.png"].pixels[:4]]`)); late != "[0,1,0,1]" {
				t.Errorf("a missing texture uploaded after the move reads %s", late)
			}
			os.Remove(filepath.Join(dir, "sandbox", "missing.png"))
		}
		pixel := string(execResult(t, q, `result = [round(v, 3) for v in bpy.data.images["shot.png"].pixels[:4]]`))
		if red := "[1,0,0,1]"; pixel != red {
			t.Errorf("loaded where the texture's file is gone, the image reads %s, want %s", pixel, red)
		}
		mustExecute(t, q, "scene.export", kv{"format": "gltf", "output": "moved.glb"})
		raw, err := os.ReadFile(filepath.Join(dir, "sandbox", "moved.glb"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(raw, []byte("image/png")) {
			t.Errorf("a .glb exported after the move holds no image")
		}
		// A .gltf carries it too, as a data: URI, in its own two files; and
		// imported again, it has the same pixels.
		out := mustExecute(t, q, "scene.export", kv{"format": "gltf", "output": "moved.gltf"})
		if fmt.Sprint(out.Fields()["files"]) != "[moved.gltf moved.bin]" {
			t.Errorf("a .gltf export wrote %v", out.Fields()["files"])
		}
		if again := mustExecute(t, q, "scene.export", kv{"format": "gltf", "output": "moved.gltf"}); again.Fields()["sha256"] != out.Fields()["sha256"] {
			t.Errorf("two .gltf exports of one scene differ: %v, %v", out.Fields()["sha256"], again.Fields()["sha256"])
		}
		entries, _ := os.ReadDir(filepath.Join(dir, "sandbox"))
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		if fmt.Sprint(names) != "[moved.bin moved.glb moved.gltf]" {
			t.Errorf("the sandbox holds %v after the exports", names)
		}
		raw, err = os.ReadFile(filepath.Join(dir, "sandbox", "moved.gltf"))
		if err != nil || !bytes.Contains(raw, []byte(`"uri":"data:image/png;base64,`)) {
			t.Errorf("the .gltf holds no image (%v):\n%.600s", err, raw)
		}
		mustExecute(t, q, "scene.import", kv{"input": "moved.gltf"}) // its format, from its extension
		again := string(execResult(t, q, `result = sorted([im.name, [round(v, 3) for v in im.pixels[:4]]] for im in bpy.data.images if im.name not in ("shot.png", "missing.png") and im.type == "IMAGE")`))
		if again != `[["shot",[1,0,0,1]]]` {
			t.Errorf("the .gltf imported again has images %s, want shot, red", again)
		}
		// An .fbx embeds it, and writes no other file.
		out = mustExecute(t, q, "scene.export", kv{"output": "moved.fbx"})
		if fmt.Sprint(out.Fields()["files"]) != "[moved.fbx]" {
			t.Errorf("an .fbx export wrote %v", out.Fields()["files"])
		}
		r, rdir := startWith(t, rt, func(*Options) {})
		if err := os.Rename(filepath.Join(dir, "sandbox", "moved.fbx"), filepath.Join(rdir, "sandbox", "moved.fbx")); err != nil {
			t.Fatal(err)
		}
		mustExecute(t, r, "scene.import", kv{"format": "fbx", "input": "moved.fbx"})
		fromFBX := string(execResult(t, r, `result = sorted([round(v, 3) for v in im.pixels[:4]] for im in bpy.data.images if im.type == "IMAGE")`))
		if fromFBX != `[[],[1,0,0,1],[1,0,0,1]]` { // missing.png's (no pixels), the .obj's image and the .gltf's
			t.Errorf("the .fbx imported in another session has images %s, want two red and the missing one", fromFBX)
		}
	})
}

func writeColorPNG(t *testing.T, path string, c color.RGBA) {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 2, 2))
	for i := 0; i < 4; i++ {
		img.Set(i%2, i/2, c)
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, b.String())
}

// TestImportAgainReadsTheFileAnew: importing a model again after its
// texture was uploaded anew takes the new pixels, into images of its own;
// the first import's keep theirs (Blender reuses an image loaded from the
// same path, which the first import had packed as the file was then).
func TestImportAgainReadsTheFileAnew(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p, sandbox := startInSandbox(t, rt)
		writeFile(t, filepath.Join(sandbox, "tex.obj"), "mtllib tex.mtl\no Tex\nv 0 0 0\nv 1 0 0\nv 0 1 0\nvt 0 0\nvt 1 0\nvt 0 1\nusemtl Paint\nf 1/1 2/2 3/3\n")
		writeFile(t, filepath.Join(sandbox, "tex.mtl"), "newmtl Paint\nKd 1 0 0\nmap_Kd shot.png\n")
		for _, c := range []color.RGBA{{R: 255, A: 255}, {B: 255, A: 255}} {
			writeColorPNG(t, filepath.Join(sandbox, "shot.png"), c)
			mustExecute(t, p, "scene.import", kv{"input": "tex.obj"})
		}
		got := string(execResult(t, p, `result = sorted([im.name, [round(v, 3) for v in im.pixels[:4]]] for im in bpy.data.images if im.type == "IMAGE")`))
		if want := `[["shot.png",[1,0,0,1]],["shot.png.001",[0,0,1,1]]]`; got != want {
			t.Errorf("images after two imports of a texture uploaded anew between them: %s, want %s", got, want)
		}
	})
}
