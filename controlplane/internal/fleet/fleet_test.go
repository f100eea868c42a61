package fleet

import (
	"errors"
	"testing"
	"time"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

func reg(id string, sessions int32) *cpv1.RegisterAgentRequest {
	return &cpv1.RegisterAgentRequest{AgentId: id, Address: id + ":1", SessionCount: sessions,
		Runtimes: []*cpv1.Runtime{{RuntimeId: "rt-" + id}}}
}

func TestPlacement(t *testing.T) {
	f := New(time.Second)
	now := time.Unix(1000, 0)
	f.now = func() time.Time { return now }
	all := func(*cpv1.Runtime) bool { return true }
	if _, err := f.Place(all); !errors.Is(err, ErrNoAgent) {
		t.Fatalf("empty fleet: %v", err)
	}
	f.Register(reg("b", 0))
	f.Register(reg("a", 1))
	// Fewest sessions wins; then the counts even out and the lowest id wins.
	for _, want := range []string{"b", "a", "b", "a"} {
		p, err := f.Place(func(*cpv1.Runtime) bool { return true })
		if err != nil || p.AgentID != want {
			t.Fatalf("placed on %q (%v), want %q", p.AgentID, err, want)
		}
	}
	// An agent silent for three heartbeats is unreachable and gets nothing.
	now = now.Add(4 * time.Second)
	f.Register(reg("b", 0))
	if p, _ := f.Place(all); p.AgentID != "b" {
		t.Fatalf("placed on %q, want the live agent b", p.AgentID)
	}
	if _, err := f.Place(func(*cpv1.Runtime) bool { return false }); !errors.Is(err, ErrNoFit) {
		t.Fatalf("no fitting runtime: %v", err)
	}
	states := map[string]cpv1.Agent_State{}
	for _, a := range f.List() {
		states[a.GetAgentId()] = a.GetState()
	}
	if states["a"] != cpv1.Agent_STATE_UNREACHABLE || states["b"] != cpv1.Agent_STATE_READY {
		t.Fatalf("states %v", states)
	}
}
