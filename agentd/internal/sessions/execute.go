package sessions

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/blendplane/blendplane/agentd/internal/blender"
	"github.com/blendplane/blendplane/agentd/internal/journal"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/internal/receiptwire"
)

// Operation is one operation to execute, with its correlation ids.
type Operation struct {
	OperationID, MCPCallID string
	Tool                   string
	Args                   map[string]any
	Safety                 cpv1.SafetyLevel
	IdempotencyKey         string
	// Budget is the call's time budget (0: none).
	Budget time.Duration
	// Verify checks the effect against a full snapshot after the call.
	Verify bool
}

// Emit receives receipts in order, each after it is durable.
type Emit func(*cpv1.Receipt) error

// Progress receives progress of the running operation; it must not block.
type Progress func(*cpv1.Progress)

// Execute runs a batch of one plan's operations in order and emits one
// receipt per operation, each after it is committed to the journal. It stops
// after the first operation that fails. A key that already has a committed
// record is not run again: a successful one comes back SKIPPED_IDEMPOTENT, a
// rolled-back one as IDEMPOTENCY_CONFLICT, a failed one as it was.
//
// Receipts are committed by a group committer while the next operation runs,
// so a batch costs one fsync per group of operations, not one per operation.
func (m *Manager) Execute(ctx context.Context, sessionID, requestID string, ops []Operation, emit Emit, progress Progress) error {
	s, err := m.acquire(ctx, sessionID)
	if err != nil {
		return err
	}
	defer m.release(s)
	log := m.log.With("session_id", sessionID, "request_id", requestID)
	m.keepFor(s, requestID)
	// See session.files: held until an import is checkpointed, else until
	// the last call that writes files has returned.
	imports := slices.ContainsFunc(ops, func(op Operation) bool { return op.Tool == "scene.import" })
	lastWriter := -1
	for i, op := range ops {
		if s.runtime.writes[op.Tool] { // python.exec may write files too, unchecked
			lastWriter = i
		}
	}
	releaseFiles := func() {}
	if imports || lastWriter >= 0 {
		s.files.Lock()
		releaseFiles = sync.OnceFunc(func() {
			gone(s.proc)
			s.files.Unlock()
		})
		defer releaseFiles()
	}

	keys := make([]string, len(ops))
	for i, op := range ops {
		keys[i] = op.IdempotencyKey
	}
	records, err := m.journal.LookupAll(sessionID, keys)
	if err != nil {
		return err
	}
	var fresh []string
	for i, rec := range records {
		if rec == nil {
			fresh = append(fresh, keys[i])
		}
	}
	// The intents are written while the first operation runs: an effect
	// lives only in Blender's memory until its receipt is journaled, so the
	// order of the two does not matter; the committer waits for the intents
	// before it journals anything, and the batch's end clears them.
	intents := make(chan error, 1)
	if len(fresh) > 0 {
		go func() { intents <- m.journal.Intend(sessionID, fresh) }()
	} else {
		intents <- nil
	}

	// Tool calls run under their own context, so that Cancel can stop them
	// while the stream stays up to carry the receipts.
	calls, cancelCalls := context.WithCancel(ctx)
	defer cancelCalls()
	m.track(s, requestID, cancelCalls)
	defer m.track(s, "", nil)

	c := newCommitter(m.journal, sessionID, emit, intents)
	debug := log.Enabled(ctx, slog.LevelDebug)
	// done hands the receipt of fresh operation ops[k] to the committer;
	// false stops the batch.
	done := func(k int, r *cpv1.Receipt, commit *journal.Commit) bool {
		op, more := ops[k], k+1 < len(ops)
		if k == lastWriter && !imports {
			releaseFiles() // its call has returned, its files as it leaves them
		}
		if r == nil && ctx.Err() == nil {
			// Cancelled: Blender was stopped mid-call (the next batch
			// recovers it); nothing of the operation is journaled.
			c.add(cancelledReceipt(requestID, op), nil, false)
			log.Info("operation cancelled", "operation_id", op.OperationID, "mcp_call_id", op.MCPCallID)
			return false
		}
		if r == nil {
			return false // the stream is gone: nothing of the op is journaled
		}
		if debug {
			log.Debug("operation executed", "operation_id", op.OperationID, "mcp_call_id", op.MCPCallID,
				"blender_mutation_id", r.GetBlenderMutationId(), "tool", op.Tool, "status", r.GetStatus().String(),
				"scene_hash_after", r.GetSceneHashAfter())
		}
		if commit != nil && commit.Entry != nil {
			s.dirty++
		}
		if h := r.GetSceneHashAfter(); h != "" {
			s.sceneHash = h
		}
		ok := succeeded(r)
		c.add(r, commit, ok && more)
		return ok
	}
	for i := 0; i < len(ops); {
		if err := c.failure(); err != nil {
			break
		}
		op := ops[i]
		if records[i] != nil {
			r := replayed(op, records[i])
			log.Info("idempotent key seen again", "operation_id", op.OperationID, "mcp_call_id", op.MCPCallID, "status", r.GetStatus().String())
			c.add(r, nil, i+1 < len(ops))
			if !succeeded(r) {
				break
			}
			i++
			continue
		}
		// A run of fresh operations goes to Blender pipelined; a verified
		// one alone (its snapshot must follow it directly).
		j := i + 1
		for !op.Verify && j < len(ops) && records[j] == nil && !ops[j].Verify {
			j++
		}
		if j-i == 1 {
			r, commit := m.run(calls, s, requestID, op, c, progress, log)
			if !done(i, r, commit) {
				break
			}
			i++
			continue
		}
		n, more := m.runPipelined(calls, s, requestID, ops[i:j], c, progress, log, func(k int, _ Operation, r *cpv1.Receipt, commit *journal.Commit) bool {
			return done(i+k, r, commit)
		})
		if !more {
			break
		}
		i += n
	}
	err = c.close()
	if !c.intended {
		<-intents // nothing was journaled: the write may still be under way
	}
	if len(fresh) > 0 {
		// The batch is over: committed calls need no intent, and calls
		// cancelled, lost with the stream or never reached are retried by
		// key by their callers.
		if _, cerr := m.journal.ClearIntents(sessionID); cerr != nil {
			log.Warn("clearing the batch's intents", "err", cerr)
		}
	}
	if jerr := c.lostJournal(); jerr != nil {
		// The scene holds effects the journal could not keep: stop Blender
		// so the next batch rebuilds the session from what is journaled.
		log.Error("journal write failed; the session will be rebuilt from the journal", "err", jerr)
		s.stop()
	}
	m.checkpointIfDue(s, imports) // what was journaled, whatever failed after
	if err != nil {
		return err
	}
	return ctx.Err()
}

