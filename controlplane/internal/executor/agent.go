package executor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/blendplane/blendplane/controlplane/internal/plan"
	"github.com/blendplane/blendplane/controlplane/internal/store"
	agentv1 "github.com/blendplane/blendplane/gen/blendplane/agent/v1"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// client returns the agent's AgentService client, or an Unavailable error
// while the agent is not registered (it is retried like a broken link).
func (e *Executor) client(agentID string) (agentv1.AgentServiceClient, error) {
	c, err := e.fleet.Client(agentID)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return c, nil
}

// interrupt asks the agent to stop the plan's running batch.
func (e *Executor) interrupt(agentID, sessionID string, ref store.PlanRef, log *slog.Logger) {
	agent, err := e.client(agentID)
	if err != nil {
		log.Warn("interrupting the running batch", "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	if _, err := agent.Cancel(ctx, &agentv1.CancelRequest{SessionId: sessionID, RequestId: ref.RequestID}); err != nil {
		log.Warn("interrupting the running batch", "err", err)
	}
}

// execute sends a batch of operations to the agent and hands each receipt
// to add, in order. While the agent
// is unreachable it retries the operations still without a receipt, with
// the same idempotency keys. last says the batch ends the plan. It returns
// an error only when the executor is stopping.
func (e *Executor) execute(ref store.PlanRef, sessionID string, budgetMs int64, ops []*cpv1.Operation, last bool, add func(*cpv1.Receipt, bool), log *slog.Logger) error {
	calls := make([]*agentv1.OperationCall, len(ops))
	given := make(map[*agentv1.OperationCall]bool, len(ops))
	for i, op := range ops {
		calls[i] = &agentv1.OperationCall{
			OperationId:    op.GetOperationId(),
			ToolName:       op.GetToolName(),
			Args:           op.GetArgs(),
			SafetyLevel:    op.GetSafetyLevel(),
			IdempotencyKey: plan.IdempotencyKey(ref.RequestID, op.GetOperationId(), op.GetArgs().AsMap()),
			TimeBudgetMs:   budgetMs,
			Verify:         op.GetVerify(),
			McpCallId:      op.GetMcpCallId(),
		}
		given[calls[i]] = op.GetMcpCallId() != ""
	}
	waiting := func() string { return calls[0].GetOperationId() }
	return e.retry(sessionID, ref, waiting, log, func(ctx context.Context, to target, alive func()) (bool, error) {
		agent, err := e.client(to.agentID)
		if err != nil {
			return false, err
		}
		for _, c := range calls {
			// The front door's call id when it gave one, else unique per
			// invocation, retries included.
			if !given[c] {
				c.McpCallId = NewID("call")
			}
		}
		stream, err := agent.Execute(ctx, &agentv1.ExecuteRequest{SessionId: sessionID, RequestId: ref.RequestID, Operations: calls, Epoch: to.epoch})
		if err != nil {
			return false, err
		}
		for len(calls) > 0 {
			resp, err := stream.Recv()
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = status.Error(codes.Unavailable, "agent ended the batch early")
				}
				return false, err
			}
			alive()
			r := resp.GetReceipt()
			if r == nil {
				if pg := resp.GetProgress(); pg != nil {
					e.store.PublishProgress(ref, pg)
				}
				continue
			}
			if r.GetOperationId() != calls[0].GetOperationId() {
				return false, fmt.Errorf("agent answered for %q, expected %q", r.GetOperationId(), calls[0].GetOperationId())
			}
			if !executed(r) {
				return false, status.Errorf(codes.Internal, "agent answered %s (%s) for operation %q", r.GetStatus(), r.GetError().GetErrorCode(), r.GetOperationId())
			}
			calls = calls[1:]
			ok := r.GetStatus() == cpv1.Receipt_STATUS_SUCCEEDED || r.GetStatus() == cpv1.Receipt_STATUS_SKIPPED_IDEMPOTENT
			add(r, ok && (len(calls) > 0 || !last))
			if !ok {
				return true, nil
			}
		}
		return true, nil
	}, func(to target, err error) {
		r := transportFailure(ref.RequestID, ops[len(ops)-len(calls)], calls[0], err)
		r.SessionEpoch = to.epoch
		add(r, false)
	})
}

