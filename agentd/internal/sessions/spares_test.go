package sessions

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/blendplane/blendplane/agentd/internal/blender"
	"github.com/blendplane/blendplane/agentd/internal/journal"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/internal/blenderprocs"
)

// waitSpare waits until a spare of rt is ready and returns its pid.
func waitSpare(t *testing.T, m *Manager, rt string) int {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		m.mu.Lock()
		sp := m.spares[rt]
		m.mu.Unlock()
		if sp != nil {
			return sp.proc.Pid()
		}
	}
	t.Fatal("no spare Blender became ready")
	return 0
}

// blenderPid is the pid of a session's Blender.
func blenderPid(m *Manager, id string) int {
	s, _ := m.session(id)
	return int(s.pid.Load())
}

// TestSpareBlenders: after a session of a runtime started, a spare Blender
// waits in a free slot; the next start of that runtime adopts it (a new
// session's first batch, a recovery after a crash, a preview), with the
// session's own sandbox, and a new spare follows. The spare's slot counts:
// with every slot taken, a session or a preview takes it over instead of
// parking a session, and never are more Blenders running than slots.
// Shutdown stops spares and their work dirs go; NoSpares keeps none.
func TestSpareBlenders(t *testing.T) {
	m, _, rt := newManagerWith(t, func(c *Config) { c.MaxLive = 2 })
	most := watchBlenders(t, m.cfg.DataDir)
	open(t, m, rt, "s1", "s2", "s3")
	run(t, m, "s1", "r1", create("a", "Box"))
	spare := waitSpare(t, m, rt)

	// s2's first batch adopts it: both slots held, s1 not parked.
	out := run(t, m, "s2", "r1", create("a", "Box"), Operation{OperationID: "e", Tool: "scene.export",
		Args: map[string]any{"format": "obj", "output": "scene.obj"}, IdempotencyKey: "key-e"})
	if blenderPid(m, "s2") != spare {
		t.Fatalf("s2 runs Blender %d, not the spare %d", blenderPid(m, "s2"), spare)
	}
	if out[1].GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED {
		t.Fatalf("export in the adopted Blender: %v", out[1])
	}
	s2, _ := m.session("s2")
	if _, err := os.Stat(filepath.Join(s2.sandbox, "scene.obj")); err != nil {
		t.Fatalf("the export is not in s2's sandbox: %v", err)
	}
	if st := m.Status(); len(st.Live) != 2 {
		t.Fatalf("live %v: s1 was parked for a spare", st.Live)
	}

	// Crash of s2's Blender: its recovery adopts the next spare.
	m.mu.Lock()
	m.cfg.MaxLive = 3 // room for one
	m.mu.Unlock()
	m.refillSpares() // as the next batch's end would

	spare = waitSpare(t, m, rt)
	syscall.Kill(blenderPid(m, "s2"), syscall.SIGKILL)
	out = run(t, m, "s2", "r2", create("b", "Ball"))
	if out[0].GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED || blenderPid(m, "s2") != spare {
		t.Fatalf("after a crash s2 runs Blender %d (spare %d): %v", blenderPid(m, "s2"), spare, out[0])
	}

	// Every slot taken (s1, s2 and a spare): a preview takes the spare over
	// rather than park a session.
	spare = waitSpare(t, m, rt)
	adopted := m.Adopted()
	if _, err := m.Preview(context.Background(), "s3", []Operation{create("p", "Cone")}, false); err != nil {
		t.Fatal(err)
	}
	if st := m.Status(); len(st.Live) != 2 || m.Adopted() != adopted+1 {
		t.Fatalf("live %v, %d adoptions: the preview should have taken the spare in the last slot", st.Live, m.Adopted()-adopted)
	}
	waitGone(t, spare)
	if n := most(); n > 3 {
		t.Fatalf("%d Blenders at once with 3 slots", n)
	}

	dir := m.cfg.DataDir
	m.Shutdown()
	if left := blenderprocs.Under(dir); len(left) > 0 {
		t.Fatalf("Blenders after Shutdown: %v", left)
	}
	if ents, _ := os.ReadDir(m.sparesDir()); len(ents) > 0 {
		t.Fatalf("spare work dirs left: %v", ents)
	}

	off, _, rt := newManagerWith(t, func(c *Config) { c.NoSpares = true })
	open(t, off, rt, "s1")
	run(t, off, "s1", "r1", create("a", "Box"))
	time.Sleep(time.Second)
	if n := len(blenderprocs.Under(off.cfg.DataDir)); n != 1 {
		t.Fatalf("%d Blenders with NoSpares, want the session's only", n)
	}
}

