package app

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/blendplane/blendplane/controlplane/internal/auth"
	"github.com/blendplane/blendplane/controlplane/internal/contract"
	"github.com/blendplane/blendplane/controlplane/internal/store"
	agentv1 "github.com/blendplane/blendplane/gen/blendplane/agent/v1"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// session returns one of the caller's sessions (any, for an admin);
// another principal's is not found: its existence is not revealed.
func (a *App) session(who Principal, id string) (store.Session, error) {
	sess, err := a.store.Session(id)
	if err != nil {
		return store.Session{}, err
	}
	if sess.Owner != who.Name && !who.Admin() {
		return store.Session{}, fmt.Errorf("session %q: %w", id, store.ErrSessionNotFound)
	}
	return sess, nil
}

// planOwner is whose plans a call addresses: the caller's, or, for an
// admin, the principal it names.
func planOwner(who Principal, owner string) (string, error) {
	if owner == "" || owner == who.Name {
		return who.Name, nil
	}
	if !who.Admin() {
		return "", &ScopeError{Scope: auth.ScopeAdmin, Action: "addressing another principal's plans"}
	}
	return owner, nil
}

// view is a session as the API shows it: OPEN while its Blender runs (as
// its agent last reported) or a plan of it is waiting or running, PARKED
// when its Blender is stopped, CLOSED once closed, BROKEN when it lost its
// agent and could not be rebuilt.
func (a *App) view(sess store.Session) *cpv1.Session {
	info := sess.Info
	info.Owner = sess.Owner
	if !sess.Closed() && !sess.Broken() {
		info.State = cpv1.Session_STATE_PARKED
		if info.GetActivePlanCount() > 0 || a.fleet.Live(info.GetAgentId(), info.GetSessionId()) {
			info.State = cpv1.Session_STATE_OPEN
		}
	}
	return info
}

// Session returns one of the caller's sessions with its state.
func (a *App) Session(ctx context.Context, who Principal, id string) (*cpv1.Session, error) {
	sess, err := a.session(who, id)
	if err != nil {
		return nil, err
	}
	return a.view(sess), nil
}

// Sessions lists the caller's sessions in negotiation order (an admin's
// call with allPrincipals: everyone's, by session id), a page at a time,
// those in state only (unspecified: all but closed ones).
func (a *App) Sessions(ctx context.Context, who Principal, size int32, token string, state cpv1.Session_State, allPrincipals bool) ([]*cpv1.Session, string, error) {
	keep := func(s store.Session) bool {
		v := a.view(s)
		if state == cpv1.Session_STATE_UNSPECIFIED {
			return v.GetState() != cpv1.Session_STATE_CLOSED
		}
		return v.GetState() == state
	}
	var list []store.Session
	var next string
	if allPrincipals {
		if err := Require(who, auth.ScopeAdmin, "listing every principal's sessions"); err != nil {
			return nil, "", err
		}
		after, err := decodeNamePageToken(token, "all-sessions/"+state.String())
		if err != nil {
			return nil, "", badPageToken(err)
		}
		var last string
		list, last, err = a.store.AllSessions(after, pageSize(size), keep)
		if err != nil {
			return nil, "", err
		}
		next = encodeNamePageToken("all-sessions/"+state.String(), last)
	} else {
		query := state.String()
		after, err := decodePageToken(token, "sessions", query)
		if err != nil {
			return nil, "", badPageToken(err)
		}
		var last uint64
		list, last, err = a.store.ListSessions(who.Name, after, pageSize(size), keep)
		if err != nil {
			return nil, "", err
		}
		next = encodePageToken("sessions", last, query)
	}
	views := make([]*cpv1.Session, 0, len(list))
	for _, s := range list {
		views = append(views, a.view(s))
	}
	return views, next, nil
}

// CloseSession closes one of the caller's sessions: no plan is accepted in
// it from now on, its unfinished plans are cancelled, and its agent stops
// its Blender and removes its files. Plans, receipts, audit and artifacts
// stay. If the agent cannot be told now, it is told later (releaseLoop).
func (a *App) CloseSession(ctx context.Context, who Principal, id string) (*cpv1.Session, error) {
	sess, err := a.session(who, id)
	if err != nil {
		return nil, err
	}
	if !sess.Closed() {
		if sess, err = a.store.CloseSession(id, time.Now()); err != nil {
			return nil, err
		}
		a.log.Info("session closed", "session_id", id, "owner", who.Name)
	}
	a.endClosed(ctx, who.Name, id)
	if sess, err = a.store.Session(id); err != nil {
		return nil, err
	}
	return a.view(sess), nil
}