// rollback asks the agent to undo operations (newest first) and hands each
// ROLLED_BACK (or ROLLBACK_FAILED) receipt to add.
func (e *Executor) rollback(ref store.PlanRef, sessionID string, keys []string, add func(*cpv1.Receipt, bool), log *slog.Logger) error {
	log.Info("rolling back the plan", "operations", len(keys))
	return e.retry(sessionID, ref, func() string { return "" }, log, func(ctx context.Context, to target, alive func()) (bool, error) {
		agent, err := e.client(to.agentID)
		if err != nil {
			return false, err
		}
		stream, err := agent.Rollback(ctx, &agentv1.RollbackRequest{SessionId: sessionID, RequestId: ref.RequestID, IdempotencyKeys: keys, Epoch: to.epoch})
		if err != nil {
			return false, err
		}
		for len(keys) > 0 {
			resp, err := stream.Recv()
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = status.Error(codes.Unavailable, "agent ended the rollback early")
				}
				return false, err
			}
			alive()
			r := resp.GetReceipt()
			if !undone(r) {
				return false, status.Errorf(codes.Internal, "agent answered %s (%s) for an undo", r.GetStatus(), r.GetError().GetErrorCode())
			}
			keys = keys[1:]
			add(r, len(keys) > 0)
			if r.GetStatus() != cpv1.Receipt_STATUS_ROLLED_BACK {
				return true, nil
			}
		}
		return true, nil
	}, func(to target, err error) {
		add(&cpv1.Receipt{
			RequestId: ref.RequestID, IdempotencyKey: keys[0], Status: cpv1.Receipt_STATUS_FAILED, CompleteTime: timestamppb.Now(),
			SessionEpoch: to.epoch,
			Error: &cpv1.Failure{ErrorCode: "ROLLBACK_FAILED", Recoverable: false, Message: status.Convert(err).Message(),
				RetryHint: "the agent could not be reached to roll the plan back; inspect the session"},
		}, false)
	})
}

// executed reports whether an agent's receipt for an operation it was
// asked to run says what running it can say: a receipt of any other
// status would leave the plan's progress where it was (the operation asked
// for again, forever) or past its schedule.
func executed(r *cpv1.Receipt) bool {
	switch r.GetStatus() {
	case cpv1.Receipt_STATUS_SUCCEEDED, cpv1.Receipt_STATUS_SKIPPED_IDEMPOTENT, cpv1.Receipt_STATUS_NOT_RUN:
		return true
	case cpv1.Receipt_STATUS_FAILED:
		return r.GetError().GetErrorCode() != "ROLLBACK_FAILED"
	}
	return false
}

// undone reports whether an agent's receipt for an undo says what an undo
// can say: ROLLED_BACK, or ROLLBACK_FAILED.
func undone(r *cpv1.Receipt) bool {
	return r.GetStatus() == cpv1.Receipt_STATUS_ROLLED_BACK ||
		(r.GetStatus() == cpv1.Receipt_STATUS_FAILED && r.GetError().GetErrorCode() == "ROLLBACK_FAILED")
}

// target is where a session runs: its agent and its epoch.
type target struct {
	agentID string
	epoch   int64
}

