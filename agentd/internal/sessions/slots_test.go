package sessions

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/blendplane/blendplane/agentd/internal/blender"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/internal/blenderprocs"
	"github.com/blendplane/blendplane/internal/receiptwire"
)

// run executes ops in a session and returns their receipts.
func run(t *testing.T, m *Manager, sessionID, requestID string, ops ...Operation) []*cpv1.Receipt {
	t.Helper()
	var got []*cpv1.Receipt
	var mu sync.Mutex
	err := m.Execute(context.Background(), sessionID, requestID, ops, func(r *cpv1.Receipt) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, r)
		return nil
	}, nil)
	if err != nil {
		t.Fatalf("execute %s in %s: %v", requestID, sessionID, err)
	}
	return got
}

// rollBack rolls back the operation of key in a session's plan and returns
// its receipt, which must say ROLLED_BACK.
func rollBack(t *testing.T, m *Manager, sessionID, requestID, key string) *cpv1.Receipt {
	t.Helper()
	var got []*cpv1.Receipt
	if err := m.Rollback(context.Background(), sessionID, requestID, []string{key}, func(r *cpv1.Receipt) error {
		got = append(got, r)
		return nil
	}); err != nil || len(got) != 1 || got[0].GetStatus() != cpv1.Receipt_STATUS_ROLLED_BACK {
		t.Fatalf("rollback of %s in %s/%s: %v, %v", key, sessionID, requestID, got, err)
	}
	return got[0]
}

func open(t *testing.T, m *Manager, rt string, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if _, _, err := m.Open(context.Background(), id, rt, blender.Limits{}, 0); err != nil {
			t.Fatalf("open %s: %v", id, err)
		}
	}
}

// blenders counts the sessions whose Blender process is alive.
func blenders(m *Manager) int {
	m.mu.Lock()
	all := make([]*session, 0, len(m.sessions))
	for _, s := range m.sessions {
		all = append(all, s)
	}
	m.mu.Unlock()
	n := 0
	for _, s := range all {
		if s.mu.TryLock() {
			if s.alive() {
				n++
			}
			s.mu.Unlock()
		} else {
			n++ // a batch holds it: count it as running
		}
	}
	return n
}