// waitGone waits until process pid has exited.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
	}
	t.Fatalf("Blender %d still runs", pid)
}

// waitRefreshes waits until the manager has refreshed n sessions.
func waitRefreshes(t *testing.T, m *Manager, n uint64) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); m.Refreshed() != n; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d refreshes, want %d", m.Refreshed(), n)
		}
	}
}

// idleDone waits until the session's idle checkpoint has fired and is done,
// and any refresh it started.
func idleDone(t *testing.T, m *Manager, id string) {
	t.Helper()
	time.Sleep(3 * m.cfg.CheckpointIdle)
	refreshDone(t, m, id)
}

// refreshDone waits until no refresh of the session is in flight.
func refreshDone(t *testing.T, m *Manager, id string) {
	t.Helper()
	s, _ := m.session(id)
	for deadline := time.Now().Add(time.Minute); refreshRuns(s); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the refresh did not end")
		}
	}
}

func refreshRuns(s *session) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fresh != nil
}

// sessionSlots is how many slots the sessions hold (spares' aside), with
// those of refreshes in flight.
func sessionSlots(m *Manager) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.live - m.spareSlots
}

// liveSessions counts the sessions holding a slot. The caller holds m.mu.
func liveSessions(m *Manager) int {
	n := 0
	for _, s := range m.sessions {
		if s.live {
			n++
		}
	}
	return n
}

// TestRefresh: a session whose Blender made RefreshAfter scene changes since
// it loaded its scene gets a fresh one from its next checkpoint, a batch's
// or the idle one: the
// ready spare loads the checkpoint and takes over, and the old Blender
// stops. The scene is the same, later batches and the rollback of a plan
// from before the refresh run on it, the count starts again, and the slots
// add up. Below the count the session keeps its Blender; when the spare
// cannot take over, it keeps it too, and the count starts again.
func TestRefresh(t *testing.T) {
	m, _, rt := newManagerWith(t, func(c *Config) {
		// A create changes three records (its object, its mesh, the active
		// object): two creates stay below the count, three reach it.
		c.MaxLive, c.CheckpointIdle, c.RefreshAfter, c.CheckpointEvery = 2, 100*time.Millisecond, 7, 3
	})
	most := watchBlenders(t, m.cfg.DataDir)
	open(t, m, rt, "s1")
	run(t, m, "s1", "r1", create("a", "A"), create("b", "B"))
	spare := waitSpare(t, m, rt)
	first := blenderPid(m, "s1")
	idleDone(t, m, "s1")
	if m.Refreshed() != 0 || blenderPid(m, "s1") != first {
		t.Fatalf("refreshed after 2 creates (Blender %d, was %d)", blenderPid(m, "s1"), first)
	}

	// The third create reaches the count and CheckpointEvery: the batch
	// checkpoints, and that starts the refresh.
	out := run(t, m, "s1", "r2", create("c", "C"))
	head := out[0].GetSceneHashAfter()
	waitRefreshes(t, m, 1)
	idleDone(t, m, "s1")
	if blenderPid(m, "s1") != spare {
		t.Fatalf("after 3 creates: Blender %d (spare %d, was %d)", blenderPid(m, "s1"), spare, first)
	}
	for deadline := time.Now().Add(10 * time.Second); syscall.Kill(first, 0) == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the old Blender %d still runs", first)
		}
	}
	if n := sessionSlots(m); n != 1 {
		t.Fatalf("the session holds %d slots after its refresh", n)
	}
	s, _ := m.session("s1")
	s.mu.Lock()
	hash, err := s.proc.SceneHash(context.Background())
	changes := s.changes
	s.mu.Unlock()
	if err != nil || hash != head || changes != 0 {
		t.Fatalf("refreshed Blender: scene %s, %v, %d changes; want %s, 0", hash, err, changes, head)
	}

	back := rollBack(t, m, "s1", "r2", "key-c") // the plan from before the refresh
	out = run(t, m, "s1", "r3", create("d", "D"))
	if out[0].GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED || out[0].GetSceneHashBefore() != back.GetSceneHashAfter() {
		t.Fatalf("a batch after the refresh and the rollback: %v", out[0])
	}
	if n := most(); n > 2 {
		t.Fatalf("%d Blenders ran at once on 2 slots", n)
	}

	// The spare cannot take over (it has no memory ceiling to lower to the
	// session's): the session keeps its Blender, and the count starts again.
	m2, _, rt2 := newManagerWith(t, func(c *Config) {
		c.MaxLive, c.CheckpointIdle, c.RefreshAfter = 2, 100*time.Millisecond, 1
	})
	if _, _, err := m2.Open(context.Background(), "s1", rt2, blender.Limits{MemoryMiB: 1024}, 0); err != nil {
		t.Fatal(err)
	}
	run(t, m2, "s1", "r1", create("a", "A"))
	waitSpare(t, m2, rt2)
	before := blenderPid(m2, "s1")
	run(t, m2, "s1", "r2", create("b", "B"))
	idleDone(t, m2, "s1")
	keptBlender(t, m2, "s1", before, "a failed refresh")
}

