package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/blendplane/blendplane/controlplane/internal/store"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// A batch is what goes to the agent in one Execute stream: at most
// batchSize operations, and no more args than batchBytes (but at least one
// operation), well inside the agent's message limit. The agent runs them
// one by one and commits their receipts in groups, so a batch saves a
// network round trip and an fsync per operation; between two batches the
// session's Blender idles while one ends and the next starts (2-9 ms on
// two CPUs), so they are large.
const (
	batchSize  = 1024
	batchBytes = 8 << 20
)

// nextBatch is the schedule positions of the next batch from the start of
// sched: up to batchSize operations and batchBytes of args, stopping before
// an operation that is distributed (it runs on its own, next).
func nextBatch(ops []*cpv1.Operation, sched []int, distribute bool) []int {
	window := sched[:min(batchSize, len(sched))]
	size := 0
	for i, idx := range window {
		op := ops[idx]
		if distribute && Distributed(op) {
			return window[:i]
		}
		if size += proto.Size(op.GetArgs()); size > batchBytes && i > 0 {
			return window[:i]
		}
	}
	return window
}

// progress is what the committed receipts of a plan say about it, so that a
// resumed plan picks up exactly where it stopped.
type progress struct {
	next int // schedule positions consumed (ran, failed or not run)
	// done is the idempotency keys of the operations that succeeded or
	// were skipped, in order: what a rollback undoes. Keys only: a large
	// plan's receipts would stay in memory until it ends.
	done       []string
	failed     *cpv1.Receipt   // the operation that failed, if any
	rolledBack map[string]bool // idempotency keys already undone
	rollback   *cpv1.Failure   // set when the rollback itself failed
	cancelled  bool            // the agent interrupted an operation on Cancel
}

func (pr *progress) observe(r *cpv1.Receipt) {
	switch r.GetStatus() {
	case cpv1.Receipt_STATUS_SUCCEEDED, cpv1.Receipt_STATUS_SKIPPED_IDEMPOTENT:
		pr.done = append(pr.done, r.GetIdempotencyKey())
		pr.next++
	case cpv1.Receipt_STATUS_ROLLED_BACK:
		pr.rolledBack[r.GetIdempotencyKey()] = true
	case cpv1.Receipt_STATUS_FAILED:
		if r.GetError().GetErrorCode() == "ROLLBACK_FAILED" {
			pr.rollback = r.GetError()
			return
		}
		pr.failed = r
		pr.next++
	case cpv1.Receipt_STATUS_NOT_RUN:
		pr.next++
		pr.cancelled = pr.cancelled || r.GetError().GetErrorCode() == "CANCELLED"
	}
}

// planWork reads a plan's state from the store, and its request and
// schedule unless work has them.
func (e *Executor) planWork(ref store.PlanRef, work *Work) (*cpv1.Plan, *cpv1.SubmitPlanRequest, []int, error) {
	if work == nil {
		return e.store.PlanWork(ref)
	}
	p, err := e.store.PlanState(ref)
	return p, work.Request, work.Schedule, err
}