// watchBlenders samples len(blenderprocs.Under(dir)) until the test ends; the
// function it returns gives the most seen at once so far.
func watchBlenders(t *testing.T, dir string) func() int {
	var most atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() { close(stop); <-done })
	go func() {
		defer close(done)
		for {
			if n := int64(len(blenderprocs.Under(dir))); n > most.Load() {
				most.Store(n)
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	return func() int { return int(most.Load()) }
}

// TestSlotsBoundBlenders: with two slots, four sessions used in turn never
// run more than two Blenders; the least recently used is parked, and a
// parked session comes back on the scene it had.
func TestSlotsBoundBlenders(t *testing.T) {
	m, _, rt := newManagerWith(t, func(c *Config) { c.MaxLive = 2 })
	open(t, m, rt, "s1", "s2", "s3", "s4")
	if n := blenders(m); n != 0 {
		t.Fatalf("%d Blenders before any batch: Open must not start one", n)
	}
	after := map[string]string{}
	for i, id := range []string{"s1", "s2", "s3", "s4"} {
		rs := run(t, m, id, "r1", create(fmt.Sprint("a", i), "Box"))
		if rs[0].GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED {
			t.Fatalf("%s: %v", id, rs[0])
		}
		after[id] = rs[0].GetSceneHashAfter()
		if n := blenders(m); n > 2 {
			t.Fatalf("%d Blenders after %s, at most 2", n, id)
		}
	}
	if st := m.Status(); fmt.Sprint(st.Live) != "[s3 s4]" || st.Sessions != 4 || st.MaxLive != 2 {
		t.Fatalf("status %+v: the least recently used sessions should be parked", st)
	}
	// s1 was parked with a checkpoint; it comes back on its scene.
	rs := run(t, m, "s1", "r2", create("again", "Box"))
	if rs[0].GetStatus() != cpv1.Receipt_STATUS_FAILED || rs[0].GetError().GetErrorCode() != "CONFLICT" {
		t.Fatalf("the restored scene lost its Box: %v", rs[0])
	}
	if rs[0].GetSceneHashBefore() != after["s1"] {
		t.Fatalf("restored scene %s, it was %s", rs[0].GetSceneHashBefore(), after["s1"])
	}
	if st := m.Status(); fmt.Sprint(st.Live) != "[s1 s4]" {
		t.Fatalf("live %v: s3 was the least recently used", st.Live)
	}
}

// TestBatchesWaitForASlot: with one slot, batches of several sessions that
// arrive together all run, one Blender at a time.
func TestBatchesWaitForASlot(t *testing.T) {
	m, _, rt := newManagerWith(t, func(c *Config) { c.MaxLive = 1 })
	open(t, m, rt, "s1", "s2", "s3")
	var wg sync.WaitGroup
	stop := make(chan struct{})
	most := 0
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
				if n := len(m.Status().Live); n > most {
					most = n
				}
			}
		}
	}()
	for _, id := range []string{"s1", "s2", "s3"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2; i++ {
				rs := run(t, m, id, fmt.Sprint("r", i), create(fmt.Sprint("op", i), fmt.Sprint("Box", i)))
				if rs[0].GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED {
					t.Errorf("%s: %v", id, rs[0])
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	if most > 1 {
		t.Fatalf("%d sessions held a Blender at once, at most 1", most)
	}
}

// TestIdleSessionIsParked: a session idle for the timeout gives up its
// Blender, checkpointed, and its next batch finds its scene.
func TestIdleSessionIsParked(t *testing.T) {
	m, j, rt := newManagerWith(t, func(c *Config) { c.IdleTimeout = 300 * time.Millisecond })
	open(t, m, rt, "s1")
	rs := run(t, m, "s1", "r1", create("a", "Box"))
	deadline := time.Now().Add(10 * time.Second)
	for len(m.Status().Live) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the idle session was not parked")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := blenders(m); n != 0 {
		t.Fatalf("%d Blenders after parking", n)
	}
	js, err := j.Session("s1")
	if err != nil || js.Checkpoint == nil || js.Checkpoint.SceneHash != rs[0].GetSceneHashAfter() {
		t.Fatalf("parked without a checkpoint of its scene: %+v %v", js, err)
	}
	next := run(t, m, "s1", "r2", Operation{OperationID: "look", MCPCallID: "c", Tool: "scene.get_summary",
		Args: map[string]any{}, Safety: cpv1.SafetyLevel_SAFETY_LEVEL_READ_ONLY, IdempotencyKey: "key-look"})
	if next[0].GetSceneHashBefore() != rs[0].GetSceneHashAfter() {
		t.Fatalf("restored on scene %s, parked on %s", next[0].GetSceneHashBefore(), rs[0].GetSceneHashAfter())
	}
}

// TestRollbackReleasesTheSession: a rollback is a batch like any other; once
// it ends the session is idle again (it used to stay counted as busy: never
// parked, and the agent's spares never refilled).
func TestRollbackReleasesTheSession(t *testing.T) {
	m, _, rt := newManagerWith(t, func(c *Config) { c.IdleTimeout = 300 * time.Millisecond })
	open(t, m, rt, "s1")
	run(t, m, "s1", "r1", create("a", "Box"))
	rollBack(t, m, "s1", "r2", "key-a")
	if busy := m.Status().Busy; busy != 0 {
		t.Errorf("%d sessions busy after the rollback ended", busy)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(m.Status().Live) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the session was not parked after its rollback")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestOpenRefusedWhileEverySlotIsBusy: a new session is refused while every
// Blender slot runs a batch, and accepted once one is free.
func TestOpenRefusedWhileEverySlotIsBusy(t *testing.T) {
	m, _, rt := newManagerWith(t, func(c *Config) { c.MaxLive = 1 })
	open(t, m, rt, "s1")
	done := make(chan []*cpv1.Receipt)
	go func() {
		done <- run(t, m, "s1", "r1", Operation{OperationID: "sleep", MCPCallID: "c", Tool: "python.exec",
			Args: map[string]any{"code": "import time\ntime.sleep(3)"}, Safety: cpv1.SafetyLevel_SAFETY_LEVEL_DESTRUCTIVE,
			IdempotencyKey: "key-sleep"})
	}()
	deadline := time.Now().Add(60 * time.Second)
	for m.Status().Busy == 0 || len(m.Status().Live) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the batch did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, _, err := m.Open(context.Background(), "s2", rt, blender.Limits{}, 0); !errors.Is(err, ErrCapacity) {
		t.Fatalf("open while the only slot is busy: %v", err)
	}
	if rs := <-done; rs[0].GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED {
		t.Fatalf("sleep: %v", rs[0])
	}
	open(t, m, rt, "s2")
}

// TestPreviewTakesASlot: a preview's fork is a Blender like a session's and
// counts against MaxLive. With every slot held by an idle session it parks
// the least recently used one; with every slot busy it waits for one, or
// fails if its context ends first, leaving no Blender and no slot behind.
func TestPreviewTakesASlot(t *testing.T) {
	m, _, rt := newManagerWith(t, func(c *Config) { c.MaxLive = 2 })
	open(t, m, rt, "s1", "s2", "s3")
	run(t, m, "s1", "r1", create("a", "Box"))
	run(t, m, "s2", "r1", create("a", "Box"))
	most := watchBlenders(t, m.cfg.DataDir)
	preview := func(ctx context.Context) (PreviewResult, error) {
		return m.Preview(ctx, "s3", []Operation{create("p", "Ball")}, false)
	}
	slotsHeld := func() (int, []string) {
		st := m.Status()
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.live - m.spareSlots, st.Live // spares hold slots too, given up first
	}

	res, err := preview(context.Background())
	if err != nil || res.Failure != nil || len(res.Changes) == 0 {
		t.Fatalf("preview with idle sessions: %+v %v", res, err)
	}
	if n := most(); n > 2 {
		t.Fatalf("%d Blenders at once with 2 slots and a preview", n)
	}
	if held, live := slotsHeld(); held != 1 || fmt.Sprint(live) != "[s2]" {
		t.Fatalf("%d slots held, live %v: the preview should have parked s1 and given its slot back", held, live)
	}

	// Every slot busy: s1 (restored) and s2 sleep.
	sleeping := map[string]chan []*cpv1.Receipt{}
	for _, id := range []string{"s1", "s2"} {
		done := make(chan []*cpv1.Receipt, 1)
		sleeping[id] = done
		go func() {
			done <- run(t, m, id, "r2", Operation{OperationID: "sleep", MCPCallID: "c", Tool: "python.exec",
				Args: map[string]any{"code": "import time\ntime.sleep(4)"}, Safety: cpv1.SafetyLevel_SAFETY_LEVEL_DESTRUCTIVE,
				IdempotencyKey: "key-sleep"})
		}()
	}
	deadline := time.Now().Add(60 * time.Second)
	for st := m.Status(); st.Busy < 2 || len(st.Live) < 2; st = m.Status() {
		if time.Now().After(deadline) {
			t.Fatalf("the batches did not start: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	_, err = preview(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("preview while every slot is busy, its context ending first: %v", err)
	}
	if held, _ := slotsHeld(); held != 2 {
		t.Fatalf("%d slots held after the failed preview, want the sessions' 2", held)
	}
	s3, _ := m.session("s3")
	if left, _ := filepath.Glob(filepath.Join(m.previewsDir(), s3.id+"-*")); len(left) != 0 {
		t.Fatalf("the failed preview left %v", left)
	}
	// Waiting, it runs once a batch ends, in the slot of the session it parks.
	if res, err := preview(context.Background()); err != nil || len(res.Changes) == 0 {
		t.Fatalf("preview waiting for a slot: %+v %v", res, err)
	}
	for id, done := range sleeping {
		if rs := <-done; rs[0].GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED {
			t.Fatalf("%s: %v", id, rs[0])
		}
	}
	if n := most(); n > 2 {
		t.Fatalf("%d Blenders at once with 2 slots and a preview", n)
	}
	if held, live := slotsHeld(); held != len(live) {
		t.Fatalf("%d slots held, %d live sessions: the preview kept its slot", held, len(live))
	}
}

// TestCloseRemovesTheSession: closing stops the Blender, removes every file
// of the session and forgets it.
func TestCloseRemovesTheSession(t *testing.T) {
	m, j, rt := newManager(t)
	open(t, m, rt, "s1")
	run(t, m, "s1", "r1", create("a", "Box"))
	s, _ := m.session("s1")
	dir := s.dir
	if _, err := os.Stat(filepath.Join(dir, "output")); err != nil {
		t.Fatal(err)
	}
	if err := m.Close("s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("session files left: %v", err)
	}
	if _, err := j.Session("s1"); err == nil {
		t.Fatal("the journal still has the session")
	}
	if st := m.Status(); st.Sessions != 0 || len(st.Live) != 0 {
		t.Fatalf("status after close %+v", st)
	}
	if err := m.Execute(context.Background(), "s1", "r2", []Operation{create("b", "B")}, func(*cpv1.Receipt) error { return nil }, nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("execute in a closed session: %v", err)
	}
}

// TestCancelledCallLeavesNoIntent: the intent of a call that was cancelled
// is cleaned up with the batch.
func TestCancelledCallLeavesNoIntent(t *testing.T) {
	m, j, rt := newManager(t)
	open(t, m, rt, "s1")
	go func() {
		for {
			if interrupted, _ := m.Cancel("s1", "r1"); interrupted {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	rs := run(t, m, "s1", "r1", Operation{OperationID: "sleep", MCPCallID: "c", Tool: "python.exec",
		Args: map[string]any{"code": "import time\ntime.sleep(30)"}, Safety: cpv1.SafetyLevel_SAFETY_LEVEL_DESTRUCTIVE,
		IdempotencyKey: "key-sleep"})
	if len(rs) != 1 || rs[0].GetError().GetErrorCode() != "CANCELLED" {
		t.Fatalf("receipts %v", rs)
	}
	if keys, err := j.Intents("s1"); err != nil || len(keys) != 0 {
		t.Fatalf("intents left: %v %v", keys, err)
	}
}

// TestUploadWaitsForAKilledBlender: a batch that writes files, cancelled
// while its Blender runs a call, lets an upload land only once that
// Blender has exited: a system call it was in (a rename of its output)
// completes even after the kill.
func TestUploadWaitsForAKilledBlender(t *testing.T) {
	m, _, rt := newManager(t)
	open(t, m, rt, "s1")
	run(t, m, "s1", "r0", create("a", "Box")) // its Blender runs
	pid := blenderPid(m, "s1")
	batch := make(chan []*cpv1.Receipt, 1)
	go func() {
		batch <- run(t, m, "s1", "r1",
			Operation{OperationID: "sleep", MCPCallID: "c", Tool: "python.exec", Args: map[string]any{"code": "import time\ntime.sleep(30)"},
				Safety: cpv1.SafetyLevel_SAFETY_LEVEL_DESTRUCTIVE, IdempotencyKey: "key-sleep"},
			Operation{OperationID: "out", MCPCallID: "c", Tool: "scene.export", Args: map[string]any{"format": "obj", "output": "out.obj"},
				Safety: cpv1.SafetyLevel_SAFETY_LEVEL_SAFE_WRITE, IdempotencyKey: "key-out"})
	}()
	waitRunning(t, m, "s1", "r1")
	upload := []byte("# uploaded\n")
	uploaded := make(chan error, 1)
	go func() {
		uploaded <- errOf(m.PutFile("s1", "out.obj", int64(len(upload)), sha(upload), bytes.NewReader(upload)))
	}()
	time.Sleep(300 * time.Millisecond) // the upload waits for the batch, which writes its name
	if interrupted, err := m.Cancel("s1", "r1"); err != nil || !interrupted {
		t.Fatalf("cancel: %v %v", interrupted, err)
	}
	if err := <-uploaded; err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the upload landed while the killed Blender %d was still there: %v", pid, err)
	}
	if rs := <-batch; len(rs) != 1 || rs[0].GetError().GetErrorCode() != "CANCELLED" {
		t.Fatalf("receipts %v", rs)
	}
}

// TestLostCallLeavesNoIntent: the intent of a call lost when agentd
// stopped (journaled as it started, never committed nor cleared) is
// cleaned up when the manager starts again on that journal.
func TestLostCallLeavesNoIntent(t *testing.T) {
	m, j, rt := newManager(t)
	open(t, m, rt, "s1")
	run(t, m, "s1", "r1", create("a", "Box"))
	// What agentd stopping in the middle of a call leaves behind.
	if err := j.Intend("s1", []string{"key-lost"}); err != nil {
		t.Fatal(err)
	}
	m.Shutdown()
	if keys, err := j.Intents("s1"); err != nil || len(keys) != 1 {
		t.Fatalf("intents before the restart: %v %v", keys, err)
	}
	restart(t, m, j)
	if keys, err := j.Intents("s1"); err != nil || len(keys) != 0 {
		t.Fatalf("intents left after the restart: %v %v", keys, err)
	}
}

// TestFailedCallThatChangedTheSceneLeavesNothing: a call that fails after
// changing the scene in a way the bridge cannot undo (python.exec) is
// discarded by rebuilding the session from its journal.
func TestFailedCallThatChangedTheSceneLeavesNothing(t *testing.T) {
	m, _, rt := newManager(t)
	open(t, m, rt, "s1")
	first := run(t, m, "s1", "r1", create("a", "Box"))
	rs := run(t, m, "s1", "r2", Operation{OperationID: "leak", MCPCallID: "c", Tool: "python.exec",
		Args:   map[string]any{"code": "import bpy\nbpy.data.objects.new('Leak', None)\nraise RuntimeError('boom')"},
		Safety: cpv1.SafetyLevel_SAFETY_LEVEL_DESTRUCTIVE, IdempotencyKey: "key-leak"})
	if rs[0].GetStatus() != cpv1.Receipt_STATUS_FAILED {
		t.Fatalf("receipt %v", rs[0])
	}
	if h := rs[0].GetSceneHashAfter(); h != first[0].GetSceneHashAfter() {
		t.Fatalf("scene after the failed call %s, before it %s", h, first[0].GetSceneHashAfter())
	}
	look := run(t, m, "s1", "r3", Operation{OperationID: "look", MCPCallID: "c", Tool: "python.exec",
		Args:   map[string]any{"code": "import bpy\nresult = [n for n in ('Box', 'Leak') if n in bpy.data.objects]"},
		Safety: cpv1.SafetyLevel_SAFETY_LEVEL_DESTRUCTIVE, IdempotencyKey: "key-look"})
	res, err := receiptwire.Result(look[0])
	if err != nil {
		t.Fatal(err)
	}
	names := res.GetFields()["result"].GetListValue().AsSlice()
	if fmt.Sprint(names) != "[Box]" {
		t.Fatalf("objects after the failed call: %v (want the Box only): %v", names, look[0])
	}
}

// TestFiles: files go into the sandbox whole or not at all, by plain name
// only, and come back with their hash.
func TestFiles(t *testing.T) {
	m, _, rt := newManager(t)
	open(t, m, rt, "s1")
	content := []byte("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n")
	sum := sha(content)
	put := func(name string, body []byte, size int64, hash string) error {
		return errOf(m.PutFile("s1", name, size, hash, bytesReader(body)))
	}
	if err := put("tri.obj", content, int64(len(content)), sum); err != nil {
		t.Fatal(err)
	}
	f, size, got, err := m.OpenFile("s1", "tri.obj", "")
	if err != nil || size != int64(len(content)) || got != sum {
		t.Fatalf("open: %d %s %v", size, got, err)
	}
	f.Close()
	for _, name := range []string{"../x.obj", "a/b.obj", "", "..", "tab\t.obj", "nl\n.obj"} {
		if err := put(name, content, int64(len(content)), sum); !errors.Is(err, ErrBadFileName) {
			t.Errorf("name %q: %v", name, err)
		}
	}
	if err := put("bad.obj", content, int64(len(content)), sha([]byte("other"))); !errors.Is(err, ErrFileMismatch) {
		t.Errorf("wrong hash: %v", err)
	}
	if err := put("short.obj", content, int64(len(content))+1, sum); !errors.Is(err, ErrFileMismatch) {
		t.Errorf("wrong size: %v", err)
	}
	if _, _, _, err := m.OpenFile("s1", "bad.obj", ""); !errors.Is(err, ErrFileNotFound) {
		t.Errorf("a refused file was written: %v", err)
	}
	s, _ := m.session("s1")
	outside := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(outside, []byte("secret"), 0o600)
	os.Symlink(outside, filepath.Join(s.sandbox, "link.obj"))
	if _, _, _, err := m.OpenFile("s1", "link.obj", ""); !errors.Is(err, ErrFileConflict) {
		t.Errorf("read through a symlink: %v", err)
	}
	if err := put("link.obj", content, int64(len(content)), sum); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(outside); string(b) != "secret" {
		t.Error("a put followed a symlink out of the sandbox")
	}
	os.Mkdir(filepath.Join(s.sandbox, "dir.obj"), 0o755)
	if err := put("dir.obj", content, int64(len(content)), sum); !errors.Is(err, ErrFileConflict) {
		t.Errorf("put over a directory: %v", err)
	}
	// An import of a file the sandbox does not have says to upload it.
	rs := run(t, m, "s1", "r1", Operation{OperationID: "imp", MCPCallID: "c", Tool: "scene.import", Args: map[string]any{"format": "obj", "input": "missing.obj"},
		Safety: cpv1.SafetyLevel_SAFETY_LEVEL_SAFE_WRITE, IdempotencyKey: "key-imp"})
	if e := rs[0].GetError(); e.GetErrorCode() != "NOT_FOUND" || !strings.Contains(e.GetRetryHint(), "upload the file") {
		t.Errorf("an import of a missing file: %v", rs[0])
	}
}

// TestUnrepresentableResultDiscarded: a python.exec whose result a Struct
// cannot hold (a number beyond float64) fails as an internal error, and
// what it did to the scene is discarded: the session is rebuilt from its
// journal, which does not hold the call.
func TestUnrepresentableResultDiscarded(t *testing.T) {
	m, _, rt := newManager(t)
	open(t, m, rt, "s1")
	before := run(t, m, "s1", "r1", create("a", "Box"))[0].GetSceneHashAfter()
	rs := run(t, m, "s1", "r2", Operation{OperationID: "x", MCPCallID: "c", Tool: "python.exec",
		Args:   map[string]any{"code": "import bpy\nbpy.ops.mesh.primitive_cube_add()\nresult = 10**400"},
		Safety: cpv1.SafetyLevel_SAFETY_LEVEL_DESTRUCTIVE, IdempotencyKey: "key-x"})
	r := rs[0]
	if r.GetStatus() != cpv1.Receipt_STATUS_FAILED || r.GetError().GetErrorCode() != "INTERNAL_ERROR" ||
		!strings.Contains(r.GetError().GetMessage(), "decode result") || r.GetSceneHashAfter() != before {
		t.Fatalf("receipt %v, want INTERNAL_ERROR with the scene back at %s", r, before)
	}
	sum := run(t, m, "s1", "r3", Operation{OperationID: "s", MCPCallID: "c", Tool: "scene.get_summary",
		Args: map[string]any{}, Safety: cpv1.SafetyLevel_SAFETY_LEVEL_READ_ONLY, IdempotencyKey: "key-s"})[0]
	if sum.GetSceneHashBefore() != before {
		t.Fatalf("the scene after the failed call: %s, want %s", sum.GetSceneHashBefore(), before)
	}
}

// TestPreviewSlotIsBusy: a slot a preview holds is busy, as a running
// batch's is: with every slot held so, a new session is refused with
// ErrCapacity, and accepted once the preview gives its slot back.
func TestPreviewSlotIsBusy(t *testing.T) {
	m, _, rt := newManagerWith(t, func(c *Config) { c.MaxLive = 1 })
	var slot bool // what Preview holds while its fork runs
	if err := m.takeSlot(context.Background(), &slot, "a preview", "", nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Open(context.Background(), "s1", rt, blender.Limits{}, 0); !errors.Is(err, ErrCapacity) {
		t.Fatalf("a session while a preview holds the only slot: %v, want ErrCapacity", err)
	}
	m.giveSlot(&slot)
	open(t, m, rt, "s1")
}

// TestPreviewOfImportedFiles: the fork a preview replays the journal in has
// the session's files: a session that imported a model is previewed (its
// fork failed, "no file 'tri.obj' in the sandbox", before), and what the
// fork writes does not touch the session's files.
func TestPreviewOfImportedFiles(t *testing.T) {
	m, _, rt := newManager(t)
	open(t, m, rt, "s1")
	content := []byte("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n")
	putFile(t, m, "s1", "tri.obj", content)
	run(t, m, "s1", "r1", Operation{OperationID: "imp", MCPCallID: "c", Tool: "scene.import",
		Args: map[string]any{"format": "obj", "input": "tri.obj"}, Safety: cpv1.SafetyLevel_SAFETY_LEVEL_SAFE_WRITE, IdempotencyKey: "key-imp"})
	export := Operation{OperationID: "out", MCPCallID: "c", Tool: "scene.export", Args: map[string]any{"format": "obj", "output": "tri.obj"},
		Safety: cpv1.SafetyLevel_SAFETY_LEVEL_SAFE_WRITE, IdempotencyKey: "key-out"}
	res, err := m.Preview(context.Background(), "s1", []Operation{create("p", "Ball"), export}, false)
	if err != nil || res.Failure != nil || len(res.Changes) == 0 {
		t.Fatalf("preview of a session that imported a file: %+v %v", res, err)
	}
	s, _ := m.session("s1")
	if got, err := os.ReadFile(filepath.Join(s.sandbox, "tri.obj")); err != nil || !bytes.Equal(got, content) {
		t.Fatalf("the session's tri.obj after the preview exported over its copy: %q %v", got, err)
	}
	if left, _ := filepath.Glob(filepath.Join(m.previewsDir(), s.id+"-*")); len(left) != 0 {
		t.Fatalf("the preview left %v", left)
	}
}

// TestOpenWaitsForItsClose: an Open of a session that is being closed (its
// close waits for a running batch) waits for the close to end, then opens
// it afresh: before, the open took the journal's old session as its own
// and the close then removed the journal and the files under it.
func TestOpenWaitsForItsClose(t *testing.T) {
	m, _, rt := newManagerWith(t, func(c *Config) { c.MaxLive = 2 })
	open(t, m, rt, "s1")
	batch := make(chan []*cpv1.Receipt, 1)
	go func() {
		batch <- run(t, m, "s1", "r1", Operation{OperationID: "sleep", MCPCallID: "c", Tool: "python.exec",
			Args: map[string]any{"code": "import time\ntime.sleep(1.5)"}, Safety: cpv1.SafetyLevel_SAFETY_LEVEL_DESTRUCTIVE, IdempotencyKey: "key-sleep"})
	}()
	for deadline := time.Now().Add(60 * time.Second); m.Status().Busy < 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the batch did not start")
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- m.Close("s1") }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := m.session("s1"); errors.Is(err, ErrNotFound) {
			break // the close began: it waits for the batch
		}
		if time.Now().After(deadline) {
			t.Fatal("the close did not start")
		}
	}
	if _, _, err := m.Open(context.Background(), "s1", rt, blender.Limits{}, 0); err != nil {
		t.Fatalf("open while closing: %v", err)
	}
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatal("the open returned before the close ended")
	}
	<-batch
	if _, err := m.journal.Session("s1"); err != nil {
		t.Fatalf("the reopened session's journal: %v", err)
	}
	s, err := m.session("s1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.sandbox); err != nil {
		t.Fatalf("the reopened session's sandbox: %v", err)
	}
	run(t, m, "s1", "r2", create("a", "Box"))
}

// TestPreviewSkipsRenders: a preview shows the scene a plan leaves, and a
// render leaves it as it was: the preview does not render (a render after
// the camera's delete would fail on the fork if it ran), and the
// operations around it are previewed.
func TestPreviewSkipsRenders(t *testing.T) {
	m, _, rt := newManager(t)
	open(t, m, rt, "s1")
	del := Operation{OperationID: "del", MCPCallID: "c", Tool: "object.delete", Args: map[string]any{"name": "Camera"},
		Safety: cpv1.SafetyLevel_SAFETY_LEVEL_DESTRUCTIVE, IdempotencyKey: "key-del"}
	shot := Operation{OperationID: "shot", MCPCallID: "c", Tool: "render.still", Args: map[string]any{"output": "shot.png"},
		Safety: cpv1.SafetyLevel_SAFETY_LEVEL_SAFE_WRITE, IdempotencyKey: "key-shot"}
	res, err := m.Preview(context.Background(), "s1", []Operation{del, shot, create("after", "Ball")}, false)
	if err != nil || res.Failure != nil {
		t.Fatalf("preview: %+v %v", res, err)
	}
	var got []string
	for _, c := range res.Changes {
		got = append(got, c.GetKind().String()+" "+c.GetCollection()+"/"+c.GetName())
	}
	if !slices.Contains(got, "KIND_REMOVED objects/Camera") || !slices.Contains(got, "KIND_ADDED objects/Ball") {
		t.Fatalf("changes: %v", got)
	}
}

// TestUploadWaitsForABatchWithFiles: an upload into a session whose batch
// runs a call that reads or writes files lands only after that call. The
// bridge checks an imported file's references before the importer reads
// it, and a file replaced in between (a binary USD layer naming a file
// outside the sandbox) was read unchecked: an upload waits for a batch that
// imports to end. A call that writes a file and fails removes it, or puts
// back what it set aside, over an upload that landed meanwhile: an upload
// waits for the batch's last such call to return, not for the rest. The
// batch starts with an operation seen before, so that its calls run from
// the second on.
func TestUploadWaitsForABatchWithFiles(t *testing.T) {
	m, _, rt := newManager(t)
	tri := []byte("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n")
	tiny := map[string]any{"resolution": []any{16, 16}, "samples": 1}
	// waitFor is a call that returns once the file exists.
	waitFor := func(id, file string) Operation {
		return Operation{OperationID: id, MCPCallID: "c", Tool: "python.exec",
			Args:   map[string]any{"code": fmt.Sprintf("import os, time\nwhile not os.path.exists(%q):\n    time.sleep(0.01)", file)},
			Safety: cpv1.SafetyLevel_SAFETY_LEVEL_DESTRUCTIVE, IdempotencyKey: "key-" + id}
	}
	for i, c := range []struct {
		tool, file string
		args       map[string]any
	}{
		{"scene.import", "tri.obj", map[string]any{"format": "obj", "input": "tri.obj"}},
		{"scene.export", "out.obj", map[string]any{"format": "obj", "output": "out.obj"}},
		{"render.still", "shot.png", map[string]any{"output": "shot.png"}},
		{"render.animation", "anim_0001.png", map[string]any{"output_prefix": "anim", "frame_start": 1, "frame_end": 1}},
	} {
		t.Run(c.tool, func(t *testing.T) {
			id := fmt.Sprintf("s%d", i)
			open(t, m, rt, id)
			putFile(t, m, id, "tri.obj", tri)
			run(t, m, id, "r0", create("a", "Box"))
			if strings.HasPrefix(c.tool, "render.") {
				maps.Copy(c.args, tiny)
			}
			gate := t.TempDir()
			start, end := filepath.Join(gate, "start"), filepath.Join(gate, "end")
			t.Cleanup(func() { os.WriteFile(end, nil, 0o600) }) // a failed test's batch ends too
			ops := []Operation{create("a", "Box"), waitFor("before", start),
				{OperationID: "files", MCPCallID: "c", Tool: c.tool, Args: c.args, Safety: cpv1.SafetyLevel_SAFETY_LEVEL_SAFE_WRITE, IdempotencyKey: "key-files"},
				waitFor("after", end)}
			batch := make(chan error, 1)
			go func() {
				batch <- m.Execute(context.Background(), id, "r1", ops, func(*cpv1.Receipt) error { return nil }, nil)
			}()
			waitRunning(t, m, id, "r1") // it holds what it holds: the upload comes after
			upload := []byte("v 0 0 0\nv 2 0 0\nv 0 2 0\nf 1 2 3\n")
			uploaded := make(chan error, 1)
			go func() {
				uploaded <- errOf(m.PutFile(id, c.file, int64(len(upload)), sha(upload), bytes.NewReader(upload)))
			}()
			time.Sleep(200 * time.Millisecond) // an upload held off by nothing lands now, before the call
			if err := os.WriteFile(start, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if c.tool == "scene.import" {
				select {
				case err := <-uploaded:
					t.Fatalf("the upload landed while the batch that imports ran: %v", err)
				case <-time.After(300 * time.Millisecond):
				}
				if err := os.WriteFile(end, nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case err := <-uploaded:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(60 * time.Second):
				t.Fatal("the upload waited for more than the call that writes its file")
			}
			if c.tool != "scene.import" {
				select {
				case err := <-batch:
					t.Fatalf("the batch ended before its last call: %v", err)
				default: // it waits in "after": the upload did not wait for it
				}
				if err := os.WriteFile(end, nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if err := <-batch; err != nil {
				t.Fatal(err)
			}
			recs, err := m.journal.LookupAll(id, []string{"key-files"})
			if err != nil || recs[0] == nil || recs[0].Receipt.GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED {
				t.Fatalf("%s: %v %v", c.tool, recs, err)
			}
			// The upload came after the call, over what it wrote; what the
			// call wrote is still served by the hash its receipt gives.
			if got, err := os.ReadFile(filepath.Join(m.cfg.DataDir, "sessions", id, "output", c.file)); err != nil || !bytes.Equal(got, upload) {
				t.Fatalf("%s after the batch: %.40q, %v; want the upload", c.file, got, err)
			}
			if c.tool == "scene.import" {
				return
			}
			i := slices.IndexFunc(recs[0].Receipt.GetArtifacts(), func(a *cpv1.Artifact) bool { return a.GetName() == c.file })
			if i < 0 {
				t.Fatalf("the receipt names no %s: %v", c.file, recs[0].Receipt)
			}
			want := recs[0].Receipt.GetArtifacts()[i].GetSha256()
			f, _, got, err := m.OpenFile(id, c.file, want)
			if err != nil || got != want {
				t.Fatalf("the call's %s after the upload: %s, %v; want %s", c.file, got, err, want)
			}
			f.Close()
		})
	}
}

// waitRunning waits until plan requestID's batch runs in session id: it
// holds the session's files by then, if it holds them (Execute).
func waitRunning(t *testing.T, m *Manager, id, requestID string) {
	t.Helper()
	s, err := m.session(id)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		m.mu.Lock()
		running := s.running == requestID
		m.mu.Unlock()
		if running {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never ran in %s", requestID, id)
		}
	}
}