// keptBlender checks a session after a refresh that gave up: none done, its
// Blender the one before, its count started again, one slot held, and a
// batch runs on.
func keptBlender(t *testing.T, m *Manager, id string, before int, what string) {
	t.Helper()
	s, _ := m.session(id)
	s.mu.Lock()
	changes := s.changes
	s.mu.Unlock()
	if m.Refreshed() != 0 || blenderPid(m, id) != before || changes != 0 || sessionSlots(m) != 1 {
		t.Fatalf("%s: %d refreshes, Blender %d (was %d), %d changes, %d session slots",
			what, m.Refreshed(), blenderPid(m, id), before, changes, sessionSlots(m))
	}
	if out := run(t, m, id, "after-"+id, create("after", "After")); out[0].GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED {
		t.Fatalf("a batch after %s: %v", what, out[0])
	}
}

// TestParkWhileHeld: a session whose idle park comes while something that
// is not a batch holds it (its idle checkpoint, a refresh's last catch-up)
// is parked once that is done. The park used to give up: only a batch
// re-armed it.
func TestParkWhileHeld(t *testing.T) {
	m, _, rt := newManagerWith(t, func(c *Config) { c.MaxLive, c.IdleTimeout = 2, 500*time.Millisecond })
	open(t, m, rt, "s1")
	run(t, m, "s1", "r1", create("a", "A"))
	s, _ := m.session("s1")
	s.mu.Lock() // past the park's time, as a long idle checkpoint would
	time.Sleep(1200 * time.Millisecond)
	live := len(m.Status().Live)
	s.mu.Unlock()
	if live != 1 {
		t.Fatal("parked while held")
	}
	for deadline := time.Now().Add(10 * time.Second); len(m.Status().Live) != 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("still live after its idle timeout")
		}
	}
}

// TestRefreshWeighsChanges: the count is of the scene's records a session's
// Blender changed, not of its calls: one python.exec that makes many
// objects is as many changes (a Blender that built its scene in one script
// is as slow as one that built it call by call).
func TestRefreshWeighsChanges(t *testing.T) {
	m, _, rt := newManagerWith(t, func(c *Config) {
		c.MaxLive, c.RefreshAfter, c.CheckpointEvery = 2, 50, 1
	})
	open(t, m, rt, "s1")
	run(t, m, "s1", "r1", create("a", "A"))
	spare := waitSpare(t, m, rt)
	refreshDone(t, m, "s1")
	if m.Refreshed() != 0 {
		t.Fatal("refreshed after one create")
	}
	out := run(t, m, "s1", "r2", Operation{OperationID: "exec", MCPCallID: "c", Tool: "python.exec",
		Args: map[string]any{"code": "import bpy\nfor i in range(60):\n" +
			"    bpy.context.scene.collection.objects.link(bpy.data.objects.new('E%d' % i, None))"},
		Safety: cpv1.SafetyLevel_SAFETY_LEVEL_DESTRUCTIVE, IdempotencyKey: "key-exec"})
	waitRefreshes(t, m, 1)
	refreshDone(t, m, "s1")
	s, _ := m.session("s1")
	s.mu.Lock()
	hash, err := s.proc.SceneHash(context.Background())
	s.mu.Unlock()
	if blenderPid(m, "s1") != spare || err != nil || hash != out[0].GetSceneHashAfter() {
		t.Fatalf("after a python.exec of 60 objects: Blender %d (spare %d), scene %s %v (want %s)",
			blenderPid(m, "s1"), spare, hash, err, out[0].GetSceneHashAfter())
	}
}

