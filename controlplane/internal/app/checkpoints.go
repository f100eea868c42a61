package app

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/blendplane/blendplane/controlplane/internal/store"
	agentv1 "github.com/blendplane/blendplane/gen/blendplane/agent/v1"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// Checkpoints held by the control plane. Agents report the scene hash of
// each session's newest checkpoint at every heartbeat; the control plane
// takes a copy of one it does not hold (a blob), and notes how far into the
// session's log it reaches: the last committed record that leaves the scene
// with that hash. A session rebuilt on another agent (a move, a fork for a
// distributed render) then starts from that checkpoint and replays only the
// log after it. One exception keeps undo possible: while an atomic plan of
// the session is unfinished with committed operations, the log is replayed
// whole, so that the new agent journals the undo records a rollback needs.

// checkpointPulls runs at most one copy per session at a time.
type checkpointPulls struct {
	mu      sync.Mutex
	running map[string]bool
}

// pullCheckpoints copies the newest checkpoints an agent reports for its
// sessions when the control plane holds another (in the background).
func (a *App) pullCheckpoints(agentID string, held []*cpv1.HeldSession) {
	if a.bg == nil {
		return // not started
	}
	for _, h := range held {
		if h.GetCheckpointSceneHash() == "" {
			continue
		}
		at, err := a.store.Placement(h.GetSessionId())
		if err != nil || at.Closed() || at.AgentID != agentID || h.GetEpoch() != at.Epoch {
			continue
		}
		if have, err := a.store.Checkpoint(h.GetSessionId()); err != nil || have != nil && have.SceneHash == h.GetCheckpointSceneHash() {
			continue
		}
		id := h.GetSessionId()
		a.pulls.mu.Lock()
		busy := a.pulls.running[id]
		a.pulls.running[id] = true
		a.pulls.mu.Unlock()
		if busy {
			continue
		}
		a.stopped.Add(1)
		go func() {
			defer a.stopped.Done()
			defer func() {
				a.pulls.mu.Lock()
				delete(a.pulls.running, id)
				a.pulls.mu.Unlock()
			}()
			ctx, cancel := context.WithTimeout(a.bg, 5*time.Minute)
			defer cancel()
			if err := a.pullCheckpoint(ctx, agentID, id); err != nil {
				a.log.Warn("copying a session's checkpoint", "session_id", id, "agent_id", agentID, "err", err)
			}
		}()
	}
}

