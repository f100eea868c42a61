// Package executor runs accepted plans: one plan at a time per session, one
// operation at a time, in the plan's schedule order. It sends each operation
// to the session's agent with its idempotency key, and hands every receipt to
// the store, which commits it before any stream can see it.
//
// Receipts are committed by a per-plan committer goroutine in batches, so the
// next operation runs while the previous receipt is being written. After a
// control-plane crash, operations without a committed receipt are sent again
// with the same idempotency key; the agent's journal makes that safe.
package executor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/blendplane/blendplane/controlplane/internal/fleet"
	"github.com/blendplane/blendplane/controlplane/internal/plan"
	"github.com/blendplane/blendplane/controlplane/internal/store"
	agentv1 "github.com/blendplane/blendplane/gen/blendplane/agent/v1"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// Config tunes how operations are sent to agents.
type Config struct {
	// OperationTimeout bounds one Execute call (a render can be long).
	OperationTimeout time.Duration
	// AgentRetryWindow is how long an unreachable agent is retried before the
	// operation fails with AGENT_UNAVAILABLE.
	AgentRetryWindow time.Duration
}

// Executor runs plans.
type Executor struct {
	cfg   Config
	store *store.Store
	fleet *fleet.Fleet
	log   *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	queues    map[string]*queue // by session id
	cancelled map[string]bool   // request ids asked to stop
	running   map[string]func() // request id → interrupt its batch on the agent
}

// queue holds the plans of one session waiting to run, in order.
type queue struct {
	pending []string
	running bool
}

// New returns an executor; call Resume to pick up unfinished plans.
func New(cfg Config, st *store.Store, fl *fleet.Fleet, log *slog.Logger) *Executor {
	ctx, cancel := context.WithCancel(context.Background())
	return &Executor{cfg: cfg, store: st, fleet: fl, log: log, ctx: ctx, cancel: cancel, queues: map[string]*queue{},
		cancelled: map[string]bool{}, running: map[string]func(){}}
}

// Resume queues every plan the store holds as not yet terminal, in
// submission order, so a restarted control plane finishes them.
func (e *Executor) Resume() error {
	ids, err := e.store.ActivePlans()
	if err != nil {
		return fmt.Errorf("list active plans: %w", err)
	}
	for _, id := range ids {
		p, err := e.store.PlanState(id)
		if err != nil {
			return err
		}
		e.log.Info("resuming plan", "request_id", id, "session_id", p.GetSessionId(), "receipts", p.GetReceiptCount())
		e.Enqueue(p.GetSessionId(), id)
	}
	return nil
}

// Enqueue queues an accepted plan behind the session's other plans.
func (e *Executor) Enqueue(sessionID, requestID string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	q, ok := e.queues[sessionID]
	if !ok {
		q = &queue{}
		e.queues[sessionID] = q
	}
	q.pending = append(q.pending, requestID)
	if !q.running {
		q.running = true
		e.wg.Add(1)
		go e.drain(sessionID, q)
	}
}

