package sessions

import (
	"context"
	"errors"
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
