package sessions

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/blendplane/blendplane/agentd/internal/blender"
	"github.com/blendplane/blendplane/agentd/internal/journal"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

func openJournal(t testing.TB) *journal.Journal {
	t.Helper()
	j, err := journal.Open(filepath.Join(t.TempDir(), "agentd.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

// newManager probes the repo's Blender (make blender installs it) and returns
// a manager on a fresh journal.
func newManager(t testing.TB) (*Manager, *journal.Journal, string) {
	t.Helper()
	return newManagerWith(t, func(*Config) {})
}

// newManagerWith is newManager with changes to its configuration.
func newManagerWith(t testing.TB, configure func(*Config)) (*Manager, *journal.Journal, string) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	rts, err := blender.Discover(nil, []string{root})
	if err != nil {
		t.Fatalf("no Blender (run make blender): %v", err)
	}
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	probed, err := Probe(context.Background(), rts[:1], dir, log)
	if err != nil {
		t.Fatal(err)
	}
	j := openJournal(t)
	cfg := Config{DataDir: dir, CheckpointEvery: 1000, CheckpointInterval: time.Hour}
	configure(&cfg)
	m, err := NewManager(cfg, probed, j, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Shutdown)
	return m, j, probed[0].Info.GetRuntimeId()
}

func create(id, name string) Operation {
	return Operation{OperationID: id, MCPCallID: "call-" + id, Tool: "object.create",
		Args: map[string]any{"type": "cube", "name": name}, Safety: cpv1.SafetyLevel_SAFETY_LEVEL_SAFE_WRITE,
		IdempotencyKey: "key-" + id}
}

// TestRecoveryOutlivesItsRequest: a rebuild started by a request whose
// context is already gone (a cancel, a lost stream) still completes, so the
// session stays usable instead of being marked broken.
func TestRecoveryOutlivesItsRequest(t *testing.T) {
	m, _, rt := newManager(t)
	if _, _, err := m.Open(context.Background(), "s1", rt, blender.Limits{}, 0); err != nil {
		t.Fatal(err)
	}
	var got []*cpv1.Receipt
	emit := func(r *cpv1.Receipt) error { got = append(got, r); return nil }
	if err := m.Execute(context.Background(), "s1", "r1", []Operation{create("a", "A")}, emit, nil); err != nil {
		t.Fatal(err)
	}
	s, _ := m.session("s1")
	syscall.Kill(s.proc.Pid(), syscall.SIGKILL)
	<-s.proc.Done()

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := m.Execute(cancelled, "s1", "r2", []Operation{create("b", "B")}, emit, nil); errors.Is(err, ErrBroken) {
		t.Fatalf("a cancelled request broke the session: %v", err)
	}
	got = nil
	if err := m.Execute(context.Background(), "s1", "r3", []Operation{create("c", "C")}, emit, nil); err != nil {
		t.Fatalf("session unusable after a recovery under a cancelled request: %v", err)
	}
	if len(got) != 1 || got[0].GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED {
		t.Fatalf("receipts %v", got)
	}
}

// TestCancelBeforeTheBatchStarts: a Cancel that arrives before its plan's
// batch registers interrupts that batch as soon as it does.
func TestCancelBeforeTheBatchStarts(t *testing.T) {
	m, err := NewManager(Config{DataDir: t.TempDir()}, nil, openJournal(t), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	s := m.newSession("s1", Runtime{})
	m.sessions["s1"] = s
	if interrupted, err := m.Cancel("s1", "r1"); err != nil || interrupted {
		t.Fatalf("cancel with nothing running: %v %v", interrupted, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m.track(s, "r2", cancel) // another plan: not affected
	if ctx.Err() != nil {
		t.Fatal("a cancel for r1 interrupted r2")
	}
	m.track(s, "r1", cancel)
	if ctx.Err() == nil {
		t.Fatal("the early cancel was lost")
	}
}

// TestCommitterJournalsAfterEmitFails: once the stream is gone, receipts of
// operations that ran are still journaled (their effects are in the scene),
// only the sends stop.
func TestCommitterJournalsAfterEmitFails(t *testing.T) {
	j := openJournal(t)
	if err := j.OpenSession("s1", "rt", "h0", journal.Limits{}, 0); err != nil {
		t.Fatal(err)
	}
	sent := 0
	intents := make(chan error, 1)
	intents <- nil
	c := newCommitter(j, "s1", func(*cpv1.Receipt) error {
		sent++
		return errors.New("stream gone")
	}, intents)
	for i, key := range []string{"k1", "k2", "k3"} {
		r := &cpv1.Receipt{IdempotencyKey: key, Status: cpv1.Receipt_STATUS_SUCCEEDED}
		c.add(r, &journal.Commit{Receipt: r, Entry: &journal.Entry{Kind: "op", Key: key, HashAfter: string(rune('a' + i))}}, i < 2)
		c.flush()
	}
	if err := c.close(); err == nil {
		t.Fatal("the emit error was lost")
	}
	if sent != 1 {
		t.Errorf("%d sends after the stream failed, want 1", sent)
	}
	for _, key := range []string{"k1", "k2", "k3"} {
		if rec, err := j.Lookup("s1", key); err != nil || rec == nil {
			t.Errorf("%s not journaled: %v", key, err)
		}
	}
	if c.lostJournal() != nil {
		t.Error("journal reported lost")
	}
}

func sha(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// putFile uploads content as name into session id's sandbox.
func putFile(t testing.TB, m *Manager, id, name string, content []byte) {
	t.Helper()
	if _, err := m.PutFile(id, name, int64(len(content)), sha(content), bytesReader(content)); err != nil {
		t.Fatal(err)
	}
}

// restart is a new manager on m's journal and runtimes, as agentd's next
// start makes.
func restart(t testing.TB, m *Manager, j *journal.Journal) *Manager {
	t.Helper()
	var rts []Runtime
	for _, r := range m.runtimes {
		rts = append(rts, r)
	}
	again, err := NewManager(m.cfg, rts, j, m.base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(again.Shutdown)
	return again
}

// TestKilledBlenderRecoversAtOnce: a rollback that finds the session's
// Blender killed after an abandoned call, but perhaps not yet exited,
// recovers the session first instead of failing on the dying Blender (a
// plan's rollback starts as soon as its batch's failure arrives).
func TestKilledBlenderRecoversAtOnce(t *testing.T) {
	m, _, rt := newManager(t)
	if _, _, err := m.Open(context.Background(), "s1", rt, blender.Limits{}, 0); err != nil {
		t.Fatal(err)
	}
	emit := func(*cpv1.Receipt) error { return nil }
	for i := range 3 {
		op := create(fmt.Sprint("a", i), fmt.Sprint("A", i))
		if err := m.Execute(context.Background(), "s1", fmt.Sprint("r", i), []Operation{op}, emit, nil); err != nil {
			t.Fatal(err)
		}
		s, _ := m.session("s1")
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(200*time.Millisecond, cancel)
		// Abandoned under the manager's nose: Blender is killed, its exit
		// perhaps not yet seen.
		s.proc.Execute(ctx, blender.Call{Tool: "python.exec", Args: map[string]any{"code": "import time\ntime.sleep(5)"}})
		rollBack(t, m, "s1", fmt.Sprint("r", i), op.IdempotencyKey) // right after an abandoned call
	}
}

// errOf is the error of a call that also returns a time (PutFile).
func errOf(_ time.Time, err error) error { return err }
