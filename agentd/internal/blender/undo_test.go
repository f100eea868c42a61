package blender

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// wantToolClasses lists every tool the bridge registers: determinism,
// rollback, idempotence, safety mode, Blender versions. Test files of other
// tool families add their tools in an init function.
var wantToolClasses = map[string][5]string{
	"object.create":        {DeterminismDeterministic, RollbackCompensation, IdempotenceKeyed, SafetyModeHeadlessSafe, ">=3.4"},
	"object.delete":        {DeterminismDeterministic, RollbackCompensation, IdempotenceKeyed, SafetyModeHeadlessSafe, ">=3.4"},
	"object.set_transform": {DeterminismDeterministic, RollbackCompensation, IdempotenceIdempotent, SafetyModeHeadlessSafe, ">=3.4"},
	"render.still":         {DeterminismSeeded, RollbackNotNeeded, IdempotenceIdempotent, SafetyModeHeadlessSafe, ">=3.4"},
	"scene.get_summary":    {DeterminismDeterministic, RollbackNone, IdempotenceReadOnly, SafetyModeHeadlessSafe, ">=3.4"},
	"scene.snapshot":       {DeterminismDeterministic, RollbackNone, IdempotenceReadOnly, SafetyModeHeadlessSafe, ">=3.4"},
}

func TestToolDeterminismAndRollbackClasses(t *testing.T) {
	want := wantToolClasses
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		for _, tool := range p.Tools() {
			got := [5]string{tool.DeterminismClass, tool.RollbackMethod, tool.IdempotenceClass, tool.SafetyMode, tool.BlenderVersions}
			if got != want[tool.Name] {
				t.Errorf("%s: classes %v, want %v", tool.Name, got, want[tool.Name])
			}
		}
	})
}

// opGen produces a seeded random sequence of tool calls, tracking live names
// so that most calls succeed.
type opGen struct {
	rng   *rand.Rand
	names []string
	n     int
}

func newOpGen(seed int64) *opGen {
	return &opGen{rng: rand.New(rand.NewSource(seed)), names: []string{"Camera", "Light"}}
}

var primitiveTypes = []string{"cube", "uv_sphere", "ico_sphere", "plane", "cylinder", "cone", "torus", "monkey"}

func (g *opGen) next() Call {
	g.n++
	vec := func() []any {
		return []any{g.rng.Float64()*10 - 5, g.rng.Float64()*10 - 5, g.rng.Float64()*10 - 5}
	}
	c := Call{MutationID: fmt.Sprintf("mut-%d", g.n), RequestID: "test"}
	switch op := g.rng.Intn(10); {
	case op < 4 || len(g.names) == 0:
		c.Tool, c.Args = "object.create", map[string]any{"type": primitiveTypes[g.rng.Intn(len(primitiveTypes))], "location": vec()}
		if g.rng.Intn(3) == 0 {
			c.Args["name"] = fmt.Sprintf("N%d", g.rng.Intn(4)) // reuses names of deleted objects
		}
	case op < 7:
		c.Tool, c.Args = "object.set_transform", map[string]any{"name": g.names[g.rng.Intn(len(g.names))], "location": vec(), "rotation_euler": vec(), "scale": []any{1, 2, 3}}
	default:
		c.Tool, c.Args = "object.delete", map[string]any{"name": g.names[g.rng.Intn(len(g.names))]}
	}
	return c
}

// observe updates the live names after a successful call (or an undo of it).
func (g *opGen) observe(c Call, out Outcome, undone bool) {
	var name string
	var add bool
	switch c.Tool {
	case "object.create":
		name, _ = out.Fields()["name"].(string)
		add = !undone
	case "object.delete":
		name, _ = c.Args["name"].(string)
		add = undone
	default:
		return
	}
	if add {
		g.names = append(g.names, name)
		return
	}
	for i, n := range g.names {
		if n == name {
			g.names = append(g.names[:i], g.names[i+1:]...)
			return
		}
	}
}

func mustUndo(t testing.TB, p *Process, out Outcome, c Call) {
	t.Helper()
	h, err := p.Undo(callCtx(t), out.Undo, c)
	if err != nil {
		t.Fatalf("Undo(%s %v) = %v (record %s)", c.Tool, c.Args, err, out.Undo)
	}
	if h != out.SceneHashBefore {
		t.Fatalf("Undo(%s %v) = %s, want scene_hash_before %s (record %s)", c.Tool, c.Args, h, out.SceneHashBefore, out.Undo)
	}
}

