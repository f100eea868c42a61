package sessions

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/blendplane/blendplane/agentd/internal/blender"
	"github.com/blendplane/blendplane/agentd/internal/journal"
)

// A fresh Blender for a long session. A Blender that built its scene call
// by call gets slower as the scene grows, in ways a load undoes: every
// datablock it frees walks a queue of notifiers as long as the datablocks
// it set properties of (a Blender without an event loop never empties it),
// and its datablocks lie where they were allocated, which Blender's list
// walks pay for. At 10,000 objects the undo of a create costs 1.2 ms before
// a load and 0.2 after (BENCHMARKS.md, ToolFamilies' reloaded rows).
//
// So once a session's Blender has changed Config.RefreshAfter of the
// scene's records (its datablocks, Outcome.RecordsChanged: a call that
// makes many objects counts for each) since it loaded its scene, the next
// checkpoint (a batch's or the idle one) hands the session to the ready
// spare of its runtime. The spare loads the checkpoint and replays the
// journal after it while the session goes on with its own Blender, in
// rounds; once little is left, it takes the session's lock for that and
// takes over if its scene hash is the journaled head's; the old Blender
// stops. The session waits for that last catch-up only, never for the load.

// Catching up: a refresh replays the journal beside the running session in
// rounds, each from where the last ended. After each it takes the session's
// lock (so after the batch that runs) and looks how far behind it is: at
// most catchUpLocked entries, or as many as it replays in catchUpHold at
// the pace of its last round, it replays them there; more, it lets go for
// another round, and gives up after catchUpRounds. A session that changes
// faster than a replay follows it is not refreshed.
const (
	catchUpRounds = 8
	catchUpLocked = 32
	catchUpHold   = 20 * time.Millisecond
)

// dirtyCap bounds, in multiples of Config.CheckpointEvery, the changes a
// session makes without a checkpoint while a refresh runs (a checkpoint
// would drop entries the refresh has yet to replay): past it, the refresh
// gives up and the checkpoint is saved, so recovery stays bounded.
const dirtyCap = 4

// errNotReplayable: the journal after a refresh's checkpoint holds an entry
// whose replay could reach outside the scene. Replaying it beside the
// running Blender could write a file over a newer one; recovery replays it,
// with no other Blender running.
var errNotReplayable = errors.New("not replayed beside the session")

// refreshing is a refresh in flight: session.fresh (guarded by session.mu)
// and Manager.refreshing (guarded by Manager.mu: its slot and Blender).
type refreshing struct {
	cancel context.CancelCauseFunc // stops it, saying why: it then gives up
	// pid is its Blender's, or after a takeover the old one's, until it
	// stops; guarded by Manager.mu.
	pid int
}

// refreshDue reports whether the session's Blender has changed enough of
// the scene's records since it loaded its scene for a refresh, and none
// runs.
func (m *Manager) refreshDue(s *session) bool {
	return m.cfg.RefreshAfter > 0 && s.changes >= m.cfg.RefreshAfter && s.fresh == nil
}

// refreshIfDue starts a refresh when one is due, the journal's checkpoint
// holds the scene as it is, and a spare is ready: without one it waits for
// the next checkpoint, since starting a Blender for it would cost more
// than it saves. The caller holds s.mu.
func (m *Manager) refreshIfDue(s *session) {
	if !m.refreshDue(s) || s.dirty > 0 || !s.alive() || s.broken != nil {
		return // s.dirty > 0: the checkpoint is behind the scene
	}
	js, err := m.journal.Session(s.id)
	if err != nil || js.Checkpoint == nil || js.CheckpointIndex() != js.Head {
		return // no checkpoint of the scene as it is: nothing to load
	}
	rtID := s.runtime.Info.GetRuntimeId()
	m.mu.Lock()
	// The spare keeps its slot until the refresh ends: meanwhile the
	// session runs two Blenders, and the bound on them holds.
	var sp *spare
	if !s.closed {
		sp = m.takeSpare(rtID)
	}
	var ctx context.Context
	if sp != nil {
		m.wanted[rtID] = true
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(context.Background())
		s.fresh = &refreshing{cancel: cancel, pid: sp.proc.Pid()}
		m.refreshing[s] = s.fresh
	}
	m.mu.Unlock()
	if sp == nil {
		return
	}
	m.refreshes.Add(1)
	go m.refresh(ctx, s, sp.proc, *js.Checkpoint, s.proc, s.changes)
}

