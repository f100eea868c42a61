package blender

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// geometryDigest is records.py's geometry_sha256, computed here from the
// spec (records.py's docstring) and not from the bridge's code: each
// coordinate as round(x * 1e5), then "|", then each face's vertex indices
// rotated to start at its lowest, faces sorted.
func geometryDigest(co [][3]float64, faces [][]int) string {
	var parts []string
	for _, v := range co {
		for _, x := range v {
			f32 := float64(float32(x)) // Blender stores float32
			parts = append(parts, strconv.FormatInt(int64(math.RoundToEven(f32*100000)), 10))
		}
	}
	var fs [][]int
	for _, f := range faces {
		k := slices.Index(f, slices.Min(f))
		fs = append(fs, append(slices.Clone(f[k:]), f[:k]...))
	}
	slices.SortFunc(fs, slices.Compare)
	var ftext []string
	for _, f := range fs {
		var s []string
		for _, i := range f {
			s = append(s, strconv.Itoa(i))
		}
		ftext = append(ftext, strings.Join(s, ","))
	}
	sum := sha256.Sum256([]byte(strings.Join(parts, ",") + "|" + strings.Join(ftext, ";")))
	return hex.EncodeToString(sum[:])
}

// TestGeometryDigests checks mesh records' geometry_sha256 against the
// spec, computed in Go: the bridge keeps digests by the exact arrays they
// digest (records.py: _GEOMETRY), so a mesh whose vertices moved, whose
// faces wind the other way, or whose loops are split into faces of other
// sizes, with the same counts as a mesh digested before, must not get that
// mesh's digest; nor a mesh changed in place after its digest was kept; nor,
// on Blender 3.4 (a start per face), a mesh whose faces start elsewhere.
// Meshes too large to be kept (a 6,000-vertex line), small faceless and
// empty ones are digested the same way.
func TestGeometryDigests(t *testing.T) {
	quad := [][3]float64{{-1, -1, 0}, {1, -1, 0}, {1, 1, 0}, {-1, 1, 0}}
	moved := slices.Clone(quad)
	moved[2] = [3]float64{1.25, 1, 0.1}
	var line [][3]float64
	for i := range 6000 {
		line = append(line, [3]float64{float64(i) * 0.001, -float64(i), 1.5})
	}
	// E and F: the same loops, split into faces of 4 and 3 or of 3 and 4.
	five := append(slices.Clone(quad), [3]float64{2, 0, 0})
	want := map[string]string{
		"A":    geometryDigest(quad, [][]int{{0, 1, 2, 3}}),
		"B":    geometryDigest(quad, [][]int{{0, 1, 2, 3}}),
		"C":    geometryDigest(moved, [][]int{{0, 1, 2, 3}}),
		"D":    geometryDigest(quad, [][]int{{0, 3, 2, 1}}),
		"E":    geometryDigest(five, [][]int{{0, 1, 2, 3}, {1, 4, 2}}),
		"F":    geometryDigest(five, [][]int{{0, 1, 2}, {3, 1, 4, 2}}),
		"Line": geometryDigest(line, nil),
		"Dot":  geometryDigest([][3]float64{{math.Copysign(0, -1), 0.5, 0}}, nil),
		"Void": geometryDigest(nil, nil),
	}
	if want["A"] == want["C"] || want["A"] == want["D"] || want["E"] == want["F"] {
		t.Fatal("the test's meshes must differ in geometry")
	}
	build := `
quad = [(-1, -1, 0), (1, -1, 0), (1, 1, 0), (-1, 1, 0)]
moved = list(quad)
moved[2] = (1.25, 1, 0.1)
for name, co, faces in [("A", quad, [(0, 1, 2, 3)]), ("B", quad, [(0, 1, 2, 3)]),
                        ("C", moved, [(0, 1, 2, 3)]), ("D", quad, [(0, 3, 2, 1)]),
                        ("E", quad + [(2, 0, 0)], [(0, 1, 2, 3), (1, 4, 2)]),
                        ("F", quad + [(2, 0, 0)], [(0, 1, 2), (3, 1, 4, 2)]),
                        ("Line", [(i * 0.001, -i, 1.5) for i in range(6000)], []),
                        ("Dot", [(-0.0, 0.5, 0)], []), ("Void", [], [])]:
    me = bpy.data.meshes.new(name)
    me.from_pydata(co, [], faces)
if bpy.app.version < (4, 0, 0):  # G: E's arrays with its faces' starts swapped (3.4 keeps them per face)
    me = bpy.data.meshes["E"].copy()
    me.name = "G"
    me.polygons.foreach_set("loop_start", [3, 0])
`
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		check := func(when string, want map[string]string) {
			t.Helper()
			meshes := assertIncrementalMatchesFull(t, p).State["meshes"].(map[string]any)
			for name, w := range want {
				m, ok := meshes[name].(map[string]any)
				if !ok {
					t.Fatalf("%s: no record of mesh %s", when, name)
				}
				if got := m["geometry_sha256"]; got != w {
					t.Errorf("%s: mesh %s geometry_sha256 %v, want %s", when, name, got, w)
				}
			}
		}
		want := maps.Clone(want)
		if rt.Kind == RuntimeBinary { // Blender 3.4: G's faces start at 3 and 0
			want["G"] = geometryDigest(five, [][]int{{3, 1, 4, 2}, {0, 1, 2}})
		}
		mustExecute(t, p, "python.exec", map[string]any{"code": build})
		check("built", want)

		// A's vertex moves in place to where C's is: A digests as C, B as before.
		mustExecute(t, p, "python.exec", map[string]any{"code": `bpy.data.meshes["A"].vertices[2].co = (1.25, 1, 0.1)`})
		want["A"] = want["C"]
		check("moved", want)

		// A checkpoint's load digests every mesh afresh.
		assertCheckpointRoundTrip(t, p, rt)
	})
}

