// Package fleet tracks the agents that registered with the control plane,
// places sessions on them and holds one gRPC connection per agent.
//
// Agents are soft state: each agentd registers again every heartbeat
// interval, so after a control-plane restart the fleet refills by itself;
// agents that hold sessions are known from the store until they do (Known).
// An agent silent for three heartbeats is UNREACHABLE, silent for the
// lost-after duration LOST.
// Sessions are bound to an agent's id, never to its address: an agent that
// restarts on another address keeps its sessions.
package fleet

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/blendplane/blendplane/gen/blendplane/agent/v1"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

var (
	// ErrNoAgent: no agent is ready.
	ErrNoAgent = errors.New("no ready agent")
	// ErrNoFit: agents are ready, but none has a runtime the session accepts.
	ErrNoFit = errors.New("no runtime fits")
	// ErrNoLabel: agents are ready, but none carries the labels asked for.
	ErrNoLabel = errors.New("no ready agent carries the labels")
	// ErrTooManyAgents: a principal registering another agent has as many
	// in the fleet as Limits allow.
	ErrTooManyAgents = errors.New("too many agents for one principal")
	// ErrTooManyRegistries: a registration would give a principal's agents
	// more distinct tool registries than Limits allow.
	ErrTooManyRegistries = errors.New("too many tool registries for one principal")
	// ErrUnknownAgent: the agent has not registered (since this control
	// plane started).
	ErrUnknownAgent = errors.New("agent not registered")
)

// Fleet is the set of known agents.
type Fleet struct {
	heartbeat time.Duration
	lostAfter time.Duration
	now       func() time.Time
	creds     func(agentID string) credentials.TransportCredentials
	dialOpts  []grpc.DialOption

	mu     sync.Mutex
	agents map[string]*member
	limits Limits
}

// Limits bound what registrations make the fleet hold: anyone with an
// agent token adds to it, and each registration may carry megabytes of
// tool registries. 0: no bound.
type Limits struct {
	// AgentsPerPrincipal bounds the agents one principal has in the fleet
	// (until they are forgotten).
	AgentsPerPrincipal int
	// RegistriesPerPrincipal bounds the distinct tool registries one
	// principal's agents hold: a real fleet has a few (one per Blender and
	// bridge version).
	RegistriesPerPrincipal int
}

type member struct {
	info     *cpv1.Agent
	live     map[string]bool      // sessions whose Blender runs, as last reported
	counted  map[string]bool      // sessions in info.SessionCount: reported held, or Placed since
	touched  map[string]time.Time // sessions a plan ran in, and when
	lastSeen time.Time
	conn     *grpc.ClientConn // to info.Address
	owner    string           // the principal that registered it ("": known from the store only)
}

// New returns an empty fleet. Agents missing three heartbeats are
// unreachable, and lost once silent for lostAfter (0: never). creds gives the transport credentials to dial an agent (the
// control plane's client certificate, and the agent's expected identity);
// nil dials without TLS (--allow-insecure-local).
func New(heartbeat, lostAfter time.Duration, creds func(agentID string) credentials.TransportCredentials, dialOpts ...grpc.DialOption) *Fleet {
	if creds == nil {
		creds = func(string) credentials.TransportCredentials { return insecure.NewCredentials() }
	}
	return &Fleet{
		heartbeat: heartbeat,
		lostAfter: lostAfter,
		now:       time.Now,
		creds:     creds,
		dialOpts:  dialOpts,
		agents:    map[string]*member{},
	}
}

// Limit sets the fleet's limits.
func (f *Fleet) Limit(l Limits) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.limits = l
}

// Heartbeat is the interval agents are asked to register at.
func (f *Fleet) Heartbeat() time.Duration { return f.heartbeat }

// Admit checks a registration by principal owner against the limits
// without taking it (Register checks again): a new agent beyond the
// principal's limit (ErrTooManyAgents), registries beyond its limit
// (ErrTooManyRegistries).
func (f *Fleet) Admit(req *cpv1.RegisterAgentRequest, owner string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.admit(req, owner)
}

// Hold counts a new agent of principal owner that registers again once it
// has its certificate: its registration cannot join the fleet yet (it does
// not serve), but binds its id; without this, certificate requests under
// fresh ids went past AgentsPerPrincipal. The agent is UNREACHABLE until
// it registers, and forgotten like a silent one if it never does.
func (f *Fleet) Hold(req *cpv1.RegisterAgentRequest, owner string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.admit(req, owner); err != nil {
		return err
	}
	if _, ok := f.agents[req.GetAgentId()]; !ok {
		f.agents[req.GetAgentId()] = f.silent(req.GetAgentId(), owner)
	}
	return nil
}

