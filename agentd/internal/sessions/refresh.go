package sessions

import (
	"context"
	"errors"
	"fmt"
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
// So once a session's Blender has made Config.RefreshAfter scene changes
// since it loaded its scene, the next checkpoint (a batch's or the idle
// one) hands the session to the ready spare of its runtime. The spare loads
// the checkpoint and replays the journal after it while the session goes
// on with its own Blender, then takes the session's lock for the last few
// entries and takes over if its scene hash is the journaled head's; the old
// Blender stops. The session waits only for that last catch-up, never for
// the load.

// Catching up: a refresh replays the journal beside the running session in
// rounds, each from where the last ended, at most catchUpRounds of them;
// once a round found at most catchUpLocked entries, the rest is replayed
// under the session's lock.
const (
	catchUpRounds = 8
	catchUpLocked = 32
)

// errNotReplayable: the journal after a refresh's checkpoint holds an entry
// whose replay could reach outside the scene. Replaying it beside the
// running Blender could write a file over a newer one; recovery replays it,
// with no other Blender running.
var errNotReplayable = errors.New("not replayed beside the session")

// refreshing is a session's refresh in flight, guarded by session.mu.
type refreshing struct {
	cancel context.CancelFunc // stops it: it then gives up
}

// refreshDue reports whether the session's Blender has made enough scene
// changes since it loaded its scene for a refresh, and none runs.
func (m *Manager) refreshDue(s *session) bool {
	return m.cfg.RefreshAfter > 0 && s.changes >= m.cfg.RefreshAfter && s.fresh == nil
}

// refreshIfDue starts a refresh when one is due, the journal's checkpoint
// holds the scene as it is, and a spare is ready: without one it waits for
// the next checkpoint, since starting a Blender for it would cost more
// than it saves. The caller holds s.mu.
func (m *Manager) refreshIfDue(s *session) {
	if !m.refreshDue(s) || s.proc == nil {
		return
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
	if sp != nil {
		m.wanted[rtID] = true
	}
	m.mu.Unlock()
	if sp == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), recoverTimeout)
	s.fresh = &refreshing{cancel: cancel}
	m.refreshes.Add(1)
	go m.refresh(ctx, s, sp.proc, *js.Checkpoint, s.proc, s.changes)
}

// refresh brings p to the session's scene beside its Blender old and hands
// the session over (the comment at the top of this file). If anything
// fails, or the session stopped or changed Blenders meanwhile, p stops and
// the session keeps old; the count of changes starts again either way, so
// that a refresh that cannot succeed is not retried at every checkpoint.
func (m *Manager) refresh(ctx context.Context, s *session, p *blender.Process, cp journal.Checkpoint, old *blender.Process, made int) {
	defer m.refreshes.Done()
	start := time.Now()
	at := caughtUp{index: cp.Index}
	var err error
	if at.hash, err = p.Adopt(ctx, m.base.With("session_id", s.id), s.sandbox, s.memoryLimitMiB); err == nil {
		at.hash, err = m.rebuild(ctx, p, s.id, at.hash, &cp, cp.Path, nil)
	}
	for round := 0; err == nil && round < catchUpRounds; round++ {
		var n int
		if n, err = m.catchUp(ctx, s.id, p, &at); n <= catchUpLocked {
			break
		}
	}

	s.mu.Lock()
	locked := time.Now()
	if err == nil && (s.proc != old || s.broken != nil || ctx.Err() != nil) {
		err = errors.New("the session stopped or changed Blenders meanwhile")
	}
	if err == nil {
		_, err = m.catchUp(ctx, s.id, p, &at)
	}
	if err == nil {
		var js journal.Session
		if js, err = m.journal.Session(s.id); err == nil && (at.index != js.Head || at.hash != js.HeadHash) {
			err = fmt.Errorf("caught up to entry %d (scene %s), journal head is %d (%s)", at.index, at.hash, js.Head, js.HeadHash)
		}
	}
	gone := p
	if err == nil {
		s.setProc(p)
		s.changes, gone = at.replayed, old
	} else {
		s.changes = 0
	}
	held := time.Since(locked)
	s.mu.Unlock()

	// One of the two Blenders stops, and then its slot goes: until it has,
	// the session runs two.
	gone.Stop(time.Second)
	m.dropSlot()
	m.refillWhenQuiet()
	s.mu.Lock()
	s.fresh.cancel()
	s.fresh = nil
	if s.proc != nil && s.broken == nil {
		m.checkpointIfDue(s) // those skipped meanwhile, and the idle one
	}
	s.mu.Unlock()
	if err != nil {
		m.log.Warn("refresh gave up; the session keeps its Blender", "session_id", s.id, "err", err)
		return
	}
	m.refreshed.Add(1)
	m.log.Info("session refreshed", "session_id", s.id, "changes", made, "replayed", at.replayed,
		"scene_hash", at.hash, "took", time.Since(start).Round(time.Millisecond), "held", held.Round(time.Microsecond))
}

// caughtUp is how far a refresh's Blender has come through the journal: the
// last entry it replayed (or the checkpoint's), the scene hash there, and
// how many entries it replayed.
type caughtUp struct {
	index    uint64
	hash     string
	replayed int
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
	for _, e := range entries {
		if err := m.replayable(id, e); err != nil {
			return 0, err
		}
		hash, err := m.replayEntry(ctx, p, id, at.index+1, e)
		if err != nil {
			return 0, err
		}
		at.index, at.hash = at.index+1, hash
		at.replayed++
	}
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