// TestUndoRandomSequence applies a seeded random sequence of calls; each
// compensation, applied right after its call or later in reverse order,
// returns exactly the recorded scene_hash_before, which also equals a full
// recomputation; undoing everything returns to the baseline.
func TestUndoRandomSequence(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		baseline, err := p.SceneHash(callCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		g := newOpGen(7)
		type done struct {
			c   Call
			out Outcome
		}
		var stack []done
		undos := 0
		for i := 0; i < 80; i++ {
			c := g.next()
			out, err := p.Execute(callCtx(t), c)
			if err != nil {
				if _, ok := err.(*ToolError); !ok {
					t.Fatalf("op %d %s: %v", i, c.Tool, err)
				}
				continue
			}
			if out.Undo == nil {
				t.Fatalf("op %d %s: no undo record", i, c.Tool)
			}
			g.observe(c, out, false)
			switch r := g.rng.Intn(4); {
			case r == 0: // undo at once
				mustUndo(t, p, out, c)
				g.observe(c, out, true)
				undos++
				if s := assertIncrementalMatchesFull(t, p); s.SceneHash != out.SceneHashBefore {
					t.Fatalf("full hash after undo %s, want %s", s.SceneHash, out.SceneHashBefore)
				}
			case r == 1 && len(stack) > 0: // undo a few, newest first
				stack = append(stack, done{c, out})
				for k := 1 + g.rng.Intn(min(4, len(stack))); k > 0; k-- {
					d := stack[len(stack)-1]
					stack = stack[:len(stack)-1]
					mustUndo(t, p, d.out, d.c)
					g.observe(d.c, d.out, true)
					undos++
				}
				assertIncrementalMatchesFull(t, p)
			default:
				stack = append(stack, done{c, out})
			}
		}
		for len(stack) > 0 {
			d := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			mustUndo(t, p, d.out, d.c)
			undos++
		}
		s := assertIncrementalMatchesFull(t, p)
		if s.SceneHash != baseline {
			t.Fatalf("after undoing everything: %s, want baseline %s", s.SceneHash, baseline)
		}
		for k := range s.State {
			if recs, ok := s.State[k].(map[string]any); ok {
				for name := range recs {
					if strings.HasPrefix(name, "__bp_") {
						t.Errorf("snapshot %s holds %s", k, name)
					}
				}
			}
		}
		t.Logf("%d undos", undos)

		// Read-only and file-only tools have no compensation.
		if out := mustExecute(t, p, "scene.get_summary", nil); out.Undo != nil {
			t.Errorf("scene.get_summary undo = %s", out.Undo)
		}
		if out := mustExecute(t, p, "render.still", map[string]any{"output": "u.png", "resolution": []any{16, 16}, "samples": 1}); out.Undo != nil {
			t.Errorf("render.still undo = %s", out.Undo)
		}
	})
}

func TestTombstones(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		ctx := callCtx(t)
		mustExecute(t, p, "object.create", map[string]any{"type": "monkey", "name": "M"})
		del, err := p.Execute(ctx, Call{Tool: "object.delete", Args: map[string]any{"name": "M"}, MutationID: "m-del"})
		if err != nil {
			t.Fatal(err)
		}
		var rec map[string]any
		if err := json.Unmarshal(del.Undo, &rec); err != nil {
			t.Fatal(err)
		}
		tomb, _ := rec["tomb"].(string)
		if !strings.HasPrefix(tomb, tombPrefix) || fmt.Sprint(rec["data"]) != fmt.Sprintf("map[kind:mesh name:M tomb:%s]", tomb) {
			t.Fatalf("delete undo record %s", del.Undo)
		}
		sum := mustExecute(t, p, "scene.get_summary", nil)
		if sum.Fields()["object_count"] != float64(2) || strings.Contains(fmt.Sprint(sum.Fields()), "bp_") {
			t.Errorf("summary shows the tombstone: %v", sum.Fields())
		}
		// Same name again: no conflict, no .001, neither for the object nor its mesh.
		again := mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": "M"})
		if again.Fields()["name"] != "M" || !strings.Contains(string(again.Undo), `"mesh":"M"`) {
			t.Fatalf("recreated M: %v undo %s", again.Fields(), again.Undo)
		}
		// The tombstone's original name is taken now: the delete cannot be undone yet.
		if h, err := p.Undo(ctx, del.Undo, Call{}); !isCode(err, CodeConflict) || h != again.SceneHashAfter {
			t.Fatalf("undo with name taken = %s, %v", h, err)
		}
		// No tool takes a tombstone's name (a control character), and an
		// older bridge's tombstone (a name tools refuse to create) is not
		// found.
		wantToolError(t, p, "object.create", map[string]any{"type": "cube", "name": tomb}, CodeInvalidInput)
		wantToolError(t, p, "object.delete", map[string]any{"name": tomb}, CodeInvalidInput)
		wantToolError(t, p, "object.set_transform", map[string]any{"name": tomb, "scale": []any{1, 1, 1}}, CodeInvalidInput)
		mustExecute(t, p, "python.exec", map[string]any{"code": `bpy.data.objects.new("__bp_tomb_old", None)`})
		wantToolError(t, p, "object.delete", map[string]any{"name": "__bp_tomb_old"}, CodeNotFound)
		wantToolError(t, p, "object.set_transform", map[string]any{"name": "__bp_tomb_old", "scale": []any{1, 1, 1}}, CodeNotFound)
		mustUndo(t, p, again, Call{})
		mustUndo(t, p, del, Call{})
		// A compensation applies once.
		if _, err := p.Undo(ctx, del.Undo, Call{}); !isCode(err, CodeConflict) {
			t.Fatalf("second undo = %v, want conflict", err)
		}

		// The scene camera and the active object come back.
		mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": "Active"})
		for _, name := range []string{"Camera", "Active"} {
			d := mustExecute(t, p, "object.delete", map[string]any{"name": name})
			mustUndo(t, p, d, Call{})
		}
		s := assertIncrementalMatchesFull(t, p)
		sc := s.State["scenes"].(map[string]any)["Scene"].(map[string]any)
		act := s.State["active_objects"].(map[string]any)["Scene"].(map[string]any)
		if sc["camera"] != "Camera" || act["active_object"] != "Active" {
			t.Errorf("scene after undoing deletes: camera %v active %v", sc["camera"], act["active_object"])
		}
		if cams := s.State["cameras"].(map[string]any); cams["Camera"] == nil {
			t.Errorf("camera data not restored: %v", cams)
		}
	})
}

