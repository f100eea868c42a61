package sessions

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/blendplane/blendplane/agentd/internal/blender"
	"github.com/blendplane/blendplane/agentd/internal/journal"
)

// recoverTimeout bounds rebuilding a session (start, load, replay).
const recoverTimeout = 10 * time.Minute

// checkpointTimeout bounds one .blend save; it is not tied to the request
// that triggered it, which may end first.
const checkpointTimeout = 5 * time.Minute

// start launches the session's Blender, which comes up on the baseline scene.
func (m *Manager) start(ctx context.Context, s *session) (string, error) {
	work := filepath.Join(s.dir, "work")
	for _, d := range []string{work, s.sandbox} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", err
		}
	}
	if err := m.putBack(s); err != nil {
		return "", err
	}
	if err := m.dropPartials(s); err != nil {
		return "", err
	}
	sp := s.spare
	s.spare = nil
	p, err := m.startBlender(ctx, s.runtime, sp, m.base.With("session_id", s.id), work, s.sandbox, s.limits)
	if err != nil {
		return "", fmt.Errorf("start blender: %w", err)
	}
	s.setProc(p)
	return p.SceneHash(ctx)
}

// recover (re)starts the session's Blender, loads the last checkpoint,
// replays the journal after it and checks that the scene hash is the
// journaled one. It serves a session's first batch (no checkpoint, nothing
// to replay), a parked session's restore and a crash alike. The caller
// holds s.mu and the session holds a slot.
func (m *Manager) recover(ctx context.Context, s *session) error {
	// A rebuild must not die with the request that triggered it (a cancel,
	// a lost stream): that would leave the session broken for good.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recoverTimeout)
	defer cancel()
	start := time.Now()
	if s.fresh != nil {
		s.fresh.cancel(errors.New("its session recovered")) // it replays beside a Blender about to go
	}
	if s.proc != nil {
		s.proc.Stop(time.Second)
		s.setProc(nil)
	}
	js, err := m.journal.Session(s.id)
	if err != nil {
		return err
	}
	hash, err := m.start(ctx, s)
	if err != nil {
		return err
	}
	var cpPath string
	if js.Checkpoint != nil {
		cpPath = js.Checkpoint.Path
	}
	entries, err := m.journal.Entries(s.id, js.CheckpointIndex())
	if err != nil {
		return err
	}
	changed := 0
	if hash, changed, err = m.rebuild(ctx, s.proc, s.id, hash, js.Checkpoint, cpPath, entries); err != nil {
		return err
	}
	if hash != js.HeadHash {
		return fmt.Errorf("recovered scene hash %s, journal head says %s", hash, js.HeadHash)
	}
	s.sceneHash = hash
	s.dirty, s.changes = len(entries), changed
	from := js.CheckpointIndex()
	msg := "session started"
	if js.Checkpoint != nil || len(entries) > 0 {
		msg = "session recovered" // from a park, a crash or a stopped call
	}
	m.log.Info(msg, "session_id", s.id, "checkpoint_index", from, "replayed", len(entries),
		"scene_hash", hash, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// rebuild brings p, on the baseline scene (hash), to a session's journaled
// scene: the checkpoint cp (read from path: its file, or a link to it), then
// the journal entries after it, each checked against its journaled hash. It
// returns the scene hash and the scene's records the entries changed
// (replay).
func (m *Manager) rebuild(ctx context.Context, p *blender.Process, id, hash string, cp *journal.Checkpoint, path string, entries []journal.Entry) (string, int, error) {
	var from uint64
	if cp != nil {
		var err error
		if hash, err = p.LoadCheckpoint(ctx, path); err != nil {
			// The file's name only: the message reaches clients in a receipt.
			return "", 0, fmt.Errorf("load checkpoint %s: %w", filepath.Base(cp.Path), err)
		}
		if hash != cp.SceneHash {
			return "", 0, fmt.Errorf("checkpoint %s hashes to %s, journal says %s", filepath.Base(cp.Path), hash, cp.SceneHash)
		}
		from = cp.Index
	}
	hash, _, changed, err := m.replay(ctx, p, id, from, hash, entries, nil)
	return hash, changed, err
}

// replay replays entries, the journal's after index from, into p (on the
// scene hash), each checked against its journaled hash, and returns the
// hash after the last, how many it replayed and the scene's records they
// changed (Outcome.RecordsChanged; an undo counts one). Runs of operations go
// through Process.ExecuteBatch, pipelined as a batch ran them; undos one by
// one. vet, if set, must pass each entry first.
func (m *Manager) replay(ctx context.Context, p *blender.Process, id string, from uint64, hash string, entries []journal.Entry, vet func(journal.Entry) error) (string, int, int, error) {
	vetted := func(k int) error {
		if vet == nil {
			return nil
		}
		if err := vet(entries[k]); err != nil {
			return fmt.Errorf("entry %d: %w", from+uint64(k)+1, err)
		}
		return nil
	}
	done, changed := 0, 0
	for done < len(entries) {
		if e := entries[done]; e.Kind != "op" {
			err := vetted(done)
			if err == nil {
				hash, err = m.replayUndo(ctx, p, id, from+uint64(done)+1, e)
			}
			if err != nil {
				return "", done, changed, err
			}
			done, changed = done+1, changed+1
			continue
		}
		run := 0 // the run of operations from done
		for ; done+run < len(entries) && entries[done+run].Kind == "op"; run++ {
			if err := vetted(done + run); err != nil {
				return "", done, changed, err
			}
		}
		calls := make([]blender.Call, run)
		for k, e := range entries[done : done+run] {
			calls[k] = blender.Call{Tool: e.Tool, Args: e.Args, MutationID: e.MutationID}
		}
		var err error
		n := p.ExecuteBatch(ctx, calls, func(k int, r blender.BatchResult) bool {
			e := entries[done+k]
			index := from + uint64(done+k) + 1
			switch {
			case r.Err != nil:
				err = fmt.Errorf("replay entry %d (%s): %w", index, e.Tool, r.Err)
			case r.Outcome.SceneHashAfter != e.HashAfter:
				err = fmt.Errorf("replay entry %d: scene hash %s, journal says %s", index, r.Outcome.SceneHashAfter, e.HashAfter)
			default:
				hash, changed = r.Outcome.SceneHashAfter, changed+max(r.Outcome.RecordsChanged, 1)
			}
			return err == nil
		})
		if err == nil && n < run {
			err = fmt.Errorf("replay stopped after %d of %d entries from %d", n, run, from+uint64(done)+1)
		}
		if err != nil {
			return "", done, changed, err
		}
		done += run
	}
	return hash, done, changed, nil
}

// replayUndo replays the undo entry at index into p and checks the scene
// hash it leaves against the journaled one (replay runs the operations).
func (m *Manager) replayUndo(ctx context.Context, p *blender.Process, id string, index uint64, e journal.Entry) (string, error) {
	if e.Kind != "undo" {
		return "", fmt.Errorf("replay entry %d: unknown kind %q", index, e.Kind)
	}
	rec, err := m.journal.Lookup(id, e.Key)
	if err != nil || rec == nil {
		return "", fmt.Errorf("replay entry %d: undo record of %s: %v", index, e.Key, err)
	}
	hash, err := p.Undo(ctx, rec.Undo, blender.Call{MutationID: rec.Receipt.GetBlenderMutationId()})
	if err != nil {
		return "", fmt.Errorf("replay entry %d (undo): %w", index, err)
	}
	if hash != e.HashAfter {
		return "", fmt.Errorf("replay entry %d: scene hash %s, journal says %s", index, hash, e.HashAfter)
	}
	return hash, nil
}

// checkpointIfDue saves a checkpoint when the policy says so, or at once
// when now (a batch that imported a file: its replay would read the file
// as it is then, which an upload may have replaced), and arms the idle
// checkpoint. The caller holds s.mu.
func (m *Manager) checkpointIfDue(s *session, now bool) {
	if !s.alive() || s.broken != nil {
		return // the next batch recovers the session first
	}
	if s.fresh != nil {
		// A checkpoint would drop journal entries the refresh has yet to
		// replay; the refresh calls this again when it ends. Past the cap,
		// or for a checkpoint that cannot wait, it is stopped, and can no
		// longer take over (it takes over under s.mu, which the caller
		// holds): the checkpoint goes ahead.
		switch {
		case now && s.dirty > 0:
			s.fresh.cancel(errors.New("a checkpoint of an import cannot wait"))
		case m.cfg.CheckpointEvery <= 0 || s.dirty < dirtyCap*m.cfg.CheckpointEvery:
			return
		default:
			s.fresh.cancel(fmt.Errorf("%d changes without a checkpoint", s.dirty))
		}
	}
	if s.dirty > 0 && (now || s.dirty >= m.cfg.CheckpointEvery || time.Since(s.lastCheckpoint) >= m.cfg.CheckpointInterval) {
		ctx, cancel := context.WithTimeout(context.Background(), checkpointTimeout)
		defer cancel()
		if err := m.checkpoint(ctx, s); err != nil {
			m.log.Warn("checkpoint failed", "session_id", s.id, "err", err)
		}
	}
	m.refreshIfDue(s) // a busy session's refresh starts at its checkpoints
	if (s.dirty > 0 || m.refreshDue(s)) && m.cfg.CheckpointIdle > 0 {
		if s.idle != nil {
			s.idle.Stop()
		}
		s.idle = time.AfterFunc(m.cfg.CheckpointIdle, func() {
			if !s.mu.TryLock() {
				return // a batch or a park has it; either checkpoints as needed
			}
			defer s.mu.Unlock()
			if !s.alive() || s.broken != nil || s.fresh != nil {
				return
			}
			if s.dirty > 0 {
				ctx, cancel := context.WithTimeout(context.Background(), checkpointTimeout)
				defer cancel()
				if err := m.checkpoint(ctx, s); err != nil {
					m.log.Warn("idle checkpoint failed", "session_id", s.id, "err", err)
					return
				}
			}
			m.refreshIfDue(s)
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