func succeeded(r *cpv1.Receipt) bool {
	st := r.GetStatus()
	return st == cpv1.Receipt_STATUS_SUCCEEDED || st == cpv1.Receipt_STATUS_SKIPPED_IDEMPOTENT
}

// runPipelined runs fresh operations through Process.ExecuteBatch: Blender
// gets the next request while agentd turns the previous result into a
// receipt, so the round trip overlaps Blender's work. Each result goes
// through run (retry after a crash, time budget, receipt) and done, in order.
// It returns how many operations it handed to done and whether the batch
// goes on: it stops early, with more true, when Blender had to be restored
// (the rest continue on the new process).
func (m *Manager) runPipelined(ctx context.Context, s *session, requestID string, ops []Operation, c *committer, progress Progress, log *slog.Logger, done func(int, Operation, *cpv1.Receipt, *journal.Commit) bool) (int, bool) {
	proc := s.proc
	calls := make([]blender.Call, len(ops))
	lasts := make([]map[string]any, len(ops))
	for k, op := range ops {
		calls[k] = m.call(s, requestID, op, progress, &lasts[k])
		calls[k].Budget = op.Budget
	}
	more := true
	n := proc.ExecuteBatch(ctx, calls, func(k int, br blender.BatchResult) bool {
		r, commit := m.finish(ctx, s, requestID, ops[k], calls[k], c, log, br, &lasts[k])
		more = done(k, ops[k], r, commit)
		return more && s.proc == proc
	})
	return n, more
}