// Register records an agent's registration or heartbeat by principal
// owner; one that Admit refuses changes nothing. A registry is kept once
// per fingerprint, whichever agents have it.
func (f *Fleet) Register(req *cpv1.RegisterAgentRequest, owner string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.admit(req, owner); err != nil {
		return err
	}
	m, ok := f.agents[req.GetAgentId()]
	if !ok {
		m = &member{touched: map[string]time.Time{}}
		f.agents[req.GetAgentId()] = m
	}
	m.owner = owner
	if m.conn != nil && m.info.GetAddress() != req.GetAddress() {
		m.conn.Close() // the agent moved: dial its new address next time
		m.conn = nil
	}
	m.info = &cpv1.Agent{
		AgentId:          req.GetAgentId(),
		Address:          req.GetAddress(),
		Hostname:         req.GetHostname(),
		Runtimes:         req.GetRuntimes(),
		SessionCount:     req.GetSessionCount(),
		Resources:        req.GetResources(),
		MaxSessions:      req.GetMaxSessions(),
		LiveSessionCount: int32(len(req.GetLiveSessions())),
		BusySessionCount: req.GetBusySessions(),
		Labels:           req.GetLabels(),
	}
	m.counted = make(map[string]bool, len(req.GetHeldSessions()))
	for _, h := range req.GetHeldSessions() {
		m.counted[h.GetSessionId()] = true
	}
	m.live = make(map[string]bool, len(req.GetLiveSessions()))
	for _, id := range req.GetLiveSessions() {
		m.live[id] = true
	}
	// A report may have been taken just before a plan started a session's
	// Blender: a session touched within two heartbeats stays live until a
	// later report.
	now := f.now()
	for id, at := range m.touched {
		if now.Sub(at) < 2*f.heartbeat {
			m.live[id] = true
		} else {
			delete(m.touched, id)
		}
	}
	m.lastSeen = now
	return nil
}

// owned counts the agents of principal owner. The caller holds f.mu.
func (f *Fleet) owned(owner string) int {
	n := 0
	for _, m := range f.agents {
		if m.owner == owner {
			n++
		}
	}
	return n
}

// admit checks req against the limits and points its runtimes at the
// copies of their registries the fleet holds already. The caller holds
// f.mu.
func (f *Fleet) admit(req *cpv1.RegisterAgentRequest, owner string) error {
	m, known := f.agents[req.GetAgentId()]
	if most := f.limits.AgentsPerPrincipal; most > 0 && (!known || m.owner == "") {
		if n := f.owned(owner); n >= most {
			return fmt.Errorf("%w: %q has %d agents in the fleet, at most %d (--max-agents-per-principal); an agent that holds no session is forgotten after --agent-forget-after of silence",
				ErrTooManyAgents, owner, n, most)
		}
	}
	held := map[string]*cpv1.ToolRegistry{} // by fingerprint
	if known {
		for _, rt := range m.info.GetRuntimes() {
			held[rt.GetRegistry().GetFingerprint()] = rt.GetRegistry()
		}
	}
	if registriesIn(req, held) {
		return nil // a heartbeat: nothing new to hold
	}
	// New registries: share the copies other agents hold, and count the
	// principal's.
	mine := map[string]bool{}
	for id, o := range f.agents {
		for _, rt := range o.info.GetRuntimes() {
			fp := rt.GetRegistry().GetFingerprint()
			held[fp] = rt.GetRegistry()
			if o.owner == owner && id != req.GetAgentId() {
				mine[fp] = true
			}
		}
	}
	registriesIn(req, held)
	for _, rt := range req.GetRuntimes() {
		mine[rt.GetRegistry().GetFingerprint()] = true
	}
	delete(mine, "")
	if most := f.limits.RegistriesPerPrincipal; most > 0 && len(mine) > most {
		return fmt.Errorf("%w: %q's agents would hold %d distinct tool registries, at most %d", ErrTooManyRegistries, owner, len(mine), most)
	}
	return nil
}

// registriesIn points req's runtimes at the registries of held with their
// fingerprints and reports whether held has them all.
func registriesIn(req *cpv1.RegisterAgentRequest, held map[string]*cpv1.ToolRegistry) bool {
	all := true
	for _, rt := range req.GetRuntimes() {
		if r, ok := held[rt.GetRegistry().GetFingerprint()]; ok && r != nil {
			rt.Registry = r // the same content: registries are checked against their fingerprints
		} else if rt.GetRegistry().GetFingerprint() != "" {
			all = false
		}
	}
	return all
}

