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

// Spare Blenders. Starting Blender takes about 0.4 s (the bpy 4.5 wheel and
// Debian's 3.4 binary, with the agent's bytecode cache) before the bridge
// answers; a session's first batch,
// the restore of a parked session, a recovery after a crash and a preview
// would each wait that long. A spare is a Blender started ahead on the
// baseline scene, with a work dir of its own, no sandbox and the ceiling
// Config.SpareMemoryMiB: the next start of its runtime adopts it
// (blender.Process.Adopt: the sandbox, and the memory ceiling lowered to
// the session's, about a millisecond) instead of starting one.
//
// An agent keeps at most one spare per runtime, and only for runtimes a
// session or preview has started in (an agent never asked for a runtime
// holds none); the spare is started once the agent has run no batch and no
// preview for a moment (spareQuiet), so that its start does not slow a
// burst of them. A spare holds a Blender
// slot, so the bound on Blenders stays: it takes only a free slot, a start
// of its runtime that finds no free slot takes its slot over, and anything
// else that needs a slot has it stopped (or, while it starts, cancelled)
// before any session is parked. A spare unused for the idle timeout stops,
// and so does one whose Blender dies. Its work dir (under spares/) goes
// when it exits; spares/ is emptied when agentd starts.

const (
	// spareStartTimeout bounds starting a spare (a start waits for one of
	// its runtime being started rather than start another).
	spareStartTimeout = 30 * time.Second
	// spareRetry is how long a runtime whose spare failed to start gets
	// none.
	spareRetry = time.Minute
)

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

// Adopted counts the starts that adopted a spare.
func (m *Manager) Adopted() uint64 { return m.adopted.Load() }

// sparesDir holds the spares' work dirs.
func (m *Manager) sparesDir() string { return filepath.Join(m.cfg.DataDir, "spares") }

// previewsDir holds the forks of running previews (preview.go).
func (m *Manager) previewsDir() string { return filepath.Join(m.cfg.DataDir, "previews") }

// cacheDir is shared by every Blender of the agent (blender.Options.CacheDir).
func (m *Manager) cacheDir() string { return CacheDir(m.cfg.DataDir) }

// CacheDir is where the Blenders of an agent with data dir dataDir share
// the bridge and Python's bytecode.
func CacheDir(dataDir string) string { return filepath.Join(dataDir, "cache") }

// takeSpare takes the ready spare of runtime rtID out of the pool, or
// returns nil. Its slot stays held: the caller takes it over, or gives it
// up. The caller holds m.mu.
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

// anySpare takes any ready spare out of the pool (its slot still held), or
// returns nil. The caller holds m.mu.
func (m *Manager) anySpare() *spare {
	for id := range m.spares {
		return m.takeSpare(id)
	}
	return nil
}

// cancelSpareStart cancels a spare being started: its slot is freed (and
// m.changed closed) once its start has given up. It reports whether there
// was one. The caller holds m.mu.
func (m *Manager) cancelSpareStart() bool {
	for _, cancel := range m.spawning {
		cancel()
		return true
	}
	return false
}

// startBlender starts the Blender of a session or preview that holds a
// slot: sp, a spare whose slot the holder took over, or else a ready spare
// of its runtime (whose slot is given up), adopted; or a new Blender. The
// runtime then wants a spare (refillSpares).
func (m *Manager) startBlender(ctx context.Context, rt Runtime, sp *spare, log *slog.Logger, workDir, sandbox string, limits blender.Limits) (*blender.Process, error) {
	id := rt.Info.GetRuntimeId()
	m.mu.Lock()
	m.wanted[id] = true
	ownSlot := false // sp holds a slot of its own, besides the caller's
	if sp == nil {
		sp = m.takeSpare(id)
		ownSlot = sp != nil
	}
	m.mu.Unlock()
	if sp != nil {
		_, err := sp.proc.Adopt(ctx, log, sandbox, limits)
		if err != nil {
			m.log.Warn("a spare Blender could not be adopted; starting one", "runtime_id", id, "err", err)
			sp.proc.Stop(time.Second)
		}
		if ownSlot { // the caller's slot is enough: give it up once one Blender is left
			m.dropSlot()
		}
		if err == nil {
			m.adopted.Add(1)
			return sp.proc, nil
		}
	}
	return blender.Start(ctx, rt.Runtime, blender.Options{Logger: log, WorkDir: workDir, SandboxDir: sandbox, CacheDir: m.cacheDir(),
		Faults: m.cfg.Faults, MemoryLimitMiB: limits.MemoryMiB, StorageLimitMiB: limits.StorageMiB, MinFreeDiskMiB: m.cfg.MinFreeDiskMiB})
}