func isCode(err error, code string) bool {
	var te *ToolError
	return errors.As(err, &te) && te.Code == code
}

// TestUndoFailureRollsBack makes undos fail midway (inject_failure) and
// feeds malformed records: the scene is unchanged each time.
func TestUndoFailureRollsBack(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		create := mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": "A"})
		move := mustExecute(t, p, "object.set_transform", map[string]any{"name": "A", "location": []any{1, 2, 3}, "scale": []any{2, 2, 2}})
		mustExecute(t, p, "object.create", map[string]any{"type": "cone", "name": "B"})
		del := mustExecute(t, p, "object.delete", map[string]any{"name": "B"})
		before := assertIncrementalMatchesFull(t, p)
		cases := []struct {
			undo  json.RawMessage
			label string
		}{
			{del.Undo, "undo.object.delete:renamed"},
			{del.Undo, "undo.object.delete:relinked"},
			{move.Undo, "undo.object.set_transform:location"},
		}
		for _, c := range cases {
			err := p.call(callCtx(t), "undo", map[string]any{"undo": c.undo, "inject_failure": c.label}, nil, nil)
			if !isCode(err, CodeInternalError) {
				t.Fatalf("%s: err = %v, want internal_error", c.label, err)
			}
			if after := assertIncrementalMatchesFull(t, p); after.SceneHash != before.SceneHash {
				t.Fatalf("%s left partial work", c.label)
			}
		}
		for _, bad := range []string{`{}`, `{"v":2,"tool":"object.create"}`, `{"v":1,"tool":"render.still"}`,
			`{"v":1,"tool":"object.set_transform","object":"A","location":[1,2],"rotation_euler":[0,0,0],"scale":[1,1,1]}`,
			`[1]`, `nope`} {
			if h, err := p.Undo(callCtx(t), json.RawMessage(bad), Call{}); !isCode(err, CodeInvalidInput) || (h != "" && h != before.SceneHash) {
				t.Errorf("Undo(%s) = %s, %v; want invalid_input", bad, h, err)
			}
		}
		// A compensation that no longer fits the scene is refused.
		mustExecute(t, p, "object.delete", map[string]any{"name": "A"})
		if _, err := p.Undo(callCtx(t), create.Undo, Call{}); !isCode(err, CodeConflict) {
			t.Errorf("undo create of a deleted object = %v, want conflict", err)
		}
		assertIncrementalMatchesFull(t, p)
	})
}

// TestUndoFaultInjection enables the "undo" test fault: undo stops
// midway, reports internal_error and an honest hash.
func TestUndoFaultInjection(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt, "undo")
		for _, c := range []struct {
			tool string
			args map[string]any
		}{
			{"object.create", map[string]any{"type": "cube", "name": "F"}},
			{"object.set_transform", map[string]any{"name": "F", "location": []any{1, 1, 1}, "scale": []any{3, 3, 3}}},
			{"object.delete", map[string]any{"name": "Light"}},
		} {
			out := mustExecute(t, p, c.tool, c.args)
			h, err := p.Undo(callCtx(t), out.Undo, Call{RequestID: "fault"})
			if !isCode(err, CodeInternalError) {
				t.Fatalf("%s: Undo = %v, want internal_error", c.tool, err)
			}
			s := assertIncrementalMatchesFull(t, p)
			if h != s.SceneHash || h == out.SceneHashBefore || h == out.SceneHashAfter {
				t.Fatalf("%s: reported %s, scene %s, before %s, after %s", c.tool, h, s.SceneHash, out.SceneHashBefore, out.SceneHashAfter)
			}
			if c.tool == "object.create" { // F is unlinked now; link it back for the next step
				if _, err := p.Reset(callCtx(t)); err != nil {
					t.Fatal(err)
				}
				mustExecute(t, p, c.tool, c.args)
			}
		}
	})
}

