package fleet

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

func reg(id string, sessions, max, busy int32, live ...string) *cpv1.RegisterAgentRequest {
	return &cpv1.RegisterAgentRequest{AgentId: id, Address: id + ":1", SessionCount: sessions, MaxSessions: max,
		BusySessions: busy, LiveSessions: live, Runtimes: []*cpv1.Runtime{{RuntimeId: "rt-" + id}}}
}

// regHolding is a heartbeat of an agent holding the sessions held.
func regHolding(id string, sessions, max int32, held ...string) *cpv1.RegisterAgentRequest {
	r := reg(id, sessions, max, 0)
	for _, h := range held {
		r.HeldSessions = append(r.HeldSessions, &cpv1.HeldSession{SessionId: h})
	}
	return r
}

func first(t *testing.T, f *Fleet) string {
	t.Helper()
	p, err := f.Place(nil, func(*cpv1.Runtime) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	return p[0].AgentID
}

func TestPlacement(t *testing.T) {
	f := New(time.Second, 0, nil)
	now := time.Unix(1000, 0)
	f.now = func() time.Time { return now }
	all := func(*cpv1.Runtime) bool { return true }
	if _, err := f.Place(nil, all); !errors.Is(err, ErrNoAgent) {
		t.Fatalf("empty fleet: %v", err)
	}
	f.Register(reg("b", 0, 4, 0), "agent")
	f.Register(reg("a", 1, 4, 0), "agent")
	// Fewest sessions wins; then the counts even out and the lowest id wins.
	for i, want := range []string{"b", "a", "b", "a"} {
		got := first(t, f)
		if got != want {
			t.Fatalf("placed on %q, want %q", got, want)
		}
		f.Placed(got, fmt.Sprint("s", i))
	}
	// A heartbeat sent after a session opened, but before it was placed,
	// counts it already: placing it does not count it again.
	f.Register(regHolding("a", 1, 4, "s-new"), "agent")
	f.Register(regHolding("b", 1, 4), "agent")
	f.Placed("a", "s-new")
	f.Placed("a", "s-new")
	if got := first(t, f); got != "a" {
		t.Fatalf("placed on %q, want a (one session each, a first by id; not a session counted twice)", got)
	}
	// More free Blender slots beat fewer sessions.
	f.Register(reg("a", 9, 4, 0), "agent")
	f.Register(reg("b", 0, 4, 3), "agent")
	if got := first(t, f); got != "a" {
		t.Fatalf("placed on %q, want a (b's Blenders are busy)", got)
	}
	// An agent silent for three heartbeats is unreachable and gets nothing.
	now = now.Add(4 * time.Second)
	f.Register(reg("b", 0, 4, 0), "agent")
	if p, _ := f.Place(nil, all); len(p) != 1 || p[0].AgentID != "b" {
		t.Fatalf("placed on %v, want only the live agent b", p)
	}
	if _, err := f.Place(nil, func(*cpv1.Runtime) bool { return false }); !errors.Is(err, ErrNoFit) {
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

func TestLiveSessionsAndAddress(t *testing.T) {
	f := New(time.Second, 0, nil)
	f.Register(reg("a", 2, 4, 0, "s1"), "agent")
	if !f.Live("a", "s1") || f.Live("a", "s2") || f.Live("b", "s1") {
		t.Fatal("live sessions not as reported")
	}
	f.Released("a", "s1")
	if f.Live("a", "s1") {
		t.Fatal("a released session is live")
	}
	// A plan runs in s2 just after the agent took its report: the report
	// does not undo what the plan shows, until two heartbeats later.
	now := time.Unix(1000, 0)
	f.now = func() time.Time { return now }
	f.Touch("a", "s2")
	f.Register(reg("a", 2, 4, 0), "agent")
	if !f.Live("a", "s2") {
		t.Fatal("a stale report hid a session a plan just ran in")
	}
	now = now.Add(3 * time.Second)
	f.Register(reg("a", 2, 4, 0), "agent")
	if f.Live("a", "s2") {
		t.Fatal("the agent's later report that s2 was parked is ignored")
	}
	if _, err := f.Client("b"); !errors.Is(err, ErrUnknownAgent) {
		t.Fatalf("client of an unknown agent: %v", err)
	}
	if _, err := f.Client("a"); err != nil {
		t.Fatal(err)
	}
	// An agent that comes back on another address is dialled there: sessions
	// are bound to its id.
	moved := reg("a", 2, 4, 0)
	moved.Address = "elsewhere:2"
	f.Register(moved, "agent")
	f.mu.Lock()
	conn := f.agents["a"].conn
	f.mu.Unlock()
	if conn != nil {
		t.Fatal("the connection to the old address was kept")
	}
	if _, err := f.Client("a"); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	target := f.agents["a"].conn.Target()
	f.mu.Unlock()
	if target != "elsewhere:2" {
		t.Fatalf("dialled %s", target)
	}
	f.Close()
}

// An agent is UNREACHABLE after three missed heartbeats, LOST after
// lostAfter, READY again when it registers; one known only from the store
// is silent from the start; Forget keeps agents that hold sessions.
func TestLiveness(t *testing.T) {
	f := New(time.Second, 10*time.Second, nil)
	now := time.Unix(1000, 0)
	f.now = func() time.Time { return now }
	f.Register(reg("a", 0, 4, 0), "agent")
	f.Known("a", "z") // z holds sessions but has not registered since the start
	states := func() map[string]cpv1.Agent_State {
		out := map[string]cpv1.Agent_State{}
		for _, a := range f.List() {
			out[a.GetAgentId()] = a.GetState()
		}
		return out
	}
	if s := states(); s["a"] != cpv1.Agent_STATE_READY || s["z"] != cpv1.Agent_STATE_UNREACHABLE {
		t.Fatalf("at the start: %v", s)
	}
	if lost := f.Lost(); len(lost) != 0 {
		t.Fatalf("lost at the start: %v", lost)
	}
	if _, err := f.Client("z"); !errors.Is(err, ErrUnknownAgent) {
		t.Fatalf("a client for an agent with no address: %v", err)
	}
	now = now.Add(3500 * time.Millisecond)
	if s := states(); s["a"] != cpv1.Agent_STATE_UNREACHABLE {
		t.Fatalf("after 3.5 heartbeats: %v", s)
	}
	now = now.Add(7 * time.Second)
	if s := states(); s["a"] != cpv1.Agent_STATE_LOST || s["z"] != cpv1.Agent_STATE_LOST {
		t.Fatalf("after 10.5 s: %v", s)
	}
	if lost := f.Lost(); len(lost) != 2 || lost[0] != "a" || lost[1] != "z" {
		t.Fatalf("Lost after 10.5 s: %v, want [a z]", lost)
	}
	if _, err := f.Place(nil, func(*cpv1.Runtime) bool { return true }); !errors.Is(err, ErrNoAgent) {
		t.Fatalf("placed on a lost agent: %v", err)
	}
	f.Register(reg("a", 0, 4, 0), "agent")
	if s := states(); s["a"] != cpv1.Agent_STATE_READY {
		t.Fatalf("after coming back: %v", s)
	}
	if rts := f.Runtimes(); len(rts) != 1 || rts[0].GetRuntimeId() != "rt-a" {
		t.Fatalf("runtimes of the ready agents: %v", rts)
	}
	now = now.Add(time.Minute)
	gone := f.Forget(30*time.Second, func(id string) bool { return id == "z" })
	if len(gone) != 1 || gone[0] != "a" || len(f.List()) != 1 {
		t.Fatalf("forgot %v, left %v", gone, f.List())
	}
}

// A selector places only on agents carrying every one of its labels.
func TestLabels(t *testing.T) {
	f := New(time.Second, 0, nil)
	gpu := reg("gpu", 5, 4, 0)
	gpu.Labels = map[string]string{"gpu": "true", "rack": "b"}
	f.Register(gpu, "agent")
	f.Register(reg("cpu", 0, 4, 0), "agent")
	all := func(*cpv1.Runtime) bool { return true }
	if p, err := f.Place(map[string]string{"gpu": "true"}, all); err != nil || len(p) != 1 || p[0].AgentID != "gpu" {
		t.Fatalf("gpu=true: %v %v", p, err)
	}
	if p, _ := f.Place(nil, all); len(p) != 2 || p[0].AgentID != "cpu" {
		t.Fatalf("no selector: %v", p)
	}
	if _, err := f.Place(map[string]string{"gpu": "true", "rack": "a"}, all); !errors.Is(err, ErrNoLabel) {
		t.Fatalf("rack=a: %v", err)
	}
	if got := f.List()[1].GetLabels(); got["rack"] != "b" {
		t.Fatalf("listed labels %v", got)
	}
}

// A heartbeat may name its registries by fingerprint only when every
// runtime matches one the agent registered in full before.
func TestFillRegistries(t *testing.T) {
	f := New(time.Second, 0, nil)
	tools := []*cpv1.ToolDefinition{{Name: "object.create"}}
	full := reg("a", 0, 4, 0)
	full.Runtimes[0].Registry = &cpv1.ToolRegistry{Fingerprint: "fp1", Tools: tools}
	byFP := func(runtimeID, fp string) *cpv1.RegisterAgentRequest {
		r := reg("a", 0, 4, 0)
		r.Runtimes[0].RuntimeId, r.Runtimes[0].Registry, r.RegistriesByFingerprint = runtimeID, &cpv1.ToolRegistry{Fingerprint: fp}, true
		return r
	}
	if f.FillRegistries(byFP("rt-a", "fp1")) {
		t.Fatal("filled the registries of an agent that never registered")
	}
	f.Known("a") // named by the store after a restart: no registries yet
	if f.FillRegistries(byFP("rt-a", "fp1")) {
		t.Fatal("filled the registries of an agent known only from the store")
	}
	f.Register(full, "agent")
	for _, bad := range []*cpv1.RegisterAgentRequest{byFP("rt-a", "fp2"), byFP("rt-b", "fp1")} {
		if f.FillRegistries(bad) {
			t.Fatalf("filled %v", bad.GetRuntimes())
		}
	}
	hb := byFP("rt-a", "fp1")
	if !f.FillRegistries(hb) || len(hb.GetRuntimes()[0].GetRegistry().GetTools()) != 1 {
		t.Fatalf("heartbeat by fingerprint not filled: %v", hb.GetRuntimes())
	}
	f.Register(hb, "agent")
	if rts := f.List()[0].GetRuntimes(); len(rts[0].GetRegistry().GetTools()) != 1 {
		t.Fatalf("after the heartbeat the agent lists %v", rts)
	}
}

// Census counts what List shows, state by state, and the longest silence.
func TestCensus(t *testing.T) {
	f := New(time.Second, 10*time.Second, nil)
	now := time.Unix(1000, 0)
	f.now = func() time.Time { return now }
	if byState, silence := f.Census(); len(byState) != 0 || silence != 0 {
		t.Fatalf("empty fleet: %v %v", byState, silence)
	}
	f.Register(reg("lost", 0, 4, 0), "agent")
	now = now.Add(8 * time.Second)
	f.Register(reg("unreachable", 0, 4, 0), "agent")
	now = now.Add(4 * time.Second)
	f.Register(reg("ready-1", 0, 4, 0), "agent")
	f.Register(reg("ready-2", 0, 4, 0), "agent")
	now = now.Add(500 * time.Millisecond)
	listed := map[cpv1.Agent_State]int{}
	for _, a := range f.List() {
		listed[a.GetState()]++
	}
	byState, silence := f.Census()
	want := map[cpv1.Agent_State]int{cpv1.Agent_STATE_READY: 2, cpv1.Agent_STATE_UNREACHABLE: 1, cpv1.Agent_STATE_LOST: 1}
	if fmt.Sprint(byState) != fmt.Sprint(want) || fmt.Sprint(listed) != fmt.Sprint(want) {
		t.Fatalf("census %v, list %v, want %v", byState, listed, want)
	}
	if silence != 12500*time.Millisecond {
		t.Fatalf("longest silence %v, want 12.5s", silence)
	}
}

// BenchmarkCensus: what a metrics scrape reads of fifty agents, each with
// two runtimes of a hundred tools, against listing them.
func BenchmarkCensus(b *testing.B) {
	schema, err := structpb.NewStruct(map[string]any{"type": "object", "properties": map[string]any{
		"name": map[string]any{"type": "string"}, "location": map[string]any{"type": "array", "items": map[string]any{"type": "number"}}}})
	if err != nil {
		b.Fatal(err)
	}
	f := New(time.Second, 0, nil)
	for i := range 50 {
		r := reg(fmt.Sprintf("agent-%02d", i), 0, 8, 0)
		r.Runtimes = nil
		for k := range 2 {
			reg := &cpv1.ToolRegistry{Version: "1", Fingerprint: fmt.Sprint(k)}
			for t := range 100 {
				reg.Tools = append(reg.Tools, &cpv1.ToolDefinition{Name: fmt.Sprintf("tool.%d", t), Description: "a tool of the benchmark, described at some length as tools are",
					InputSchema: schema})
			}
			r.Runtimes = append(r.Runtimes, &cpv1.Runtime{RuntimeId: fmt.Sprintf("rt-%d", k), Registry: reg})
		}
		f.Register(r, "agent")
	}
	b.Run("List", func(b *testing.B) {
		for b.Loop() {
			f.List()
		}
	})
	b.Run("Census", func(b *testing.B) {
		for b.Loop() {
			f.Census()
		}
	})
}

// TestLimits: a principal registers at most AgentsPerPrincipal agents, and
// its agents hold at most RegistriesPerPrincipal distinct registries, one
// copy each in the fleet; a refused registration changes nothing, an
// unchanged heartbeat is never refused, and registries dropped or agents
// forgotten make room.
func TestLimits(t *testing.T) {
	f := New(time.Second, 0, nil)
	now := time.Unix(1000, 0)
	f.now = func() time.Time { return now }
	f.Limit(Limits{AgentsPerPrincipal: 2, RegistriesPerPrincipal: 2})
	with := func(id string, fps ...string) *cpv1.RegisterAgentRequest {
		r := reg(id, 0, 4, 0)
		r.Runtimes = nil
		for _, fp := range fps {
			r.Runtimes = append(r.Runtimes, &cpv1.Runtime{RuntimeId: "rt-" + fp, Registry: &cpv1.ToolRegistry{Fingerprint: fp}})
		}
		return r
	}
	register := func(req *cpv1.RegisterAgentRequest, owner string, want error) {
		t.Helper()
		if err := f.Admit(req, owner); !errors.Is(err, want) {
			t.Fatalf("Admit %s by %s: %v, want %v", req.GetAgentId(), owner, err, want)
		}
		if err := f.Register(req, owner); !errors.Is(err, want) {
			t.Fatalf("%s by %s: %v, want %v", req.GetAgentId(), owner, err, want)
		}
	}
	registry := func(agent string, i int) *cpv1.ToolRegistry {
		return f.agents[agent].info.GetRuntimes()[i].GetRegistry()
	}
	register(with("a", "fp1"), "p", nil)
	register(with("b", "fp1", "fp2"), "p", nil)
	register(with("c", "fp1"), "p", ErrTooManyAgents)
	register(with("a", "fp1"), "p", nil) // a heartbeat of an agent it has
	register(with("c", "fp3", "fp4"), "q", nil)
	register(with("d", "fp5"), "q", ErrTooManyRegistries)
	register(with("a", "fp1", "fp3"), "p", ErrTooManyRegistries)
	if got := fmt.Sprint(ids(f.List())); got != "[a b c]" {
		t.Fatalf("agents %s", got)
	}
	if len(registry("a", 0).GetTools()) != 0 || len(f.agents["a"].info.GetRuntimes()) != 1 {
		t.Fatalf("a refused registration changed a: %v", f.agents["a"].info)
	}
	if registry("a", 0) != registry("b", 0) {
		t.Fatal("fp1 is kept twice")
	}
	register(with("d", "fp3"), "q", nil) // q's two registries: shared with c
	if registry("d", 0) != registry("c", 0) {
		t.Fatal("fp3 is kept twice")
	}
	register(with("b", "fp1"), "p", nil) // drops fp2: p may take fp3
	register(with("a", "fp1", "fp3"), "p", nil)
	register(with("b", "fp1"), "p", nil)
	register(with("a", "fp1", "fp3"), "p", nil)

	// Forgotten agents make room for others.
	now = now.Add(time.Hour)
	register(with("a", "fp1", "fp3"), "p", nil)
	if gone := f.Forget(time.Minute, func(string) bool { return false }); fmt.Sprint(gone) != "[b c d]" {
		t.Fatalf("forgotten %v", gone)
	}
	register(with("e", "fp3"), "p", nil)
	register(with("f", "fp6", "fp7"), "q", nil)

	// An agent that asked for a certificate holds its place until it
	// registers with it.
	if err := f.Hold(with("g", "fp1"), "p"); !errors.Is(err, ErrTooManyAgents) {
		t.Fatalf("a third agent of p held: %v", err)
	}
	if err := f.Hold(with("h", "fp6"), "q"); err != nil {
		t.Fatal(err)
	}
	if st := f.state(f.agents["h"]); st != cpv1.Agent_STATE_UNREACHABLE {
		t.Fatalf("a held agent is %v", st)
	}
	if err := f.Hold(with("i", "fp6"), "q"); !errors.Is(err, ErrTooManyAgents) {
		t.Fatalf("a third agent of q held: %v", err)
	}
	register(with("h", "fp6"), "q", nil)
}

func ids(agents []*cpv1.Agent) []string {
	var out []string
	for _, a := range agents {
		out = append(out, a.GetAgentId())
	}
	return out
}