// TestExecResultEncoding: a python.exec result the bridge cannot encode is
// refused, and leaves nothing behind in the encoder: the bridge builds its
// JSON encoders once (common.py), and their circular-reference check marks
// every container it is inside. A result that failed inside a container the
// code keeps (the driver namespace outlives the call) must encode once it
// is fixed, a result that holds the same list twice is not circular, and
// a value whose own code encodes while the result is encoded does not
// disturb it.
func TestExecResultEncoding(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		keep := `bpy.app.driver_namespace["bp_keep"]`
		te := wantToolError(t, p, "python.exec", map[string]any{"code": keep + ` = [object()]; result = ` + keep}, CodeInvalidInput)
		if !strings.Contains(te.Message, "not JSON-able") {
			t.Errorf("message %q, want it to say the result is not JSON-able", te.Message)
		}
		if got := string(execResult(t, p, keep+`[0] = 1; result = `+keep)); got != "[1]" {
			t.Errorf("fixed result %s, want [1]", got)
		}
		if got := string(execResult(t, p, `x = [1]; result = {"k": x, "j": x}`)); got != `{"j":[1],"k":[1]}` {
			t.Errorf("shared list: result %s", got)
		}
		te = wantToolError(t, p, "python.exec", map[string]any{"code": `l = []; l.append(l); result = l`}, CodeInvalidInput)
		if !strings.Contains(te.Message, "ircular") {
			t.Errorf("message %q, want a circular reference", te.Message)
		}
		if got := string(execResult(t, p, `result = {"a": [1.5, None, "é"]}`)); got != `{"a":[1.5,null,"é"]}` {
			t.Errorf("result %s", got)
		}
		// A value whose own code encodes (and fails) while the result is
		// being encoded: each call keeps its own marks.
		reenter := `
import sys
canonical = sys.modules["common"].canonical
class D(dict):
    def items(self):
        try:
            canonical({"x": [object()]})
        except TypeError:
            pass
        return super().items()
result = {"a": D(b=1), "c": [D(z=[1])]}`
		if got := string(execResult(t, p, reenter)); got != `{"a":{"b":1},"c":[{"z":[1]}]}` {
			t.Errorf("re-entered encoding: result %s", got)
		}
	})
}

// TestExecUnhashableScene: python.exec that leaves a value no record can
// hold (a NaN location) cannot be rolled back, and its rehash stops at that
// record. The scene must then hash as changed, so the call fails with
// internal_error ("rollback ... left the scene changed"), never as if
// nothing had happened.
func TestExecUnhashableScene(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		before := sceneHash(t, p)
		_, err := p.Execute(callCtx(t), Call{Tool: "python.exec", Args: map[string]any{"code": `bpy.data.objects["Camera"].location.x = float("nan")`}})
		var te *ToolError
		if !errors.As(err, &te) || te.Code != CodeInternalError {
			t.Fatalf("python.exec writing a NaN: %v, want internal_error", err)
		}
		if after := sceneHash(t, p); after == before {
			t.Errorf("the scene hashes as before (%s) after python.exec wrote a NaN", before)
		}
	})
}