// run executes one fresh operation. If Blender dies under it, the session is
// recovered from the journal and the operation runs once more. Over its time
// budget, the call is stopped (Blender with it) and the session recovered,
// so nothing of it remains; the receipt says TIMEOUT with what was done. It
// returns a nil receipt when ctx was cancelled.
func (m *Manager) run(ctx context.Context, s *session, requestID string, op Operation, c *committer, progress Progress, log *slog.Logger) (*cpv1.Receipt, *journal.Commit) {
	var last map[string]any
	call := m.call(s, requestID, op, progress, &last)
	return m.finish(ctx, s, requestID, op, call, c, log, blender.BatchResult{}, &last)
}

// call is the Blender call of op; its progress reports go to progress and
// the last one to *last.
func (m *Manager) call(s *session, requestID string, op Operation, progress Progress, last *map[string]any) blender.Call {
	return blender.Call{Tool: op.Tool, Args: op.Args, MutationID: MutationID(s.id, op.IdempotencyKey),
		RequestID: requestID, OperationID: op.OperationID, MCPCallID: op.MCPCallID,
		OnProgress: func(p map[string]any) {
			*last = p
			if progress != nil {
				progress(toProgress(op.OperationID, p))
			}
		}}
}

// finish runs op (first, when its Start is zero: the call has not run yet)
// or takes the result of its first attempt from first (ExecuteBatch), and
// returns its receipt, as run describes.
func (m *Manager) finish(ctx context.Context, s *session, requestID string, op Operation, call blender.Call, c *committer, log *slog.Logger, first blender.BatchResult, last *map[string]any) (*cpv1.Receipt, *journal.Commit) {
	mutationID := call.MutationID
	r := &cpv1.Receipt{
		RequestId: requestID, OperationId: op.OperationID, ToolName: op.Tool,
		McpCallId: op.MCPCallID, SafetyLevel: op.Safety, IdempotencyKey: op.IdempotencyKey,
		DeterminismClass: s.runtime.determinism[op.Tool], Tolerance: SceneHashTolerance,
	}
	var start, end time.Time
	attempt := func() (blender.Outcome, error, bool) {
		start = time.Now()
		cctx, cancel := ctx, context.CancelFunc(func() {})
		if op.Budget > 0 {
			cctx, cancel = context.WithTimeout(ctx, op.Budget)
		}
		defer cancel()
		out, err := s.proc.Execute(cctx, call)
		end = time.Now()
		timedOut := err != nil && op.Budget > 0 && ctx.Err() == nil && errors.Is(cctx.Err(), context.DeadlineExceeded)
		return out, err, timedOut
	}
	// restore brings the session back to its journaled scene after Blender
	// died or was stopped; everything before must be in the journal first.
	restore := func() error {
		if err := c.flush(); err != nil {
			return err
		}
		if err := m.recover(ctx, s); err != nil {
			s.broken = err
			return fmt.Errorf("recovery failed: %w", err)
		}
		return nil
	}
	var out blender.Outcome
	var err error
	var timedOut bool
	if first.Start.IsZero() {
		out, err, timedOut = attempt()
	} else {
		out, err, timedOut = first.Outcome, first.Err, first.TimedOut && ctx.Err() == nil
		start, end = first.Start, first.Start.Add(first.Duration)
	}
	if errors.Is(err, blender.ErrMemoryExceeded) && ctx.Err() == nil {
		// Running it again would only hit the ceiling again.
		return m.overMemory(s, r, op, start, restore, log), &journal.Commit{Receipt: r}
	}
	if !timedOut && errors.Is(err, blender.ErrProcessExited) && ctx.Err() == nil {
		log.Warn("blender died during an operation; recovering the session", "operation_id", op.OperationID,
			"mcp_call_id", op.MCPCallID, "err", err)
		if rerr := restore(); rerr != nil {
			err = fmt.Errorf("%w: %v", err, rerr)
		} else {
			out, err, timedOut = attempt()
		}
	}
	if timedOut {
		return m.timedOut(s, r, op, start, *last, restore, log), &journal.Commit{Receipt: r}
	}
	if ctx.Err() != nil && err != nil {
		return nil, nil // interrupted: Blender was stopped mid-call
	}
	// A call that completed before ctx ended is journaled like any other:
	// its effect is in the scene.
	r.DurationMicros = end.Sub(start).Microseconds()
	r.CompleteTime = timestamppb.New(end)
	var toolErr *blender.ToolError
	switch {
	case err == nil && op.Verify:
		if verr := m.verify(ctx, s, out, call); verr != nil {
			r.Status = cpv1.Receipt_STATUS_FAILED
			r.SceneHashBefore, r.SceneHashAfter = out.SceneHashBefore, out.SceneHashBefore
			r.Error = toolFailure(op, &blender.ToolError{Code: blender.CodeInternalError, Message: verr.Error()})
			return r, &journal.Commit{Receipt: r}
		}
		r.Verified = true
		fallthrough
	case err == nil:
		r.Status = cpv1.Receipt_STATUS_SUCCEEDED
		r.SceneHashBefore, r.SceneHashAfter = out.SceneHashBefore, out.SceneHashAfter
		if out.Mutated {
			r.BlenderMutationId = mutationID
		}
		if err := receiptwire.SetResultWire(r, out.Result); err != nil { // encoded once, journaled and sent as it is
			r.Result, _ = structpb.NewStruct(map[string]any{"error": "result not representable: " + err.Error()})
		}
		r.Artifacts = m.artifacts(s, out.Files, log)
		commit := &journal.Commit{Receipt: r, Undo: out.Undo}
		if out.SceneHashAfter != out.SceneHashBefore {
			s.changes += max(out.RecordsChanged, 1)
			commit.Entry = &journal.Entry{Kind: "op", Key: op.IdempotencyKey, Tool: op.Tool, Args: op.Args,
				MutationID: mutationID, HashAfter: out.SceneHashAfter}
		}
		return r, commit
	case errors.As(err, &toolErr):
		r.Status = cpv1.Receipt_STATUS_FAILED
		r.Error = toolFailure(op, toolErr)
		r.SceneHashBefore, r.SceneHashAfter = s.sceneHash, out.SceneHashAfter
		if out.SceneHashAfter != s.sceneHash {
			// The bridge could not undo what the call did before failing
			// (a tool without compensation, such as python.exec): rebuild
			// the scene from the journal, which does not hold the call.
			log.Warn("a failed call left the scene changed; rebuilding the session from its journal",
				"operation_id", op.OperationID, "mcp_call_id", op.MCPCallID, "scene_hash", out.SceneHashAfter)
			r.Error.Message += "; its partial effect was discarded"
			if rerr := restore(); rerr != nil {
				r.Error.Message += ": " + rerr.Error()
			}
			r.SceneHashAfter = s.sceneHash
		}
	default:
		r.Status = cpv1.Receipt_STATUS_FAILED
		r.Error = &cpv1.Failure{
			ErrorCode: "BLENDER_EXITED", Recoverable: s.broken == nil,
			RetryHint: "retry the plan; if it keeps failing, open a new session",
			Message:   err.Error(),
		}
	}
	return r, &journal.Commit{Receipt: r}
}

