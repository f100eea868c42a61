package sessions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/blendplane/blendplane/agentd/internal/blender"
	"github.com/blendplane/blendplane/agentd/internal/journal"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/internal/wireid"
)

var (
	// ErrNotFound: no session with that id.
	ErrNotFound = errors.New("session not found")
	// ErrUnknownRuntime: no runtime with that id on this agent.
	ErrUnknownRuntime = errors.New("unknown runtime")
	// ErrBroken: the session could not be recovered and cannot continue.
	ErrBroken = errors.New("session broken")
	// ErrCapacity: every Blender slot is held by a busy session.
	ErrCapacity = errors.New("no Blender slot free")
	// ErrBadSessionID: not an id that can name a session's directory.
	ErrBadSessionID = errors.New("not a session id")
)

// checkSessionID refuses an id that would not name a directory of its own
// under sessions/ (wireid.SessionPattern): "." and ".." would name the
// directory of all sessions and the agent's own, which the session's close
// removes.
func checkSessionID(id string) error {
	if !wireid.ValidSession(id) {
		return fmt.Errorf("%w: %q", ErrBadSessionID, id)
	}
	return nil
}

// Config is the session manager's part of agentd's configuration.
type Config struct {
	// DataDir holds sessions/<id>/ (work files, checkpoints, output sandbox).
	DataDir string
	// MaxLive bounds how many sessions have a Blender running at once;
	// beyond it the least recently used idle session is parked. 0: 1.
	MaxLive int
	// IdleTimeout parks a session after this long without batches (0:
	// never); SetIdleTimeout changes it at run time.
	IdleTimeout time.Duration
	// Checkpoint policy: a session's scene is saved to a .blend after
	// CheckpointEvery journaled scene changes, or when CheckpointInterval has
	// passed since the last checkpoint and something changed, or after
	// CheckpointIdle without operations. Recovery replays the journal from
	// the last checkpoint, so these bound recovery time.
	CheckpointEvery    int
	CheckpointInterval time.Duration
	CheckpointIdle     time.Duration
	// RefreshAfter: a session whose Blender has changed this many of the
	// scene's records (Outcome.RecordsChanged) since it loaded its scene
	// gets a fresh Blender from its next checkpoint on, when a spare is
	// ready (refresh.go). 0: never.
	RefreshAfter int
	// MinFreeDiskMiB is the disk agentd keeps free under DataDir for its
	// journal and checkpoints (0: none): an upload, or a call's files, that
	// would leave less is refused (ErrQuotaExceeded, quota_exceeded).
	MinFreeDiskMiB int64
	// Faults enables test-only fault injection in the bridge (e.g. "undo").
	Faults []string
	// NoSpares: no Blender is started ahead of its session (spares.go).
	NoSpares bool
	// SpareMemoryMiB is the memory ceiling spares start under (0: none);
	// the session that adopts one lowers it to its own. The machine's
	// memory: what a session may ask for at most.
	SpareMemoryMiB int64
}

// Manager holds the agent's runtimes and sessions: at most Config.MaxLive
// of them have a Blender process at any time (see slots.go).
type Manager struct {
	cfg         Config
	runtimes    map[string]Runtime
	journal     *journal.Journal
	base        *slog.Logger // for Blender processes, which name their own component
	log         *slog.Logger
	idleTimeout atomic.Int64 // nanoseconds

	mu       sync.Mutex
	sessions map[string]*session
	// closing holds the sessions being closed, by id, each closed (the
	// channel) once its journal and files are gone: an Open of the same id
	// waits for it, else the close would remove what the open made.
	closing map[string]chan struct{}
	live    int           // sessions holding a Blender slot
	changed chan struct{} // closed (and replaced) when a slot may have freed

	previews chan struct{} // one preview at a time

	// Spare Blenders (spares.go), guarded by mu: ready ones by runtime id,
	// those being started (how to cancel them), how many slots both hold,
	// the runtimes that want one and when a runtime's last start failed.
	spares      map[string]*spare
	spawning    map[string]context.CancelFunc
	spareSlots  int
	spareSeq    int
	wanted      map[string]bool
	spareFailed map[string]time.Time
	shutdown    bool           // no spare starts any more
	spawns      sync.WaitGroup // spares being started
	adopted     atomic.Uint64  // starts that adopted a spare
	refreshed   atomic.Uint64  // sessions given a fresh Blender (refresh.go)
	refreshes   sync.WaitGroup // refreshes in flight
	// refreshing holds the refreshes in flight, guarded by mu: each holds
	// a slot (its spare's) and runs a Blender for its session.
	refreshing map[*session]*refreshing
	// afterLoad, when set (tests), runs in each refresh once its Blender
	// has loaded the checkpoint, before it catches up.
	afterLoad func(context.Context)
	quiet     *time.Timer // refills the spares once no batch or preview ran for a while
}

