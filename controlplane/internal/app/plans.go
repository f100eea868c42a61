package app

import (
	"context"
	"slices"

	"github.com/blendplane/blendplane/controlplane/internal/contract"
	"github.com/blendplane/blendplane/controlplane/internal/store"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// Plan returns one of the caller's plans (an admin: of the principal it
// names) with its state and schedule.
func (a *App) Plan(ctx context.Context, who Principal, owner, requestID string) (*cpv1.Plan, error) {
	owner, err := planOwner(who, owner)
	if err != nil {
		return nil, err
	}
	p, err := a.store.Plan(store.PlanRef{Owner: owner, RequestID: requestID})
	if err == nil {
		a.viewPlan(p)
	}
	return p, err
}

// Plans lists a session's plans, newest first, a page at a time: the
// caller's own (an admin's call: every principal's).
func (a *App) Plans(ctx context.Context, who Principal, sessionID string, size int32, token string) ([]*cpv1.Plan, string, error) {
	if _, err := a.session(who, sessionID); err != nil {
		return nil, "", err
	}
	owner := who.Name
	if who.Admin() {
		owner = ""
	}
	query := sessionID + "/" + owner
	before, err := decodePageToken(token, "plans", query)
	if err != nil {
		return nil, "", badPageToken(err)
	}
	list, next, err := a.store.SessionPlans(sessionID, owner, before, pageSize(size))
	if err != nil {
		return nil, "", err
	}
	for _, p := range list {
		a.viewPlan(p)
	}
	return list, encodePageToken("plans", next, query), nil
}

// viewPlan shows a stored plan as the API does: RUNNING once the executor
// started it, even before its first receipt is committed.
func (a *App) viewPlan(p *cpv1.Plan) {
	if p.GetState() == cpv1.Plan_STATE_PENDING && a.exec.Running(store.PlanRef{Owner: p.GetOwner(), RequestID: p.GetRequestId()}) {
		p.State = cpv1.Plan_STATE_RUNNING
	}
}

// Cancel stops one of the caller's plans (an admin: of the principal it
// names) and returns it as it ended; a plan already terminal is returned as
// it is.
func (a *App) Cancel(ctx context.Context, who Principal, owner, requestID string) (*cpv1.Plan, error) {
	owner, err := planOwner(who, owner)
	if err != nil {
		return nil, err
	}
	ref := store.PlanRef{Owner: owner, RequestID: requestID}
	if _, err := a.store.PlanState(ref); err != nil {
		return nil, err
	}
	if err := a.cancelPlan(ctx, who.Name, ref); err != nil {
		return nil, err
	}
	p, err := a.store.Plan(ref)
	if err != nil {
		return nil, err
	}
	a.log.Info("plan cancelled", "request_id", requestID, "owner", owner, "by", who.Name, "state", p.GetState().String())
	return p, nil
}

// receiptPage is how many stored receipts one read takes.
const receiptPage = 512

// Receipts sends a plan's receipts from sequence from on (stored ones, then
// live ones as they are committed) and, if its session negotiated
// progress_events, the progress of its running operation; while the plan
// waits for approval, its approval (when the wait is seen and when its
// preview lands). It returns when the plan is terminal and every receipt
// was sent, or when send fails or ctx ends.
func (a *App) Receipts(ctx context.Context, who Principal, owner, requestID string, from int64, send func(*cpv1.StreamReceiptsResponse) error) error {
	owner, err := planOwner(who, owner)
	if err != nil {
		return err
	}
	ref := store.PlanRef{Owner: owner, RequestID: requestID}
	cursor := max(from, 1)
	var lastProgress *cpv1.Progress
	var lastWait string
	wantProgress := false
	if st, err := a.store.PlanState(ref); err == nil {
		if terms, err := a.store.Terms(st.GetSessionId()); err == nil {
			wantProgress = slices.Contains(terms.FeatureFlags, contract.FlagProgressEvents)
		}
	}
	for {
		st, err := a.store.PlanState(ref)
		if err != nil {
			return err
		}
		var wake <-chan struct{}
		if !store.IsTerminal(st.GetState()) {
			// Watch before reading, then read the state again, so no commit
			// can fall between the read and the wait.
			wake = a.store.Watch(ref)
			if st, err = a.store.PlanState(ref); err != nil {
				return err
			}
		}
		receipts, err := a.store.Receipts(ref, cursor, receiptPage)
		if err != nil {
			return err
		}
		for _, r := range receipts {
			if err := send(&cpv1.StreamReceiptsResponse{Event: &cpv1.StreamReceiptsResponse_Receipt{Receipt: r}}); err != nil {
				return err
			}
			cursor = r.GetSequence() + 1
		}
		if len(receipts) == receiptPage {
			continue
		}
		if st.GetState() == cpv1.Plan_STATE_AWAITING_APPROVAL {
			// Once when the wait is seen, again when the preview lands.
			ap, err := a.store.Approval(st.GetApprovalId())
			if err != nil {
				return err
			}
			if seen := ap.GetApprovalId() + "/" + ap.GetPreview().GetState().String(); seen != lastWait {
				lastWait = seen
				if err := send(&cpv1.StreamReceiptsResponse{Event: &cpv1.StreamReceiptsResponse_AwaitingApproval{AwaitingApproval: ap}}); err != nil {
					return err
				}
			}
		}
		if pg := a.store.Progress(ref); wantProgress && pg != nil && pg != lastProgress {
			lastProgress = pg
			if err := send(&cpv1.StreamReceiptsResponse{Event: &cpv1.StreamReceiptsResponse_Progress{Progress: pg}}); err != nil {
				return err
			}
		}
		if store.IsTerminal(st.GetState()) && cursor > st.GetReceiptCount() {
			return nil
		}
		if wake == nil {
			continue
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