// verify is seed 001's phase 5: the scene is snapshotted from scratch and
// must hash to what the call reported. On a mismatch the call is undone (and
// if that fails, the session is rebuilt from the journal, which does not
// hold the call yet), so a failed verification leaves no effect.
func (m *Manager) verify(ctx context.Context, s *session, out blender.Outcome, call blender.Call) error {
	ctx = context.WithoutCancel(ctx) // the call ran: finish judging it
	snap, err := s.proc.Snapshot(ctx)
	if err == nil && snap.SceneHash == out.SceneHashAfter {
		return nil
	}
	reason := fmt.Sprintf("verification failed: the call reported scene %s, a full snapshot says %s", out.SceneHashAfter, snap.SceneHash)
	if err != nil {
		reason = "verification failed: " + err.Error()
	}
	if out.Undo != nil {
		if _, uerr := s.proc.Undo(ctx, out.Undo, call); uerr == nil {
			return errors.New(reason + "; the operation was undone")
		}
	}
	if out.SceneHashAfter != out.SceneHashBefore {
		if rerr := m.recover(ctx, s); rerr != nil {
			s.broken = rerr
			return fmt.Errorf("%s; restoring the session failed: %v", reason, rerr)
		}
	}
	return errors.New(reason + "; the session was restored from its journal")
}