type session struct {
	id      string
	runtime Runtime
	dir     string
	sandbox string
	// limits are its ceilings: its Blender's memory, its sandbox's files.
	limits blender.Limits

	mu sync.Mutex // one batch at a time
	// files is held by a batch that imports (to its end) or writes files
	// (until its last call that does, Runtime.writes, has returned), and by an
	// upload while it renames its file into the sandbox: the files an
	// import checked (the file and those it names) are the ones it reads,
	// not others an upload put under their names in between; and an upload
	// never lands under a call that writes its name, whose failure would
	// remove it or put back what the call set aside over it.
	files sync.Mutex
	proc  *blender.Process
	// spare is a spare Blender whose slot the session took over (reserve),
	// for its next start to adopt.
	spare *spare
	pid   atomic.Int64 // proc's process id while it runs, for metrics (read without mu)
	// sceneHash is the scene's hash as journaled (or about to be) by the
	// batch that holds mu: what a failed call must leave behind.
	sceneHash string
	broken    error
	// Scene changes since the last checkpoint, and when it was taken.
	dirty          int
	lastCheckpoint time.Time
	// changes counts the scene's records its Blender changed since it
	// loaded the scene (a start, a recovery, a refresh), replays included.
	changes int
	idle    *time.Timer // the idle checkpoint
	// fresh is its refresh in flight, if any (refresh.go).
	fresh *refreshing
	// keptFor is the plan whose files keptDir holds, keptMarked whether its
	// keptFor file says so, keptKnown whether both were read from disk
	// (keepFor).
	keptFor               string
	keptMarked, keptKnown bool

	// Guarded by Manager.mu, so that Cancel and slot decisions never wait
	// for a batch.
	//
	// running is the plan whose batch runs now and how to interrupt its
	// tool calls; cancelNext is a plan cancelled before its batch started:
	// its next batch is interrupted as soon as it registers.
	running     string
	cancelCalls context.CancelFunc
	cancelNext  string
	live        bool      // holds a Blender slot: its Blender runs or is being started
	users       int       // batches holding or waiting for mu
	lastUsed    time.Time // when its last batch ended
	closed      bool
	park        *time.Timer // the idle park
}

// NewManager returns a manager that knows the sessions in the journal; their
// Blender is started (and the scene recovered) on first use.
func NewManager(cfg Config, rts []Runtime, j *journal.Journal, log *slog.Logger) (*Manager, error) {
	cfg.MaxLive = max(cfg.MaxLive, 1)
	m := &Manager{cfg: cfg, runtimes: map[string]Runtime{}, journal: j, base: log,
		log: log.With("component", "sessions"), sessions: map[string]*session{}, closing: map[string]chan struct{}{}, changed: make(chan struct{}),
		previews: make(chan struct{}, 1), spares: map[string]*spare{}, spawning: map[string]context.CancelFunc{},
		refreshing: map[*session]*refreshing{},
		wanted:     map[string]bool{}, spareFailed: map[string]time.Time{}}
	for _, d := range []string{m.sparesDir(), m.previewsDir()} { // of an agentd that is gone
		if err := os.RemoveAll(d); err != nil {
			return nil, err
		}
	}
	m.idleTimeout.Store(int64(cfg.IdleTimeout))
	for _, rt := range rts {
		m.runtimes[rt.Info.GetRuntimeId()] = rt
	}
	known, err := j.Sessions()
	if err != nil {
		return nil, err
	}
	for _, js := range known {
		if err := checkSessionID(js.ID); err != nil {
			// Opened before ids were checked: left in the journal, never
			// given a directory (nor its close the power to remove one).
			m.log.Error("a session in the journal has an id that names no directory of its own; it is not served", "err", err)
			continue
		}
		rt, ok := m.runtimes[js.RuntimeID]
		s := m.newSession(js.ID, rt)
		s.limits = blender.Limits(js.Limits)
		if !ok {
			s.broken = fmt.Errorf("%w: runtime %q of session %s is gone", ErrUnknownRuntime, js.RuntimeID, js.ID)
		}
		m.sessions[js.ID] = s
		m.settle(s)
		if n, err := j.ClearIntents(js.ID); err == nil && n > 0 {
			// Calls in flight when agentd stopped: their effects died with
			// Blender, and their callers retry them by key.
			m.log.Info("dropped the intents of calls lost in the last run", "session_id", js.ID, "calls", n)
		}
		m.log.Info("session known from journal", "session_id", js.ID, "journal_head", js.Head)
	}
	return m, nil
}

