// Package executor runs accepted plans: one plan at a time per session, one
// operation at a time, in the plan's schedule order. It sends each operation
// to the session's agent with its idempotency key, and hands every receipt to
// the store, which commits it before any stream can see it.
//
// Files:
//
//	executor.go  the per-session queues, Cancel, Stop
//	run.go       running or resuming one plan, its final state
//	agent.go     calls to the agent (Execute, Rollback) with retries
//	commit.go    the receipt committer (group commit)
//
// After a control-plane crash, operations without a committed receipt are
// sent again with the same idempotency key; the agent's journal makes that
// safe.
package executor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/blendplane/blendplane/controlplane/internal/fleet"
	"github.com/blendplane/blendplane/controlplane/internal/store"
	agentv1 "github.com/blendplane/blendplane/gen/blendplane/agent/v1"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/internal/panicguard"
)

// Config tunes how operations are sent to agents.
type Config struct {
	// OperationTimeout bounds one Execute call (a render can be long).
	OperationTimeout time.Duration
	// AgentRetryWindow is how long an unreachable agent is retried before the
	// operation fails with AGENT_UNAVAILABLE.
	AgentRetryWindow time.Duration
	// Place says where a session runs now: its agent and epoch. It may wait
	// (a lost agent's session being rebuilt on another). nil: as the store
	// says.
	Place func(ctx context.Context, sessionID string) (agentID string, epoch int64, err error)
	// Distribute runs an operation that spreads over several agents (a
	// render.animation with "distribute": true) and returns its receipt,
	// failed or not; ctx ends when the plan is cancelled. nil: such
	// operations run on the session's agent like any other.
	Distribute func(ctx context.Context, ref store.PlanRef, sessionID string, op *cpv1.Operation) *cpv1.Receipt
	// AwaitApproval is called when a plan waiting for approval comes to its
	// turn in its session's queue. It waits there, holding back the plans
	// submitted after it, until its approval is resolved: the scene it is
	// previewed on now is the one it will run on. nil: nothing is called.
	AwaitApproval func(ref store.PlanRef, approvalID, sessionID string)
}

// Distributed reports whether an operation is one for Config.Distribute.
func Distributed(op *cpv1.Operation) bool {
	return op.GetToolName() == "render.animation" && op.GetArgs().GetFields()["distribute"].GetBoolValue()
}

// Collect takes the files a receipt names (Receipt.artifacts) from the
// session's agent before the receipt is committed, so that a client who
// sees the receipt can download them (agent is nil when it cannot be
// reached: what the control plane holds is recorded still). An error is
// logged; the receipt is committed anyway.
type Collect func(ctx context.Context, agent agentv1.AgentServiceClient, ref store.PlanRef, sessionID string, r *cpv1.Receipt) error

// Executor runs plans.
type Executor struct {
	cfg     Config
	store   *store.Store
	fleet   *fleet.Fleet
	collect Collect
	log     *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	queues    map[string]*queue        // by session id
	cancelled map[store.PlanRef]bool   // asked to stop, not run to its end yet
	running   map[store.PlanRef]func() // interrupt its batch on the agent
	attempts  map[string]attempt       // by session id: the agent call running now
	moves     map[string]chan struct{} // by session id: closed at its next move
}

// attempt is an agent call in flight: where it goes, and how to stop it.
type attempt struct {
	to     target
	cancel context.CancelFunc
}

// queue holds the plans of one session waiting to run, in order.
type queue struct {
	pending []queued
	running bool
	// held is the progress of the plans behind one that waits for
	// approval, while it waits (nil otherwise).
	held *cpv1.Progress
}

// queued is a plan in a session's queue, with its work when Enqueue kept it.
type queued struct {
	ref  store.PlanRef
	work *Work // nil: read from the store when the plan starts
}

// Work is what a plan runs: its request and schedule, as stored.
type Work struct {
	Request  *cpv1.SubmitPlanRequest
	Schedule []int
}

