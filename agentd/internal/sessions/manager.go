package sessions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/blendplane/blendplane/agentd/internal/blender"
	"github.com/blendplane/blendplane/agentd/internal/journal"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

var (
	// ErrNotFound: no open session with that id.
	ErrNotFound = errors.New("session not found")
	// ErrUnknownRuntime: no runtime with that id on this agent.
	ErrUnknownRuntime = errors.New("unknown runtime")
	// ErrBroken: the session could not be recovered and cannot continue.
	ErrBroken = errors.New("session broken")
)

// Config is the session manager's part of agentd's configuration.
type Config struct {
	// DataDir holds sessions/<id>/ (work files, checkpoints, output sandbox).
	DataDir string
	// Checkpoint policy: a session's scene is saved to a .blend after
	// CheckpointEvery journaled scene changes, or when CheckpointInterval has
	// passed since the last checkpoint and something changed, or after
	// CheckpointIdle without operations. Recovery replays the journal from
	// the last checkpoint, so these bound recovery time.
	CheckpointEvery    int
	CheckpointInterval time.Duration
	CheckpointIdle     time.Duration
	// Faults enables test-only fault injection in the bridge (e.g. "undo").
	Faults []string
}

// Manager holds the agent's runtimes and sessions.
type Manager struct {
	cfg      Config
	runtimes map[string]Runtime
	journal  *journal.Journal
	base     *slog.Logger // for Blender processes, which name their own component
	log      *slog.Logger

	mu       sync.Mutex
	sessions map[string]*session
}

type session struct {
	id      string
	runtime Runtime
	dir     string
	sandbox string

	mu   sync.Mutex // one batch at a time
	proc *blender.Process
	// running is the plan whose batch runs now and how to interrupt its
	// tool calls; guarded by Manager.mu, not s.mu, so Cancel never waits.
	running     string
	cancelCalls context.CancelFunc
	// cancelNext is a plan cancelled before its batch started: its next
	// batch is interrupted as soon as it registers.
	cancelNext string
	broken     error
	// Scene changes since the last checkpoint, and when it was taken.
	dirty          int
	lastCheckpoint time.Time
	idle           *time.Timer
}

// NewManager returns a manager that knows the sessions in the journal; their
// Blender is started (and the scene recovered) on first use.
func NewManager(cfg Config, rts []Runtime, j *journal.Journal, log *slog.Logger) (*Manager, error) {
	m := &Manager{cfg: cfg, runtimes: map[string]Runtime{}, journal: j, base: log,
		log: log.With("component", "sessions"), sessions: map[string]*session{}}
	for _, rt := range rts {
		m.runtimes[rt.Info.GetRuntimeId()] = rt
	}
	known, err := j.Sessions()
	if err != nil {
		return nil, err
	}
	for _, js := range known {
		rt, ok := m.runtimes[js.RuntimeID]
		s := m.newSession(js.ID, rt)
		if !ok {
			s.broken = fmt.Errorf("%w: runtime %q of session %s is gone", ErrUnknownRuntime, js.RuntimeID, js.ID)
		}
		m.sessions[js.ID] = s
		m.log.Info("session known from journal", "session_id", js.ID, "journal_head", js.Head)
	}
	return m, nil
}

func (m *Manager) newSession(id string, rt Runtime) *session {
	dir := filepath.Join(m.cfg.DataDir, "sessions", id)
	return &session{id: id, runtime: rt, dir: dir, sandbox: filepath.Join(dir, "output"), lastCheckpoint: time.Now()}
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

// Count returns the number of open sessions.
func (m *Manager) Count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sessions)
}

// Open starts a session's Blender on the baseline scene and journals it.
// Opening an open session returns its current scene hash.
func (m *Manager) Open(ctx context.Context, sessionID, runtimeID string) (*cpv1.BlenderProfile, string, error) {
	rt, ok := m.runtimes[runtimeID]
	if !ok {
		return nil, "", fmt.Errorf("%w: %q", ErrUnknownRuntime, runtimeID)
	}
	m.mu.Lock()
	s, existed := m.sessions[sessionID]
	if !existed {
		s = m.newSession(sessionID, rt)
		m.sessions[sessionID] = s
	}
	m.mu.Unlock()

	s.mu.Lock()
	defer s.mu.Unlock()
	if existed {
		if err := m.ensure(ctx, s); err != nil {
			return nil, "", err
		}
		hash, err := s.proc.SceneHash(ctx)
		return rt.Info.GetBlenderProfile(), hash, err
	}
	hash, err := m.start(ctx, s)
	if err == nil {
		err = m.journal.OpenSession(sessionID, runtimeID, hash)
	}
	if err != nil {
		if s.proc != nil {
			s.proc.Stop(5 * time.Second)
		}
		m.mu.Lock()
		delete(m.sessions, sessionID)
		m.mu.Unlock()
		return nil, "", err
	}
	m.log.Info("session opened", "session_id", sessionID, "runtime_id", runtimeID, "sandbox", s.sandbox, "scene_hash", hash)
	return rt.Info.GetBlenderProfile(), hash, nil
}