// TestCheckpointsAndReplay: random ops A (with deletes, so tombstones) ->
// checkpoint -> ops B -> load restores the checkpoint hash; a fresh process
// loads the same hash, still undoes an op of A through its tombstone, and
// replaying B's calls reproduces B's hashes and undo records.
func TestCheckpointsAndReplay(t *testing.T) {
	finals := map[RuntimeKind]string{}
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		dir := t.TempDir()
		g := newOpGen(11)
		run := func(n int) (calls []Call, outs []Outcome) {
			for len(calls) < n {
				c := g.next()
				out, err := p.Execute(callCtx(t), c)
				if err != nil {
					if _, ok := err.(*ToolError); !ok {
						t.Fatal(err)
					}
					continue
				}
				g.observe(c, out, false)
				calls, outs = append(calls, c), append(outs, out)
			}
			return
		}
		callsA, outsA := run(30)
		var lastDelA int = -1
		for i, c := range callsA {
			if c.Tool == "object.delete" {
				lastDelA = i
			}
		}
		if lastDelA < 0 {
			t.Fatal("seed produced no delete in A")
		}
		ckpt := filepath.Join(dir, "ckpt.blend")
		pre := assertIncrementalMatchesFull(t, p)
		saved, err := p.SaveCheckpoint(callCtx(t), ckpt)
		if err != nil {
			t.Fatal(err)
		}
		post := assertIncrementalMatchesFull(t, p)
		if saved != pre.SceneHash || post.SceneHash != pre.SceneHash || fmt.Sprint(pre.State) != fmt.Sprint(post.State) {
			t.Fatalf("saving changed the scene: %s -> %s (returned %s)", pre.SceneHash, post.SceneHash, saved)
		}
		if _, err := os.Stat(ckpt + ".tmp"); !os.IsNotExist(err) {
			t.Errorf("temp file left behind: %v", err)
		}
		callsB, outsB := run(20)
		loaded, err := p.LoadCheckpoint(callCtx(t), ckpt)
		if err != nil || loaded != saved {
			t.Fatalf("LoadCheckpoint = %s, %v; want %s", loaded, err, saved)
		}
		assertIncrementalMatchesFull(t, p)
		if _, err := p.LoadCheckpoint(callCtx(t), filepath.Join(dir, "missing.blend")); !isCode(err, CodeNotFound) {
			t.Errorf("missing checkpoint = %v", err)
		}

		// Fresh process: same hash, replay B, then undo all of B and A's last ops.
		q := startTestProcess(t, rt)
		if h, err := q.LoadCheckpoint(callCtx(t), ckpt); err != nil || h != saved {
			t.Fatalf("fresh LoadCheckpoint = %s, %v; want %s", h, err, saved)
		}
		for i, c := range callsB {
			out, err := q.Execute(callCtx(t), c)
			if err != nil {
				t.Fatalf("replay %d %s: %v", i, c.Tool, err)
			}
			if out.SceneHashBefore != outsB[i].SceneHashBefore || out.SceneHashAfter != outsB[i].SceneHashAfter {
				t.Fatalf("replay %d %s: hashes %s->%s, original %s->%s", i, c.Tool, out.SceneHashBefore, out.SceneHashAfter, outsB[i].SceneHashBefore, outsB[i].SceneHashAfter)
			}
			if string(out.Undo) != string(outsB[i].Undo) {
				t.Fatalf("replay %d %s: undo %s, original %s", i, c.Tool, out.Undo, outsB[i].Undo)
			}
		}
		final := assertIncrementalMatchesFull(t, q)
		if final.SceneHash != outsB[len(outsB)-1].SceneHashAfter {
			t.Fatalf("replayed final %s, original %s", final.SceneHash, outsB[len(outsB)-1].SceneHashAfter)
		}
		finals[rt.Kind] = final.SceneHash
		// The original compensations work on the replayed scene, back into A.
		for i := len(outsB) - 1; i >= 0; i-- {
			mustUndo(t, q, outsB[i], callsB[i])
		}
		for i := len(outsA) - 1; i >= lastDelA; i-- {
			mustUndo(t, q, outsA[i], callsA[i])
		}
		assertIncrementalMatchesFull(t, q)

		// And on the original process, after its own load.
		for i := len(outsA) - 1; i >= 0; i-- {
			mustUndo(t, p, outsA[i], callsA[i])
		}
		if h, _ := p.SceneHash(callCtx(t)); h != outsA[0].SceneHashBefore {
			t.Fatalf("undoing all of A after load: %s, want %s", h, outsA[0].SceneHashBefore)
		}
	})
	if len(finals) == 2 && finals[RuntimeBPYModule] != finals[RuntimeBinary] {
		t.Errorf("same calls, different final hash across Blender versions: %v", finals)
	}
}

// TestCheckpointTiming saves and loads a scene of a few hundred objects with
// tombstones and logs how long that takes.
func TestCheckpointTiming(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		const n = 300
		for i := 0; i < n; i++ {
			mustExecute(t, p, "object.create", map[string]any{"type": primitiveTypes[i%len(primitiveTypes)], "location": []any{i % 17, i % 13, i % 7}})
		}
		for i := 0; i < n/10; i++ {
			mustExecute(t, p, "object.delete", map[string]any{"name": fmt.Sprintf("Cube.%03d", i+1)})
		}
		want := assertIncrementalMatchesFull(t, p).SceneHash
		path := filepath.Join(t.TempDir(), "big.blend")
		t0 := time.Now()
		if h, err := p.SaveCheckpoint(callCtx(t), path); err != nil || h != want {
			t.Fatalf("save = %s, %v", h, err)
		}
		save := time.Since(t0)
		st, _ := os.Stat(path)
		q := startTestProcess(t, rt)
		t0 = time.Now()
		if h, err := q.LoadCheckpoint(callCtx(t), path); err != nil || h != want {
			t.Fatalf("load = %s, %v; want %s", h, err, want)
		}
		t.Logf("%s: %d objects (+%d tombstones), %d bytes: save %v, load+rehash %v", p.Profile().Version, n+2-n/10, n/10, st.Size(), save, time.Since(t0))
		assertIncrementalMatchesFull(t, q)
	})
}