// New returns an executor; call Resume to pick up unfinished plans.
func New(cfg Config, st *store.Store, fl *fleet.Fleet, collect Collect, log *slog.Logger) *Executor {
	ctx, cancel := context.WithCancel(context.Background())
	return &Executor{cfg: cfg, store: st, fleet: fl, collect: collect, log: log, ctx: ctx, cancel: cancel,
		queues: map[string]*queue{}, cancelled: map[store.PlanRef]bool{}, running: map[store.PlanRef]func(){},
		attempts: map[string]attempt{}, moves: map[string]chan struct{}{}}
}

// Resume queues every plan the store holds as not yet terminal, in
// submission order, so a restarted control plane finishes them; plans
// waiting for approval wait on, at their turn.
func (e *Executor) Resume() error {
	refs, err := e.store.ActivePlans()
	if err != nil {
		return fmt.Errorf("list active plans: %w", err)
	}
	for _, ref := range refs {
		p, err := e.store.PlanState(ref)
		if err != nil {
			return err
		}
		e.log.Info("resuming plan", "request_id", ref.RequestID, "owner", ref.Owner, "session_id", p.GetSessionId(),
			"receipts", p.GetReceiptCount(), "state", p.GetState().String())
		e.Enqueue(p.GetSessionId(), ref, nil)
	}
	return nil
}

// Enqueue queues an accepted plan behind the session's other plans. work,
// when not nil, is the request and schedule just stored for it: a plan
// that starts at once runs from them instead of decoding them back from the
// store (3 ms before the first operation of a 400-operation plan). A plan
// that has to wait keeps only its ref, so that waiting plans hold no
// requests in memory.
func (e *Executor) Enqueue(sessionID string, ref store.PlanRef, work *Work) {
	e.mu.Lock()
	defer e.mu.Unlock()
	q, ok := e.queues[sessionID]
	if !ok {
		q = &queue{}
		e.queues[sessionID] = q
	}
	if q.running {
		work = nil
	}
	q.pending = append(q.pending, queued{ref, work})
	if q.held != nil {
		e.store.PublishProgress(ref, q.held)
	}
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
// A plan that is already terminal is left as it is.
func (e *Executor) Cancel(ctx context.Context, ref store.PlanRef) error {
	for {
		wake := e.store.Watch(ref)
		p, err := e.store.PlanState(ref)
		if err != nil {
			return err
		}
		if store.IsTerminal(p.GetState()) {
			e.forget(ref) // nothing will run it again
			return nil
		}
		e.mu.Lock()
		first := !e.cancelled[ref]
		e.cancelled[ref] = true
		interrupt := e.running[ref]
		var queued *queued
		if interrupt == nil {
			queued = e.dequeue(ref)
		}
		e.mu.Unlock()
		if first && interrupt != nil {
			interrupt()
		}
		if queued != nil {
			// Queued behind another plan (one that runs, or waits for its
			// approval for as long as that takes): it ends now, out of its
			// turn, nothing of it run (it waited for its turn to end: the
			// cancel for as long as the plan ahead ran or waited).
			e.wg.Add(1)
			go func() {
				defer e.wg.Done()
				if err := e.guardedRun(ref, queued.work); err != nil && e.ctx.Err() == nil {
					e.fail(ref, err)
				}
				e.mu.Lock()
				delete(e.cancelled, ref)
				e.mu.Unlock()
			}()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake:
		case <-time.After(time.Second):
			// The plan may have started after we looked: interrupt it too.
			e.mu.Lock()
			interrupt = e.running[ref]
			e.mu.Unlock()
			if interrupt != nil {
				interrupt()
			}
		}
	}
}

// dequeue takes a plan out of its session's queue, where it waits for its
// turn; nil when it is not there (running, or not queued). e.mu is held.
func (e *Executor) dequeue(ref store.PlanRef) *queued {
	for _, q := range e.queues {
		for i, next := range q.pending {
			if next.ref == ref {
				q.pending = slices.Delete(q.pending, i, i+1)
				return &next
			}
		}
	}
	return nil
}

// forget drops a plan's cancel mark once it can no longer run.
func (e *Executor) forget(ref store.PlanRef) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.running[ref] == nil {
		delete(e.cancelled, ref)
	}
}