// refresh brings p to the session's scene beside its Blender old and hands
// the session over (the comment at the top of this file). If anything
// fails, or the session stopped or changed Blenders meanwhile, p stops; the
// count of changes of a session that keeps old starts again, so that a
// refresh that cannot succeed is not retried at every checkpoint. Once
// stopped (ctx), p and its slot go at once, even while the refresh waits
// for the session's lock behind a long batch.
func (m *Manager) refresh(ctx context.Context, s *session, p *blender.Process, cp journal.Checkpoint, old *blender.Process, made int) {
	defer m.refreshes.Done()
	ctx, cancel := context.WithTimeout(ctx, recoverTimeout)
	defer cancel()
	giveUp := sync.OnceFunc(func() { p.Stop(time.Second); m.endRefresh(s) })
	watch := context.AfterFunc(ctx, giveUp)
	start := time.Now()
	at := caughtUp{index: cp.Index}
	var err error
	if at.hash, err = p.Adopt(ctx, m.base.With("session_id", s.id), s.sandbox, s.limits); err == nil {
		at.hash, _, err = m.rebuild(ctx, p, s.id, at.hash, &cp, cp.Path, nil)
	}
	loaded := time.Since(start)
	if m.afterLoad != nil {
		m.afterLoad(ctx)
	}
	var held time.Duration
	if err == nil {
		held, err = m.takeOver(ctx, s, p, old, &at, watch)
	}
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("stopped: %w (%v)", context.Cause(ctx), err)
	}
	if err != nil {
		giveUp()
	} else {
		old.Stop(time.Second)
		m.endRefresh(s) // the slot of one of the two
	}
	m.refillWhenQuiet()

	s.mu.Lock()
	if err != nil && s.proc == old {
		s.changes = 0
	}
	s.fresh.cancel(nil)
	s.fresh = nil
	m.checkpointIfDue(s, false) // those skipped meanwhile, and the idle one
	s.mu.Unlock()
	if err != nil {
		m.log.Warn("refresh gave up", "session_id", s.id, "err", err)
		return
	}
	m.refreshed.Add(1)
	m.log.Info("session refreshed", "session_id", s.id, "changes", made, "replayed", at.replayed,
		"scene_hash", at.hash, "loaded", loaded.Round(time.Millisecond), "took", time.Since(start).Round(time.Millisecond),
		"held", held.Round(time.Microsecond))
}

// takeOver catches p up with the session's journal in rounds (the comment
// at the top of this file) and makes it the session's Blender, if the
// session still runs old. watch stops the refresh's give-up on a stop of
// ctx: it must not stop p once p is the session's. It returns how long
// the session waited.
func (m *Manager) takeOver(ctx context.Context, s *session, p, old *blender.Process, at *caughtUp, watch func() bool) (time.Duration, error) {
	for round := 1; ; round++ {
		start := time.Now()
		n, err := m.catchUp(ctx, s.id, p, at)
		if err != nil {
			return 0, err
		}
		var pace time.Duration // per entry, this round
		if n > 0 {
			pace = time.Since(start) / time.Duration(n)
		}
		s.mu.Lock() // after the batch that runs, if one does
		if s.proc != old || !s.alive() || s.broken != nil || ctx.Err() != nil {
			s.mu.Unlock()
			return 0, errors.New("the session stopped or changed Blenders meanwhile")
		}
		js, err := m.journal.Session(s.id)
		if err == nil && closeEnough(js.Head-at.index, pace) {
			break // with the lock
		}
		s.mu.Unlock()
		if err != nil {
			return 0, err
		}
		if round == catchUpRounds {
			return 0, fmt.Errorf("still %d entries behind after %d rounds", js.Head-at.index, round)
		}
	}
	defer s.mu.Unlock()
	locked := time.Now()
	if _, err := m.catchUp(ctx, s.id, p, at); err != nil {
		return 0, err
	}
	js, err := m.journal.Session(s.id)
	if err != nil {
		return 0, err
	}
	if at.index != js.Head || at.hash != js.HeadHash {
		return 0, fmt.Errorf("caught up to entry %d (scene %s), journal head is %d (%s)", at.index, at.hash, js.Head, js.HeadHash)
	}
	if !watch() {
		return 0, ctx.Err() // stopped just now: p is going
	}
	s.setProc(p)
	s.changes = at.changed
	m.mu.Lock()
	s.fresh.pid = old.Pid() // the refresh's Blender until it stops (Blenders)
	m.mu.Unlock()
	return time.Since(locked), nil
}