// cancelledReceipt answers for an operation interrupted by Cancel.
func cancelledReceipt(requestID string, op Operation) *cpv1.Receipt {
	return &cpv1.Receipt{
		RequestId: requestID, OperationId: op.OperationID, ToolName: op.Tool, McpCallId: op.MCPCallID,
		SafetyLevel: op.Safety, IdempotencyKey: op.IdempotencyKey, Status: cpv1.Receipt_STATUS_NOT_RUN,
		CompleteTime: timestamppb.Now(),
		Error: &cpv1.Failure{ErrorCode: "CANCELLED", Recoverable: true,
			Message:   "cancelled while running; its effect was discarded",
			RetryHint: "submit the remaining operations again under a new request_id"},
	}
}

// timedOut fills the receipt of a call stopped at its time budget, after
// restoring the session so that nothing of the call remains.
func (m *Manager) timedOut(s *session, r *cpv1.Receipt, op Operation, start time.Time, last map[string]any, restore func() error, log *slog.Logger) *cpv1.Receipt {
	elapsed := time.Since(start)
	log.Warn("operation over its time budget; discarding its effect", "operation_id", op.OperationID,
		"mcp_call_id", op.MCPCallID, "budget", op.Budget, "elapsed", elapsed)
	summary := map[string]any{"budget_ms": float64(op.Budget.Milliseconds()), "elapsed_ms": float64(elapsed.Milliseconds())}
	if last != nil {
		summary["progress"] = last
	}
	msg := fmt.Sprintf("%s exceeded its time budget of %s", op.Tool, op.Budget)
	if last != nil {
		msg += fmt.Sprintf(" after partial work %v", last)
	}
	r.Result, _ = structpb.NewStruct(summary)
	return m.discarded(s, r, op, elapsed, restore, &cpv1.Failure{ErrorCode: "TIMEOUT", Message: msg,
		RetryHint: "raise tool_time_budget_ms in the session contract, or make the operation cheaper (fewer frames, samples, pixels)"})
}

// overMemory fails an operation whose Blender was stopped for going over
// the session's memory ceiling, and brings the session back from its
// journal.
func (m *Manager) overMemory(s *session, r *cpv1.Receipt, op Operation, start time.Time, restore func() error, log *slog.Logger) *cpv1.Receipt {
	log.Warn("blender went over the session's memory ceiling; discarding the operation's effect", "operation_id", op.OperationID,
		"mcp_call_id", op.MCPCallID, "memory_limit_mib", s.limits.MemoryMiB)
	r.Result, _ = structpb.NewStruct(map[string]any{"memory_limit_mib": float64(s.limits.MemoryMiB)})
	return m.discarded(s, r, op, time.Since(start), restore, &cpv1.Failure{ErrorCode: "RESOURCE_EXHAUSTED",
		Message:   fmt.Sprintf("%s went over the session's memory ceiling of %d MiB; Blender was stopped", op.Tool, s.limits.MemoryMiB),
		RetryHint: "raise max_memory_mib in the session contract, or make the operation lighter (fewer objects, pixels, samples)"})
}

// discarded completes the receipt of an operation whose effect was thrown
// away with its Blender: the session is restored from its journal, the
// scene is as before the operation, and the failure is recoverable by
// changing the operation or the contract.
func (m *Manager) discarded(s *session, r *cpv1.Receipt, op Operation, elapsed time.Duration, restore func() error, fail *cpv1.Failure) *cpv1.Receipt {
	fail.Message += "; its effect was discarded and the scene restored"
	if err := restore(); err != nil {
		fail.Message += "; " + err.Error()
	}
	fail.Recoverable = true
	fail.MinimalRepairPlan = []*cpv1.RepairStep{{OperationId: op.OperationID, Action: cpv1.RepairStep_ACTION_REPLACE_ARGS}}
	r.Status = cpv1.Receipt_STATUS_FAILED
	r.DurationMicros = elapsed.Microseconds()
	r.CompleteTime = timestamppb.Now()
	r.Error = fail
	if js, err := m.journal.Session(s.id); err == nil {
		r.SceneHashBefore, r.SceneHashAfter = js.HeadHash, js.HeadHash
	}
	return r
}