// awaitApproval holds a plan waiting for approval (and its session's queue)
// until its approval is resolved, and returns its state then.
func (e *Executor) awaitApproval(ref store.PlanRef, p *cpv1.Plan) (*cpv1.Plan, error) {
	if e.cfg.AwaitApproval != nil {
		e.cfg.AwaitApproval(ref, p.GetApprovalId(), p.GetSessionId())
	}
	e.log.Info("plan waits for its approval", "request_id", ref.RequestID, "session_id", p.GetSessionId(), "approval_id", p.GetApprovalId())
	detail, _ := structpb.NewStruct(map[string]any{"waiting_behind": ref.RequestID, "approval_id": p.GetApprovalId()})
	e.hold(p.GetSessionId(), &cpv1.Progress{Detail: detail})
	defer e.hold(p.GetSessionId(), nil)
	for {
		wake := e.store.Watch(ref)
		p, err := e.store.PlanState(ref)
		if err != nil || p.GetState() != cpv1.Plan_STATE_AWAITING_APPROVAL {
			return p, err
		}
		select {
		case <-wake:
		case <-e.ctx.Done():
			return nil, e.ctx.Err() // stopping: it waits again at the next start
		}
	}
}

// hold tells the plans queued in a session, and those queued later, that
// they wait behind a plan waiting for approval (pg), or no more (nil).
func (e *Executor) hold(sessionID string, pg *cpv1.Progress) {
	e.mu.Lock()
	defer e.mu.Unlock()
	q := e.queues[sessionID]
	if q == nil {
		return
	}
	q.held = pg
	for _, next := range q.pending {
		e.store.PublishProgress(next.ref, pg)
	}
}

func (e *Executor) isCancelled(ref store.PlanRef) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cancelled[ref]
}

// Running reports whether the executor is running the plan now. Its state
// in the store says RUNNING only from its first committed receipt on: the
// start is not worth a commit of its own on every plan's path.
func (e *Executor) Running(ref store.PlanRef) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.running[ref] != nil
}

// Pending reports how many cancel marks the executor holds (for tests: it
// must not grow with plans that ended).
func (e *Executor) Pending() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.cancelled)
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
			if len(q.pending) == 0 {
				delete(e.queues, sessionID)
			}
			e.mu.Unlock()
			return
		}
		next := q.pending[0]
		q.pending[0] = queued{} // the array outlives the slice: not its request
		q.pending = q.pending[1:]
		e.mu.Unlock()
		ref := next.ref
		err := e.guardedRun(ref, next.work)
		for errors.Is(err, store.ErrStaleEpoch) && e.ctx.Err() == nil {
			// Receipts of the session's old placement were refused: it runs
			// elsewhere now. Resume from what is committed.
			e.log.Info("plan continues where its session was placed anew", "request_id", ref.RequestID, "session_id", sessionID)
			err = e.guardedRun(ref, next.work)
		}
		if err != nil && e.ctx.Err() == nil {
			// Not a shutdown: end the plan rather than strand it (it would
			// resume out of order after a restart, behind later plans).
			e.log.Error("plan run failed", "request_id", ref.RequestID, "session_id", sessionID, "err", err)
			e.fail(ref, err)
		}
		e.mu.Lock()
		delete(e.cancelled, ref)
		e.mu.Unlock()
	}
}

// guardedRun is run with its panic (a bug, or stored or agent data no
// check foresaw) as its error, which fails the plan: no handler's recovery
// reaches the executor's goroutines, and a plan that crashed the control
// plane would crash it again at every start, resumed.
func (e *Executor) guardedRun(ref store.PlanRef, w *Work) (err error) {
	defer panicguard.Catch("running plan "+ref.RequestID, &err)
	return e.run(ref, w)
}

// fail ends a plan whose run broke with an internal error.
func (e *Executor) fail(ref store.PlanRef, cause error) {
	p, err := e.store.PlanState(ref)
	if err != nil || store.IsTerminal(p.GetState()) {
		return
	}
	p.State = cpv1.Plan_STATE_FAILED
	p.Failure = &cpv1.Failure{ErrorCode: "INTERNAL", Recoverable: false, Message: cause.Error(),
		RetryHint: "check the control plane's log; resubmit the remaining operations under a new request_id"}
	if err := e.store.Commit(ref, p, nil); err != nil {
		e.log.Error("cannot end the plan", "request_id", ref.RequestID, "err", err)
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
