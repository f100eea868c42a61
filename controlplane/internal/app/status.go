package app

import (
	"strings"
	"time"

	"github.com/blendplane/blendplane/controlplane/internal/store"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// What the metrics read at each scrape (package metrics' Source): counts,
// never ids.

// SessionStates counts every principal's sessions by state: open, parked,
// closed, broken.
func (a *App) SessionStates() map[string]int {
	out := map[string]int{}
	after := ""
	for {
		page, next, err := a.store.AllSessions(after, 1000, func(store.Session) bool { return true })
		if err != nil {
			a.log.Warn("counting sessions", "err", err)
			return out
		}
		for _, sess := range page {
			out[stateName(a.view(sess).GetState().String())]++
		}
		if next == "" {
			return out
		}
		after = next
	}
}

// stateName is a state enum's name as the metrics label it: STATE_OPEN → open.
func stateName(enum string) string { return strings.ToLower(strings.TrimPrefix(enum, "STATE_")) }

// PendingApprovals counts the approvals nobody has decided yet.
func (a *App) PendingApprovals() int {
	n := 0
	var before uint64
	for {
		page, next, err := a.store.Approvals(store.ApprovalFilter{State: cpv1.Approval_STATE_PENDING}, before, 1000)
		if err != nil {
			a.log.Warn("counting approvals", "err", err)
			return n
		}
		n += len(page)
		if next == 0 {
			return n
		}
		before = next
	}
}

// ActivePlans counts the plans not finished.
func (a *App) ActivePlans() int {
	refs, err := a.store.ActivePlans()
	if err != nil {
		a.log.Warn("counting plans", "err", err)
	}
	return len(refs)
}

// AgentStates counts the known agents by state (ready, unreachable, lost)
// and tells how long the most silent one has not been heard from.
func (a *App) AgentStates() (map[string]int, time.Duration) {
	byState, silence := a.fleet.Census()
	out := make(map[string]int, len(byState))
	for st, n := range byState {
		out[stateName(st.String())] += n
	}
	return out, silence
}