// closeEnough says whether a refresh behind by that many entries replays
// them under the session's lock: at most catchUpLocked, or as many as take
// at most catchUpHold at pace (0: unknown).
func closeEnough(behind uint64, pace time.Duration) bool {
	return behind <= catchUpLocked || pace > 0 && behind <= uint64(catchUpHold/pace)
}

// endRefresh gives up the slot of one of a refresh's two Blenders, once it
// has stopped.
func (m *Manager) endRefresh(s *session) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.refreshing, s)
	m.live--
	m.notify()
}

// cancelRefresh stops a refresh in flight, whose slot frees (and m.changed
// closes) once it has given up. It reports whether there was one. The
// caller holds m.mu.
func (m *Manager) cancelRefresh() bool {
	for _, f := range m.refreshing {
		f.cancel(errors.New("a session needed its slot"))
		return true
	}
	return false
}

// caughtUp is how far a refresh's Blender has come through the journal: the
// last entry it replayed (or the checkpoint's), the scene hash there, how
// many entries it replayed and the records they changed.
type caughtUp struct {
	index    uint64
	hash     string
	replayed int
	changed  int
}

// catchUp replays into p the journal entries after at, and reports how many.
// It fails if a checkpoint has dropped entries p has not replayed (a park
// checkpoints), or at an entry it must not replay beside the session.
func (m *Manager) catchUp(ctx context.Context, id string, p *blender.Process, at *caughtUp) (int, error) {
	entries, err := m.journal.Entries(id, at.index)
	if err != nil {
		return 0, err
	}
	// Read after the entries: a checkpoint that dropped some before they
	// were read shows here.
	js, err := m.journal.Session(id)
	if err != nil {
		return 0, err
	}
	if js.CheckpointIndex() > at.index {
		return 0, fmt.Errorf("a checkpoint at entry %d dropped entries after %d", js.CheckpointIndex(), at.index)
	}
	hash, n, changed, err := m.replay(ctx, p, id, at.index, at.hash, entries, func(e journal.Entry) error { return m.replayable(id, e) })
	if err != nil {
		return 0, err
	}
	at.index, at.hash, at.replayed, at.changed = at.index+uint64(n), hash, at.replayed+n, at.changed+changed
	return len(entries), nil
}

// replayable checks that an entry changes the scene and nothing else: its
// operation declared no files (renders, exports) and is not
// nondeterministic (python.exec, which may write anything).
func (m *Manager) replayable(id string, e journal.Entry) error {
	rec, err := m.journal.Lookup(id, e.Key)
	if err != nil {
		return err
	}
	if rec == nil {
		return fmt.Errorf("no record of %s", e.Key)
	}
	r := rec.Receipt
	if len(r.GetArtifacts()) > 0 || r.GetDeterminismClass() == "nondeterministic" {
		return fmt.Errorf("%s (%s): %w", r.GetToolName(), e.Kind, errNotReplayable)
	}
	return nil
}

// Refreshed counts the sessions given a fresh Blender.
func (m *Manager) Refreshed() uint64 { return m.refreshed.Load() }
