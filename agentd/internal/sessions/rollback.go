package sessions

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/blendplane/blendplane/agentd/internal/blender"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// Rollback undoes committed operations, newest first, with their
// compensating actions, and emits one ROLLED_BACK receipt per operation. If
// a compensation fails, the session is rebuilt from the journal (which holds
// the state before that compensation), checkpointed, and a FAILED receipt
// with ROLLBACK_FAILED and that checkpoint is emitted last.
func (m *Manager) Rollback(ctx context.Context, sessionID, requestID string, keys []string, emit Emit) error {
	s, err := m.acquire(ctx, sessionID)
	if err != nil {
		return err
	}
	defer m.release(s)
	log := m.log.With("session_id", sessionID, "request_id", requestID)
	for _, key := range keys {
		rec, err := m.journal.Lookup(sessionID, key)
		if err != nil {
			return err
		}
		if rec == nil {
			return fmt.Errorf("%w: no committed operation with idempotency key %s", ErrNotFound, key)
		}
		r := proto.Clone(rec.Receipt).(*cpv1.Receipt)
		r.Status = cpv1.Receipt_STATUS_ROLLED_BACK
		r.CompleteTime = timestamppb.Now()
		r.Error = nil
		if rec.RolledBack || rec.LogIndex == 0 {
			// Already undone, or it never changed the scene: the undo leads
			// from the operation's after-state back to its before-state.
			r.SceneHashBefore, r.SceneHashAfter = rec.Receipt.GetSceneHashAfter(), rec.Receipt.GetSceneHashBefore()
			if err := emit(r); err != nil {
				return err
			}
			continue
		}
		before, err := s.proc.SceneHash(ctx)
		if err != nil {
			return err
		}
		start := time.Now()
		hash, err := s.proc.Undo(ctx, rec.Undo, blender.Call{MutationID: rec.Receipt.GetBlenderMutationId(),
			RequestID: requestID, OperationID: rec.Receipt.GetOperationId()})
		if err == nil && hash != rec.Receipt.GetSceneHashBefore() {
			err = fmt.Errorf("compensation left scene %s, the operation started from %s", hash, rec.Receipt.GetSceneHashBefore())
		}
		if err != nil {
			log.Error("rollback failed", "operation_id", r.GetOperationId(), "blender_mutation_id", r.GetBlenderMutationId(), "err", err)
			return emit(m.rollbackFailed(ctx, s, r, err))
		}
		if err := m.journal.CommitUndo(sessionID, key, hash); err != nil {
			return err
		}
		s.dirty++
		s.changes++
		r.SceneHashBefore, r.SceneHashAfter = before, hash
		r.DurationMicros = time.Since(start).Microseconds()
		log.Info("operation rolled back", "operation_id", r.GetOperationId(), "blender_mutation_id", r.GetBlenderMutationId())
		if err := emit(r); err != nil {
			return err
		}
	}
	m.checkpointIfDue(s, false)
	return nil
}

// rollbackFailed restores the last consistent state after a failed
// compensation and describes it in a ROLLBACK_FAILED receipt.
func (m *Manager) rollbackFailed(ctx context.Context, s *session, r *cpv1.Receipt, cause error) *cpv1.Receipt {
	r.Status = cpv1.Receipt_STATUS_FAILED
	r.Error = &cpv1.Failure{
		ErrorCode:   "ROLLBACK_FAILED",
		Recoverable: false,
		RetryHint:   "inspect the session: its scene was restored to the last consistent checkpoint, with this operation still applied",
		Message:     fmt.Sprintf("compensation of %q failed: %v", r.GetOperationId(), cause),
	}
	if err := m.recover(ctx, s); err != nil {
		s.broken = err
		r.Error.Message += fmt.Sprintf("; restoring the session failed too: %v", err)
		return r
	}
	if err := m.checkpoint(ctx, s); err != nil {
		m.log.Warn("checkpoint after failed rollback", "session_id", s.id, "err", err)
	}
	if js, err := m.journal.Session(s.id); err == nil {
		cp := &cpv1.Checkpoint{JournalIndex: int64(js.Head), SceneHash: js.HeadHash}
		if js.Checkpoint != nil {
			cp.Path = js.Checkpoint.Path
			cp.JournalIndex = int64(js.Checkpoint.Index)
		}
		r.Error.LastConsistentCheckpoint = cp
		r.SceneHashAfter = js.HeadHash
	}
	return r
}