// start launches the session's Blender, which comes up on the baseline scene.
func (m *Manager) start(ctx context.Context, s *session) (string, error) {
	work := filepath.Join(s.dir, "work")
	for _, d := range []string{work, s.sandbox} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", err
		}
	}
	p, err := blender.Start(ctx, s.runtime.Runtime, blender.Options{
		Logger: m.base.With("session_id", s.id), WorkDir: work, SandboxDir: s.sandbox, Faults: m.cfg.Faults,
	})
	if err != nil {
		return "", fmt.Errorf("start blender: %w", err)
	}
	s.proc = p
	return p.SceneHash(ctx)
}

// alive reports whether the session's Blender is running.
func (s *session) alive() bool {
	if s.proc == nil {
		return false
	}
	select {
	case <-s.proc.Done():
		return false
	default:
		return true
	}
}

// ensure makes sure the session's Blender runs and holds the journaled scene,
// recovering it if needed. The caller holds s.mu.
func (m *Manager) ensure(ctx context.Context, s *session) error {
	if s.broken != nil {
		return fmt.Errorf("%w: %v", ErrBroken, s.broken)
	}
	if s.alive() {
		return nil
	}
	if err := m.recover(ctx, s); err != nil {
		s.broken = err
		return fmt.Errorf("%w: %v", ErrBroken, err)
	}
	return nil
}