// spareQuiet is how long the agent must run no batch and no preview before
// a spare starts: its start (0.4 s of a CPU) would otherwise slow the
// batches of a burst.
const spareQuiet = 250 * time.Millisecond

// refillWhenQuiet starts the spares wanted once the agent has been quiet
// for spareQuiet: batches and previews call it when they end, and a later
// one puts the start off again.
func (m *Manager) refillWhenQuiet() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.quiet == nil {
		m.quiet = time.AfterFunc(spareQuiet, m.refillIfQuiet)
		return
	}
	m.quiet.Reset(spareQuiet)
}

// refillIfQuiet refills the spares unless a batch or a preview runs (its
// end calls refillWhenQuiet again).
func (m *Manager) refillIfQuiet() {
	m.mu.Lock()
	busy := m.busyLive() > 0
	m.mu.Unlock()
	if !busy {
		m.refillSpares()
	}
}

// refillSpares starts, in the background, a spare of every runtime that
// wants one and has none, while slots are free.
func (m *Manager) refillSpares() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id := range m.wanted {
		rt, ok := m.runtimes[id]
		if m.cfg.NoSpares || m.shutdown || m.live >= m.cfg.MaxLive {
			return
		}
		if !ok || m.spares[id] != nil || m.spawning[id] != nil || time.Since(m.spareFailed[id]) < spareRetry {
			continue
		}
		m.startSpare(rt)
	}
}

// startSpare starts a spare of rt in a free slot. The caller holds m.mu.
func (m *Manager) startSpare(rt Runtime) {
	id := rt.Info.GetRuntimeId()
	ctx, cancel := context.WithTimeout(context.Background(), spareStartTimeout)
	m.spawning[id] = cancel
	m.live++
	m.spareSlots++
	m.spareSeq++
	work := filepath.Join(m.sparesDir(), fmt.Sprintf("%s-%d", id, m.spareSeq))
	m.spawns.Add(1)
	go func() {
		defer m.spawns.Done()
		p, err := blender.Start(ctx, rt.Runtime, blender.Options{Logger: m.base.With("spare", true), WorkDir: work, CacheDir: m.cacheDir(),
			RemoveWorkDir: true, Faults: m.cfg.Faults, MemoryLimitMiB: m.cfg.SpareMemoryMiB, MinFreeDiskMiB: m.cfg.MinFreeDiskMiB})
		cancelled := ctx.Err() != nil
		cancel()
		m.mu.Lock()
		delete(m.spawning, id)
		if err == nil && !m.shutdown {
			sp := &spare{proc: p}
			sp.idle = time.AfterFunc(m.spareIdle(), func() { m.dropSpare(id, sp, "unused") })
			m.spares[id] = sp
			m.notify() // a slot wait may take it
			m.mu.Unlock()
			go func() {
				<-p.Done()
				m.dropSpare(id, sp, "its Blender exited")
			}()
			return
		}
		if err != nil && !cancelled {
			m.spareFailed[id] = time.Now()
		}
		m.mu.Unlock()
		if err == nil {
			p.Stop(5 * time.Second) // agentd is stopping
		} else {
			os.RemoveAll(work)
			if !cancelled {
				m.log.Warn("starting a spare Blender", "runtime_id", id, "err", err)
			}
		}
		m.mu.Lock()
		m.live--
		m.spareSlots--
		m.notify()
		m.mu.Unlock()
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

// dropSpare stops a spare that is still in the pool; its slot is freed once
// its Blender has exited.
func (m *Manager) dropSpare(rtID string, sp *spare, why string) {
	m.mu.Lock()
	if m.spares[rtID] != sp {
		m.mu.Unlock()
		return // adopted or dropped already
	}
	m.takeSpare(rtID)
	m.mu.Unlock()
	sp.proc.Stop(5 * time.Second)
	m.dropSlot()
	m.log.Info("spare Blender stopped", "runtime_id", rtID, "why", why)
}

// stopSpares stops every spare, cancels those being started and waits for
// them; no new one starts.
func (m *Manager) stopSpares() {
	m.mu.Lock()
	m.shutdown = true
	for _, cancel := range m.spawning {
		cancel()
	}
	var all []*spare
	for sp := m.anySpare(); sp != nil; sp = m.anySpare() {
		all = append(all, sp)
	}
	m.mu.Unlock()
	for _, sp := range all {
		sp.proc.Stop(5 * time.Second)
	}
	m.mu.Lock()
	m.live -= len(all)
	m.notify()
	m.mu.Unlock()
	m.spawns.Wait()
}
