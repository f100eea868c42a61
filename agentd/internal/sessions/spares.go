package sessions

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/blendplane/blendplane/agentd/internal/blender"
)

// Spare Blenders. Starting Blender takes 0.4 s (the bpy 4.5 wheel) to 1.5 s
// (Debian's 3.4 binary) before the bridge answers; a session's first batch,
// the restore of a parked session, a recovery after a crash and a preview
// would each wait that long. A spare is a Blender started ahead on the
// baseline scene, with a work dir of its own and no sandbox: the next start
// of its runtime adopts it (blender.Process.Adopt: the session's sandbox and
// memory ceiling, about a millisecond) instead of starting one, and a new
// spare is started behind it.
//
// An agent keeps at most one spare per runtime, and only for runtimes a
// session has started in (an agent never asked for a runtime holds none). A
// spare holds a Blender slot, so the bound on Blenders stays; it is taken
// only from a free slot, and given up first when a session or a preview
// needs one (before any session is parked). A spare unused for the idle
// timeout is stopped. Its work dir (under spares/) goes when it exits, and
// spares/ is emptied when agentd starts.

// spareStartTimeout bounds starting a spare.
const spareStartTimeout = 2 * time.Minute

// spare is a Blender started ahead of its session.
type spare struct {
	proc *blender.Process
	idle *time.Timer // stops it after the idle timeout
}

// Spares counts the spares ready to be adopted.
func (m *Manager) Spares() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.spares)
}

// sparesDir holds the spares' work dirs.
func (m *Manager) sparesDir() string { return filepath.Join(m.cfg.DataDir, "spares") }

// takeSpare takes the spare of runtime rtID out of the pool, or returns
// nil. Its slot stays held: the caller takes it over (held set), or gives it
// up with giveSpareSlot. The caller holds m.mu.
func (m *Manager) takeSpare(rtID string) *spare {
	sp := m.spares[rtID]
	if sp == nil {
		return nil
	}
	delete(m.spares, rtID)
	sp.idle.Stop()
	m.spareSlots--
	return sp
}

// startBlender starts the Blender of a session or preview that holds a
// slot: a spare of its runtime adopted (the spare's own slot given up, or
// taken over when given), else a new one; then a spare of the runtime is
// started behind it.
func (m *Manager) startBlender(ctx context.Context, rt Runtime, sp *spare, log *slog.Logger, workDir, sandbox string, memoryLimitMiB int64) (*blender.Process, error) {
	defer m.refillSpare(rt, memoryLimitMiB)
	if sp == nil {
		m.mu.Lock()
		if sp = m.takeSpare(rt.Info.GetRuntimeId()); sp != nil {
			m.live-- // the caller's slot is enough
			m.notify()
		}
		m.mu.Unlock()
	}
	if sp != nil {
		if _, err := sp.proc.Adopt(ctx, log, sandbox, memoryLimitMiB); err == nil {
			return sp.proc, nil
		} else {
			m.log.Warn("a spare Blender could not be adopted; starting one", "runtime_id", rt.Info.GetRuntimeId(), "err", err)
			sp.proc.Stop(time.Second)
		}
	}
	return blender.Start(ctx, rt.Runtime, blender.Options{Logger: log, WorkDir: workDir, SandboxDir: sandbox,
		Faults: m.cfg.Faults, MemoryLimitMiB: memoryLimitMiB})
}

// refillSpare starts a spare of rt in the background when the runtime has
// none, a slot is free and spares are on. Its memory ceiling is the one the
// last start asked for (an adoption changes it).
func (m *Manager) refillSpare(rt Runtime, memoryLimitMiB int64) {
	id := rt.Info.GetRuntimeId()
	m.mu.Lock()
	if m.cfg.NoSpares || m.shutdown || m.spares[id] != nil || m.spawning[id] || m.live >= m.cfg.MaxLive {
		m.mu.Unlock()
		return
	}
	m.spawning[id] = true
	m.live++
	m.spareSlots++
	m.spareSeq++
	work := filepath.Join(m.sparesDir(), fmt.Sprintf("%s-%d", id, m.spareSeq))
	m.mu.Unlock()
	m.spawns.Add(1)
	go func() {
		defer m.spawns.Done()
		ctx, cancel := context.WithTimeout(context.Background(), spareStartTimeout)
		p, err := blender.Start(ctx, rt.Runtime, blender.Options{Logger: m.base.With("spare", true), WorkDir: work,
			RemoveWorkDir: true, Faults: m.cfg.Faults, MemoryLimitMiB: memoryLimitMiB})
		cancel()
		m.mu.Lock()
		defer m.mu.Unlock()
		delete(m.spawning, id)
		if err != nil || m.shutdown {
			m.live--
			m.spareSlots--
			m.notify()
			if err != nil {
				m.log.Warn("starting a spare Blender", "runtime_id", id, "err", err)
				os.RemoveAll(work)
			} else {
				go p.Stop(5 * time.Second)
			}
			return
		}
		sp := &spare{proc: p}
		sp.idle = time.AfterFunc(m.spareIdle(), func() { m.dropSpare(id, sp, "unused") })
		m.spares[id] = sp
		m.notify() // a slot wait may take it
	}()
}

// spareIdle is how long a spare waits for a session: the idle timeout, or
// ten minutes when sessions never park.
func (m *Manager) spareIdle() time.Duration {
	if d := time.Duration(m.idleTimeout.Load()); d > 0 {
		return d
	}
	return 10 * time.Minute
}

// dropSpare stops a spare that is still in the pool, freeing its slot.
func (m *Manager) dropSpare(rtID string, sp *spare, why string) {
	m.mu.Lock()
	if m.spares[rtID] != sp {
		m.mu.Unlock()
		return // adopted or dropped already
	}
	m.takeSpare(rtID)
	m.live--
	m.notify()
	m.mu.Unlock()
	sp.proc.Stop(5 * time.Second)
	m.log.Info("spare Blender stopped", "runtime_id", rtID, "why", why)
}

// evictSpare gives up a spare's slot for someone who needs it; it reports
// whether there was one. The caller holds m.mu; the spare stops in the
// background.
func (m *Manager) evictSpare() bool {
	for id := range m.spares {
		sp := m.takeSpare(id)
		m.live--
		m.notify()
		go sp.proc.Stop(5 * time.Second)
		m.log.Info("spare Blender stopped", "runtime_id", id, "why", "its slot is needed")
		return true
	}
	return false
}

// stopSpares stops every spare and waits for those being started; no new
// one starts.
func (m *Manager) stopSpares() {
	m.mu.Lock()
	m.shutdown = true
	var all []*spare
	for id := range m.spares {
		all = append(all, m.takeSpare(id))
		m.live--
	}
	m.notify()
	m.mu.Unlock()
	for _, sp := range all {
		sp.proc.Stop(5 * time.Second)
	}
	m.spawns.Wait()
}