// retry runs attempt until it completes, retrying while the session's agent
// is unreachable (within AgentRetryWindow from the start of the outage: the
// first failure after the agent last answered; counted afresh whenever the
// session is placed on another agent). Each attempt goes to where the
// session runs now (Config.Place), which waits while a lost agent's session
// is rebuilt elsewhere. An attempt that hears nothing from the agent for
// OperationTimeout is cancelled, and so is one whose session moves
// (Moved); attempt calls alive whenever it hears something. giveUp records
// the final error. While it waits, the plan's progress says so (the
// operation waiting is waitingOp's), so that a watcher is not left with a
// silent stream for minutes.
func (e *Executor) retry(sessionID string, ref store.PlanRef, waitingOp func() string, log *slog.Logger,
	attempt func(ctx context.Context, to target, alive func()) (bool, error), giveUp func(target, error)) error {
	var deadline time.Time // of the outage under way; zero while the agent answers
	backoff := 100 * time.Millisecond
	defer func() {
		e.mu.Lock()
		delete(e.moves, sessionID)
		e.mu.Unlock()
	}()
	var first int64 // the epoch of the first attempt
	waited := false // the plan's progress says it waits for the agent
	for {
		ctx, cancel := context.WithCancel(e.ctx)
		to, err := e.place(ctx, sessionID)
		if err == nil && first != 0 && to.epoch != first {
			cancel()
			return errMoved(sessionID, to)
		}
		if first == 0 {
			first = to.epoch
		}
		ok := false
		if err == nil {
			if waited { // tried again: until it fails too, the plan does not wait
				waited = false
				e.store.PublishProgress(ref, nil)
			}
			e.trackAttempt(sessionID, to, cancel)
			watchdog := time.AfterFunc(e.cfg.OperationTimeout, cancel)
			ok, err = attempt(ctx, to, func() {
				watchdog.Reset(e.cfg.OperationTimeout)
				deadline, backoff = time.Time{}, 100*time.Millisecond // it answered: a failure after is a new outage
			})
			watchdog.Stop()
			e.trackAttempt(sessionID, target{}, nil)
			if err != nil && ctx.Err() != nil && e.ctx.Err() == nil {
				err = status.Errorf(codes.DeadlineExceeded, "no answer from the agent for %s", e.cfg.OperationTimeout)
			}
		}
		cancel()
		if ok {
			return nil
		}
		if e.ctx.Err() != nil {
			return e.ctx.Err()
		}
		if now := e.stored(sessionID); now.epoch != to.epoch && to.epoch != 0 {
			// The session moved while the attempt ran: what this batch still
			// holds in memory may follow receipts the store refused. The plan
			// starts again from what is committed, where the session runs now.
			log.Info("session placed on another agent; resuming the plan there", "agent_id", now.agentID, "epoch", now.epoch)
			return errMoved(sessionID, now)
		}
		if err == nil {
			err = status.Error(codes.Unavailable, "the attempt ended without an answer")
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(e.cfg.AgentRetryWindow)
		}
		if status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
			log.Warn("agent call failed", "err", err)
			giveUp(to, err)
			return nil
		}
		log.Warn("agent unreachable, retrying", "err", err, "backoff", backoff)
		e.store.PublishProgress(ref, waitingForAgent(waitingOp(), to.agentID, err, deadline))
		waited = true
		select {
		case <-time.After(backoff):
		case <-e.movedSignal(sessionID):
		case <-e.ctx.Done():
			return e.ctx.Err()
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// waitingForAgent is the progress of a plan whose agent does not answer:
// the operation waiting, the agent, why, and until when it is retried.
func waitingForAgent(operationID, agentID string, err error, until time.Time) *cpv1.Progress {
	detail, _ := structpb.NewStruct(map[string]any{"waiting_for_agent": cmp.Or(agentID, "(none placed)"), "reason": status.Convert(err).Message(),
		"retry_until": until.UTC().Format(time.RFC3339)})
	return &cpv1.Progress{OperationId: operationID, Detail: detail}
}

// errMoved ends a batch whose session moved: the run starts again from the
// committed receipts (drain re-runs on store.ErrStaleEpoch).
func errMoved(sessionID string, to target) error {
	return fmt.Errorf("%w: session %s is at epoch %d on agent %s now", store.ErrStaleEpoch, sessionID, to.epoch, to.agentID)
}

// stored is where the store says the session runs, without waiting for a
// rebuild.
func (e *Executor) stored(sessionID string) target {
	p, err := e.store.Placement(sessionID)
	if err != nil {
		return target{}
	}
	return target{p.AgentID, p.Epoch}
}

// place is where the session runs now.
func (e *Executor) place(ctx context.Context, sessionID string) (target, error) {
	if e.cfg.Place != nil {
		agentID, epoch, err := e.cfg.Place(ctx, sessionID)
		return target{agentID, epoch}, err
	}
	p, err := e.store.Placement(sessionID)
	if err != nil {
		return target{}, err
	}
	return target{p.AgentID, p.Epoch}, nil
}

// trackAttempt records the running attempt of a session (cancel nil: none).
func (e *Executor) trackAttempt(sessionID string, to target, cancel context.CancelFunc) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if cancel == nil {
		delete(e.attempts, sessionID)
		return
	}
	e.attempts[sessionID] = attempt{to, cancel}
}

// current is the agent the session's running attempt talks to, or the
// session's placement when none runs.
func (e *Executor) current(sessionID string) string {
	e.mu.Lock()
	a, ok := e.attempts[sessionID]
	e.mu.Unlock()
	if ok {
		return a.to.agentID
	}
	return e.stored(sessionID).agentID
}

// Moved stops the running attempt of a session that was just placed on
// another agent: it goes on there (its receipts of the old placement are
// refused by the store).
func (e *Executor) Moved(sessionID string) {
	e.mu.Lock()
	a, ok := e.attempts[sessionID]
	if ch, waiting := e.moves[sessionID]; waiting {
		close(ch)
		delete(e.moves, sessionID)
	}
	e.mu.Unlock()
	if ok {
		a.cancel()
	}
}

// movedSignal is closed at the session's next move, so that a retry
// waiting out its backoff goes to the new agent at once.
func (e *Executor) movedSignal(sessionID string) <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	ch, ok := e.moves[sessionID]
	if !ok {
		ch = make(chan struct{})
		e.moves[sessionID] = ch
	}
	return ch
}