// FillRegistries fills in the tool registries of a registration that
// sends them by fingerprint from the agent's last registration, and reports
// whether it could: each runtime must match one registered before, by id
// and registry fingerprint.
func (f *Fleet) FillRegistries(req *cpv1.RegisterAgentRequest) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.agents[req.GetAgentId()]
	if !ok {
		return false
	}
	held := map[string]*cpv1.ToolRegistry{}
	for _, rt := range m.info.GetRuntimes() {
		held[rt.GetRuntimeId()] = rt.GetRegistry()
	}
	for _, rt := range req.GetRuntimes() {
		r := held[rt.GetRuntimeId()]
		if len(r.GetTools()) == 0 || r.GetFingerprint() != rt.GetRegistry().GetFingerprint() {
			return false
		}
	}
	for _, rt := range req.GetRuntimes() {
		rt.Registry = held[rt.GetRuntimeId()] // registered registries are never changed
	}
	return true
}

// List returns every known agent, sorted by id, with its current state.
func (f *Fleet) List() []*cpv1.Agent {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*cpv1.Agent, 0, len(f.agents))
	for _, m := range f.agents {
		a := proto.Clone(m.info).(*cpv1.Agent)
		a.LastSeenTime = timestamppb.New(m.lastSeen)
		a.State = f.state(m)
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetAgentId() < out[j].GetAgentId() })
	return out
}

// Census counts the known agents by state and tells how long the most
// silent one has not been heard from: what the metrics read at each
// scrape. It copies no agent (List clones every registry, some 20 ms with
// fifty agents, all of it under the lock heartbeats and placements take).
func (f *Fleet) Census() (byState map[cpv1.Agent_State]int, longestSilence time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	byState = map[cpv1.Agent_State]int{}
	now := f.now()
	for _, m := range f.agents {
		byState[f.state(m)]++
		longestSilence = max(longestSilence, now.Sub(m.lastSeen))
	}
	return byState, longestSilence
}

func (f *Fleet) state(m *member) cpv1.Agent_State {
	silent := f.now().Sub(m.lastSeen)
	switch {
	case f.lostAfter > 0 && silent > f.lostAfter:
		return cpv1.Agent_STATE_LOST
	case silent > 3*f.heartbeat || m.info.GetAddress() == "": // or never heard since the start
		return cpv1.Agent_STATE_UNREACHABLE
	}
	return cpv1.Agent_STATE_READY
}

// Known adds agents the control plane's store names (they hold sessions)
// and that have not registered since it started: they count as silent
// from now on, so an agent that never comes back after a restart is
// unreachable, then lost, like one that went silent while it ran.
func (f *Fleet) Known(agentIDs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range agentIDs {
		if _, ok := f.agents[id]; !ok {
			f.agents[id] = f.silent(id, "")
		}
	}
}

// silent is an agent known before it registers (by owner; "": from the
// store): no address, so UNREACHABLE, then LOST or forgotten as a silent
// one. The caller holds f.mu.
func (f *Fleet) silent(id, owner string) *member {
	return &member{info: &cpv1.Agent{AgentId: id}, live: map[string]bool{}, counted: map[string]bool{}, touched: map[string]time.Time{},
		lastSeen: f.now(), owner: owner}
}

// Forget drops the agents that have not registered for age, except those
// keep keeps, and returns their ids: a fleet of agents that come and go
// does not grow forever.
func (f *Fleet) Forget(age time.Duration, keep func(agentID string) bool) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var gone []string
	for id, m := range f.agents {
		if f.now().Sub(m.lastSeen) > age && !keep(id) {
			if m.conn != nil {
				m.conn.Close()
			}
			delete(f.agents, id)
			gone = append(gone, id)
		}
	}
	sort.Strings(gone)
	return gone
}

// Live reports whether the agent said, at its last heartbeat, that the
// session's Blender runs.
func (f *Fleet) Live(agentID, sessionID string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.agents[agentID]
	return ok && m.live[sessionID]
}

// Touch records that a plan runs in a session: its Blender runs, whatever
// the agent's last report said.
func (f *Fleet) Touch(agentID, sessionID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if m, ok := f.agents[agentID]; ok {
		m.live[sessionID] = true
		m.touched[sessionID] = f.now()
	}
}

// Released records that an agent let go of a session.
func (f *Fleet) Released(agentID, sessionID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if m, ok := f.agents[agentID]; ok {
		delete(m.live, sessionID)
		delete(m.touched, sessionID)
	}
}