// Cancel stops a plan: a queued one never starts, a running one has its
// batch interrupted on the agent. The remaining operations get NOT_RUN
// receipts (CANCELLED) and the plan ends CANCELLED. Cancel waits for that,
// until ctx ends. An atomic plan that is rolling back finishes its rollback.
func (e *Executor) Cancel(ctx context.Context, requestID string) error {
	e.mu.Lock()
	e.cancelled[requestID] = true
	interrupt := e.running[requestID]
	e.mu.Unlock()
	if interrupt != nil {
		interrupt()
	}
	for {
		p, err := e.store.PlanState(requestID)
		if err != nil {
			return err
		}
		if store.IsTerminal(p.GetState()) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// fail ends a plan whose run broke with an internal error.
func (e *Executor) fail(requestID string, cause error) {
	p, err := e.store.PlanState(requestID)
	if err != nil || store.IsTerminal(p.GetState()) {
		return
	}
	p.State = cpv1.Plan_STATE_FAILED
	p.Failure = &cpv1.Failure{ErrorCode: "INTERNAL", Recoverable: false, Message: cause.Error(),
		RetryHint: "check the control plane's log; resubmit the remaining operations under a new request_id"}
	if err := e.store.Commit(p, nil); err != nil {
		e.log.Error("cannot end the plan", "request_id", requestID, "err", err)
	}
}

func (e *Executor) isCancelled(requestID string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cancelled[requestID]
}

// Stop cancels running operations and waits for the workers. Plans that did
// not finish stay active in the store and resume on the next start.
func (e *Executor) Stop() {
	e.cancel()
	e.wg.Wait()
}

func (e *Executor) drain(sessionID string, q *queue) {
	defer e.wg.Done()
	for {
		e.mu.Lock()
		if len(q.pending) == 0 || e.ctx.Err() != nil {
			q.running = false
			e.mu.Unlock()
			return
		}
		id := q.pending[0]
		q.pending = q.pending[1:]
		e.mu.Unlock()
		if err := e.run(id); err != nil && e.ctx.Err() == nil {
			// Not a shutdown: end the plan rather than strand it (it would
			// resume out of order after a restart, behind later plans).
			e.log.Error("plan run failed", "request_id", id, "session_id", sessionID, "err", err)
			e.fail(id, err)
		}
		e.mu.Lock()
		delete(e.cancelled, id)
		e.mu.Unlock()
	}
}

// batchSize is how many operations go to the agent in one Execute stream.
// The agent runs them one by one and commits their receipts in groups, so a
// batch saves a network round trip and an fsync per operation.
const batchSize = 256

// progress is what the committed receipts of a plan say about it, so that a
// resumed plan picks up exactly where it stopped.
type progress struct {
	next       int             // schedule positions consumed (ran, failed or not run)
	done       []*cpv1.Receipt // succeeded or skipped, in order: what a rollback undoes
	failed     *cpv1.Receipt   // the operation that failed, if any
	rolledBack map[string]bool // idempotency keys already undone
	rollback   *cpv1.Failure   // set when the rollback itself failed
	cancelled  bool            // the agent interrupted an operation on Cancel
}

func (pr *progress) observe(r *cpv1.Receipt) {
	switch r.GetStatus() {
	case cpv1.Receipt_STATUS_SUCCEEDED, cpv1.Receipt_STATUS_SKIPPED_IDEMPOTENT:
		pr.done = append(pr.done, r)
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

// run executes a plan, or resumes it after its last committed receipt:
// operations in schedule order, then, if one failed, the rollback of the
// plan's operations (atomic plans) and NOT_RUN receipts for the rest.
func (e *Executor) run(requestID string) error {
	p, req, sched, err := e.store.PlanWork(requestID)
	if err != nil {
		return err
	}
	if store.IsTerminal(p.GetState()) {
		return nil
	}
	sess, err := e.store.Session(p.GetSessionId())
	if err != nil {
		return err
	}
	agent, err := e.fleet.Client(sess.AgentAddress)
	if err != nil {
		return err
	}
	log := e.log.With("request_id", requestID, "session_id", p.GetSessionId())

	pr := &progress{rolledBack: map[string]bool{}}
	if p.GetReceiptCount() > 0 {
		prior, err := e.store.Receipts(requestID, 1, int(p.GetReceiptCount()))
		if err != nil {
			return err
		}
		for _, r := range prior {
			pr.observe(r)
		}
	}
	log.Info("plan running", "operations", len(sched), "from", pr.next+1)
	p.State = cpv1.Plan_STATE_RUNNING
	c := newCommitter(e.store, p)
	seq := p.GetReceiptCount()
	add := func(r *cpv1.Receipt) {
		seq++
		r.Sequence = seq
		log.Debug("receipt", "sequence", seq, "operation_id", r.GetOperationId(), "mcp_call_id", r.GetMcpCallId(),
			"blender_mutation_id", r.GetBlenderMutationId(), "status", r.GetStatus().String())
		pr.observe(r)
		c.add(r)
	}

	e.mu.Lock()
	e.running[requestID] = func() {
		ictx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
		defer cancel()
		if _, err := agent.Cancel(ictx, &agentv1.CancelRequest{SessionId: p.GetSessionId(), RequestId: requestID}); err != nil {
			log.Warn("interrupting the running batch", "err", err)
		}
	}
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.running, requestID)
		e.mu.Unlock()
	}()

	for pr.failed == nil && !pr.cancelled && pr.next < len(sched) && !e.isCancelled(requestID) {
		window := sched[pr.next:min(pr.next+batchSize, len(sched))]
		ops := make([]*cpv1.Operation, len(window))
		for i, idx := range window {
			ops[i] = req.GetOperations()[idx]
		}
		budget := sess.Contract.GetConstraints().GetToolTimeBudgetMs()
		if err := e.execute(agent, requestID, p.GetSessionId(), budget, ops, add, log); err != nil {
			c.close()
			return err // stopping: the plan stays active and resumes
		}
		if err := c.failure(); err != nil {
			c.close()
			return fmt.Errorf("commit receipts: %w", err)
		}
	}
	if pr.failed != nil && p.GetAtomic() && pr.rollback == nil {
		var keys []string
		for i := len(pr.done) - 1; i >= 0; i-- {
			if k := pr.done[i].GetIdempotencyKey(); !pr.rolledBack[k] {
				keys = append(keys, k)
			}
		}
		if len(keys) > 0 {
			if err := e.rollback(agent, requestID, p.GetSessionId(), keys, add, log); err != nil {
				c.close()
				return err
			}
		}
	}
	cancelled := pr.failed == nil && pr.next < len(sched)
	if pr.failed != nil || cancelled {
		for _, idx := range sched[pr.next:] {
			add(notRun(requestID, req.GetOperations()[idx], pr.failed))
		}
	}
	if err := c.close(); err != nil {
		return fmt.Errorf("commit receipts: %w", err)
	}
	p.State = cpv1.Plan_STATE_SUCCEEDED
	if cancelled {
		p.State = cpv1.Plan_STATE_CANCELLED
		p.Failure = &cpv1.Failure{ErrorCode: "CANCELLED", Recoverable: true, Message: "cancelled by CancelPlan",
			RetryHint: "submit the operations that did not run under a new request_id"}
	}
	if pr.failed != nil {
		p.State = cpv1.Plan_STATE_FAILED
		p.Failure = pr.failed.GetError()
		if pr.rollback != nil {
			p.Failure = pr.rollback
		}
	}
	log.Info("plan finished", "state", p.GetState().String())
	return e.store.Commit(p, nil)
}

// execute sends a batch of operations to the agent and hands each receipt
// to add, in order. While the agent is unreachable it retries the operations
// still without a receipt, with the same idempotency keys. It returns an
// error only when the executor is stopping.
func (e *Executor) execute(agent agentv1.AgentServiceClient, requestID, sessionID string, budgetMs int64, ops []*cpv1.Operation, add func(*cpv1.Receipt), log *slog.Logger) error {
	calls := make([]*agentv1.OperationCall, len(ops))
	for i, op := range ops {
		calls[i] = &agentv1.OperationCall{
			OperationId:    op.GetOperationId(),
			ToolName:       op.GetToolName(),
			Args:           op.GetArgs(),
			SafetyLevel:    op.GetSafetyLevel(),
			IdempotencyKey: plan.IdempotencyKey(requestID, op.GetOperationId(), op.GetArgs().AsMap()),
			TimeBudgetMs:   budgetMs,
			Verify:         op.GetVerify(),
		}
	}
	return e.retry(log, func(ctx context.Context, alive func()) (bool, error) {
		for _, c := range calls {
			c.McpCallId = NewID("call") // unique per invocation, retries included
		}
		stream, err := agent.Execute(ctx, &agentv1.ExecuteRequest{SessionId: sessionID, RequestId: requestID, Operations: calls})
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
					e.store.PublishProgress(requestID, pg)
				}
				continue
			}
			if r.GetOperationId() != calls[0].GetOperationId() {
				return false, fmt.Errorf("agent answered for %q, expected %q", r.GetOperationId(), calls[0].GetOperationId())
			}
			calls = calls[1:]
			add(r)
			if st := r.GetStatus(); st != cpv1.Receipt_STATUS_SUCCEEDED && st != cpv1.Receipt_STATUS_SKIPPED_IDEMPOTENT {
				return true, nil
			}
		}
		return true, nil
	}, func(err error) {
		add(transportFailure(requestID, ops[len(ops)-len(calls)], calls[0], err))
	})
}

