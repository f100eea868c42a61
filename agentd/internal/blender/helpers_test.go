package blender

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// testCache is the cache the Blenders of startTestProcess share (as an
// agent's do: Options.CacheDir); Start without one is tested where tests
// call it themselves.
var testCache string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "blender-test-cache-")
	if err != nil {
		panic(err)
	}
	testCache = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// testRuntimes are the Blender runtimes the tests run against, when present.
func testRuntimes() []struct {
	name string
	rt   Runtime
} {
	root, _ := filepath.Abs(filepath.Join("..", "..", ".."))
	return []struct {
		name string
		rt   Runtime
	}{
		{"bpy_4.5", Runtime{Kind: RuntimeBPYModule, Path: filepath.Join(root, ".blender", "venv", "bin", "python")}},
		{"blender_3.4", Runtime{Kind: RuntimeBinary, Path: "/usr/bin/blender"}},
	}
}

// forEachRuntime runs fn as a subtest per runtime, skipping absent ones; it
// fails when there is no Blender at all, so a machine without one cannot
// pass by skipping everything (`make blender` installs them).
func forEachRuntime(t *testing.T, fn func(t *testing.T, rt Runtime)) {
	t.Helper()
	found := 0
	for _, r := range testRuntimes() {
		t.Run(r.name, func(t *testing.T) {
			if !isExecutable(r.rt.Path) {
				t.Skipf("runtime %s not installed at %s", r.name, r.rt.Path)
			}
			found++
			fn(t, r.rt)
		})
	}
	if found == 0 {
		t.Fatal("no Blender runtime installed: run `make blender`")
	}
}

func testLogger(t testing.TB) *slog.Logger {
	level := slog.LevelInfo
	if os.Getenv("BLENDER_TEST_DEBUG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: level}))
}

// startTestProcess starts a Blender with the "inject" test fault (its
// calls' injectFailure and injectProgress are honoured) and the faults
// given.
func startTestProcess(t testing.TB, rt Runtime, faults ...string) *Process {
	t.Helper()
	p, _ := startWith(t, rt, func(o *Options) { o.Faults = append(o.Faults, faults...) })
	return p
}

// startWith is startTestProcess with its options changed by set; it
// returns the directory that holds work/ and sandbox/ too.
func startWith(t testing.TB, rt Runtime, set func(*Options)) (*Process, string) {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts := Options{
		Logger:     testLogger(t),
		WorkDir:    filepath.Join(dir, "work"),
		SandboxDir: filepath.Join(dir, "sandbox"),
		CacheDir:   testCache,
		Faults:     []string{"inject"},
	}
	set(&opts)
	p, err := Start(ctx, rt, opts)
	if err != nil {
		t.Fatalf("Start(%s): %v", rt.Path, err)
	}
	t.Cleanup(func() {
		if err := p.Stop(5 * time.Second); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return p, dir
}

func callCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustExecute(t testing.TB, p *Process, tool string, args map[string]any) Outcome {
	t.Helper()
	out, err := p.Execute(callCtx(t), Call{Tool: tool, Args: args, RequestID: "test"})
	if err != nil {
		t.Fatalf("Execute(%s, %v): %v", tool, args, err)
	}
	return out
}

// wantToolError runs a call that must fail with code and leave the scene hash unchanged.
func wantToolError(t testing.TB, p *Process, tool string, args map[string]any, code string) *ToolError {
	t.Helper()
	before, err := p.SceneHash(callCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.Execute(callCtx(t), Call{Tool: tool, Args: args})
	var te *ToolError
	if !errors.As(err, &te) {
		t.Fatalf("Execute(%s, %v) = %v, want ToolError %s", tool, args, err, code)
	}
	if te.Code != code {
		t.Fatalf("Execute(%s, %v): code %s (%s), want %s", tool, args, te.Code, te.Message, code)
	}
	if out.SceneHashBefore != before || out.SceneHashAfter != before {
		t.Errorf("refused call reports hashes %s/%s, want %s", out.SceneHashBefore, out.SceneHashAfter, before)
	}
	after, err := p.SceneHash(callCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("Execute(%s) failed with %s but changed the scene hash", tool, code)
	}
	assertIncrementalMatchesFull(t, p)
	return te
}

func assertIncrementalMatchesFull(t testing.TB, p *Process) Snapshot {
	t.Helper()
	s, err := p.Snapshot(callCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if s.SceneHash != s.IncrementalSceneHash {
		t.Fatalf("incremental hash %s != full recomputation %s", s.IncrementalSceneHash, s.SceneHash)
	}
	return s
}

// assertCheckpointRoundTrip saves p's scene as a checkpoint and loads it
// into a fresh process of rt: both must report p's scene hash, the save
// must leave p's scene as it was, and the loaded scene must hash the same
// incrementally and in full.
func assertCheckpointRoundTrip(t testing.TB, p *Process, rt Runtime) {
	t.Helper()
	s := assertIncrementalMatchesFull(t, p)
	q := reloaded(t, p, rt, s.SceneHash)
	if after := assertIncrementalMatchesFull(t, p); after.SceneHash != s.SceneHash {
		t.Fatalf("the save changed the scene: %s, was %s", after.SceneHash, s.SceneHash)
	}
	assertIncrementalMatchesFull(t, q)
}

// reloaded saves a checkpoint of p, which must hash h, and loads it into a
// new process of rt, which must hash h too.
func reloaded(t testing.TB, p *Process, rt Runtime, h string) *Process {
	t.Helper()
	path := filepath.Join(t.TempDir(), "scene.blend")
	if got, err := p.SaveCheckpoint(callCtx(t), path); err != nil || got != h {
		t.Fatalf("SaveCheckpoint = %s, %v; want %s", got, err, h)
	}
	q := startTestProcess(t, rt)
	if got, err := q.LoadCheckpoint(callCtx(t), path); err != nil || got != h {
		t.Fatalf("LoadCheckpoint = %s, %v; want %s", got, err, h)
	}
	return q
}