// Placement is where a new session may go.
type Placement struct {
	AgentID   string
	Runtime   *cpv1.Runtime
	Resources *cpv1.Resources
}

// Place lists, best first, the ready agents that carry every label of
// selector and have a runtime that fits (the first fitting runtime of each): agents with the most Blender slots not
// busy first, then the fewest sessions, then the lowest id. Deterministic
// for a given fleet. A caller that opens a session on one of them should
// call Placed, so that back-to-back placements spread out before the
// agent's next heartbeat reports the new session.
func (f *Fleet) Place(selector map[string]string, fits func(*cpv1.Runtime) bool) ([]Placement, error) {
	// Read under the lock, without copies (List clones every agent, tool
	// registries and all: 20 ms for 50 agents): a registration replaces an
	// agent's info whole, so what is read here stays as it was; only the
	// session count changes in place (Placed), and it is copied.
	type candidate struct {
		info             *cpv1.Agent
		free, sessionCnt int32
	}
	var agents []candidate
	ready, labelled := false, false
	f.mu.Lock()
	for _, m := range f.agents {
		if f.state(m) != cpv1.Agent_STATE_READY {
			continue
		}
		ready = true
		if !carries(m.info, selector) {
			continue
		}
		labelled = true
		agents = append(agents, candidate{m.info, m.info.GetMaxSessions() - m.info.GetBusySessionCount(), m.info.GetSessionCount()})
	}
	f.mu.Unlock()
	sort.Slice(agents, func(i, j int) bool {
		a, b := agents[i], agents[j]
		if a.free != b.free {
			return a.free > b.free
		}
		if a.sessionCnt != b.sessionCnt {
			return a.sessionCnt < b.sessionCnt
		}
		return a.info.GetAgentId() < b.info.GetAgentId()
	})
	var out []Placement
	for _, a := range agents {
		for _, rt := range a.info.GetRuntimes() {
			if fits(rt) {
				out = append(out, Placement{AgentID: a.info.GetAgentId(), Runtime: rt, Resources: a.info.GetResources()})
				break
			}
		}
	}
	if !ready {
		return nil, fmt.Errorf("%w: start agentd and let it register", ErrNoAgent)
	}
	if !labelled {
		return nil, ErrNoLabel
	}
	if len(out) == 0 {
		return nil, ErrNoFit
	}
	return out, nil
}

// carries reports whether an agent has every label of selector.
func carries(a *cpv1.Agent, selector map[string]string) bool {
	for k, v := range selector {
		if got, ok := a.GetLabels()[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Placed counts a new session on an agent until its next heartbeat, unless
// the agent's last heartbeat, sent after the session opened there, already
// counted it.
func (f *Fleet) Placed(agentID, sessionID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if m, ok := f.agents[agentID]; ok && !m.counted[sessionID] {
		m.counted[sessionID] = true
		m.info.SessionCount++
	}
}

// Runtimes returns every runtime of the ready agents, by agent id; they are
// shared, not copies (see Place): read only.
func (f *Fleet) Runtimes() []*cpv1.Runtime {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*cpv1.Runtime
	for _, id := range slices.Sorted(maps.Keys(f.agents)) {
		if m := f.agents[id]; f.state(m) == cpv1.Agent_STATE_READY {
			out = append(out, m.info.GetRuntimes()...)
		}
	}
	return out
}

// Lost lists the agents that are LOST now, by id.
func (f *Fleet) Lost() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for id, m := range f.agents {
		if f.state(m) == cpv1.Agent_STATE_LOST {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// Client returns an AgentService client for an agent at the address it last
// registered, reusing one connection per agent.
func (f *Fleet) Client(agentID string) (agentv1.AgentServiceClient, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.agents[agentID]
	if !ok || m.info.GetAddress() == "" {
		return nil, fmt.Errorf("%w: %s", ErrUnknownAgent, agentID)
	}
	if m.conn == nil {
		opts := append([]grpc.DialOption{grpc.WithTransportCredentials(f.creds(agentID))}, f.dialOpts...)
		conn, err := grpc.NewClient(m.info.GetAddress(), opts...)
		if err != nil {
			return nil, fmt.Errorf("dial agent %s at %s: %w", agentID, m.info.GetAddress(), err)
		}
		m.conn = conn
	}
	return agentv1.NewAgentServiceClient(m.conn), nil
}

// Close closes every agent connection.
func (f *Fleet) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range f.agents {
		if m.conn != nil {
			m.conn.Close()
			m.conn = nil
		}
	}
}