func (m *Manager) newSession(id string, rt Runtime) *session {
	dir := filepath.Join(m.cfg.DataDir, "sessions", id)
	return &session{id: id, runtime: rt, dir: dir, sandbox: filepath.Join(dir, "output"), lastCheckpoint: time.Now(),
		lastUsed: time.Now()}
}

// Runtimes returns the runtimes' descriptions, sorted by id.
func (m *Manager) Runtimes() []*cpv1.Runtime {
	out := make([]*cpv1.Runtime, 0, len(m.runtimes))
	for _, rt := range m.runtimes {
		out = append(out, rt.Info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetRuntimeId() < out[j].GetRuntimeId() })
	return out
}

// Status is what the agent reports about its sessions.
type Status struct {
	// Sessions the agent holds, running or parked.
	Sessions int
	// MaxLive is the bound on Blender processes; Live the sessions whose
	// Blender runs (or is starting), sorted; Busy those running a batch.
	MaxLive int
	Live    []string
	Busy    int
}

// Status returns the sessions' status now.
func (m *Manager) Status() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := Status{Sessions: len(m.sessions), MaxLive: m.cfg.MaxLive}
	for id, s := range m.sessions {
		if s.live {
			st.Live = append(st.Live, id)
		}
		if s.users > 0 {
			st.Busy++
		}
	}
	sort.Strings(st.Live)
	return st
}

// SetIdleTimeout changes how long a session may stay idle before it is
// parked (0: never); sessions idle now are judged by it at their next
// check.
func (m *Manager) SetIdleTimeout(d time.Duration) {
	if old := time.Duration(m.idleTimeout.Swap(int64(d))); old != d {
		m.log.Info("session idle timeout", "timeout", d)
		m.mu.Lock()
		for _, s := range m.sessions {
			if s.live && s.users == 0 {
				m.armPark(s)
			}
		}
		for _, sp := range m.spares {
			sp.idle.Reset(m.spareIdle())
		}
		m.mu.Unlock()
	}
}

// Open records a new session on its runtime's baseline scene; its Blender
// starts when a batch first needs it. It fails with ErrCapacity when every
// Blender slot is held by a busy session, so that a flood of negotiations
// goes to other agents (or is refused) rather than queueing here. Opening a
// known session returns its current scene hash.
// limits are its ceilings (0: none).
func (m *Manager) Open(ctx context.Context, sessionID, runtimeID string, limits blender.Limits, epoch int64) (*cpv1.BlenderProfile, string, error) {
	if err := checkSessionID(sessionID); err != nil {
		return nil, "", err
	}
	rt, ok := m.runtimes[runtimeID]
	if !ok {
		return nil, "", fmt.Errorf("%w: %q", ErrUnknownRuntime, runtimeID)
	}
	m.mu.Lock()
	if closing, ok := m.closing[sessionID]; ok {
		m.mu.Unlock()
		select {
		case <-closing:
		case <-ctx.Done():
			return nil, "", ctx.Err()
		}
		return m.Open(ctx, sessionID, runtimeID, limits, epoch)
	}
	if _, known := m.sessions[sessionID]; known {
		m.mu.Unlock()
		js, err := m.journal.Session(sessionID)
		if err != nil {
			return nil, "", err
		}
		if epoch > 0 && js.Epoch > 0 && js.Epoch < epoch {
			// Placed here again after it ran elsewhere: what this agent
			// holds is stale. Start over; the control plane replays.
			m.log.Info("session placed here again under a newer epoch; discarding the stale copy",
				"session_id", sessionID, "epoch", epoch, "held_epoch", js.Epoch)
			if err := m.Close(sessionID); err != nil && !errors.Is(err, ErrNotFound) {
				return nil, "", err
			}
			return m.Open(ctx, sessionID, runtimeID, limits, epoch)
		}
		if err := m.journal.Fence(sessionID, epoch); err != nil {
			return nil, "", err
		}
		return rt.Info.GetBlenderProfile(), js.HeadHash, nil
	}
	if busy := m.busyLive(); busy >= m.cfg.MaxLive {
		m.mu.Unlock()
		return nil, "", fmt.Errorf("%w: all %d Blender slots of this agent are busy", ErrCapacity, m.cfg.MaxLive)
	}
	s := m.newSession(sessionID, rt)
	s.limits = limits
	// Known from here on, but held until its directory and journal record
	// exist: a close that finds it meanwhile waits, then removes both
	// (rather than removing the directory under the open, and missing the
	// record the open writes after). No one else can hold a new session's
	// lock, so taking it under m.mu cannot wait.
	s.mu.Lock()
	defer s.mu.Unlock()
	m.sessions[sessionID] = s
	m.mu.Unlock()

	hash := rt.Info.GetBaselineSceneHash()
	err := os.MkdirAll(s.sandbox, 0o755) // files may arrive before its Blender starts
	if err == nil {
		err = m.journal.OpenSession(sessionID, runtimeID, hash, journal.Limits(limits), epoch)
	}
	if err != nil {
		m.mu.Lock()
		if m.sessions[sessionID] == s { // not closed, nor opened again since
			delete(m.sessions, sessionID)
		}
		s.closed = true // a batch that found it meanwhile must not run on it
		m.mu.Unlock()
		return nil, "", err
	}
	m.log.Info("session opened", "session_id", sessionID, "runtime_id", runtimeID, "sandbox", s.sandbox, "scene_hash", hash,
		"memory_limit_mib", limits.MemoryMiB, "storage_limit_mib", limits.StorageMiB, "epoch", epoch)
	return rt.Info.GetBlenderProfile(), hash, nil
}