// endClosed cancels a closed session's unfinished plans, waits for them
// to end (until ctx ends) and releases the session on its agent.
func (a *App) endClosed(ctx context.Context, by, id string) {
	if err := a.cancelSessionPlans(ctx, by, id); err != nil {
		a.log.Warn("cancelling the plans of a closed session", "session_id", id, "err", err)
	}
	a.release(ctx, id)
}

// closeEphemeral closes the sessions of clients that lived in the previous
// run's memory (contract.CapabilityEphemeral: its MCP sessions over HTTP,
// which ended with it), before their plans could resume. It returns them,
// for endClosed once the executor runs.
func (a *App) closeEphemeral() ([]store.Session, error) {
	return a.closeWhere(func(s store.Session) bool {
		return slices.Contains(s.Info.GetContract().GetHostProfile().GetCapabilities(), contract.CapabilityEphemeral)
	}, "its client ended with the control plane's last run")
}

// closeWhere closes every open session keep selects (why says why, in the
// log) and returns those it closed, for endClosed: it ends their plans and
// has their agents release them.
func (a *App) closeWhere(keep func(store.Session) bool, why string) ([]store.Session, error) {
	open, err := a.store.OpenSessionsWhere(keep)
	if err != nil {
		return nil, err
	}
	var closed []store.Session
	for _, s := range open {
		if _, err := a.store.CloseSession(s.Info.GetSessionId(), time.Now()); err != nil {
			return closed, err
		}
		a.log.Info("session closed: "+why, "session_id", s.Info.GetSessionId(),
			"owner", s.Owner, "client", s.Info.GetContract().GetHostProfile().GetClientName())
		closed = append(closed, s)
	}
	return closed, nil
}

// cancelSessionPlans cancels every unfinished plan of a session and waits
// for them to end, until ctx ends.
func (a *App) cancelSessionPlans(ctx context.Context, by, sessionID string) error {
	refs, err := a.store.ActivePlans()
	if err != nil {
		return err
	}
	var errs []error
	for _, ref := range refs {
		p, err := a.store.PlanState(ref)
		if err != nil || p.GetSessionId() != sessionID {
			continue
		}
		if err := a.cancelPlan(ctx, by, ref); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// release tells a closed session's agent to let go of it, once the session
// has no unfinished plan; it records success and otherwise leaves the
// session for releaseLoop.
func (a *App) release(ctx context.Context, id string) {
	sess, err := a.store.Session(id)
	if err != nil || !sess.Closed() || sess.Info.GetActivePlanCount() > 0 {
		return
	}
	if !a.releaseOnAgent(ctx, sess.Info.GetAgentId(), id) {
		return
	}
	if err := a.store.Released(id); err != nil {
		a.log.Warn("recording a released session", "session_id", id, "err", err)
	}
}

// releaseOnAgent asks an agent to close a session; a session the agent
// does not know is released too.
func (a *App) releaseOnAgent(ctx context.Context, agentID, sessionID string) bool {
	agent, err := a.fleet.Client(agentID)
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = agent.CloseSession(ctx, &agentv1.CloseSessionRequest{SessionId: sessionID})
	if err != nil && status.Code(err) != codes.NotFound {
		a.log.Warn("agent did not release a closed session; retrying later", "session_id", sessionID, "agent_id", agentID, "err", err)
		return false
	}
	a.fleet.Released(agentID, sessionID)
	return true
}

// releaseLoop retries releasing closed sessions on their agents until
// ctx ends.
func (a *App) releaseLoop(ctx context.Context) {
	every := a.cfg.ReleaseInterval
	if every <= 0 {
		every = 5 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	expired := map[string]bool{} // tokens whose sessions closeExpired closed
	for {
		a.closeExpired(expired)
		ids, err := a.store.Releasing()
		if err != nil {
			a.log.Warn("listing closed sessions", "err", err)
		}
		for _, id := range ids {
			a.release(ctx, id)
		}
		if a.cfg.AgentForgetAfter > 0 {
			// An agent that holds sessions stays listed, LOST, until they
			// are closed or placed elsewhere.
			// The sessions are read only when an agent is up for forgetting.
			var held map[string][]string
			var err error
			keep := func(id string) bool {
				if held == nil && err == nil {
					if held, err = a.store.SessionsByAgent(); err != nil {
						a.log.Warn("listing sessions by agent", "err", err)
					}
				}
				return err != nil || len(held[id]) > 0
			}
			for _, id := range a.fleet.Forget(a.cfg.AgentForgetAfter, keep) {
				a.log.Info("agent forgotten after missing its heartbeats", "agent_id", id, "after", a.cfg.AgentForgetAfter)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