// run executes a plan, or resumes it after its last committed receipt:
// operations in schedule order, then, if one failed or the plan was
// cancelled, the rollback of the plan's operations (atomic plans) and
// NOT_RUN receipts for the rest.
func (e *Executor) run(ref store.PlanRef, work *Work) error {
	p, req, sched, err := e.planWork(ref, work)
	if err != nil {
		return err
	}
	if p.GetState() == cpv1.Plan_STATE_AWAITING_APPROVAL {
		if p, err = e.awaitApproval(ref, p); err != nil {
			return err
		}
	}
	if store.IsTerminal(p.GetState()) {
		return nil
	}
	at, err := e.store.Placement(p.GetSessionId())
	if err != nil {
		return err
	}
	terms, err := e.store.Terms(p.GetSessionId())
	if err != nil {
		return err
	}
	sessionID := p.GetSessionId()
	log := e.log.With("request_id", ref.RequestID, "session_id", sessionID)
	if at.Closed() {
		// Closed while the plan waited (CloseSession, or a restart that
		// closed an ephemeral session): nothing of it runs; it ends CANCELLED.
		e.mu.Lock()
		e.cancelled[ref] = true
		e.mu.Unlock()
	}

	pr := &progress{rolledBack: map[string]bool{}}
	if p.GetReceiptCount() > 0 {
		prior, err := e.store.Receipts(ref, 1, int(p.GetReceiptCount()))
		if err != nil {
			return err
		}
		for _, r := range prior {
			pr.observe(r)
		}
	}
	log.Info("plan running", "operations", len(sched), "from", pr.next+1)
	p.State = cpv1.Plan_STATE_RUNNING
	c := newCommitter(e.store, ref, proto.Clone(p).(*cpv1.Plan))
	seq := p.GetReceiptCount()
	debug := log.Enabled(e.ctx, slog.LevelDebug)
	finished := false // the final state went out with a receipt
	// add hands a receipt to the committer; more says that more receipts
	// follow at once. The receipt that completes the plan carries its final
	// state, so that both are committed together.
	add := func(r *cpv1.Receipt, more bool) {
		seq++
		r.Sequence = seq
		if debug {
			log.Debug("receipt", "sequence", seq, "operation_id", r.GetOperationId(), "mcp_call_id", r.GetMcpCallId(),
				"blender_mutation_id", r.GetBlenderMutationId(), "status", r.GetStatus().String())
		}
		pr.observe(r)
		if len(r.GetArtifacts()) > 0 {
			e.collectFiles(e.current(sessionID), ref, sessionID, r, log)
		}
		var final *cpv1.Plan
		if pr.next == len(sched) && pr.failed == nil && !pr.cancelled && !finished {
			final = proto.Clone(p).(*cpv1.Plan)
			final.State = cpv1.Plan_STATE_SUCCEEDED
			finished = true
		}
		c.add(r, final, more && final == nil)
	}

	// A distributed operation runs under its own context, which an
	// interrupt ends too.
	var dmu sync.Mutex
	var stopDistributed context.CancelFunc
	e.mu.Lock()
	e.running[ref] = func() {
		e.interrupt(e.current(sessionID), sessionID, ref, log)
		dmu.Lock()
		if stopDistributed != nil {
			stopDistributed()
		}
		dmu.Unlock()
	}
	e.mu.Unlock()
	e.fleet.Touch(at.AgentID, sessionID)
	defer func() {
		e.fleet.Touch(e.current(sessionID), sessionID) // its Blender ran until now
		e.mu.Lock()
		delete(e.running, ref)
		e.mu.Unlock()
	}()

	budget := terms.Constraints.GetToolTimeBudgetMs()
	for pr.failed == nil && !pr.cancelled && len(pr.rolledBack) == 0 && pr.next < len(sched) && !e.isCancelled(ref) {
		if op := req.GetOperations()[sched[pr.next]]; e.cfg.Distribute != nil && Distributed(op) {
			// The forks replay the session from the store, and the receipt
			// takes its scene hash from it: the plan's receipts so far first.
			if err := c.flush(); err != nil {
				c.close()
				return fmt.Errorf("commit receipts: %w", err)
			}
			ctx, cancel := context.WithCancel(e.ctx)
			dmu.Lock()
			stopDistributed = cancel
			dmu.Unlock()
			r := e.cfg.Distribute(ctx, ref, sessionID, op)
			dmu.Lock()
			stopDistributed = nil
			dmu.Unlock()
			cancel()
			if e.ctx.Err() != nil {
				c.close()
				return e.ctx.Err() // stopping: it runs again at the next start
			}
			add(r, r.GetStatus() == cpv1.Receipt_STATUS_SUCCEEDED && pr.next+1 < len(sched))
			if err := c.failure(); err != nil {
				c.close()
				return fmt.Errorf("commit receipts: %w", err)
			}
			continue
		}
		window := nextBatch(req.GetOperations(), sched[pr.next:], e.cfg.Distribute != nil)
		ops := make([]*cpv1.Operation, len(window))
		for i, idx := range window {
			ops[i] = req.GetOperations()[idx]
		}
		last := pr.next+len(window) == len(sched)
		if err := e.execute(ref, sessionID, budget, ops, last, add, log); err != nil {
			c.close()
			return err // stopping: the plan stays active and resumes
		}
		if err := c.failure(); err != nil {
			c.close()
			return fmt.Errorf("commit receipts: %w", err)
		}
	}
	if p.GetAtomic() && pr.rollback == nil && !finished && e.undoes(ref, sessionID, pr, len(sched)) {
		var keys []string
		for i := len(pr.done) - 1; i >= 0; i-- {
			if k := pr.done[i]; !pr.rolledBack[k] {
				keys = append(keys, k)
			}
		}
		if len(keys) > 0 {
			if err := e.rollback(ref, sessionID, keys, add, log); err != nil {
				c.close()
				return err
			}
		}
	}
	if !finished {
		final := e.final(p, pr, len(sched))
		var tail []*cpv1.Receipt
		if final.GetState() != cpv1.Plan_STATE_SUCCEEDED {
			for _, idx := range sched[min(pr.next, len(sched)):] { // a store written before answers were checked may hold more
				tail = append(tail, notRun(ref.RequestID, req.GetOperations()[idx], pr.failed))
			}
		}
		finished = true
		for i, r := range tail {
			seq++
			r.Sequence = seq
			var with *cpv1.Plan
			if i == len(tail)-1 {
				with = final
			}
			c.add(r, with, i < len(tail)-1)
		}
		if len(tail) == 0 {
			c.add(nil, final, false)
		}
		log.Info("plan finished", "state", final.GetState().String())
	}
	if err := c.close(); err != nil {
		return fmt.Errorf("commit receipts: %w", err)
	}
	return nil
}