func transportFailure(requestID string, op *cpv1.Operation, call *agentv1.OperationCall, err error) *cpv1.Receipt {
	st := status.Convert(err)
	code, hint, action := "AGENT_UNAVAILABLE", "once the agent is back (READY in ListAgents), submit the operations that did not run under a new request_id", cpv1.RepairStep_ACTION_RETRY
	switch st.Code() {
	case codes.DeadlineExceeded:
		code, hint = "TOOL_TIMEOUT", "retry the operation or lower its cost (resolution, samples)"
	case codes.InvalidArgument:
		code, hint, action = "AGENT_REFUSED", "fix the operation's arguments", cpv1.RepairStep_ACTION_REPLACE_ARGS
	case codes.ResourceExhausted:
		code, hint = "RESOURCE_EXHAUSTED", "the agent lacks what the session needs: raise max_memory_mib in the session contract if its Blender went over it, else resubmit once a Blender slot is free"
	case codes.FailedPrecondition, codes.NotFound:
		code, hint = "SESSION_LOST", "the agent cannot continue this session (its Blender could not be rebuilt, or the agent lost it): negotiate a new session and resubmit"
	case codes.Unavailable:
	default:
		code = "INTERNAL"
	}
	return &cpv1.Receipt{
		RequestId:      requestID,
		OperationId:    op.GetOperationId(),
		ToolName:       op.GetToolName(),
		Status:         cpv1.Receipt_STATUS_FAILED,
		SafetyLevel:    op.GetSafetyLevel(),
		McpCallId:      call.GetMcpCallId(),
		IdempotencyKey: call.GetIdempotencyKey(),
		CompleteTime:   timestamppb.Now(),
		Error: &cpv1.Failure{
			ErrorCode:         code,
			Recoverable:       true,
			RetryHint:         hint,
			Message:           st.Message(),
			MinimalRepairPlan: []*cpv1.RepairStep{{OperationId: op.GetOperationId(), Action: action}},
		},
	}
}