// Fence refuses a call for a session under an older epoch than one it has
// seen (journal.ErrStaleEpoch), and records a newer one.
func (m *Manager) Fence(sessionID string, epoch int64) error {
	if _, err := m.session(sessionID); err != nil {
		return err
	}
	return m.journal.Fence(sessionID, epoch)
}

// Held lists the sessions this agent holds with the epoch it holds each
// under, sorted by id.
func (m *Manager) Held() []*cpv1.HeldSession {
	m.mu.Lock()
	ids := make([]string, 0, len(m.sessions))
	for id := range m.sessions {
		ids = append(ids, id)
	}
	m.mu.Unlock()
	sort.Strings(ids)
	out := make([]*cpv1.HeldSession, 0, len(ids))
	for _, id := range ids {
		if js, err := m.journal.Session(id); err == nil {
			h := &cpv1.HeldSession{SessionId: id, Epoch: js.Epoch}
			if js.Checkpoint != nil && js.Checkpoint.Index > 0 {
				h.CheckpointSceneHash = js.Checkpoint.SceneHash // one it made, not one it was given
			}
			out = append(out, h)
		}
	}
	return out
}

// Blenders lists the process ids of the sessions' running Blenders, those
// of their refreshes included.
func (m *Manager) Blenders() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []int
	for _, s := range m.sessions {
		if pid := s.pid.Load(); pid > 0 {
			out = append(out, int(pid))
		}
	}
	for _, f := range m.refreshing {
		out = append(out, f.pid)
	}
	return out
}

// SessionCounts counts the sessions whose Blender runs (or is starting)
// and the others.
func (m *Manager) SessionCounts() (live, parked int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.sessions {
		if s.live {
			live++
		} else {
			parked++
		}
	}
	return live, parked
}

// busyLive counts the slots that are busy: held by sessions running a
// batch, or by previews. The caller holds m.mu.
func (m *Manager) busyLive() int {
	busy, live := 0, 0
	for _, s := range m.sessions {
		if s.live {
			live++
			if s.users > 0 {
				busy++
			}
		}
	}
	// The slots that are neither sessions', spares' nor refreshes' are
	// previews', busy. A refresh gives its slot up to a session that needs
	// it (takeSlot), as a spare does.
	return busy + m.live - live - m.spareSlots - len(m.refreshing)
}

