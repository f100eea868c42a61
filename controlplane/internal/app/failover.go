package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/blendplane/blendplane/controlplane/internal/executor"
	"github.com/blendplane/blendplane/controlplane/internal/plan"
	"github.com/blendplane/blendplane/controlplane/internal/store"
	agentv1 "github.com/blendplane/blendplane/gen/blendplane/agent/v1"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// Failover. An agent silent for --agent-lost-after is LOST: each of its
// open sessions is placed on a READY agent whose runtime has the same tool
// registry and baseline scene, under a new epoch (so that anything the lost
// agent still reports is refused), and its running attempt is stopped.
// The session is rebuilt on its new agent when it is next needed (a plan's
// next call waits for it): the control plane's redo log of the session —
// its audit records in commit order — is replayed there, every operation
// that changed the scene with its original idempotency key, every rollback
// as a rollback, and each replayed receipt must hash as the committed one
// did. A session whose history cannot be replayed exactly (a
// nondeterministic tool, a hash that differs) is marked BROKEN rather than
// silently diverged.

// replaySilence ends a replay call that hears nothing from its agent for
// this long (each replayed call also has the contract's tool time budget).
const replaySilence = 2 * time.Minute

// replayBatch is how many operations of one plan go to the new agent in one
// Execute: the agent pipelines them and commits their receipts in groups.
const replayBatch = 2048

// errDiverged: a rebuild did not reproduce the committed scene.
var errDiverged = errors.New("the session cannot be rebuilt exactly")

// rebuilds runs at most one rebuild per session at a time; callers that
// come while one runs wait for its outcome.
type rebuilds struct {
	mu      sync.Mutex
	running map[string]*rebuild
}

type rebuild struct {
	done   chan struct{}
	err    error
	cancel context.CancelFunc // a move elsewhere ends it
}

// placement is where a session runs now, once it is rebuilt there: the
// executor's Config.Place. A broken session is FAILED_PRECONDITION, a
// rebuild that could not reach its agent UNAVAILABLE (the executor retries).
func (a *App) placement(ctx context.Context, sessionID string) (string, int64, error) {
	for {
		p, err := a.store.Placement(sessionID)
		if err != nil {
			return "", 0, err
		}
		switch {
		case p.Closed():
			return "", 0, status.Errorf(codes.FailedPrecondition, "session %s was closed", sessionID)
		case p.Broken():
			return "", 0, status.Errorf(codes.FailedPrecondition, "session %s lost its agent and could not be rebuilt exactly on another", sessionID)
		case p.Rebuilt >= p.Epoch:
			return p.AgentID, p.Epoch, nil
		}
		sess, err := a.store.Session(sessionID)
		if err != nil {
			return "", 0, err
		}
		if err := a.rebuildOnce(ctx, sess); err != nil {
			if errors.Is(err, errDiverged) {
				continue // now broken
			}
			return "", 0, status.Errorf(codes.Unavailable, "rebuilding session %s on agent %s: %v", sessionID, sess.Info.GetAgentId(), err)
		}
	}
}

