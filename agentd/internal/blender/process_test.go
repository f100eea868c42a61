package blender

import (
	"context"
	"errors"
	"io/fs"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// toolVersion is the form of a tool's version: major.minor.patch.
var toolVersion = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`)

func TestStartProfileAndTools(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		pr := p.Profile()
		t.Logf("profile: %+v", pr)
		if !regexp.MustCompile(`^\d+\.\d+\.\d+$`).MatchString(pr.Version) {
			t.Errorf("Version = %q", pr.Version)
		}
		if pr.Runtime != rt.Kind || pr.PythonVersion == "" || pr.Platform == "" || pr.BuildHash == "" {
			t.Errorf("incomplete profile %+v", pr)
		}
		if !contains(pr.Features, "cycles") {
			t.Errorf("features %v lack cycles", pr.Features)
		}
		var names []string
		for _, tool := range p.Tools() {
			names = append(names, tool.Name)
			if !toolVersion.MatchString(tool.Version) || tool.Description == "" || tool.InputSchema["additionalProperties"] != false {
				t.Errorf("tool %s: incomplete metadata %+v", tool.Name, tool)
			}
			for prop, raw := range tool.InputSchema["properties"].(map[string]any) {
				schema := raw.(map[string]any)
				if marked, _ := schema["x-sandbox-path"].(bool); marked != sandboxPathArgs[tool.Name+"."+prop] {
					t.Errorf("tool %s: property %s x-sandbox-path = %v", tool.Name, prop, schema["x-sandbox-path"])
				}
			}
			switch tool.SafetyLevel {
			case "read_only", "safe_write", "destructive":
			default:
				t.Errorf("tool %s: safety level %q", tool.Name, tool.SafetyLevel)
			}
		}
		want := make([]string, 0, len(wantToolClasses)) // every tool, sorted (undo_test.go)
		for name := range wantToolClasses {
			want = append(want, name)
		}
		sort.Strings(want)
		if len(names) != len(want) {
			t.Fatalf("tools = %v, want %v", names, want)
		}
		for i := range want {
			if names[i] != want[i] {
				t.Fatalf("tools = %v, want %v", names, want)
			}
		}
	})
}

// sandboxPathArgs are the tool arguments that name files in the session
// sandbox: their schemas carry "x-sandbox-path": true, which the control
// plane's path gate reads.
var sandboxPathArgs = map[string]bool{
	"render.still.output":            true,
	"render.animation.output_prefix": true,
	"scene.export.output":            true,
	"scene.import.input":             true,
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Baseline hashes per runtime, for the cross-version comparison.
var baselineHashes = map[RuntimeKind]string{}

func TestBaselineHashStable(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p1 := startTestProcess(t, rt)
		p2 := startTestProcess(t, rt)
		h1, err := p1.Reset(callCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		h2, err := p2.SceneHash(callCtx(t)) // Start already loaded the baseline
		if err != nil {
			t.Fatal(err)
		}
		if h1 != h2 || !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(h1) {
			t.Fatalf("baseline hashes differ across processes: %s vs %s", h1, h2)
		}
		mustExecute(t, p1, "object.create", map[string]any{"type": "cube"})
		h3, err := p1.Reset(callCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if h3 != h1 {
			t.Fatalf("Reset after a change = %s, want baseline %s", h3, h1)
		}
		s := assertIncrementalMatchesFull(t, p1)
		objs := s.State["objects"].(map[string]any)
		if len(objs) != 2 || objs["Camera"] == nil || objs["Light"] == nil {
			t.Fatalf("baseline objects = %v", objs)
		}
		baselineHashes[rt.Kind] = h1
	})
	if len(baselineHashes) == 2 {
		a, b := baselineHashes[RuntimeBPYModule], baselineHashes[RuntimeBinary]
		if a != b {
			t.Errorf("baseline hash differs across Blender versions: 4.5 %s, 3.4 %s", a, b)
		}
	}
}

func TestStopKillsProcessGroup(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		// A straggler in Blender's process group must die with it.
		straggler := exec.Command("sleep", "60")
		straggler.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: p.Pid()}
		if err := straggler.Start(); err != nil {
			t.Fatal(err)
		}
		stragglerDone := make(chan error, 1)
		go func() { stragglerDone <- straggler.Wait() }()

		start := time.Now()
		if err := p.Stop(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		t.Logf("graceful stop took %v, wait err %v", time.Since(start), p.Wait())
		select {
		case <-stragglerDone:
		case <-time.After(5 * time.Second):
			t.Fatal("process in Blender's group survived Stop")
		}
		if err := syscall.Kill(-p.Pid(), 0); !errors.Is(err, syscall.ESRCH) {
			t.Fatalf("process group still exists: %v", err)
		}
		if _, err := p.SceneHash(callCtx(t)); !errors.Is(err, ErrProcessExited) {
			t.Fatalf("call after Stop = %v, want ErrProcessExited", err)
		}
	})
}

func TestStopEscalatesToKill(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		// A stopped (hung) Blender never answers shutdown.
		if err := syscall.Kill(p.Pid(), syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := p.Stop(300 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("Stop took %v", d)
		}
		if err := p.Wait(); err == nil {
			t.Fatal("Wait = nil for a killed process")
		}
	})
}

func TestKilledBlenderYieldsErrProcessExited(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		if err := syscall.Kill(p.Pid(), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_, err := p.Execute(callCtx(t), Call{Tool: "object.create", Args: map[string]any{"type": "cube"}})
		if !errors.Is(err, ErrProcessExited) {
			t.Fatalf("Execute after kill = %v, want ErrProcessExited", err)
		}
		t.Logf("error: %v", err)
		select {
		case <-p.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("Done not closed")
		}
	})
}

func TestCancelledCallKillsBlender(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		// A render that takes far longer than the deadline.
		_, err := p.Execute(ctx, Call{Tool: "render.still", Args: map[string]any{"output": "slow.png", "resolution": []any{1024, 1024}, "samples": 4096}})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Execute = %v, want DeadlineExceeded", err)
		}
		select {
		case <-p.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("Blender still running after an abandoned call")
		}
		if _, err := p.SceneHash(callCtx(t)); !errors.Is(err, ErrProcessExited) {
			t.Fatalf("call after abandoned call = %v, want ErrProcessExited", err)
		}
	})
}

func TestBadRequestsDoNotCrashBridge(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		var te *ToolError
		if err := p.call(callCtx(t), "no_such_method", struct{}{}, nil, nil); !errors.As(err, &te) || te.Code != CodeInvalidInput {
			t.Fatalf("unknown method = %v", err)
		}
		if err := p.call(callCtx(t), "execute", map[string]any{"tool": 5, "args": "x"}, nil, nil); !errors.As(err, &te) || te.Code != CodeNotFound {
			t.Fatalf("bad execute params = %v", err)
		}
		if err := p.call(callCtx(t), "execute", map[string]any{"tool": "object.create", "args": []any{1}}, nil, nil); !errors.As(err, &te) || te.Code != CodeInvalidInput {
			t.Fatalf("array args = %v", err)
		}
		// Raw garbage on the wire.
		p.mu.Lock()
		_, err := p.reqW.Write([]byte("{not json\n[1,2]\n\"x\"\n"))
		p.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.SceneHash(callCtx(t)); err != nil {
			t.Fatalf("bridge unusable after garbage: %v", err)
		}
	})
}

// nestedArgs returns args whose deepest container is at depth ({} is depth
// 1): {"v": [[...[]...]]}, the innermost array empty.
func nestedArgs(depth int) map[string]any {
	var v any = []any{}
	for d := depth; d > 2; d-- {
		v = []any{v}
	}
	return map[string]any{"v": v}
}

// TestDeepArgs: args nested deeper than maxArgsDepth (the control plane's
// plan.MaxArgsDepth, same definition) fail at once with invalid_input,
// without a request to Blender, in Execute and ExecuteBatch; args at the
// limit reach the bridge; a request nested too deep for the bridge's JSON
// decoder, which only a caller bypassing Execute can send, is answered with
// its id instead of leaving the caller waiting.
func TestDeepArgs(t *testing.T) {
	if checkArgsDepth(nestedArgs(maxArgsDepth)) != nil || checkArgsDepth(map[string]any{"v": nestedArgs(maxArgsDepth - 1)}) != nil {
		t.Fatal("args at the limit refused")
	}
	if !isCode(checkArgsDepth(nestedArgs(maxArgsDepth+1)), CodeInvalidInput) ||
		!isCode(checkArgsDepth(map[string]any{"a": 1.0, "v": map[string]any{"w": nestedArgs(maxArgsDepth - 1)}}), CodeInvalidInput) {
		t.Fatal("args over the limit accepted")
	}
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		sent := p.nextID
		out, err := p.Execute(callCtx(t), Call{Tool: "object.create", Args: nestedArgs(maxArgsDepth + 1)})
		if !isCode(err, CodeInvalidInput) || out.SceneHashBefore != "" || p.nextID != sent {
			t.Fatalf("too deep: %+v, %v (requests sent: %d)", out, err, p.nextID-sent)
		}
		out, err = p.Execute(callCtx(t), Call{Tool: "object.create", Args: nestedArgs(maxArgsDepth)})
		if !isCode(err, CodeInvalidInput) || out.SceneHashBefore == "" || p.nextID != sent+1 {
			t.Fatalf("at the limit: %+v, %v (the bridge's schema check should refuse it)", out, err)
		}

		calls := cubeCalls("D1", "D2", "D3")
		calls[1].Args["extra"] = nestedArgs(maxArgsDepth)
		got := runBatch(t, p, calls)
		if len(got) != 2 || got[0].Err != nil || !isCode(got[1].Err, CodeInvalidInput) {
			t.Fatalf("batch: %+v", got)
		}
		if s := mustExecute(t, p, "scene.get_summary", nil); s.Fields()["object_count"] != 3.0 {
			t.Errorf("after the batch: %v, want D1 only", s.Fields())
		}

		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err = p.call(ctx, "execute", map[string]any{"tool": "object.create", "args": nestedArgs(1000)}, nil, nil)
		if !isCode(err, CodeInvalidInput) {
			t.Fatalf("1,000 deep past Execute: %v, want invalid_input", err)
		}
		assertIncrementalMatchesFull(t, p)
	})
}

// TestNothingWrittenOutsideWorkDir: Blender gets HOME, the XDG base
// directories and TMPDIR inside WorkDir, and saving a checkpoint writes no
// thumbnail: with this test's HOME and XDG_* on an empty directory, a
// session that renders, exports and saves and loads checkpoints leaves
// that directory empty, and WorkDir holds no thumbnail either.
func TestNothingWrittenOutsideWorkDir(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	for _, k := range []string{"XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME"} {
		t.Setenv(k, filepath.Join(home, k))
	}
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		dir := t.TempDir()
		work := filepath.Join(dir, "work")
		p, err := Start(callCtx(t), rt, Options{Logger: testLogger(t), WorkDir: work, SandboxDir: filepath.Join(dir, "sandbox")})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Stop(5 * time.Second)
		mustExecute(t, p, "object.create", map[string]any{"type": "monkey"})
		mustExecute(t, p, "render.still", map[string]any{"output": "r.png", "resolution": []any{16, 16}, "samples": 1})
		mustExecute(t, p, "scene.export", map[string]any{"format": "obj", "output": "r.obj"})
		cp := filepath.Join(dir, "cp.blend")
		if _, err := p.SaveCheckpoint(callCtx(t), cp); err != nil {
			t.Fatal(err)
		}
		mustExecute(t, p, "object.create", map[string]any{"type": "cube"})
		if _, err := p.LoadCheckpoint(callCtx(t), cp); err != nil {
			t.Fatal(err)
		}
		if _, err := p.SaveCheckpoint(callCtx(t), cp); err != nil {
			t.Fatal(err)
		}
		if err := p.Stop(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		_ = filepath.WalkDir(home, func(path string, d fs.DirEntry, err error) error {
			if path != home {
				t.Errorf("written outside the work dir: %s", path)
			}
			return err
		})
		// Blender makes the thumbnail directories at start; no file in them.
		_ = filepath.WalkDir(work, func(path string, d fs.DirEntry, err error) error {
			if d != nil && !d.IsDir() && strings.Contains(path, string(filepath.Separator)+"thumbnails"+string(filepath.Separator)) {
				t.Errorf("a thumbnail: %s", path)
			}
			return err
		})
	})
}

// lateCtx is a context whose functions registered with context.AfterFunc
// never run: the moment between a cancel closing Done and starting them,
// which a call may see first, made to last. Value hides the cancelCtx
// inside, so that context.AfterFunc goes through the AfterFunc method.
type lateCtx struct{ context.Context }

func (lateCtx) AfterFunc(func()) func() bool { return func() bool { return true } }
func (lateCtx) Value(any) any                { return nil }

// TestAbandonedCallKillsBlenderItself: a call or a batch that sees its ctx
// end kills Blender itself, whether or not context.AfterFunc has run yet
// (its deferred stop would otherwise keep it from running at all, and
// Blender would go on with a request its caller has given up).
func TestAbandonedCallKillsBlenderItself(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		for _, batch := range []bool{false, true} {
			p := startTestProcess(t, rt)
			inner, cancel := context.WithCancel(context.Background())
			time.AfterFunc(300*time.Millisecond, cancel)
			ctx := lateCtx{inner}
			call := Call{Tool: "python.exec", Args: map[string]any{"code": "import time\ntime.sleep(3)"}}
			var err error
			if batch {
				p.ExecuteBatch(ctx, []Call{call}, func(i int, r BatchResult) bool { err = r.Err; return true })
			} else {
				_, err = p.Execute(ctx, call)
			}
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("batch %v: %v, want context.Canceled", batch, err)
			}
			select {
			case <-p.Done():
			case <-time.After(10 * time.Second):
				t.Fatalf("batch %v: Blender still running after an abandoned call", batch)
			}
		}
	})
}

// TestBatchOutlivesALateCancel: a caller that hangs up as soon as it has a
// batch's last answer, or its failure (the control plane starts the plan's
// rollback at once), leaves Blender running: nothing of the batch can run
// any more (the bridge refuses the calls after a failure). It used to be
// killed, and the rollback that followed failed on a dead Blender.
func TestBatchOutlivesALateCancel(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		create := func(name string) Call {
			return Call{Tool: "object.create", Args: map[string]any{"type": "cube", "name": name}}
		}
		for _, c := range []struct {
			name  string
			calls []Call
		}{
			{"answered", []Call{create("A1"), create("A2")}},
			{"failed", []Call{create("F1"), {Tool: "object.delete", Args: map[string]any{"name": "Nope"}}, create("F3"), create("F4")}},
		} {
			ctx, cancel := context.WithCancel(context.Background())
			p.ExecuteBatch(ctx, c.calls, func(i int, r BatchResult) bool {
				if r.Err != nil || i == len(c.calls)-1 {
					cancel()
					// context.AfterFunc's function runs now, while the batch
					// still holds Blender.
					time.Sleep(50 * time.Millisecond)
				}
				return true
			})
			cancel()
			if !p.Usable() {
				t.Fatalf("%s: Blender killed by a cancel after the batch's last answer or its failure", c.name)
			}
			if _, err := p.Execute(context.Background(), create("After_"+c.name)); err != nil {
				t.Fatalf("%s: the next call: %v", c.name, err)
			}
		}
		if _, err := p.Execute(context.Background(), Call{Tool: "object.delete", Args: map[string]any{"name": "F3"}}); err == nil {
			t.Fatal("F3 exists: a call after the batch's failure ran")
		}
	})
}

// TestDrainKillsOnCancel: a batch whose call failed in Go on an answer the
// bridge sent as ok (python.exec's result too large for JSON's numbers)
// has not failed for the bridge, which runs the later requests already
// written. If ctx ends while the batch waits for them, it kills Blender
// itself: context.AfterFunc's kill may come too late or not at all.
func TestDrainKillsOnCancel(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		inner, cancel := context.WithCancel(context.Background())
		defer cancel()
		calls := []Call{
			{Tool: "python.exec", Args: map[string]any{"code": "result = 10**400"}},
			{Tool: "python.exec", Args: map[string]any{"code": "import time\ntime.sleep(0.5)"}},
			{Tool: "object.create", Args: map[string]any{"type": "cube", "name": "Ghost"}},
		}
		var first error
		p.ExecuteBatch(lateCtx{inner}, calls, func(i int, r BatchResult) bool {
			if i == 0 {
				first = r.Err
				time.AfterFunc(50*time.Millisecond, cancel) // the caller hangs up elsewhere
			}
			return true
		})
		if first == nil {
			t.Fatal("python.exec's 10**400 was not a failure in Go")
		}
		if p.Usable() {
			t.Fatal("Blender left running with the rest of a batch it runs unknown to its caller")
		}
	})
}

// TestRecordsChanged: a call reports how many of the scene's records it
// made, changed or removed, python.exec's (which the bridge hashes anew)
// included; a call that changes nothing reports none.
func TestRecordsChanged(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt Runtime) {
		p := startTestProcess(t, rt)
		create := mustExecute(t, p, "object.create", map[string]any{"type": "cube", "name": "A"})
		if create.RecordsChanged < 2 { // the object and its mesh, at least
			t.Fatalf("object.create changed %d records", create.RecordsChanged)
		}
		move := mustExecute(t, p, "object.set_transform", map[string]any{"name": "A", "location": []any{1, 2, 3}})
		if move.RecordsChanged != 1 {
			t.Fatalf("object.set_transform changed %d records", move.RecordsChanged)
		}
		if same := mustExecute(t, p, "object.set_transform", map[string]any{"name": "A", "location": []any{1, 2, 3}}); same.RecordsChanged != 0 {
			t.Fatalf("a transform to where it is changed %d records", same.RecordsChanged)
		}
		exec := mustExecute(t, p, "python.exec", map[string]any{"code": "import bpy\n" +
			"for i in range(50):\n    bpy.context.scene.collection.objects.link(bpy.data.objects.new('E%d' % i, None))"})
		if exec.RecordsChanged < 50 {
			t.Fatalf("python.exec made 50 objects and changed %d records", exec.RecordsChanged)
		}
		if summary := mustExecute(t, p, "scene.get_summary", map[string]any{}); summary.RecordsChanged != 0 {
			t.Fatalf("scene.get_summary changed %d records", summary.RecordsChanged)
		}
		t.Logf("records changed: create %d, transform %d, python.exec of 50 empties %d", create.RecordsChanged, move.RecordsChanged, exec.RecordsChanged)
	})
}