// TestUndoneCreatesFreedInBatches: undoing a create discards what it made
// (renamed out of sight, freed in batches; see trash.discard): past the batch
// size nothing breaks, every undo gives the hash back and frees the name, no
// checkpoint holds a discarded datablock, and python.exec never meets one.
func TestUndoneCreatesFreedInBatches(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p, sandbox := startInSandbox(t, rt)
		base := assertIncrementalMatchesFull(t, p).SceneHash
		undoCreate := func(name string) {
			t.Helper()
			c := Call{Tool: "object.create", Args: map[string]any{"type": "cube", "name": name}, RequestID: "test"}
			out := mustExecute(t, p, c.Tool, c.Args)
			if out.Fields()["name"] != name {
				t.Fatalf("created %v, want %s (the name of an undone create is free again)", out.Fields()["name"], name)
			}
			mustUndo(t, p, out, c)
		}
		for i := range 300 { // more than one batch (TRASH_MAX)
			undoCreate("T")
			if i%100 == 0 {
				assertIncrementalMatchesFull(t, p)
			}
		}
		for _, c := range []Call{
			{Tool: "camera.create", Args: map[string]any{"name": "Cam2"}},
			{Tool: "light.create", Args: map[string]any{"type": "point", "name": "Lamp"}},
			{Tool: "material.create", Args: map[string]any{"name": "Mat"}},
			{Tool: "collection.create", Args: map[string]any{"name": "Set"}},
		} {
			mustUndo(t, p, mustExecute(t, p, c.Tool, c.Args), c)
		}
		if h := assertIncrementalMatchesFull(t, p).SceneHash; h != base {
			t.Fatalf("after 304 undone creates: %s, want %s", h, base)
		}
		tombs := func(name string, proc *Process) {
			t.Helper()
			out := mustExecute(t, proc, "python.exec", map[string]any{"code": `result = sorted(d.name for c in (bpy.data.objects, ` +
				`bpy.data.meshes, bpy.data.cameras, bpy.data.lights, bpy.data.materials, bpy.data.collections) ` +
				`for d in c if 'bp_tomb_' in d.name)`})
			if got := fmt.Sprint(out.Fields()["result"]); got != "[]" {
				t.Errorf("%s meets discarded datablocks: %s", name, got)
			}
		}
		// An undone keyframe's action is discarded; FBX writes every action
		// of bpy.data, so the export must not meet it.
		mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": "Anim"})
		mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": "Kept"})
		mustExecute(t, p, "keyframe.insert", map[string]any{"object": "Kept", "data_path": "location", "frame": 1}) // animated: FBX bakes every action for it
		kc := Call{Tool: "keyframe.insert", Args: map[string]any{"object": "Anim", "data_path": "location", "frame": 1}, RequestID: "test"}
		mustUndo(t, p, mustExecute(t, p, kc.Tool, kc.Args), kc)
		fbx := mustExecute(t, p, "scene.export", map[string]any{"format": "fbx", "output": "anim.fbx"})
		if raw, err := os.ReadFile(filepath.Join(sandbox, fbx.Fields()["path"].(string))); err != nil || bytes.Contains(raw, []byte("bp_tomb_")) {
			t.Errorf("the FBX export holds a discarded datablock (or cannot be read: %v)", err)
		}
		undoCreate("Gone") // pending when python.exec runs
		tombs("python.exec", p)
		mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": "Keep"})
		undoCreate("Gone") // pending when the checkpoint is saved
		ckpt := filepath.Join(t.TempDir(), "c.blend")
		saved, err := p.SaveCheckpoint(callCtx(t), ckpt)
		if err != nil {
			t.Fatal(err)
		}
		q := startTestProcess(t, rt)
		if h, err := q.LoadCheckpoint(callCtx(t), ckpt); err != nil || h != saved {
			t.Fatalf("LoadCheckpoint = %s, %v; want %s", h, err, saved)
		}
		tombs("the checkpoint", q)
	})
}