// undoes reports whether an atomic plan that stopped before its end is to
// be rolled back: one of its operations failed, or it was cancelled
// (CancelPlan) while its session stays open (a closed session's Blender
// goes, rolled back or not), or its rollback had begun before a restart
// (its receipts say so; an in-memory cancel mark is gone then).
func (e *Executor) undoes(ref store.PlanRef, sessionID string, pr *progress, total int) bool {
	if pr.failed != nil || len(pr.rolledBack) > 0 {
		return true
	}
	if !pr.cancelled && !(e.isCancelled(ref) && pr.next < total) {
		return false
	}
	at, err := e.store.Placement(sessionID)
	return err == nil && !at.Closed()
}

// collectFiles has the files a receipt names taken from the agent before
// the receipt is committed, so that whoever sees the receipt can download
// them; with no agent at hand (nil), those the control plane holds
// already (a distributed render's frames) are still recorded. A failure
// is logged: the receipt is committed anyway.
func (e *Executor) collectFiles(agentID string, ref store.PlanRef, sessionID string, r *cpv1.Receipt, log *slog.Logger) {
	if e.collect == nil {
		return
	}
	agent, cerr := e.client(agentID) // nil without its agent: collect records the files anyway
	ctx, cancel := context.WithTimeout(e.ctx, e.cfg.OperationTimeout)
	err := errors.Join(cerr, e.collect(ctx, agent, ref, sessionID, r))
	cancel()
	if err != nil {
		log.Warn("collecting the files of a receipt", "operation_id", r.GetOperationId(), "err", err)
	}
}

// final is the terminal state of a plan that did not succeed op by op to
// its end: cancelled, failed, or (a resumed plan with nothing left)
// succeeded.
func (e *Executor) final(p *cpv1.Plan, pr *progress, total int) *cpv1.Plan {
	final := proto.Clone(p).(*cpv1.Plan)
	switch {
	case pr.failed != nil:
		final.State = cpv1.Plan_STATE_FAILED
		final.Failure = pr.failed.GetError()
		if pr.rollback != nil {
			final.Failure = pr.rollback
		}
	case pr.cancelled || pr.next < total:
		// An operation was interrupted, or Cancel came between batches: the
		// plan did not do all it was asked, so it never ends SUCCEEDED.
		final.State = cpv1.Plan_STATE_CANCELLED
		final.Failure = &cpv1.Failure{ErrorCode: "CANCELLED", Recoverable: true, Message: "cancelled by CancelPlan",
			RetryHint: "submit the operations that did not run under a new request_id"}
		if len(pr.rolledBack) > 0 {
			final.Failure.Message = "cancelled by CancelPlan; the operations that ran were rolled back"
			final.Failure.RetryHint = "submit the plan again under a new request_id"
		}
		if at, err := e.store.Placement(p.GetSessionId()); err == nil && at.Closed() {
			final.Failure.Message = "cancelled: its session was closed"
			final.Failure.RetryHint = "negotiate a session and submit the operations that did not run there"
		}
		if pr.rollback != nil {
			final.Failure = pr.rollback
		}
	default:
		final.State = cpv1.Plan_STATE_SUCCEEDED
	}
	return final
}

func notRun(requestID string, op *cpv1.Operation, failed *cpv1.Receipt) *cpv1.Receipt {
	r := &cpv1.Receipt{
		RequestId: requestID, OperationId: op.GetOperationId(), ToolName: op.GetToolName(),
		Status: cpv1.Receipt_STATUS_NOT_RUN, SafetyLevel: op.GetSafetyLevel(), CompleteTime: timestamppb.Now(),
	}
	if failed == nil {
		r.Error = &cpv1.Failure{ErrorCode: "CANCELLED", Recoverable: true, Message: "not run: the plan was cancelled",
			RetryHint: "submit the operations that did not run under a new request_id"}
		return r
	}
	r.Error = &cpv1.Failure{
		ErrorCode:         "PLAN_ABORTED",
		Recoverable:       true,
		RetryHint:         fmt.Sprintf("fix operation %q, then resubmit the remaining operations", failed.GetOperationId()),
		Message:           fmt.Sprintf("not run: operation %q failed earlier in the plan", failed.GetOperationId()),
		MinimalRepairPlan: failed.GetError().GetMinimalRepairPlan(),
	}
	return r
}