// rebuildOnce rebuilds a session on its agent, or waits for the rebuild
// that runs.
func (a *App) rebuildOnce(ctx context.Context, sess store.Session) error {
	id := sess.Info.GetSessionId()
	a.rebuilds.mu.Lock()
	if r, ok := a.rebuilds.running[id]; ok {
		a.rebuilds.mu.Unlock()
		select {
		case <-r.done:
			return r.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// Not tied to the caller (the executor's attempt may end first): a move
	// of the session, or the control plane stopping, ends it.
	rctx, cancel := context.WithCancel(a.previewCtx)
	defer cancel()
	r := &rebuild{done: make(chan struct{}), cancel: cancel}
	a.rebuilds.running[id] = r
	a.rebuilds.mu.Unlock()
	defer func() {
		a.rebuilds.mu.Lock()
		delete(a.rebuilds.running, id)
		a.rebuilds.mu.Unlock()
		close(r.done)
	}()
	r.err = a.rebuild(rctx, sess)
	if errors.Is(r.err, errDiverged) {
		a.log.Error("session broken: it cannot be rebuilt exactly on its new agent", "session_id", id, "agent_id", sess.Info.GetAgentId(), "err", r.err)
		if err := a.store.MarkBroken(id); err != nil {
			return err
		}
	}
	return r.err
}

// failoverLost places the open sessions of LOST agents on other agents.
func (a *App) failoverLost(ctx context.Context) {
	lost := a.fleet.Lost()
	if len(lost) == 0 {
		a.unplaced = nil
		return // the usual case: no scan of the sessions every tick
	}
	held, err := a.store.SessionsByAgent()
	if err != nil {
		a.log.Warn("listing sessions by agent", "err", err)
		return
	}
	waiting := map[string]string{}
	for _, agentID := range lost {
		for _, id := range held[agentID] {
			if err := a.move(id, agentID); err != nil {
				// Said once, and again when the reason changes: it is tried
				// every heartbeat.
				if waiting[id] = err.Error(); a.unplaced[id] != waiting[id] {
					a.log.Warn("cannot place the session of a lost agent elsewhere yet", "session_id", id, "lost_agent_id", agentID, "err", err)
				}
			}
		}
	}
	a.unplaced = waiting
}

// move places a session of a lost agent on the best READY agent that
// carries the labels its contract asks for and has a runtime that replays
// it exactly (same tool registry, same baseline scene), under a new epoch,
// and stops its running attempt.
func (a *App) move(sessionID, lostAgent string) error {
	sess, err := a.store.Session(sessionID)
	if err != nil || sess.Closed() || sess.Broken() || sess.Info.GetAgentId() != lostAgent {
		return err
	}
	places, err := a.fleet.Place(sess.Info.GetContract().GetAgentSelector(), replays(sess))
	if err != nil {
		return err
	}
	to := places[0]
	epoch, err := a.store.MoveSession(sessionID, to.AgentID, to.Runtime.GetRuntimeId())
	if err != nil {
		return err
	}
	a.fleet.Placed(to.AgentID, sessionID)
	a.cfg.Metrics.Moved()
	a.rebuilds.mu.Lock()
	if r, ok := a.rebuilds.running[sessionID]; ok {
		r.cancel() // it rebuilt on the agent just lost
	}
	a.rebuilds.mu.Unlock()
	a.exec.Moved(sessionID)
	a.log.Warn("session placed on another agent: its agent is lost", "session_id", sessionID, "lost_agent_id", lostAgent,
		"agent_id", to.AgentID, "runtime_id", to.Runtime.GetRuntimeId(), "epoch", epoch)
	return nil
}

// replays accepts the runtimes that replay a session's log exactly: the
// same tool registry and the same baseline scene.
func replays(sess store.Session) func(*cpv1.Runtime) bool {
	fp, baseline := sess.RegistryFingerprint(), sess.Info.GetContract().GetBaselineSceneHash()
	return func(rt *cpv1.Runtime) bool {
		return rt.GetRegistry().GetFingerprint() == fp && rt.GetBaselineSceneHash() == baseline
	}
}

// rebuild opens the session on its (new) agent under its epoch, replays its
// redo log there and gives it the files its sandbox held (restore).
func (a *App) rebuild(ctx context.Context, sess store.Session) error {
	id, agentID, epoch := sess.Info.GetSessionId(), sess.Info.GetAgentId(), sess.Info.GetEpoch()
	log := a.log.With("session_id", id, "agent_id", agentID, "epoch", epoch)
	log.Info("rebuilding the session from the control plane's log", "checkpoint_held", sess.Checkpoint != nil) // used unless the log after it must be replayed whole
	r, err := a.restore(ctx, agentID, sess, id, sess.Info.GetRuntimeId(), epoch)
	if err != nil {
		return err
	}
	if r.hash != sess.Info.GetSceneHash() {
		return fmt.Errorf("%w: the replay ends on scene %s, the session's committed scene is %s", errDiverged, r.hash, sess.Info.GetSceneHash())
	}
	if err := a.store.MarkRebuilt(id, epoch); err != nil {
		return err
	}
	log.Info("session rebuilt", "from_checkpoint", r.fromCheckpoint, "operations_replayed", r.replayed,
		"rollbacks_replayed", r.rolledBack, "scene_hash", r.hash)
	return nil
}

// replayer sends a session's redo log to its new agent: consecutive
// operations of one plan as one Execute batch, consecutive rollbacks of
// one plan as one Rollback.
type replayer struct {
	app       *App
	agent     agentv1.AgentServiceClient
	sessionID string
	epoch     int64
	reg       *plan.Registry
	plans     map[store.PlanRef]*cpv1.SubmitPlanRequest
	files     *replayFiles

	ref        store.PlanRef
	calls      []*agentv1.OperationCall // pending Execute batch of ref
	keys       []string                 // pending Rollback of ref
	expect     []string                 // committed scene hash after each pending call or key
	hash       string                   // scene hash after what was replayed
	replayed   int
	rolledBack int
	// fromCheckpoint: it started from the control plane's checkpoint.
	fromCheckpoint bool
	budgetMs       int64 // each replayed call's time budget (the contract's)
}

// add takes one audit record of the session's history.
func (r *replayer) add(ctx context.Context, rec *cpv1.AuditRecord) error {
	if !changesScene(rec) {
		return nil // an approval decision, a read, a failure that left nothing
	}
	rollback := rec.GetStatus() == cpv1.Receipt_STATUS_ROLLED_BACK
	ref := store.PlanRef{Owner: rec.GetPrincipal(), RequestID: rec.GetRequestId()}
	req, err := r.plan(ref)
	if err != nil {
		return err
	}
	var op *cpv1.Operation
	for _, o := range req.GetOperations() {
		if o.GetOperationId() == rec.GetOperationId() {
			op = o
			break
		}
	}
	if op == nil {
		return fmt.Errorf("%w: the log names operation %q, which plan %s does not hold", errDiverged, rec.GetOperationId(), ref)
	}
	key := plan.IdempotencyKey(ref.RequestID, op.GetOperationId(), op.GetArgs().AsMap())
	if kindChanged := (rollback && len(r.calls) > 0) || (!rollback && len(r.keys) > 0); ref != r.ref || kindChanged {
		if err := r.flush(ctx); err != nil {
			return err
		}
		r.ref = ref
	}
	if rollback {
		r.keys = append(r.keys, key)
	} else {
		if def, _ := r.reg.Lookup(op.GetToolName()); def.Determinism == "nondeterministic" {
			return fmt.Errorf("%w: its history holds %s (operation %q of plan %s), which is nondeterministic", errDiverged, op.GetToolName(), op.GetOperationId(), ref)
		}
		if op.GetToolName() == "scene.import" {
			if err := r.giveImportItsFiles(ctx, ref, op); err != nil {
				return err
			}
		}
		r.calls = append(r.calls, &agentv1.OperationCall{OperationId: op.GetOperationId(), ToolName: op.GetToolName(), Args: op.GetArgs(),
			SafetyLevel: op.GetSafetyLevel(), IdempotencyKey: key, McpCallId: cmp.Or(rec.GetMcpCallId(), executor.NewID("replay")),
			TimeBudgetMs: r.budgetMs})
	}
	r.expect = append(r.expect, rec.GetSceneHashAfter())
	if len(r.expect) >= replayBatch {
		return r.flush(ctx)
	}
	return nil
}

// giveImportItsFiles pushes the versions of the files a replayed
// scene.import read the first time, once the calls before it ran.
func (r *replayer) giveImportItsFiles(ctx context.Context, ref store.PlanRef, op *cpv1.Operation) error {
	arts, err := r.files.beforeImport(ref, op.GetOperationId())
	if len(arts) == 0 || err != nil {
		return err
	}
	if err := r.flush(ctx); err != nil {
		return err
	}
	for _, art := range arts {
		if err := r.files.push(ctx, art); err != nil {
			return err
		}
	}
	return nil
}

func (r *replayer) plan(ref store.PlanRef) (*cpv1.SubmitPlanRequest, error) {
	if req, ok := r.plans[ref]; ok {
		return req, nil
	}
	_, req, _, err := r.app.store.PlanWork(ref)
	if err != nil {
		return nil, err
	}
	r.plans[ref] = req
	return req, nil
}

// flush sends the pending batch and checks every receipt's scene hash
// against the committed one.
func (r *replayer) flush(ctx context.Context) error {
	defer func() { r.calls, r.keys, r.expect = nil, nil, nil }()
	check := func(i int, rc *cpv1.Receipt, want cpv1.Receipt_Status) error {
		st := rc.GetStatus()
		if st != want && !(want == cpv1.Receipt_STATUS_SUCCEEDED && st == cpv1.Receipt_STATUS_SKIPPED_IDEMPOTENT) {
			switch rc.GetError().GetErrorCode() {
			case "BLENDER_EXITED", "TIMEOUT", "RESOURCE_EXHAUSTED", "INTERNAL_ERROR":
				// The agent's trouble, not the history's: the rebuild is retried.
				return fmt.Errorf("replaying %q of plan %s: %s: %s", rc.GetOperationId(), r.ref, rc.GetError().GetErrorCode(), rc.GetError().GetMessage())
			}
			return fmt.Errorf("%w: replaying %q of plan %s gave %v (%s)", errDiverged, rc.GetOperationId(), r.ref, st, rc.GetError().GetMessage())
		}
		if rc.GetSceneHashAfter() != r.expect[i] {
			return fmt.Errorf("%w: replaying %q of plan %s gave scene %s, committed %s", errDiverged, rc.GetOperationId(), r.ref, rc.GetSceneHashAfter(), r.expect[i])
		}
		r.hash = rc.GetSceneHashAfter()
		return nil
	}
	// An agent that stops answering (partitioned without a reset, a tool
	// that hangs) must not hold the rebuild forever.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watchdog := time.AfterFunc(replaySilence, cancel)
	defer watchdog.Stop()
	alive := func() { watchdog.Reset(replaySilence) }
	switch {
	case len(r.calls) > 0:
		stream, err := r.agent.Execute(ctx, &agentv1.ExecuteRequest{SessionId: r.sessionID, RequestId: r.ref.RequestID, Operations: r.calls, Epoch: r.epoch})
		if err != nil {
			return err
		}
		for i := 0; i < len(r.calls); {
			resp, err := stream.Recv()
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = errors.New("the agent ended the replay early")
				}
				return err
			}
			alive()
			if rc := resp.GetReceipt(); rc != nil {
				if err := check(i, rc, cpv1.Receipt_STATUS_SUCCEEDED); err != nil {
					return err
				}
				i++
				r.replayed++
			}
		}
	case len(r.keys) > 0:
		stream, err := r.agent.Rollback(ctx, &agentv1.RollbackRequest{SessionId: r.sessionID, RequestId: r.ref.RequestID, IdempotencyKeys: r.keys, Epoch: r.epoch})
		if err != nil {
			return err
		}
		for i := range r.keys {
			resp, err := stream.Recv()
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = errors.New("the agent ended the replayed rollback early")
				}
				if c := status.Code(err); c == codes.NotFound || c == codes.FailedPrecondition {
					// The agent holds no undo record of an operation the log
					// rolls back: the replay cannot follow the history.
					err = fmt.Errorf("%w: replaying a rollback of plan %s: %v", errDiverged, r.ref, err)
				}
				return err
			}
			alive()
			if err := check(i, resp.GetReceipt(), cpv1.Receipt_STATUS_ROLLED_BACK); err != nil {
				return err
			}
			r.rolledBack++
		}
	}
	return nil
}

// movedSessions are the sessions an agent reports holding that it must
// drop: placed on another agent, or closed.
func (a *App) movedSessions(agentID string, held []*cpv1.HeldSession) []string {
	var out []string
	for _, h := range held {
		at, err := a.store.Placement(h.GetSessionId())
		if err != nil {
			continue // unknown: a negotiation may be storing it right now
		}
		// Held here under an older epoch is not moved: placing it here again
		// (OpenSession with the new epoch) discards the stale copy itself.
		if at.AgentID != agentID || at.Closed() {
			out = append(out, h.GetSessionId())
		}
	}
	return out
}