// pyCanonical writes v (decoded with UseNumber) as the bridge's canonical
// JSON (records.py, SCENE.md): keys sorted, no spaces, ASCII with Python's
// escapes, numbers as the bridge wrote them (json.Number keeps the text).
func pyCanonical(b *strings.Builder, v any) {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case json.Number:
		b.WriteString(x.String())
	case string:
		b.WriteByte('"')
		for _, r := range x {
			switch {
			case r == '"' || r == '\\':
				b.WriteByte('\\')
				b.WriteRune(r)
			case r == '\n':
				b.WriteString(`\n`)
			case r == '\r':
				b.WriteString(`\r`)
			case r == '\t':
				b.WriteString(`\t`)
			case r == '\b':
				b.WriteString(`\b`)
			case r == '\f':
				b.WriteString(`\f`)
			case r >= ' ' && r <= '~':
				b.WriteRune(r)
			case r > 0xffff:
				r -= 0x10000
				fmt.Fprintf(b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
			default:
				fmt.Fprintf(b, `\u%04x`, r)
			}
		}
		b.WriteByte('"')
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			pyCanonical(b, e)
		}
		b.WriteByte(']')
	case map[string]any:
		keys := slices.Sorted(maps.Keys(x))
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			pyCanonical(b, k)
			b.WriteByte(':')
			pyCanonical(b, x[k])
		}
		b.WriteByte('}')
	default:
		panic(fmt.Sprintf("unexpected JSON value %T", v))
	}
}

// sceneHashOf computes scene_state_v1's hash of a snapshot as SCENE.md
// specifies it, in Go: per record sha256(canonical JSON), then
// acc = sum of int(sha256(kind:name + "\0" + digest)) mod 2^256, and
// sha256("scene_state_v1:" + acc as 64 hex digits).
func sceneHashOf(t *testing.T, snap map[string]any) string {
	t.Helper()
	kinds := map[string]string{"actions": "action", "active_objects": "active", "cameras": "camera",
		"collections": "collection", "curves": "curve", "lights": "light", "materials": "material",
		"meshes": "mesh", "objects": "object", "scenes": "scene", "worlds": "world"}
	acc := new(big.Int)
	for section, records := range snap {
		if section == "schema" {
			continue
		}
		kind, ok := kinds[section]
		if !ok {
			t.Fatalf("snapshot section %q is not in scene_state_v1", section)
		}
		for name, rec := range records.(map[string]any) {
			var b strings.Builder
			pyCanonical(&b, rec)
			digest := sha256.Sum256([]byte(b.String()))
			term := sha256.Sum256([]byte(kind + ":" + name + "\x00" + hex.EncodeToString(digest[:])))
			acc.Add(acc, new(big.Int).SetBytes(term[:]))
		}
	}
	acc.Mod(acc, new(big.Int).Lsh(big.NewInt(1), 256))
	h := sha256.Sum256([]byte(fmt.Sprintf("scene_state_v1:%064x", acc)))
	return hex.EncodeToString(h[:])
}

// TestSceneHashFromSpec recomputes the scene hash from the bridge's
// snapshot in Go, from the spec alone, and compares it with the bridge's,
// for a scene with every kind of record, floats of every form, and names
// and a text body that need escapes: the bridge's encoders, digests and
// running sum must be the spec's, whatever makes them fast.
func TestSceneHashFromSpec(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		mustExecute(t, p, "object.create", map[string]any{"type": "monkey", "name": "Sü\"zanne\\",
			"location": []any{1e-7, -2.5, 123456.789}, "scale": []any{1e6, 0.1, -0}})
		mustExecute(t, p, "modifier.add", map[string]any{"object": "Sü\"zanne\\", "type": "subdivision"})
		mustExecute(t, p, "light.create", map[string]any{"name": "Lamp 1", "type": "spot"})
		mustExecute(t, p, "material.create", map[string]any{"name": "Mat ✓", "base_color": []any{0.1, 0.2, 0.3, 1}})
		mustExecute(t, p, "text.create", map[string]any{"name": "T", "body": "héllo ✓ 😀 \"q\""})
		mustExecute(t, p, "keyframe.insert", map[string]any{"object": "T", "data_path": "location", "frame": 3})
		mustExecute(t, p, "python.exec", map[string]any{"code": `
bpy.data.objects["Camera"].location = (1e20, -1e-20, 0.3)
me = bpy.data.meshes.new("Grid")
me.from_pydata([(x * 0.1, y * 0.1, 0) for x in range(4) for y in range(4)], [], [(0, 1, 5, 4), (1, 2, 6, 5)])
bpy.data.lights.new("Lamp\t\n\x01\x7f", "AREA").energy = 1.5e-5
`})
		var raw struct {
			SceneHash string          `json:"scene_hash"`
			State     json.RawMessage `json:"snapshot"`
		}
		if err := p.call(callCtx(t), "snapshot", struct{}{}, &raw, nil); err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(raw.State))
		dec.UseNumber()
		var snap map[string]any
		if err := dec.Decode(&snap); err != nil {
			t.Fatal(err)
		}
		if got := sceneHashOf(t, snap); got != raw.SceneHash {
			t.Errorf("the spec's hash of the snapshot is %s, the bridge's %s", got, raw.SceneHash)
		}
		if got := assertIncrementalMatchesFull(t, p).SceneHash; got != raw.SceneHash {
			t.Errorf("snapshot hash %s, then %s", raw.SceneHash, got)
		}
	})
}