// pullCheckpoint copies a session's newest checkpoint from its agent.
func (a *App) pullCheckpoint(ctx context.Context, agentID, sessionID string) error {
	agent, err := a.fleet.Client(agentID)
	if err != nil {
		return err
	}
	stream, err := agent.GetCheckpoint(ctx, &agentv1.GetCheckpointRequest{SessionId: sessionID})
	if err != nil {
		return err
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	h := first.GetHeader()
	if h == nil {
		return errors.New("the agent sent no checkpoint header")
	}
	after, found, err := a.logPosition(sessionID, h.GetSceneHash())
	if err != nil || !found {
		return err // ahead of what is committed here: the next heartbeat tries again
	}
	sum := h.GetSha256()
	err = a.receiveBlob("the checkpoint of "+sessionID, h.GetSizeBytes(), sum, func() ([]byte, error) {
		resp, err := stream.Recv()
		return resp.GetChunk(), err
	})
	if err != nil {
		return err
	}
	old, err := a.store.SetCheckpoint(sessionID, store.SessionCheckpoint{SHA256: sum, SceneHash: h.GetSceneHash(), After: after})
	if err != nil {
		return err
	}
	if old != nil && old.SHA256 != sum {
		if _, err := a.blobs.RemoveIdle(old.SHA256, 0, a.unnamed(old.SHA256)); err != nil {
			a.log.Warn("removing a replaced checkpoint", "session_id", sessionID, "err", err)
		}
	}
	a.log.Info("checkpoint copied", "session_id", sessionID, "scene_hash", h.GetSceneHash(), "after", after, "bytes", h.GetSizeBytes())
	return nil
}

// logPosition is the audit sequence of the last committed record of a
// session that left its scene with hash (found false: none does yet).
func (a *App) logPosition(sessionID, hash string) (after uint64, found bool, err error) {
	rec, err := a.store.LastInHistory(sessionID, func(rec *cpv1.AuditRecord) bool {
		return changesScene(rec) && rec.GetSceneHashAfter() == hash
	})
	if rec == nil || err != nil {
		return 0, false, err
	}
	return uint64(rec.GetSequence()), true, nil
}

// changesScene reports whether a redo-log record changed the scene: a
// committed operation or rollback whose hash moved. An operation whose only
// committed receipt is SKIPPED_IDEMPOTENT (the agent had journaled it, the
// control plane had not committed it before a restart or a lost stream)
// carries the original hashes: it is the operation's effect in the log.
func changesScene(rec *cpv1.AuditRecord) bool {
	switch rec.GetStatus() {
	case cpv1.Receipt_STATUS_SUCCEEDED, cpv1.Receipt_STATUS_SKIPPED_IDEMPOTENT, cpv1.Receipt_STATUS_ROLLED_BACK:
		return rec.GetEvent() == "" && rec.GetSceneHashBefore() != rec.GetSceneHashAfter()
	}
	return false
}

// restore opens target (the session itself under epoch, or a fork, epoch
// 0) on an agent and brings it to the session's committed scene: from the
// control plane's checkpoint when it may, then the log after the
// checkpoint, each replayed import given the files it read, then the files
// the session's sandbox held (replayFiles). It returns the replayer, whose hash is
// the scene reached.
func (a *App) restore(ctx context.Context, agentID string, sess store.Session, target, runtimeID string, epoch int64) (*replayer, error) {
	agent, err := a.fleet.Client(agentID)
	if err != nil {
		return nil, err
	}
	open := func() error {
		octx, cancel := context.WithTimeout(ctx, a.cfg.OpenSessionTimeout)
		defer cancel()
		cons := sess.Info.GetContract().GetConstraints()
		_, err := agent.OpenSession(octx, &agentv1.OpenSessionRequest{SessionId: target, RuntimeId: runtimeID,
			MaxMemoryMib: cons.GetMaxMemoryMib(), TempStorageMib: cons.GetTempStorageMib(), Epoch: epoch})
		return err
	}
	if err := open(); err != nil {
		return nil, fmt.Errorf("open %s: %w", target, err)
	}
	reg, err := a.registries.get(sess.RegistryFingerprint(), func() (*cpv1.ToolRegistry, error) { return a.store.Registry(sess.RegistryFingerprint()) })
	if err != nil {
		return nil, err
	}
	r := &replayer{app: a, agent: agent, sessionID: target, epoch: epoch, reg: reg, plans: map[store.PlanRef]*cpv1.SubmitPlanRequest{},
		hash: sess.Info.GetContract().GetBaselineSceneHash(), budgetMs: sess.Info.GetContract().GetConstraints().GetToolTimeBudgetMs()}
	var after uint64
	if cp := sess.Checkpoint; cp != nil && a.blobs.Has(cp.SHA256) && !a.undoPending(sess.Info.GetSessionId()) &&
		!a.rolledBackAfter(sess.Info.GetSessionId(), cp.After) {
		err := a.putCheckpoint(ctx, agent, target, epoch, cp)
		if status.Code(err) == codes.FailedPrecondition {
			// An earlier, cut-short rebuild left work there: start afresh.
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			_, err = agent.CloseSession(cctx, &agentv1.CloseSessionRequest{SessionId: target})
			cancel()
			if err == nil {
				err = open()
			}
			if err == nil {
				err = a.putCheckpoint(ctx, agent, target, epoch, cp)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("give %s its checkpoint: %w", target, err)
		}
		r.hash, r.fromCheckpoint, after = cp.SceneHash, true, cp.After
	}
	// Replayed imports read the files clients uploaded, or the session
	// wrote, as they were then.
	if r.files, err = a.newReplayFiles(sess.Info.GetSessionId(), agentID, target); err != nil {
		return nil, err
	}
	if err := a.replayHistory(ctx, sess.Info.GetSessionId(), after, r); err != nil {
		return nil, err
	}
	if err := r.files.settle(ctx, target == sess.Info.GetSessionId()); err != nil {
		return nil, err
	}
	return r, nil
}

// putCheckpoint sends the control plane's copy of a checkpoint to target.
func (a *App) putCheckpoint(ctx context.Context, agent agentv1.AgentServiceClient, target string, epoch int64, cp *store.SessionCheckpoint) error {
	f, err := a.blobs.Open(cp.SHA256)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	stream, err := agent.PutCheckpoint(ctx)
	if err != nil {
		return err
	}
	header := &agentv1.CheckpointHeader{SessionId: target, SceneHash: cp.SceneHash, SizeBytes: fi.Size(), Sha256: cp.SHA256, Epoch: epoch}
	err = stream.Send(&agentv1.PutCheckpointRequest{Part: &agentv1.PutCheckpointRequest_Header{Header: header}})
	if err == nil {
		err = sendChunks(f, func(chunk []byte) error {
			return stream.Send(&agentv1.PutCheckpointRequest{Part: &agentv1.PutCheckpointRequest_Chunk{Chunk: chunk}})
		})
	}
	if _, cerr := stream.CloseAndRecv(); cerr != nil {
		return cerr // the agent's answer says more than a failed send
	}
	return err
}

// rolledBackAfter reports whether the session's log holds a rollback after
// audit sequence after: it may undo an operation the checkpoint already
// holds, whose undo record only a replay of the whole log journals.
func (a *App) rolledBackAfter(sessionID string, after uint64) bool {
	for {
		recs, err := a.store.SessionHistory(sessionID, after, 1000)
		if err != nil {
			return true
		}
		for _, rec := range recs {
			if rec.GetStatus() == cpv1.Receipt_STATUS_ROLLED_BACK {
				return true
			}
			after = uint64(rec.GetSequence())
		}
		if len(recs) < 1000 {
			return false
		}
	}
}

// undoPending reports whether an unfinished atomic plan of the session has
// committed operations: a rollback may need their undo records.
func (a *App) undoPending(sessionID string) bool {
	refs, err := a.store.ActivePlans()
	if err != nil {
		return true
	}
	for _, ref := range refs {
		p, err := a.store.PlanState(ref)
		if err != nil || (p.GetSessionId() == sessionID && p.GetAtomic() && p.GetReceiptCount() > 0) {
			return true
		}
	}
	return false
}

// unnamed asks, under the blob store's lock, whether no artifact names
// content sha256: a replaced checkpoint's copy that an artifact's content
// happens to equal stays.
func (a *App) unnamed(sha256 string) func() (bool, error) {
	return func() (bool, error) {
		named, err := a.store.Named(sha256)
		return !named, err
	}
}