// recover restarts the session's Blender, loads the last checkpoint, replays
// the journal after it and checks that the scene hash is the journaled one.
func (m *Manager) recover(ctx context.Context, s *session) error {
	// A rebuild must not die with the request that triggered it (a cancel,
	// a lost stream): that would leave the session broken for good.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recoverTimeout)
	defer cancel()
	start := time.Now()
	if s.proc != nil {
		s.proc.Stop(time.Second)
		s.proc = nil
	}
	js, err := m.journal.Session(s.id)
	if err != nil {
		return err
	}
	hash, err := m.start(ctx, s)
	if err != nil {
		return err
	}
	var from uint64
	if cp := js.Checkpoint; cp != nil {
		if hash, err = s.proc.LoadCheckpoint(ctx, cp.Path); err != nil {
			return fmt.Errorf("load checkpoint %s: %w", cp.Path, err)
		}
		if hash != cp.SceneHash {
			return fmt.Errorf("checkpoint %s hashes to %s, journal says %s", cp.Path, hash, cp.SceneHash)
		}
		from = cp.Index
	}
	entries, err := m.journal.Entries(s.id, from)
	if err != nil {
		return err
	}
	for i, e := range entries {
		index := from + uint64(i) + 1
		switch e.Kind {
		case "op":
			out, err := s.proc.Execute(ctx, blender.Call{Tool: e.Tool, Args: e.Args, MutationID: e.MutationID})
			if err != nil {
				return fmt.Errorf("replay entry %d (%s): %w", index, e.Tool, err)
			}
			hash = out.SceneHashAfter
		case "undo":
			rec, err := m.journal.Lookup(s.id, e.Key)
			if err != nil || rec == nil {
				return fmt.Errorf("replay entry %d: undo record of %s: %v", index, e.Key, err)
			}
			if hash, err = s.proc.Undo(ctx, rec.Undo, blender.Call{MutationID: rec.Receipt.GetBlenderMutationId()}); err != nil {
				return fmt.Errorf("replay entry %d (undo): %w", index, err)
			}
		default:
			return fmt.Errorf("replay entry %d: unknown kind %q", index, e.Kind)
		}
		if hash != e.HashAfter {
			return fmt.Errorf("replay entry %d: scene hash %s, journal says %s", index, hash, e.HashAfter)
		}
	}
	if hash != js.HeadHash {
		return fmt.Errorf("recovered scene hash %s, journal head says %s", hash, js.HeadHash)
	}
	inflight, _ := m.journal.Intents(s.id)
	m.log.Info("session recovered", "session_id", s.id, "checkpoint_index", from, "replayed", len(entries),
		"scene_hash", hash, "in_flight", len(inflight), "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// recoverTimeout bounds rebuilding a session (start, load, replay).
const recoverTimeout = 10 * time.Minute

// checkpointTimeout bounds one .blend save; it is not tied to the request
// that triggered it, which may end first.
const checkpointTimeout = 5 * time.Minute

// checkpointIfDue saves a checkpoint when the policy says so and arms the
// idle checkpoint. The caller holds s.mu.
func (m *Manager) checkpointIfDue(s *session) {
	if s.dirty > 0 && (s.dirty >= m.cfg.CheckpointEvery || time.Since(s.lastCheckpoint) >= m.cfg.CheckpointInterval) {
		ctx, cancel := context.WithTimeout(context.Background(), checkpointTimeout)
		defer cancel()
		if err := m.checkpoint(ctx, s); err != nil {
			m.log.Warn("checkpoint failed", "session_id", s.id, "err", err)
		}
	}
	if s.dirty > 0 && m.cfg.CheckpointIdle > 0 {
		if s.idle != nil {
			s.idle.Stop()
		}
		s.idle = time.AfterFunc(m.cfg.CheckpointIdle, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.dirty > 0 && s.alive() && s.broken == nil {
				ctx, cancel := context.WithTimeout(context.Background(), checkpointTimeout)
				defer cancel()
				if err := m.checkpoint(ctx, s); err != nil {
					m.log.Warn("idle checkpoint failed", "session_id", s.id, "err", err)
				}
			}
		})
	}
}

// checkpoint saves the scene to a new .blend, makes the journal point at it,
// then removes the previous file: a crash at any point leaves the journal
// naming a file that exists and matches it. The caller holds s.mu.
func (m *Manager) checkpoint(ctx context.Context, s *session) error {
	js, err := m.journal.Session(s.id)
	if err != nil {
		return err
	}
	path := filepath.Join(s.dir, fmt.Sprintf("checkpoint-%08d.blend", js.Head))
	hash, err := s.proc.SaveCheckpoint(ctx, path)
	if err != nil {
		return err
	}
	if hash != js.HeadHash {
		os.Remove(path)
		return fmt.Errorf("checkpoint hashes to %s, journal head says %s", hash, js.HeadHash)
	}
	if err := m.journal.SetCheckpoint(s.id, journal.Checkpoint{Path: path, Index: js.Head, SceneHash: hash}); err != nil {
		return err
	}
	if old := js.Checkpoint; old != nil && old.Path != path {
		os.Remove(old.Path)
	}
	s.dirty, s.lastCheckpoint = 0, time.Now()
	m.log.Debug("checkpoint saved", "session_id", s.id, "journal_index", js.Head, "path", path)
	return nil
}

// Close stops a session's Blender and forgets the session; its output
// directory stays.
func (m *Manager) Close(sessionID string) error {
	m.mu.Lock()
	s, ok := m.sessions[sessionID]
	delete(m.sessions, sessionID)
	m.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %q", ErrNotFound, sessionID)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stop()
	if err := m.journal.CloseSession(sessionID); err != nil && !errors.Is(err, journal.ErrSessionNotFound) {
		return err
	}
	matches, _ := filepath.Glob(filepath.Join(s.dir, "checkpoint-*.blend"))
	for _, f := range matches {
		os.Remove(f)
	}
	return nil
}

func (s *session) stop() {
	if s.idle != nil {
		s.idle.Stop()
	}
	if s.proc != nil {
		s.proc.Stop(5 * time.Second)
		s.proc = nil
	}
}

// Shutdown stops every session's Blender; the sessions stay in the journal
// and are recovered when agentd starts again.
func (m *Manager) Shutdown() {
	m.mu.Lock()
	all := make([]*session, 0, len(m.sessions))
	for _, s := range m.sessions {
		all = append(all, s)
	}
	m.mu.Unlock()
	for _, s := range all {
		s.mu.Lock()
		s.stop()
		s.mu.Unlock()
	}
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

// acquire returns a session locked for one batch, its Blender running and
// holding the journaled scene. The caller unlocks s.mu.
func (m *Manager) acquire(ctx context.Context, id string) (*session, error) {
	s, err := m.session(id)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.idle != nil {
		s.idle.Stop() // busy again: the idle checkpoint waits for the next quiet spell
	}
	if err := m.ensure(ctx, s); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	return s, nil
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