// TestRefreshBusy: a session that never pauses is refreshed too. Its
// batch's checkpoint starts the refresh; the spare loads and replays the
// journal while batches go on in the old Blender, then takes over after a
// catch-up under the session's lock. No batch fails or waits for the load,
// the scene is the last receipt's, and the slots add up.
func TestRefreshBusy(t *testing.T) {
	m, _, rt := newManagerWith(t, func(c *Config) {
		// No idle checkpoint. A refresh gives up past 4 × CheckpointEvery
		// changes made meanwhile: 64 creates, room for a loaded machine.
		c.MaxLive, c.RefreshAfter, c.CheckpointEvery = 2, 4, 16
	})
	most := watchBlenders(t, m.cfg.DataDir)
	open(t, m, rt, "s1")
	run(t, m, "s1", "r0", create("a0", "A0"))
	spare := waitSpare(t, m, rt)
	first := blenderPid(m, "s1")
	s, _ := m.session("s1")
	var last *cpv1.Receipt
	beside := 0 // batches that ended while the refresh ran
	for i := 1; m.Refreshed() == 0 || refreshRuns(s); i++ {
		if i > 2000 {
			t.Fatal("no refresh after 2,000 batches")
		}
		during := refreshRuns(s)
		out := run(t, m, "s1", fmt.Sprintf("r%d", i), create(fmt.Sprint(i), fmt.Sprintf("A%d", i)))
		if out[0].GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED {
			t.Fatalf("batch %d: %v", i, out[0])
		}
		if last != nil && out[0].GetSceneHashBefore() != last.GetSceneHashAfter() {
			t.Fatalf("batch %d started from %s, the last one left %s", i, out[0].GetSceneHashBefore(), last.GetSceneHashAfter())
		}
		if during && refreshRuns(s) {
			beside++
		}
		last = out[0]
	}
	if beside == 0 {
		t.Fatal("no batch ran while the refresh loaded")
	}
	if blenderPid(m, "s1") != spare {
		t.Fatalf("Blender %d after the refresh (spare %d, was %d)", blenderPid(m, "s1"), spare, first)
	}
	for deadline := time.Now().Add(10 * time.Second); syscall.Kill(first, 0) == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the old Blender %d still runs", first)
		}
	}
	s.mu.Lock()
	hash, err := s.proc.SceneHash(context.Background())
	s.mu.Unlock()
	if err != nil || hash != last.GetSceneHashAfter() {
		t.Fatalf("refreshed Blender: scene %s, %v; the last receipt left %s", hash, err, last.GetSceneHashAfter())
	}
	out := run(t, m, "s1", "after", create("after", "After"))
	if out[0].GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED || out[0].GetSceneHashBefore() != last.GetSceneHashAfter() {
		t.Fatalf("a batch after the refresh: %v", out[0])
	}
	if n := sessionSlots(m); n != 1 {
		t.Fatalf("the session holds %d slots after its refresh", n)
	}
	if n := most(); n > 2 {
		t.Fatalf("%d Blenders ran at once on 2 slots", n)
	}
}

// TestRefreshGivesWay: a refresh does not replay, beside the running
// session, what may reach outside the scene (python.exec here; files
// written by renders and exports too): the session keeps its Blender, the
// count starts again, and batches go on.
func TestRefreshGivesWay(t *testing.T) {
	m, _, rt := newManagerWith(t, func(c *Config) {
		c.MaxLive, c.RefreshAfter, c.CheckpointEvery = 2, 2, 2
	})
	proceed := make(chan struct{})
	m.afterLoad = func(context.Context) { <-proceed } // the python.exec comes while it loads
	open(t, m, rt, "s1")
	run(t, m, "s1", "r1", create("a", "A"))
	waitSpare(t, m, rt)
	first := blenderPid(m, "s1")
	run(t, m, "s1", "r2", create("b", "B")) // checkpoints: the refresh starts
	s, _ := m.session("s1")
	if !refreshRuns(s) {
		t.Fatal("the checkpoint started no refresh")
	}
	out := run(t, m, "s1", "r3", Operation{OperationID: "exec", MCPCallID: "c", Tool: "python.exec",
		Args:   map[string]any{"code": "import bpy, time\nbpy.context.scene.collection.objects.link(bpy.data.objects.new('Exec', None))\ntime.sleep(0.2)"},
		Safety: cpv1.SafetyLevel_SAFETY_LEVEL_DESTRUCTIVE, IdempotencyKey: "key-exec"})
	if out[0].GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED || out[0].GetSceneHashAfter() == out[0].GetSceneHashBefore() {
		t.Fatalf("python.exec: %v", out[0])
	}
	close(proceed)
	refreshDone(t, m, "s1")
	keptBlender(t, m, "s1", first, "a refresh past python.exec")
}

