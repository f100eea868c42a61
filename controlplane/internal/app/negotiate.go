package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/blendplane/blendplane/controlplane/internal/auth"
	"github.com/blendplane/blendplane/controlplane/internal/contract"
	"github.com/blendplane/blendplane/controlplane/internal/executor"
	"github.com/blendplane/blendplane/controlplane/internal/fleet"
	"github.com/blendplane/blendplane/controlplane/internal/store"
	agentv1 "github.com/blendplane/blendplane/gen/blendplane/agent/v1"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// Negotiate agrees on a session contract (seed 003) and places the session
// on the best agent with a runtime that satisfies it and room for it. No
// Blender starts here: the agent starts one when the session first needs
// it. A negotiation that no agent can hold now is refused with
// ErrCapacityExhausted.
func (a *App) Negotiate(ctx context.Context, who Principal, req *cpv1.NegotiateRequest) (*cpv1.SessionContract, error) {
	macros := a.macroRef()
	if err := contract.CheckRequest(req, macros); err != nil {
		return nil, err
	}
	if slices.Contains(req.GetHostProfile().GetFeatureFlags(), contract.FlagUnsafeOps) {
		if err := Require(who, auth.ScopeUnsafe, "negotiating unsafe_ops"); err != nil {
			return nil, err
		}
	}
	release, err := a.reserveSession(who)
	if err != nil {
		return nil, err
	}
	defer release()
	var misfit *contract.Violation
	places, err := a.fleet.Place(req.GetAgentSelector(), func(rt *cpv1.Runtime) bool {
		v := contract.Fits(req, rt)
		if v != nil && misfit == nil {
			misfit = v
		}
		return v == nil
	})
	if errors.Is(err, fleet.ErrNoFit) && misfit != nil {
		return nil, misfit
	}
	if errors.Is(err, fleet.ErrNoLabel) {
		return nil, &contract.Violation{Field: "agent_selector", Value: selectorString(req.GetAgentSelector()),
			Message: "no ready agent carries these labels (agentd --label key=value)"}
	}
	if err != nil {
		return nil, err
	}
	diskLast(places)
	var firstErr error
	full := 0
	for _, place := range places {
		c, err := a.open(ctx, who, req, macros, place)
		if err == nil {
			return c, nil
		}
		if status.Code(err) == codes.ResourceExhausted {
			full++
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	if full == len(places) {
		return nil, fmt.Errorf("%w: every Blender of %d agent(s) with a fitting runtime is busy; retry when a plan ends, or add agents or --max-sessions",
			ErrCapacityExhausted, len(places))
	}
	return nil, firstErr
}

// reserveSession counts a negotiation of who's against its quota of open
// sessions (those it holds and those being negotiated) until release.
func (a *App) reserveSession(who Principal) (release func(), err error) {
	limit := a.cfg.MaxSessionsPerPrincipal
	if limit <= 0 {
		return func() {}, nil
	}
	a.quotaMu.Lock()
	defer a.quotaMu.Unlock()
	held, err := a.store.OpenSessions(who.Name, limit)
	if err != nil {
		return nil, err
	}
	if held+a.negotiating[who.Name] >= limit {
		return nil, fmt.Errorf("%w: %s holds %d open sessions, the most this control plane allows (--max-sessions-per-principal): "+
			"close one (CloseSession, blendctl close) and negotiate again", ErrQuotaExceeded, who.Name, held)
	}
	if a.negotiating == nil {
		a.negotiating = map[string]int{}
	}
	a.negotiating[who.Name]++
	return func() {
		a.quotaMu.Lock()
		defer a.quotaMu.Unlock()
		if a.negotiating[who.Name]--; a.negotiating[who.Name] == 0 {
			delete(a.negotiating, who.Name)
		}
	}, nil
}

// open builds the contract for one placement and opens the session on its
// agent.
func (a *App) open(ctx context.Context, who Principal, req *cpv1.NegotiateRequest, macros *cpv1.MacroRegistryRef, place fleet.Placement) (*cpv1.SessionContract, error) {
	c, err := contract.Build(req, contract.Offer{
		Runtime: place.Runtime, Resources: place.Resources,
		MaxOperationsPerPlan: int32(a.cfg.MaxOperationsPerPlan), MaxPayloadBytes: a.cfg.MaxPayloadBytes,
		MaxArtifactBytes:    a.cfg.MaxArtifactBytes,
		MinToolTimeBudgetMs: a.cfg.MinToolTimeBudget.Milliseconds(),
		MaxToolTimeBudgetMs: a.cfg.MaxToolTimeBudget.Milliseconds(), DefaultToolBudgetMs: a.cfg.DefaultToolTimeBudget.Milliseconds(),
		MacroRegistry: macros,
	})
	if err != nil {
		return nil, err
	}
	agent, err := a.fleet.Client(place.AgentID)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAgentUnavailable, err)
	}
	sessionID := executor.NewID("s")
	octx, cancel := context.WithTimeout(ctx, a.cfg.OpenSessionTimeout)
	defer cancel()
	opened, err := agent.OpenSession(octx, &agentv1.OpenSessionRequest{SessionId: sessionID, RuntimeId: place.Runtime.GetRuntimeId(),
		MaxMemoryMib: c.GetConstraints().GetMaxMemoryMib(), TempStorageMib: c.GetConstraints().GetTempStorageMib(), Epoch: 1})
	if err != nil {
		return nil, fmt.Errorf("%w: open session on agent %s: %w", ErrAgentUnavailable, place.AgentID, err)
	}
	c.SessionId, c.AgentId = sessionID, place.AgentID
	c.BlenderProfile = opened.GetBlenderProfile()
	c.BaselineSceneHash = opened.GetBaselineSceneHash()
	contract.Seal(c)
	c.CreateTime = timestamppb.Now()
	err = a.store.PutSession(store.Session{
		Owner: who.Name,
		Info: &cpv1.Session{SessionId: sessionID, State: cpv1.Session_STATE_OPEN, Contract: c,
			AgentId: place.AgentID, RuntimeId: place.Runtime.GetRuntimeId(), SceneHash: c.GetBaselineSceneHash(),
			CreateTime: c.GetCreateTime()},
	}, place.Runtime.GetRegistry())
	if err != nil {
		// Do not leave a session on the agent that nobody can reach.
		a.releaseOnAgent(context.WithoutCancel(ctx), place.AgentID, sessionID)
		return nil, err
	}
	a.fleet.Placed(place.AgentID, sessionID)
	a.log.Info("session negotiated", "session_id", sessionID, "owner", who.Name, "agent_id", place.AgentID,
		"runtime_id", place.Runtime.GetRuntimeId(), "client", req.GetHostProfile().GetClientName(),
		"feature_flags", c.GetCapabilities().GetFeatureFlags())
	return c, nil
}

// selectorString is a label selector as key=value pairs, sorted.
func selectorString(sel map[string]string) string {
	pairs := make([]string, 0, len(sel))
	for k, v := range sel {
		pairs = append(pairs, k+"="+v)
	}
	slices.Sort(pairs)
	return strings.Join(pairs, ",")
}

// diskLast moves the placements on agents with no disk to offer a
// session's files (agentd offers 1 MiB under its --min-free-disk-mib)
// after the others, keeping the order within each.
func diskLast(places []fleet.Placement) {
	short := func(p fleet.Placement) int {
		if p.Resources.GetTempStorageMib() <= 1 {
			return 1
		}
		return 0
	}
	slices.SortStableFunc(places, func(x, y fleet.Placement) int { return cmp.Compare(short(x), short(y)) })
}
