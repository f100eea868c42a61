// Package fleet tracks the agents that registered with the control plane,
// places sessions on them and holds one gRPC connection per agent.
//
// Agents are soft state: each agentd registers again every heartbeat
// interval, so after a control-plane restart the fleet refills by itself.
package fleet

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"
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
)

// Fleet is the set of known agents.
type Fleet struct {
	heartbeat time.Duration
	now       func() time.Time
	dialOpts  []grpc.DialOption

	mu     sync.Mutex
	agents map[string]*member
	conns  map[string]*grpc.ClientConn // by address
}

type member struct {
	info     *cpv1.Agent
	lastSeen time.Time
}

// New returns an empty fleet. Agents missing three heartbeats are unreachable.
func New(heartbeat time.Duration, dialOpts ...grpc.DialOption) *Fleet {
	return &Fleet{
		heartbeat: heartbeat,
		now:       time.Now,
		dialOpts:  append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dialOpts...),
		agents:    map[string]*member{},
		conns:     map[string]*grpc.ClientConn{},
	}
}

// Heartbeat is the interval agents are asked to register at.
func (f *Fleet) Heartbeat() time.Duration { return f.heartbeat }

// Register records an agent's registration or heartbeat.
func (f *Fleet) Register(req *cpv1.RegisterAgentRequest) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.agents[req.GetAgentId()] = &member{
		info: &cpv1.Agent{
			AgentId:      req.GetAgentId(),
			Address:      req.GetAddress(),
			Hostname:     req.GetHostname(),
			Runtimes:     req.GetRuntimes(),
			SessionCount: req.GetSessionCount(),
			Resources:    req.GetResources(),
		},
		lastSeen: f.now(),
	}
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

func (f *Fleet) state(m *member) cpv1.Agent_State {
	if f.now().Sub(m.lastSeen) > 3*f.heartbeat {
		return cpv1.Agent_STATE_UNREACHABLE
	}
	return cpv1.Agent_STATE_READY
}

// Placement is where a new session goes.
type Placement struct {
	AgentID   string
	Address   string
	Runtime   *cpv1.Runtime
	Resources *cpv1.Resources
}

// Place picks, among ready agents with the fewest sessions first (ties: the
// lowest id), the first runtime that fits. Deterministic for a given fleet.
func (f *Fleet) Place(fits func(*cpv1.Runtime) bool) (Placement, error) {
	agents := f.List()
	sort.SliceStable(agents, func(i, j int) bool { return agents[i].GetSessionCount() < agents[j].GetSessionCount() })
	ready := false
	for _, a := range agents {
		if a.GetState() != cpv1.Agent_STATE_READY {
			continue
		}
		ready = true
		for _, rt := range a.GetRuntimes() {
			if !fits(rt) {
				continue
			}
			f.mu.Lock()
			// Count the new session now, so back-to-back placements spread
			// out before the agent's next heartbeat reports it.
			if m, ok := f.agents[a.GetAgentId()]; ok {
				m.info.SessionCount++
			}
			f.mu.Unlock()
			return Placement{AgentID: a.GetAgentId(), Address: a.GetAddress(), Runtime: rt, Resources: a.GetResources()}, nil
		}
	}
	if !ready {
		return Placement{}, fmt.Errorf("%w: start agentd and let it register", ErrNoAgent)
	}
	return Placement{}, ErrNoFit
}

// Runtimes returns every runtime of the ready agents, in placement order.
func (f *Fleet) Runtimes() []*cpv1.Runtime {
	var out []*cpv1.Runtime
	for _, a := range f.List() {
		if a.GetState() == cpv1.Agent_STATE_READY {
			out = append(out, a.GetRuntimes()...)
		}
	}
	return out
}

// Client returns an AgentService client for an address, reusing one
// connection per address.
func (f *Fleet) Client(address string) (agentv1.AgentServiceClient, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	conn, ok := f.conns[address]
	if !ok {
		var err error
		conn, err = grpc.NewClient(address, f.dialOpts...)
		if err != nil {
			return nil, fmt.Errorf("dial agent %s: %w", address, err)
		}
		f.conns[address] = conn
	}
	return agentv1.NewAgentServiceClient(conn), nil
}

// Close closes every agent connection.
func (f *Fleet) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for addr, c := range f.conns {
		c.Close()
		delete(f.conns, addr)
	}
}