// rollback asks the agent to undo operations (newest first) and hands each
// ROLLED_BACK (or ROLLBACK_FAILED) receipt to add.
func (e *Executor) rollback(agent agentv1.AgentServiceClient, requestID, sessionID string, keys []string, add func(*cpv1.Receipt), log *slog.Logger) error {
	log.Info("rolling back the plan", "operations", len(keys))
	return e.retry(log, func(ctx context.Context, alive func()) (bool, error) {
		stream, err := agent.Rollback(ctx, &agentv1.RollbackRequest{SessionId: sessionID, RequestId: requestID, IdempotencyKeys: keys})
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
			keys = keys[1:]
			add(resp.GetReceipt())
			if resp.GetReceipt().GetStatus() != cpv1.Receipt_STATUS_ROLLED_BACK {
				return true, nil
			}
		}
		return true, nil
	}, func(err error) {
		add(&cpv1.Receipt{
			RequestId: requestID, IdempotencyKey: keys[0], Status: cpv1.Receipt_STATUS_FAILED, CompleteTime: timestamppb.Now(),
			Error: &cpv1.Failure{ErrorCode: "ROLLBACK_FAILED", Recoverable: false, Message: status.Convert(err).Message(),
				RetryHint: "the agent could not be reached to roll the plan back; inspect the session"},
		})
	})
}