// TestCloseEnough: a refresh takes the session's lock for at most 32
// entries, or for as many as its last round replayed in 20 ms.
func TestCloseEnough(t *testing.T) {
	for _, c := range []struct {
		behind uint64
		pace   time.Duration
		want   bool
	}{
		{0, 0, true}, {32, 0, true}, {33, 0, false},
		{100, 100 * time.Microsecond, true}, {200, 100 * time.Microsecond, true}, {201, 100 * time.Microsecond, false},
		{33, time.Millisecond, false}, {20, time.Second, true},
	} {
		if got := closeEnough(c.behind, c.pace); got != c.want {
			t.Errorf("closeEnough(%d, %s) = %v", c.behind, c.pace, got)
		}
	}
}

// TestReplayable: what a refresh replays beside the session: an entry whose
// operation changed the scene only, not one of python.exec or one that
// wrote files, nor the undo of either.
func TestReplayable(t *testing.T) {
	m, j, rt := newManager(t)
	open(t, m, rt, "s1")
	files := []*cpv1.Artifact{{Name: "shot.obj"}}
	for _, c := range []struct {
		tool, determinism string
		artifacts         []*cpv1.Artifact
		ok                bool
	}{
		{"object.create", "deterministic", nil, true},
		{"python.exec", "nondeterministic", nil, false},
		{"io.made_up", "deterministic", files, false},
	} {
		key := "key-" + c.tool
		r := &cpv1.Receipt{IdempotencyKey: key, ToolName: c.tool, DeterminismClass: c.determinism, Artifacts: c.artifacts}
		op := journal.Entry{Kind: "op", Key: key, Tool: c.tool, HashAfter: "h"}
		if err := j.Commit("s1", []journal.Commit{{Receipt: r, Entry: &op}}); err != nil {
			t.Fatal(err)
		}
		for _, e := range []journal.Entry{op, {Kind: "undo", Key: key, HashAfter: "h"}} {
			err := m.replayable("s1", e)
			if c.ok != (err == nil) || (err != nil && !errors.Is(err, errNotReplayable)) {
				t.Errorf("%s (%s): %v", c.tool, e.Kind, err)
			}
		}
	}
	if err := m.replayable("s1", journal.Entry{Kind: "op", Key: "key-unknown"}); err == nil {
		t.Error("an entry without a record is replayable")
	}
}

