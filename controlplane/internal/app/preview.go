package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

// previewTimeout bounds one preview on its agent; previewAgentWait is how
// long an unknown or unreachable agent is waited for. A preview waits for a
// slot on its session's agent (previewsPerAgent: an agent that does not
// answer holds only its own) and one in all (previewsAtOnce), holding only
// its approval's id, and reads its approval and plan when its turn comes:
// a goroutine per pending approval held each whole plan for as long as its
// agent took (six plans of 100,000 operations waiting on a stalled agent
// held 1 GB).
const (
	previewTimeout   = 10 * time.Minute
	previewAgentWait = 2 * time.Minute
	previewsAtOnce   = 8
	previewsPerAgent = 2
)

// previewSlots are the previews running, in all and by agent.
type previewSlots struct {
	all     chan struct{}
	mu      sync.Mutex
	byAgent map[string]chan struct{}
}

func newPreviewSlots() *previewSlots {
	return &previewSlots{all: make(chan struct{}, previewsAtOnce), byAgent: map[string]chan struct{}{}}
}

// take waits for a slot on agentID, then one in all; release gives both back.
func (p *previewSlots) take(ctx context.Context, agentID string) (release func(), err error) {
	p.mu.Lock()
	agent, ok := p.byAgent[agentID]
	if !ok {
		agent = make(chan struct{}, previewsPerAgent)
		p.byAgent[agentID] = agent
	}
	p.mu.Unlock()
	select {
	case agent <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case p.all <- struct{}{}:
	case <-ctx.Done():
		<-agent
		return nil, ctx.Err()
	}
	return func() { <-p.all; <-agent }, nil
}

// startPreview computes an approval's preview in the background: the plan
// dry-run on a throwaway fork of its session on the session's agent. The
// preview is stored with the approval (STATE_READY, or STATE_FAILED with
// the failure) and wakes the plan's streams.
func (a *App) startPreview(ref store.PlanRef, approvalID, sessionID string) {
	a.previews.Add(1)
	go func() {
		defer a.previews.Done()
		agentID := "" // unknown: the preview fails, saying why
		if sess, err := a.store.Session(sessionID); err == nil {
			agentID = sess.Info.GetAgentId()
		}
		release, err := a.previewSlots.take(a.previewCtx, agentID)
		if err != nil {
			return // stopping: the next Start computes it again
		}
		defer release()
		ap, err := a.store.Approval(approvalID)
		if err != nil {
			a.log.Warn("reading an approval to preview failed", "approval_id", approvalID, "err", err)
			return
		}
		if ap.GetState() != cpv1.Approval_STATE_PENDING {
			return // decided (or cancelled) while it waited: no one will look
		}
		p := a.preview(a.previewCtx, ref, ap)
		if a.previewCtx.Err() != nil {
			return // stopping: the next Start computes it again
		}
		p.CompleteTime = timestamppb.Now()
		if err := a.store.SetPreview(approvalID, p); err != nil {
			a.log.Warn("storing a preview failed", "approval_id", approvalID, "err", err)
		}
	}()
}

