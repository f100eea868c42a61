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

// sessionSlots is how many slots the sessions hold (spares' aside).
func sessionSlots(m *Manager) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.live - m.spareSlots
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
		c.MaxLive, c.CheckpointIdle, c.RefreshAfter, c.CheckpointEvery = 2, 100*time.Millisecond, 3, 3
	})
	most := watchBlenders(t, m.cfg.DataDir)
	open(t, m, rt, "s1")
	run(t, m, "s1", "r1", create("a", "A"), create("b", "B"))
	spare := waitSpare(t, m, rt)
	first := blenderPid(m, "s1")
	idleDone(t, m, "s1")
	if m.Refreshed() != 0 || blenderPid(m, "s1") != first {
		t.Fatalf("refreshed after 2 changes (Blender %d, was %d)", blenderPid(m, "s1"), first)
	}

	// The third change reaches CheckpointEvery: the batch checkpoints, and
	// that starts the refresh.
	out := run(t, m, "s1", "r2", create("c", "C"))
	head := out[0].GetSceneHashAfter()
	waitRefreshes(t, m, 1)
	idleDone(t, m, "s1")
	if blenderPid(m, "s1") != spare {
		t.Fatalf("after 3 changes: Blender %d (spare %d, was %d)", blenderPid(m, "s1"), spare, first)
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
	if _, _, err := m2.Open(context.Background(), "s1", rt2, 1024, 0); err != nil {
		t.Fatal(err)
	}
	run(t, m2, "s1", "r1", create("a", "A"))
	waitSpare(t, m2, rt2)
	before := blenderPid(m2, "s1")
	run(t, m2, "s1", "r2", create("b", "B"))
	idleDone(t, m2, "s1")
	s2, _ := m2.session("s1")
	s2.mu.Lock()
	changes = s2.changes
	s2.mu.Unlock()
	if m2.Refreshed() != 0 || blenderPid(m2, "s1") != before || changes != 0 || sessionSlots(m2) != 1 {
		t.Fatalf("a failed refresh: %d refreshes, Blender %d (was %d), %d changes, %d session slots",
			m2.Refreshed(), blenderPid(m2, "s1"), before, changes, sessionSlots(m2))
	}
	if out := run(t, m2, "s1", "r3", create("c", "C")); out[0].GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED {
		t.Fatalf("a batch after a failed refresh: %v", out[0])
	}
}

// TestParkAfterRefresh: a session whose idle park comes while its idle
// checkpoint and refresh hold it is parked once they are done (the park
// used to give up: only a batch re-armed it).
func TestParkAfterRefresh(t *testing.T) {
	for i := range 3 {
		m, _, rt := newManagerWith(t, func(c *Config) {
			c.MaxLive, c.RefreshAfter = 2, 1
			c.CheckpointIdle, c.IdleTimeout = 150*time.Millisecond, 150*time.Millisecond
		})
		open(t, m, rt, "s1")
		run(t, m, "s1", "r1", create("a", "A"))
		waitSpare(t, m, rt)
		run(t, m, "s1", "r2", create("b", "B"))
		for deadline := time.Now().Add(10 * time.Second); len(m.Status().Live) != 0; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: still live after its idle timeout (%d refreshes)", i, m.Refreshed())
			}
		}
	}
}

// TestRefreshBusy: a session that never pauses is refreshed too. Its
// batch's checkpoint starts the refresh; the spare loads and replays the
// journal while batches go on in the old Blender, then takes over after a
// catch-up under the session's lock. No batch fails or waits for the load,
// the scene is the last receipt's, and the slots add up.
func TestRefreshBusy(t *testing.T) {
	m, _, rt := newManagerWith(t, func(c *Config) {
		c.MaxLive, c.RefreshAfter, c.CheckpointEvery = 2, 4, 4 // no idle checkpoint
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
	refreshDone(t, m, "s1")
	s.mu.Lock()
	changes := s.changes
	s.mu.Unlock()
	if m.Refreshed() != 0 || blenderPid(m, "s1") != first || changes != 0 || sessionSlots(m) != 1 {
		t.Fatalf("a refresh past python.exec: %d refreshes, Blender %d (was %d), %d changes, %d session slots",
			m.Refreshed(), blenderPid(m, "s1"), first, changes, sessionSlots(m))
	}
	if out := run(t, m, "s1", "r4", create("c", "C")); out[0].GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED {
		t.Fatalf("a batch after the refresh gave way: %v", out[0])
	}
}