// TestRefreshStops: a refresh whose session is closed, crashes or is parked,
// whose agent shuts down, whose slot another session needs, or whose
// session has gone too long without a checkpoint while it loads gives up: its Blender stops and its slot goes, the session goes on
// (or is gone) with its journaled scene, and no more Blenders run than
// slots.
func TestRefreshStops(t *testing.T) {
	for _, event := range []string{"close", "crash", "park", "shutdown", "slot", "cap"} {
		t.Run(event, func(t *testing.T) {
			m, j, rt := newManagerWith(t, func(c *Config) {
				c.MaxLive, c.RefreshAfter, c.CheckpointEvery = 2, 2, 2
			})
			proceed := make(chan struct{})
			m.afterLoad = func(ctx context.Context) { // the event comes while it loads
				select {
				case <-proceed:
				case <-ctx.Done():
				}
			}
			most := watchBlenders(t, m.cfg.DataDir)
			open(t, m, rt, "s1")
			run(t, m, "s1", "r1", create("a", "A"))
			waitSpare(t, m, rt)
			first := blenderPid(m, "s1")
			head := run(t, m, "s1", "r2", create("b", "B"))[0].GetSceneHashAfter() // the refresh starts
			s, _ := m.session("s1")
			if !refreshRuns(s) {
				t.Fatal("the checkpoint started no refresh")
			}
			m.mu.Lock()
			loading := s.fresh.pid
			m.mu.Unlock()
			switch event {
			case "close":
				if err := m.Close("s1"); err != nil {
					t.Fatal(err)
				}
			case "crash":
				syscall.Kill(first, syscall.SIGKILL)
				out := run(t, m, "s1", "r3", create("c", "C")) // recovers in a new Blender
				if out[0].GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED {
					t.Fatalf("the batch after the crash: %v", out[0])
				}
				head = out[0].GetSceneHashAfter()
			case "park":
				s.mu.Lock()
				m.parkLocked(s, "test")
				s.mu.Unlock()
			case "shutdown":
				done := make(chan struct{})
				go func() { m.Shutdown(); close(done) }() // it waits for the refresh
				select {
				case <-done:
				case <-time.After(time.Minute):
					t.Fatal("the shutdown waits for the refresh")
				}
				if left := blenderprocs.Under(m.cfg.DataDir); len(left) > 0 {
					t.Fatalf("Blenders after the shutdown: %v", left)
				}
				return
			case "slot":
				// Both slots are held, s1's (running a batch) and the
				// refresh's: a new session is let in, as a spare's slot would,
				// and its first batch takes the refresh's slot rather than
				// wait for s1 to park it.
				busy := make(chan error, 1)
				go func() {
					busy <- m.Execute(context.Background(), "s1", "r3", []Operation{{OperationID: "sleep", MCPCallID: "c",
						Tool: "python.exec", Args: map[string]any{"code": "import time\ntime.sleep(6)"},
						Safety: cpv1.SafetyLevel_SAFETY_LEVEL_DESTRUCTIVE, IdempotencyKey: "key-sleep"}},
						func(*cpv1.Receipt) error { return nil }, nil)
				}()
				for deadline := time.Now().Add(time.Minute); m.Status().Busy == 0; time.Sleep(10 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatal("s1's batch never ran")
					}
				}
				open(t, m, rt, "s2")
				if out := run(t, m, "s2", "x1", create("z", "Z")); out[0].GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED {
					t.Fatalf("s2's batch: %v", out[0])
				}
				if len(busy) != 0 {
					t.Fatal("s2's batch waited for s1's")
				}
				if err := <-busy; err != nil {
					t.Fatalf("s1's batch: %v", err)
				}
				if blenderPid(m, "s1") != first {
					t.Fatalf("s1 was parked for s2's batch (Blender %d, was %d)", blenderPid(m, "s1"), first)
				}
			case "cap":
				// dirtyCap × CheckpointEvery changes without a checkpoint: the
				// refresh gives up, and the batch saves the checkpoint.
				ops := make([]Operation, dirtyCap*m.cfg.CheckpointEvery)
				for k := range ops {
					ops[k] = create(fmt.Sprint("c", k), fmt.Sprint("C", k))
				}
				out := run(t, m, "s1", "r3", ops...)
				head = out[len(out)-1].GetSceneHashAfter()
				js, err := j.Session("s1")
				if err != nil || js.CheckpointIndex() != js.Head {
					t.Fatalf("no checkpoint past the cap: %+v %v", js, err)
				}
			}
			// Its Blender and slot go at once, though the refresh itself
			// still waits (afterLoad) until proceed.
			for deadline := time.Now().Add(time.Minute); syscall.Kill(loading, 0) == nil || len(m.Blenders()) != liveCount(m); time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("after a %s, the refresh's Blender %d still runs or is counted", event, loading)
				}
			}
			close(proceed)
			refreshesEnd(t, m)
			if m.Refreshed() != 0 {
				t.Fatalf("refreshed after a %s", event)
			}
			m.mu.Lock()
			refreshSlots, sessions := m.live-m.spareSlots-liveSessions(m), liveSessions(m)
			m.mu.Unlock()
			if refreshSlots != 0 || len(m.Blenders()) != sessions || most() > 2 {
				t.Fatalf("after a %s: %d slots of neither a session nor a spare, %d session Blenders, %d Blenders at once",
					event, refreshSlots, len(m.Blenders()), most())
			}
			if event == "close" {
				return
			}
			out := run(t, m, "s1", "r4", create("d", "D"))
			if out[0].GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED || out[0].GetSceneHashBefore() != head {
				t.Fatalf("the batch after a %s: %v (want it to start from %s)", event, out[0], head)
			}
		})
	}
}

// liveCount counts the sessions holding a slot.
func liveCount(m *Manager) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return liveSessions(m)
}

// refreshesEnd waits until no refresh runs.
func refreshesEnd(t *testing.T, m *Manager) {
	t.Helper()
	done := make(chan struct{})
	go func() { m.refreshes.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("a refresh did not end")
	}
}