// TestUndoneDuplicateDiscarded: undoing a copy lets it drop what it refers
// to (its material, action, modifier, parent) and discards it with its mesh
// instead of freeing them at once (a walk of the whole file); every other
// datablock's user count stays true: the material's creation can still be
// undone after, which needs it unused. A linked copy, which shares its
// source's mesh, lets go of it for a mesh of the bridge's own, the void
// (trash.void_mesh), and is discarded too: the shared mesh counts its users
// right at once, and a checkpoint holds no void.
func TestUndoneDuplicateDiscarded(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		run := func(tool string, args map[string]any) (Outcome, Call) {
			t.Helper()
			c := Call{Tool: tool, Args: args, RequestID: "test"}
			return mustExecute(t, p, tool, args), c
		}
		discarded := func() float64 {
			t.Helper()
			out, _ := run("python.exec", map[string]any{"code": "import trash\nresult = trash.TRASH['n']"})
			return out.Fields()["result"].(float64)
		}
		run("object.create", map[string]any{"type": "cube", "name": "P"})
		run("object.create", map[string]any{"type": "cube", "name": "Src"})
		var done []Outcome // undone last to first at the end
		var calls []Call
		for _, c := range []Call{
			{Tool: "material.create", Args: map[string]any{"name": "M"}},
			{Tool: "material.assign", Args: map[string]any{"object": "Src", "material": "M"}},
			{Tool: "keyframe.insert", Args: map[string]any{"object": "Src", "data_path": "location", "frame": 1}},
			{Tool: "modifier.add", Args: map[string]any{"object": "Src", "type": "bevel", "name": "B"}},
			{Tool: "object.set_parent", Args: map[string]any{"name": "Src", "parent": "P"}},
		} {
			out, call := run(c.Tool, c.Args)
			done, calls = append(done, out), append(calls, call)
		}

		// python.exec frees what was discarded: counted only at the end.
		before := discarded()
		for _, c := range []Call{
			{Tool: "object.duplicate", Args: map[string]any{"name": "Src", "new_name": "Dup"}},
			{Tool: "object.duplicate", Args: map[string]any{"name": "Src", "new_name": "Lnk", "linked": true}},
		} {
			out, call := run(c.Tool, c.Args)
			mustUndo(t, p, out, call)
			assertIncrementalMatchesFull(t, p)
			users, _ := run("python.exec", map[string]any{"code": "result = bpy.data.objects['Src'].data.users"})
			if u := users.Fields()["result"]; u != 1.0 {
				t.Errorf("after the undo of %v: the source's mesh has %v users, want 1", c.Args, u)
			}
		}
		// Undone without the copies: M has no user left when its creation
		// is undone.
		for i := len(done) - 1; i >= 0; i-- {
			mustUndo(t, p, done[i], calls[i])
		}
		if n := discarded() - before; n != 5 {
			t.Errorf("%v datablocks discarded, want 5: the copy and its mesh, the linked copy, the action and the material", n)
		}

		// An object's own material hidden behind a slot linked to its data
		// (python.exec can make one) is dropped by the copy too.
		run("object.create", map[string]any{"type": "cube", "name": "Hid"})
		run("material.create", map[string]any{"name": "Shown"})
		run("material.create", map[string]any{"name": "Hidden"})
		run("material.assign", map[string]any{"object": "Hid", "material": "Shown"})
		run("python.exec", map[string]any{"code": "s = bpy.data.objects['Hid'].material_slots[0]\n" +
			"s.link = 'OBJECT'\ns.material = bpy.data.materials['Hidden']\ns.link = 'DATA'"})
		users := func() float64 {
			t.Helper()
			out, _ := run("python.exec", map[string]any{"code": "result = bpy.data.materials['Hidden'].users"})
			return out.Fields()["result"].(float64)
		}
		for _, linked := range []bool{false, true} {
			before, hidden := discarded(), users()
			dup, dupCall := run("object.duplicate", map[string]any{"name": "Hid", "new_name": "HidCopy", "linked": linked})
			mustUndo(t, p, dup, dupCall)
			want := map[bool]float64{false: 2, true: 1}[linked] // a linked copy has no mesh of its own
			if n, u := discarded()-before, users(); n != want || u != hidden {
				t.Errorf("a copy (linked: %v) with a hidden material: %v discarded (want %v), the material has %v users (want %v)",
					linked, n, want, u, hidden)
			}
		}

		// A force field's texture and (Blender 4) light linking count users
		// the copy would keep while it waits: such a copy is freed at once.
		run("object.create", map[string]any{"type": "cube", "name": "Odd"})
		run("object.create", map[string]any{"type": "cube", "name": "Lit"})
		run("python.exec", map[string]any{"code": `
def field(ob):
    with bpy.context.temp_override(object=ob, active_object=ob):
        bpy.ops.object.forcefield_toggle()
    ob.field.type = 'TEXTURE'
    ob.field.texture = bpy.data.textures.get('Tex') or bpy.data.textures.new('Tex', 'CLOUDS')
field(bpy.data.objects['Odd'])
lit = bpy.data.objects['Lit']
if hasattr(lit, 'light_linking'):
    lit.light_linking.receiver_collection = bpy.data.collections.new('LL')
else:
    field(lit)
`})
		for _, name := range []string{"Odd", "Lit"} {
			for _, linked := range []bool{false, true} {
				before := discarded()
				dup, dupCall := run("object.duplicate", map[string]any{"name": name, "new_name": name + "Copy", "linked": linked})
				mustUndo(t, p, dup, dupCall)
				assertIncrementalMatchesFull(t, p)
				if n := discarded() - before; n != 0 {
					t.Errorf("the copy of %s (linked: %v): %v discarded, want 0 (freed at once)", name, linked, n)
				}
			}
		}
		h := assertIncrementalMatchesFull(t, p).SceneHash

		// The void a linked copy took goes with the pile: no save and no
		// python.exec meets it.
		lnk, lnkCall := run("object.duplicate", map[string]any{"name": "Src", "new_name": "Lnk2", "linked": true})
		mustUndo(t, p, lnk, lnkCall)
		q := reloaded(t, p, rt, h)
		voids := "result = [m.name for m in bpy.data.meshes if 'bp_tomb_' in m.name]"
		for who, proc := range map[string]*Process{"after the save": p, "the checkpoint": q} {
			if got := string(execResult(t, proc, voids)); got != "[]" {
				t.Errorf("%s: meshes %s", who, got)
			}
		}
		assertIncrementalMatchesFull(t, q)
	})
}