// retry runs attempt until it completes, retrying while the agent is
// unreachable (within AgentRetryWindow). An attempt that hears nothing from
// the agent for OperationTimeout is cancelled; attempt calls alive whenever
// it hears something. giveUp records the final error.
func (e *Executor) retry(log *slog.Logger, attempt func(ctx context.Context, alive func()) (bool, error), giveUp func(error)) error {
	deadline := time.Now().Add(e.cfg.AgentRetryWindow)
	backoff := 100 * time.Millisecond
	for {
		ctx, cancel := context.WithCancel(e.ctx)
		watchdog := time.AfterFunc(e.cfg.OperationTimeout, cancel)
		ok, err := attempt(ctx, func() { watchdog.Reset(e.cfg.OperationTimeout) })
		watchdog.Stop()
		if err != nil && ctx.Err() != nil && e.ctx.Err() == nil {
			err = status.Errorf(codes.DeadlineExceeded, "no answer from the agent for %s", e.cfg.OperationTimeout)
		}
		cancel()
		if ok {
			return nil
		}
		if e.ctx.Err() != nil {
			return e.ctx.Err()
		}
		if status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
			log.Warn("agent call failed", "err", err)
			giveUp(err)
			return nil
		}
		log.Warn("agent unreachable, retrying", "err", err, "backoff", backoff)
		select {
		case <-time.After(backoff):
		case <-e.ctx.Done():
			return e.ctx.Err()
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

func transportFailure(requestID string, op *cpv1.Operation, call *agentv1.OperationCall, err error) *cpv1.Receipt {
	st := status.Convert(err)
	code, hint, action := "AGENT_UNAVAILABLE", "resubmit the plan with the same request_id once the agent is back", cpv1.RepairStep_ACTION_RETRY
	switch st.Code() {
	case codes.DeadlineExceeded:
		code, hint = "TOOL_TIMEOUT", "retry the operation or lower its cost (resolution, samples)"
	case codes.InvalidArgument:
		code, hint, action = "AGENT_REFUSED", "fix the operation's arguments", cpv1.RepairStep_ACTION_REPLACE_ARGS
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

func notRun(requestID string, op *cpv1.Operation, failed *cpv1.Receipt) *cpv1.Receipt {
	if failed == nil {
		return &cpv1.Receipt{
			RequestId: requestID, OperationId: op.GetOperationId(), ToolName: op.GetToolName(),
			Status: cpv1.Receipt_STATUS_NOT_RUN, SafetyLevel: op.GetSafetyLevel(), CompleteTime: timestamppb.Now(),
			Error: &cpv1.Failure{ErrorCode: "CANCELLED", Recoverable: true, Message: "not run: the plan was cancelled",
				RetryHint: "submit the operations that did not run under a new request_id"},
		}
	}
	return &cpv1.Receipt{
		RequestId:    requestID,
		OperationId:  op.GetOperationId(),
		ToolName:     op.GetToolName(),
		Status:       cpv1.Receipt_STATUS_NOT_RUN,
		SafetyLevel:  op.GetSafetyLevel(),
		CompleteTime: timestamppb.Now(),
		Error: &cpv1.Failure{
			ErrorCode:         "PLAN_ABORTED",
			Recoverable:       true,
			RetryHint:         fmt.Sprintf("fix operation %q, then resubmit the remaining operations", failed.GetOperationId()),
			Message:           fmt.Sprintf("not run: operation %q failed earlier in the plan", failed.GetOperationId()),
			MinimalRepairPlan: failed.GetError().GetMinimalRepairPlan(),
		},
	}
}

// NewID returns a random id with a readable prefix, e.g. "call-1f0c…".
func NewID(prefix string) string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return prefix + "-" + hex.EncodeToString(b[:])
}

// Group commit: wait up to groupLinger for groupTarget receipts.
const (
	groupTarget = 32
	groupLinger = time.Millisecond
)

// committer writes receipts in batches while the executor goes on.
type committer struct {
	st   *store.Store
	plan *cpv1.Plan
	in   chan *cpv1.Receipt
	done chan struct{}

	mu  sync.Mutex
	err error
}

func newCommitter(st *store.Store, p *cpv1.Plan) *committer {
	c := &committer{st: st, plan: p, in: make(chan *cpv1.Receipt, 4096), done: make(chan struct{})}
	go c.loop()
	return c
}

func (c *committer) add(r *cpv1.Receipt) { c.in <- r }

func (c *committer) loop() {
	defer close(c.done)
	for r := range c.in {
		batch := []*cpv1.Receipt{r}
		if len(c.in) < groupTarget {
			// Let a few more receipts arrive: one commit for several costs
			// less than one each, and a receipt waits at most this long.
			time.Sleep(groupLinger)
		}
	drain:
		for len(batch) < 4096 {
			select {
			case r, ok := <-c.in:
				if !ok {
					break drain
				}
				batch = append(batch, r)
			default:
				break drain
			}
		}
		if c.failure() != nil {
			continue
		}
		if err := c.st.Commit(c.plan, batch); err != nil {
			c.mu.Lock()
			c.err = err
			c.mu.Unlock()
		}
	}
}

func (c *committer) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// close waits until every added receipt is committed.
func (c *committer) close() error {
	close(c.in)
	<-c.done
	return c.failure()
}