// Close stops a session's Blender, removes its files (checkpoints, work
// files, sandbox) and forgets it. A batch running in it finishes first.
func (m *Manager) Close(sessionID string) error {
	m.mu.Lock()
	s, ok := m.sessions[sessionID]
	if ok {
		delete(m.sessions, sessionID)
		s.closed = true
		if s.park != nil {
			s.park.Stop()
		}
		done := make(chan struct{})
		m.closing[sessionID] = done
		defer func() { // after s.mu's unlock (deferred below): the close is over
			m.mu.Lock()
			delete(m.closing, sessionID)
			m.mu.Unlock()
			close(done)
		}()
	}
	m.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %q", ErrNotFound, sessionID)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stop()
	m.freeSlot(s)
	if err := m.journal.CloseSession(sessionID); err != nil && !errors.Is(err, journal.ErrSessionNotFound) {
		return err
	}
	if err := removeAll(s.dir); err != nil {
		return fmt.Errorf("remove the files of session %s: %w", sessionID, err)
	}
	m.log.Info("session closed", "session_id", sessionID)
	return nil
}

// Drop stops a session that now runs elsewhere (the control plane placed
// it on another agent while this one was out of reach): its running tool
// calls are interrupted (their receipts would be refused), then it is
// closed like Close does.
func (m *Manager) Drop(sessionID string) error {
	m.mu.Lock()
	if s, ok := m.sessions[sessionID]; ok && s.cancelCalls != nil {
		s.cancelCalls()
	}
	m.mu.Unlock()
	return m.Close(sessionID)
}

func (s *session) stop() {
	if s.idle != nil {
		s.idle.Stop()
	}
	if s.fresh != nil {
		s.fresh.cancel(errors.New("its session stopped")) // it gives up, and stops its Blender
	}
	if s.spare != nil { // taken over, never adopted: the start did not come
		s.spare.proc.Stop(5 * time.Second)
		s.spare = nil
	}
	if s.proc != nil {
		s.proc.Stop(5 * time.Second)
		s.setProc(nil)
	}
}

// setProc records the session's Blender (nil: none), and its pid in
// blender.pid in the session's directory, for people and tests: no
// Blender's command line names its session (it names the agent's shared
// bridge, and an adopted spare runs from the spare's directory).
func (s *session) setProc(p *blender.Process) {
	s.proc = p
	file := filepath.Join(s.dir, "blender.pid")
	if p == nil {
		s.pid.Store(0)
		os.Remove(file)
		return
	}
	s.pid.Store(int64(p.Pid()))
	tmp := file + ".tmp"
	if os.WriteFile(tmp, []byte(strconv.Itoa(p.Pid())+"\n"), 0o644) == nil {
		os.Rename(tmp, file)
	}
}

// Shutdown stops every session's Blender and the spares; the sessions stay
// in the journal and are recovered when agentd starts again.
func (m *Manager) Shutdown() {
	m.stopSpares()
	m.mu.Lock()
	all := make([]*session, 0, len(m.sessions))
	for _, s := range m.sessions {
		all = append(all, s)
		if s.park != nil {
			s.park.Stop()
		}
	}
	m.mu.Unlock()
	for _, s := range all {
		s.mu.Lock()
		s.stop()
		m.freeSlot(s)
		s.mu.Unlock()
	}
	m.refreshes.Wait()
}

// Cancel interrupts the running batch of a plan in a session. It reports
// whether one was running.
func (m *Manager) Cancel(sessionID, requestID string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sessions[sessionID]
	if !ok {
		return false, fmt.Errorf("%w: %q", ErrNotFound, sessionID)
	}
	if s.running != requestID || s.cancelCalls == nil {
		s.cancelNext = requestID
		return false, nil
	}
	s.cancelCalls()
	return true, nil
}

// track records the batch a session runs, for Cancel.
func (m *Manager) track(s *session, requestID string, cancel context.CancelFunc) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s.running, s.cancelCalls = requestID, cancel
	if requestID != "" && requestID == s.cancelNext {
		s.cancelNext = ""
		cancel()
	}
}

func (m *Manager) session(id string) (*session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sessions[id]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	return s, nil
}

// alive reports whether the session's Blender is running and can take calls.
func (s *session) alive() bool {
	// A Blender killed after an abandoned call may not have exited yet; it
	// is as good as gone: the next batch recovers the session.
	return s.proc != nil && s.proc.Usable()
}

// removeAll is os.RemoveAll of a directory that an upload under way may
// still add a file to (its temporary file, then nothing more: its session
// is closed): tried again while that leaves it not empty.
func removeAll(dir string) error {
	err := os.RemoveAll(dir)
	for try := 0; errors.Is(err, syscall.ENOTEMPTY) && try < 10; try++ {
		time.Sleep(10 * time.Millisecond)
		err = os.RemoveAll(dir)
	}
	return err
}

// isClosed reports whether s was closed (Close).
func (m *Manager) isClosed(s *session) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return s.closed
}