// TestChildrenIndex: the bridge knows an object's children from its index
// (Blender has no list of them), through parenting by tools, copies of a
// child, parenting behind its back (python.exec), deletes and their undos.
// A child the index missed would keep a stale record after its parent's
// rename (incremental ≠ full) or be left out of a delete's undo record.
func TestChildrenIndex(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		for _, n := range []string{"P", "A", "B", "C"} {
			mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": n})
		}
		rename := func(from, to string) {
			t.Helper()
			mustExecute(t, p, "object.rename", map[string]any{"name": from, "new_name": to})
			assertIncrementalMatchesFull(t, p)
		}
		rename("P", "P1") // builds the index: no children yet
		mustExecute(t, p, "object.set_parent", map[string]any{"name": "A", "parent": "P1"})
		rename("P1", "P2")
		mustExecute(t, p, "object.duplicate", map[string]any{"name": "A", "new_name": "A2"}) // a child of P2 too
		rename("P2", "P3")
		mustExecute(t, p, "python.exec", map[string]any{"code": "bpy.data.objects['B'].parent = bpy.data.objects['P3']"})
		rename("P3", "P4")

		del := mustExecute(t, p, "object.delete", map[string]any{"name": "P4"})
		var rec struct {
			Children []struct{ Name string } `json:"children"`
		}
		if err := json.Unmarshal(del.Undo, &rec); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, c := range rec.Children {
			got = append(got, c.Name)
		}
		if strings.Join(got, ",") != "A,A2,B" {
			t.Fatalf("delete's undo record names children %v, want A, A2, B", got)
		}
		assertIncrementalMatchesFull(t, p)
		mustUndo(t, p, del, Call{Tool: "object.delete"})
		rename("P4", "P5") // the children are back
		mustExecute(t, p, "object.set_parent", map[string]any{"name": "A", "parent": nil})
		rename("P5", "P6")

		// A create cannot be undone once something is its child, even when
		// the child came behind the index's back.
		c := Call{Tool: "object.create", Args: map[string]any{"type": "cube", "name": "D"}, RequestID: "test"}
		made, err := p.Execute(callCtx(t), c)
		if err != nil {
			t.Fatal(err)
		}
		mustExecute(t, p, "python.exec", map[string]any{"code": "bpy.data.objects['C'].parent = bpy.data.objects['D']"})
		if _, err := p.Undo(callCtx(t), made.Undo, c); !isCode(err, CodeConflict) {
			t.Fatalf("undo of a create that has a child now = %v, want conflict", err)
		}
		assertIncrementalMatchesFull(t, p)
	})
}

// TestUndoRenameToAReservedName: an object whose name has the reserved
// prefix (an import or python.exec can make one) can be renamed, and the
// rename undone: the undo gives back the name it had, reserved or not.
func TestUndoRenameToAReservedName(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		mustExecute(t, p, "python.exec", map[string]any{"code": "o = bpy.data.objects.new('__bp_x', None)\nbpy.context.scene.collection.objects.link(o)"})
		c := Call{Tool: "object.rename", Args: map[string]any{"name": "__bp_x", "new_name": "Y"}, RequestID: "test"}
		out, err := p.Execute(callCtx(t), c)
		if err != nil {
			t.Fatal(err)
		}
		mustUndo(t, p, out, c)
		assertIncrementalMatchesFull(t, p)
	})
}

// TestUndoDeleteWhenOnlyTheObjectNameIsTaken: the object's name is taken
// again, its mesh's is not. The undo puts the mesh's name back first, then
// finds the object's taken (Blender 4.5 tells by its own name check, 3.4 by
// ours) and fails with conflict, leaving the scene exactly as it was.
func TestUndoDeleteWhenOnlyTheObjectNameIsTaken(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		ctx := callCtx(t)
		mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": "A"})
		mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": "B"})
		del := mustExecute(t, p, "object.delete", map[string]any{"name": "A"})
		taken := mustExecute(t, p, "object.rename", map[string]any{"name": "B", "new_name": "A"}) // its mesh stays "B"
		if h, err := p.Undo(ctx, del.Undo, Call{}); !isCode(err, CodeConflict) || h != taken.SceneHashAfter {
			t.Fatalf("undo with the object's name taken = %s, %v; want conflict on %s", h, err, taken.SceneHashAfter)
		}
		assertIncrementalMatchesFull(t, p)
		mustUndo(t, p, taken, Call{})
		mustUndo(t, p, del, Call{})
		assertIncrementalMatchesFull(t, p)
	})
}