// toProgress turns a bridge progress report ({"done", "total", ...}) into
// the wire message.
func toProgress(operationID string, p map[string]any) *cpv1.Progress {
	pg := &cpv1.Progress{OperationId: operationID}
	if v, ok := p["done"].(float64); ok {
		pg.Done = int64(v)
	}
	if v, ok := p["total"].(float64); ok {
		pg.Total = int64(v)
	}
	pg.Detail, _ = structpb.NewStruct(p)
	return pg
}

// replayed answers a retried idempotency key from its committed record.
func replayed(op Operation, rec *journal.Record) *cpv1.Receipt {
	r := proto.Clone(rec.Receipt).(*cpv1.Receipt)
	r.McpCallId = op.MCPCallID
	switch {
	case rec.RolledBack:
		r.Status = cpv1.Receipt_STATUS_FAILED
		r.Error = &cpv1.Failure{
			ErrorCode:   "IDEMPOTENCY_CONFLICT",
			Recoverable: true,
			RetryHint:   "this operation was rolled back, so the scene no longer holds its effect; submit it under a new request_id",
			Message:     fmt.Sprintf("operation %q was committed (scene %s) and then rolled back", op.OperationID, rec.Receipt.GetSceneHashAfter()),
			MinimalRepairPlan: []*cpv1.RepairStep{
				{OperationId: op.OperationID, Action: cpv1.RepairStep_ACTION_INSERT_PRECONDITION},
			},
		}
	case rec.Receipt.GetStatus() == cpv1.Receipt_STATUS_SUCCEEDED:
		r.Status = cpv1.Receipt_STATUS_SKIPPED_IDEMPOTENT
	}
	return r
}

// MutationID names the mutation an idempotency key commits: unique per
// session and key, and the same on every retry and replay.
func MutationID(sessionID, key string) string {
	sum := sha256.Sum256([]byte(sessionID + "\x00" + key))
	return "mut-" + hex.EncodeToString(sum[:12])
}

func toolFailure(op Operation, e *blender.ToolError) *cpv1.Failure {
	hint, action := "fix the operation's args", cpv1.RepairStep_ACTION_REPLACE_ARGS
	switch {
	case e.Code == blender.CodeNotFound && op.Tool == "scene.import": // the file it reads
		hint, action = "upload the file into the session first (UploadArtifact, blendctl upload) or correct its name", cpv1.RepairStep_ACTION_INSERT_PRECONDITION
	case e.Code == blender.CodeNotFound:
		hint, action = "create the missing datablock first or correct the name", cpv1.RepairStep_ACTION_INSERT_PRECONDITION
	case e.Code == blender.CodeConflict:
		hint = "choose a name that is not in use"
	case e.Code == blender.CodeTimeout, e.Code == blender.CodeInternalError:
		hint, action = "retry the operation", cpv1.RepairStep_ACTION_RETRY
	case e.Code == blender.CodePolicyRefused:
		hint = "name files by plain names in the session's output directory, and the files they refer to too; the message says what else is refused (a binary USD layer: export .usda)"
	case e.Code == blender.CodeQuotaExceeded:
		hint = "raise temp_storage_mib in the session contract (up to what the agent offers), or write fewer or smaller files (one of the same name replaces it); if the agent's disk is short, free some on it"
	}
	return &cpv1.Failure{
		ErrorCode:         strings.ToUpper(e.Code),
		Recoverable:       e.Code != blender.CodeInternalError,
		RetryHint:         hint,
		Message:           e.Message,
		MinimalRepairPlan: []*cpv1.RepairStep{{OperationId: op.OperationID, Action: action}},
	}
}