func (a *App) preview(ctx context.Context, ref store.PlanRef, ap *cpv1.Approval) *cpv1.Preview {
	failed := func(err error) *cpv1.Preview {
		a.log.Warn("preview failed", "approval_id", ap.GetApprovalId(), "request_id", ref.RequestID, "err", err)
		return &cpv1.Preview{State: cpv1.Preview_STATE_FAILED, Failure: &cpv1.Failure{ErrorCode: "PREVIEW_UNAVAILABLE",
			Recoverable: true, Message: "no preview: " + err.Error(), RetryHint: "decide without a preview, or cancel and submit the plan again"}}
	}
	_, req, sched, err := a.store.PlanWork(ref)
	if err != nil {
		return failed(err)
	}
	ops := make([]*agentv1.OperationCall, len(sched))
	for i, idx := range sched {
		o := req.GetOperations()[idx]
		ops[i] = &agentv1.OperationCall{OperationId: o.GetOperationId(), ToolName: o.GetToolName(), Args: o.GetArgs(),
			SafetyLevel: o.GetSafetyLevel(), McpCallId: ap.GetApprovalId() + ":preview:" + o.GetOperationId(),
			IdempotencyKey: plan.IdempotencyKey(ref.RequestID, o.GetOperationId(), o.GetArgs().AsMap())}
	}
	ctx, cancel := context.WithTimeout(ctx, previewTimeout)
	defer cancel()
	start := time.Now()
	// The agent may not be back yet (a restart of either daemon): retry
	// while it is unknown or unreachable. The session may have moved to
	// another agent since its last plan: it is rebuilt there first (as a
	// plan's first batch would have it), else that agent does not know it.
	var resp *agentv1.PreviewResponse
	for {
		agentID, _, err := a.placement(ctx, ap.GetSessionId())
		var agent agentv1.AgentServiceClient
		if err == nil {
			agent, err = a.fleet.Client(agentID)
		}
		if err == nil {
			resp, err = agent.Preview(ctx, &agentv1.PreviewRequest{SessionId: ap.GetSessionId(), Operations: ops, Render: req.GetPreviewRender()})
			if err == nil {
				break
			}
		}
		if status.Code(err) != codes.Unavailable && !errors.Is(err, fleet.ErrUnknownAgent) || time.Since(start) > previewAgentWait {
			return failed(err)
		}
		select {
		case <-ctx.Done():
			return failed(ctx.Err())
		case <-time.After(time.Second):
		}
	}
	p := &cpv1.Preview{State: cpv1.Preview_STATE_READY, SceneHashBefore: resp.GetSceneHashBefore(),
		SceneHashAfter: resp.GetSceneHashAfter(), Changes: resp.GetChanges(),
		FailedOperationId: resp.GetFailedOperationId(), Failure: resp.GetFailure()}
	if p.Failure != nil {
		p.State = cpv1.Preview_STATE_FAILED
	}
	if png := resp.GetRenderPng(); len(png) > 0 {
		if p.Render, err = a.storeBytes(ap.GetSessionId(), ref.RequestID, fmt.Sprintf("preview-%s.png", ap.GetApprovalId()), png); err != nil {
			a.log.Warn("storing a preview render failed", "approval_id", ap.GetApprovalId(), "err", err)
		}
	}
	a.log.Info("preview ready", "approval_id", ap.GetApprovalId(), "request_id", ref.RequestID, "changes", len(p.Changes),
		"failed_operation", p.FailedOperationId, "took", time.Since(start).Round(time.Millisecond))
	return p
}

// storeBytes keeps content the control plane made for a plan (requestID)
// as an artifact of its session, naming the plan and no operation: its
// content is in the blob store only, never in the session's sandbox. It
// counts under the session owner's artifact quota, as any artifact does.
func (a *App) storeBytes(sessionID, requestID, name string, content []byte) (*cpv1.Artifact, error) {
	owner, err := a.store.SessionOwner(sessionID)
	if err != nil {
		return nil, err
	}
	n := int64(len(content))
	if ok, err := a.reserve(owner, n); err != nil {
		return nil, err
	} else if !ok {
		return nil, a.overQuota(owner, n)
	}
	defer a.unreserve(owner, n)
	w, err := a.blobs.Create(n)
	if err != nil {
		return nil, err
	}
	defer w.Abort()
	if _, err := bytes.NewReader(content).WriteTo(w); err != nil {
		return nil, err
	}
	sum, err := w.Commit()
	if err != nil {
		return nil, err
	}
	return a.store.PutArtifact(&cpv1.Artifact{SessionId: sessionID, Name: name, SizeBytes: int64(len(content)),
		Sha256: sum, RequestId: requestID, CreateTime: timestamppb.Now()})
}

// awaitApproval starts the preview of a plan waiting for approval, now at
// its turn in its session's queue (executor.Config.AwaitApproval), unless
// it has one (computed before a restart).
func (a *App) awaitApproval(ref store.PlanRef, approvalID, sessionID string) {
	ap, err := a.store.Approval(approvalID)
	if err != nil {
		a.log.Warn("reading an approval to preview failed", "approval_id", approvalID, "err", err)
		return
	}
	if ap.GetState() == cpv1.Approval_STATE_PENDING && ap.GetPreview().GetState() == cpv1.Preview_STATE_PENDING {
		a.startPreview(ref, approvalID, sessionID)
	}
}