// TestUndoneCreateLetsGo: a made mesh object whose creation is undone before
// the calls that gave it a material, an action, a modifier and a parent
// lets go of them as it waits on the pile: the material and the action
// count no user of it, so the material's creation can be undone at once;
// it is still discarded, not freed. A light as made is discarded too; one
// that a later call animated is freed at once (both Blenders).
func TestUndoneCreateLetsGo(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": "P"})
		made := mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": "C"})
		mat := mustExecute(t, p, "material.create", map[string]any{"name": "M"})
		for _, c := range []Call{
			{Tool: "material.assign", Args: map[string]any{"object": "C", "material": "M"}},
			{Tool: "keyframe.insert", Args: map[string]any{"object": "C", "data_path": "location", "frame": 1}},
			{Tool: "modifier.add", Args: map[string]any{"object": "C", "type": "bevel", "name": "B"}},
			{Tool: "object.set_parent", Args: map[string]any{"name": "C", "parent": "P"}},
		} {
			mustExecute(t, p, c.Tool, c.Args)
		}
		counts := "import trash\nresult = [trash.TRASH['n'], bpy.data.materials['M'].users, bpy.data.actions['CAction'].users]"
		if got := string(execResult(t, p, counts)); got != "[0,1,1]" {
			t.Fatalf("[discarded, M's users, the action's users] before = %s", got)
		}
		if _, err := p.Undo(callCtx(t), made.Undo, Call{}); err != nil {
			t.Fatal(err)
		}
		assertIncrementalMatchesFull(t, p)
		// The pile is freed before python.exec: count with the undo of M's creation.
		if _, err := p.Undo(callCtx(t), mat.Undo, Call{}); err != nil {
			t.Fatalf("undo of the material's creation after the object's: %v", err)
		}
		assertIncrementalMatchesFull(t, p)
		if got := string(execResult(t, p, "import trash\nresult = [trash.TRASH['n'], bpy.data.actions['CAction'].users]")); got != "[3,0]" {
			t.Errorf("[discarded, the action's users] after = %s, want [3,0]: the object, its mesh and the material went on the pile", got)
		}

		discarded := func() int {
			n, err := strconv.Atoi(string(execResult(t, p, "import trash\nresult = trash.TRASH['n']")))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		for _, animated := range []bool{false, true} {
			light := mustExecute(t, p, "light.create", map[string]any{"name": "L", "type": "point"})
			if animated {
				mustExecute(t, p, "keyframe.insert", map[string]any{"object": "L", "data_path": "location", "frame": 1})
			}
			before := discarded()
			if _, err := p.Undo(callCtx(t), light.Undo, Call{}); err != nil {
				t.Fatal(err)
			}
			assertIncrementalMatchesFull(t, p)
			want := map[bool]int{false: 2, true: 0}[animated] // the object and its light, or nothing: freed
			if got := discarded() - before; got != want {
				t.Errorf("light (animated: %v): %d discarded, want %d", animated, got, want)
			}
		}
	})
}

// TestUndoAssignGivesBackOwnMaterials: the undo of a material.assign that
// added a slot to a mesh shared by other objects gives back the materials
// those objects hold of their own in that slot (linked to the object, or
// out of sight behind a link to the data), which Blender would keep
// counting after it drops the slot: the counts are the same live as after
// a checkpoint's reload (both Blenders).
func TestUndoAssignGivesBackOwnMaterials(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": "A"})
		for _, n := range []string{"B", "C"} {
			mustExecute(t, p, "object.duplicate", map[string]any{"name": "A", "new_name": n, "linked": true})
		}
		mustExecute(t, p, "material.create", map[string]any{"name": "M"})
		mustExecute(t, p, "material.create", map[string]any{"name": "Own"})
		assign := mustExecute(t, p, "material.assign", map[string]any{"object": "A", "material": "M"})
		mustExecute(t, p, "python.exec", map[string]any{"code": "own = bpy.data.materials['Own']\n" +
			"b = bpy.data.objects['B'].material_slots[0]\nb.link = 'OBJECT'\nb.material = own\n" +
			"c = bpy.data.objects['C'].material_slots[0]\nc.link = 'OBJECT'\nc.material = own\nc.link = 'DATA'"})
		users := "result = [bpy.data.materials['M'].users, bpy.data.materials['Own'].users]"
		if got := string(execResult(t, p, users)); got != "[1,2]" {
			t.Fatalf("[M, Own] users before the undo = %s, want [1,2]", got)
		}
		if _, err := p.Undo(callCtx(t), assign.Undo, Call{}); err != nil {
			t.Fatal(err)
		}
		h := assertIncrementalMatchesFull(t, p).SceneHash
		if got := string(execResult(t, p, users)); got != "[0,0]" {
			t.Errorf("[M, Own] users after the undo = %s, want [0,0]", got)
		}
		q := reloaded(t, p, rt, h)
		if got := string(execResult(t, q, users)); got != "[0,0]" {
			t.Errorf("[M, Own] users after a reload = %s, want [0,0]", got)
		}
	})
}
