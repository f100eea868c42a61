package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// A studio on one machine: every host is a network namespace with its own
// address in 198.18.0.0/15 (the benchmarking range, RFC 2544), joined by
// veth pairs to a bridge in the test's namespace, which holds 198.18.0.1
// and so reaches every host as a client on another machine would. Nothing
// listens on loopback, so every link is TLS. nftables in a host's
// namespace partitions it; killing every process of a namespace is losing
// the host.

// hostNet is the bridge and the hosts on it.
type hostNet struct {
	tag    string // short and random: names of links and namespaces
	bridge string
	hosts  []*host
}

// host is one network namespace.
type host struct {
	name, ns, ip string
}

// newHostNet creates the bridge and one namespace per name, with addresses
// 198.18.0.10, .11, …; it skips the test where namespaces cannot be made
// (not root, no ip(8), a container without CAP_SYS_ADMIN). Everything is
// removed when the test ends.
func newHostNet(t *testing.T, names ...string) *hostNet {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the multi-host tests need root to create network namespaces (ip netns); run make test as root")
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the multi-host tests need %s (Debian: iproute2, nftables): %v", tool, err)
		}
	}
	var b [3]byte
	rand.Read(b[:])
	n := &hostNet{tag: hex.EncodeToString(b[:])}
	n.bridge = "bpbr" + n.tag
	probe := "bp" + n.tag + "probe"
	if out, err := exec.Command("ip", "netns", "add", probe).CombinedOutput(); err != nil {
		t.Skipf("cannot create a network namespace here (%v: %s): the multi-host tests need CAP_SYS_ADMIN", err, strings.TrimSpace(string(out)))
	}
	exec.Command("ip", "netns", "del", probe).Run()

	t.Cleanup(n.remove)
	n.must(t, "ip", "link", "add", n.bridge, "type", "bridge")
	n.must(t, "ip", "addr", "add", "198.18.0.1/15", "dev", n.bridge)
	n.must(t, "ip", "link", "set", n.bridge, "up")
	for i, name := range names {
		h := &host{name: name, ns: fmt.Sprintf("bp%s-%s", n.tag, name), ip: fmt.Sprintf("198.18.0.%d", 10+i)}
		outer, inner := fmt.Sprintf("bpv%s%d", n.tag, i), fmt.Sprintf("bpw%s%d", n.tag, i)
		n.must(t, "ip", "netns", "add", h.ns)
		n.hosts = append(n.hosts, h)
		n.must(t, "ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
		n.must(t, "ip", "link", "set", outer, "master", n.bridge, "up")
		n.must(t, "ip", "link", "set", inner, "netns", h.ns)
		n.must(t, "ip", "-n", h.ns, "link", "set", inner, "name", "eth0")
		n.must(t, "ip", "-n", h.ns, "addr", "add", h.ip+"/15", "dev", "eth0")
		n.must(t, "ip", "-n", h.ns, "link", "set", "eth0", "up")
		n.must(t, "ip", "-n", h.ns, "link", "set", "lo", "up")
	}
	return n
}

func (n *hostNet) must(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// remove kills what still runs in the namespaces and deletes them (their
// veth ends go with them) and the bridge.
func (n *hostNet) remove() {
	for _, h := range n.hosts {
		h.killAll()
		exec.Command("ip", "netns", "del", h.ns).Run()
	}
	exec.Command("ip", "link", "del", n.bridge).Run()
}

// addr is host:port on the host.
func (h *host) addr(port int) string { return h.ip + ":" + strconv.Itoa(port) }

// start runs one of the binaries in the host's namespace.
func (h *host) start(t *testing.T, name string, args ...string) *daemon {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", h.ns, filepath.Join(binDir, name)}, args...)...)
	return startCmd(t, h.name+"/"+name, cmd)
}

// partition drops every packet in and out of the host but its loopback's,
// as a cut cable would.
func (h *host) partition(t *testing.T) {
	t.Helper()
	rules := `table inet bpcut {
  chain in { type filter hook input priority -300; policy drop; iif "lo" accept; }
  chain out { type filter hook output priority -300; policy drop; oif "lo" accept; }
}`
	cmd := exec.Command("ip", "netns", "exec", h.ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("partition %s: %v\n%s", h.name, err, out)
	}
}

// heal removes the partition.
func (h *host) heal(t *testing.T) {
	t.Helper()
	if out, err := exec.Command("ip", "netns", "exec", h.ns, "nft", "delete", "table", "inet", "bpcut").CombinedOutput(); err != nil {
		t.Fatalf("heal %s: %v\n%s", h.name, err, out)
	}
}

// killAll sends SIGKILL to every process in the host's namespace (agentd
// and its Blenders alike): the host is gone.
func (h *host) killAll() {
	out, _ := exec.Command("ip", "netns", "pids", h.ns).Output()
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// dirExists reports whether dir is there.
func dirExists(dir string) bool {
	_, err := os.Stat(dir)
	return err == nil
}

// studio is a control plane and agents, each on its own host.
type studio struct {
	t      *testing.T // the test that owns the daemons (not a subtest, which would stop them when it ends)
	net    *hostNet
	cp     *cluster // the control plane's side: client, tokens, CA
	cpHost *host
	cpArgs []string
	agents []*studioAgent
}

type studioAgent struct {
	id     string // once the control plane listed it
	host   *host
	addr   string
	dir    string // its data dir
	args   []string
	daemon *daemon
}

// kill ends the agent's host: SIGKILL to agentd and its Blenders.
func (a *studioAgent) kill() {
	a.daemon.expectExit()
	a.host.killAll()
}

const (
	studioGRPCPort  = 7400
	studioHTTPPort  = 7480
	studioAgentPort = 7401
)

// startStudio starts a control plane on host "cp" and n agents on hosts
// "agent-1" … with their own tokens, TLS everywhere, and waits until every
// agent is READY. agentArgs (nil: none) gives agent i (from 1) extra flags;
// cpArgs are extra control-plane flags.
func startStudio(t *testing.T, n int, agentArgs func(i int) []string, cpArgs ...string) *studio {
	t.Helper()
	names := []string{"cp"}
	for i := 1; i <= n; i++ {
		names = append(names, fmt.Sprintf("agent-%d", i))
	}
	net := newHostNet(t, names...)
	s := &studio{t: t, net: net, cpHost: net.hosts[0]}
	dir := t.TempDir()
	s.cp = &cluster{cpAddr: s.cpHost.addr(studioGRPCPort), httpAddr: s.cpHost.addr(studioHTTPPort), tls: true, dir: dir}
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte(allowAll), 0o600); err != nil {
		t.Fatal(err)
	}
	s.cpArgs = append([]string{"--listen", s.cp.cpAddr, "--http-listen", s.cp.httpAddr, "--data-dir", filepath.Join(dir, "cp"),
		"--heartbeat", "1s", "--policy", policy}, cpArgs...)
	s.startCP(t)
	for i := 1; i <= n; i++ {
		h := net.hosts[i]
		secret := s.cp.createToken(t, h.name, "agent")
		tokenFile := filepath.Join(dir, h.name+".token")
		if err := os.WriteFile(tokenFile, []byte(secret+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		a := &studioAgent{host: h, addr: h.addr(studioAgentPort), dir: filepath.Join(dir, h.name)}
		a.args = append([]string{"--listen", a.addr, "--control-plane", s.cp.cpAddr, "--ca-file", s.cp.caFile(),
			"--token-file", tokenFile, "--data-dir", a.dir}, blenderFlags()...)
		if agentArgs != nil {
			a.args = append(a.args, agentArgs(i)...)
		}
		a.daemon = h.start(t, "agentd", a.args...)
		s.agents = append(s.agents, a)
	}
	for _, a := range s.agents {
		s.waitAgentState(t, a, cpv1.Agent_STATE_READY, 90*time.Second)
	}
	return s
}

// startCP (re)starts the control plane on its host and connects the admin
// client.
func (s *studio) startCP(t *testing.T) {
	t.Helper()
	s.cp.cp = s.cpHost.start(s.t, "controlplane", s.cpArgs...)
	s.cp.adminToken = s.cp.waitAdminToken(t)
	s.cp.client = s.cp.clientAs(s.t, s.cp.adminToken)
}

// agent finds a studio agent in the control plane's list: by id once it
// was seen (after a control-plane restart an agent that has not registered
// again has no address), else by address.
func (s *studio) agent(t *testing.T, a *studioAgent) (*cpv1.Agent, error) {
	t.Helper()
	resp, err := s.cp.client.ListAgents(ctxT(t, 10*time.Second), &cpv1.ListAgentsRequest{})
	if err != nil {
		return nil, err
	}
	for _, got := range resp.GetAgents() {
		if (a.id != "" && got.GetAgentId() == a.id) || (a.id == "" && got.GetAddress() == a.addr) {
			a.id = got.GetAgentId()
			return got, nil
		}
	}
	return nil, nil
}

// waitAgentState waits until the control plane lists the agent in state.
func (s *studio) waitAgentState(t *testing.T, a *studioAgent, state cpv1.Agent_State, within time.Duration) *cpv1.Agent {
	t.Helper()
	deadline := time.Now().Add(within)
	var last *cpv1.Agent
	var err error
	for time.Now().Before(deadline) {
		var got *cpv1.Agent
		if got, err = s.agent(t, a); got != nil {
			last = got
			if got.GetState() == state {
				return got
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("agent %s not %v within %s; last seen as %v (%v)\n--- agentd log ---\n%s", a.host.name, state, within, last, err, a.daemon.log.String())
	return nil
}

// TestHostsLiveness: three agents on their own hosts. Sessions spread over
// them; a partitioned agent goes UNREACHABLE, then LOST, and READY again
// once healed; a host whose every process is killed is LOST; after a
// control-plane restart an agent that does not come back is still listed
// with its session, and goes LOST in its turn.
func TestHostsLiveness(t *testing.T) {
	// agent-2 and agent-3 are in rack b; agent-3 has a GPU.
	// The same --max-sessions everywhere: placement ranks free Blender
	// slots first, and the default follows each agent's free memory.
	s := startStudio(t, 3, func(i int) []string {
		switch i {
		case 2:
			return []string{"--max-sessions", "8", "--label", "rack=b"}
		case 3:
			return []string{"--max-sessions", "8", "--label", "rack=b", "--label", "gpu=true"}
		}
		return []string{"--max-sessions", "8"}
	}, "--agent-lost-after", "6s")
	sessions := map[string]string{} // session → agent id it runs on
	for i := range 3 {
		id := s.cp.negotiate(t).GetSessionId()
		p, _ := s.cp.run(t, id, fmt.Sprintf("hello-%d", i), cubeOp("box", "Box", i))
		if p.GetState() != cpv1.Plan_STATE_SUCCEEDED {
			t.Fatalf("plan in session %s: %v", id, p)
		}
		sessions[id] = ""
	}
	held := map[string]*studioAgent{}
	for _, a := range s.agents {
		got, err := s.agent(t, a)
		if err != nil || got == nil {
			t.Fatalf("agent %s: %v %v", a.host.name, got, err)
		}
		// Placement spreads the sessions: one each.
		if len(got.GetSessionIds()) != 1 {
			t.Fatalf("agent %s holds %v; want one session each", a.host.name, got.GetSessionIds())
		}
		for _, id := range got.GetSessionIds() {
			if _, ok := sessions[id]; !ok || held[id] != nil {
				t.Fatalf("agent %s lists session %s (sessions %v)", a.host.name, id, sessions)
			}
			held[id] = a
		}
	}

	// Labels: a selector places on the agents that carry it, and is kept
	// when a session moves.
	gpu := s.negotiateOn(t, map[string]string{"gpu": "true"})
	if got := s.agentOf(t, gpu); got != s.agents[2] {
		t.Fatalf("gpu=true placed on %s", got.host.name)
	}
	if a, _ := s.agent(t, s.agents[2]); a.GetLabels()["gpu"] != "true" || a.GetLabels()["rack"] != "b" {
		t.Fatalf("agent-3's labels: %v", a.GetLabels())
	}
	_, err := s.cp.client.Negotiate(ctxT(t, time.Minute), negotiateReq(func(r *cpv1.NegotiateRequest) {
		r.AgentSelector = map[string]string{"gpu": "true", "rack": "a"}
	}))
	if info, _ := details(status.Convert(err)); status.Code(err) != codes.FailedPrecondition || info.GetMetadata()["field"] != "agent_selector" {
		t.Fatalf("a selector no agent matches: %v (%v)", err, info)
	}
	// Placement reads what each agent last reported (its sessions, its busy
	// Blenders), plus the sessions placed on it since: wait until the
	// reports say agent-3 holds two sessions, the others one, and nothing is
	// busy.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		settled := true
		for i, a := range s.agents {
			got, _ := s.agent(t, a)
			want := int32(1)
			if i == 2 {
				want = 2
			}
			settled = settled && got.GetBusySessionCount() == 0 && got.GetSessionCount() == want
		}
		if settled {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the agents' reports never settled")
		}
	}
	rackB := s.negotiateOn(t, map[string]string{"rack": "b"})
	sessions[gpu], sessions[rackB] = "", ""

	cut := s.agents[1]
	if got := s.agentOf(t, rackB); got != cut {
		all, _ := s.cp.client.ListAgents(ctxT(t, time.Minute), &cpv1.ListAgentsRequest{})
		for _, a := range all.GetAgents() {
			t.Logf("%s %s sessions=%d ids=%v max=%d busy=%d live=%d", a.GetAgentId(), a.GetAddress(), a.GetSessionCount(), a.GetSessionIds(), a.GetMaxSessions(), a.GetBusySessionCount(), a.GetLiveSessionCount())
		}
		t.Fatalf("rack=b placed on %s, want the emptier agent-2", got.host.name)
	}
	cut.host.partition(t)
	before := s.waitAgentState(t, cut, cpv1.Agent_STATE_UNREACHABLE, 15*time.Second)
	lost := s.waitAgentState(t, cut, cpv1.Agent_STATE_LOST, 15*time.Second)
	if !lost.GetLastSeenTime().AsTime().Equal(before.GetLastSeenTime().AsTime()) {
		t.Fatalf("a lost agent's last heartbeat moved: %v (it was %v)", lost, before)
	}
	for _, a := range []*studioAgent{s.agents[0], s.agents[2]} {
		if got, _ := s.agent(t, a); got.GetState() != cpv1.Agent_STATE_READY {
			t.Fatalf("agent %s, not partitioned, is %v", a.host.name, got.GetState())
		}
	}
	// Its sessions move; the rack=b one to agent-3, the only other agent
	// in rack b.
	s.waitSessions(t, cut, 0)
	if got := s.agentOf(t, rackB); got != s.agents[2] {
		t.Fatalf("the rack=b session moved to %s", got.host.name)
	}
	cut.host.heal(t)
	s.waitAgentState(t, cut, cpv1.Agent_STATE_READY, 20*time.Second)
	waitLog(t, cut.daemon, "session moved to another agent")

	// agent-3 is killed: the gpu=true session has nowhere to go and waits
	// on the lost agent; the others move.
	gone := s.agents[2]
	gone.kill()
	<-gone.daemon.done
	s.waitAgentState(t, gone, cpv1.Agent_STATE_LOST, 20*time.Second)
	s.waitSessions(t, gone, 1)
	if got := s.agentOf(t, rackB); got != cut {
		t.Fatalf("the rack=b session moved to %s, want agent-2", got.host.name)
	}

	// A control-plane restart while agent-3 is lost: it is listed, with
	// the session it holds, and goes LOST again.
	s.cp.cp.stop(t, syscall.SIGTERM)
	s.startCP(t)
	back := s.waitAgentState(t, gone, cpv1.Agent_STATE_UNREACHABLE, 30*time.Second)
	if ids := back.GetSessionIds(); len(ids) != 1 || ids[0] != gpu {
		t.Fatalf("after the restart the lost agent lists %v, want [%s]", ids, gpu)
	}
	for _, a := range s.agents[:2] {
		s.waitAgentState(t, a, cpv1.Agent_STATE_READY, 30*time.Second)
	}
	s.waitAgentState(t, gone, cpv1.Agent_STATE_LOST, 20*time.Second)
	if got := s.agentOf(t, gpu); got != gone {
		t.Fatalf("the gpu=true session moved to %s, which has no GPU", got.host.name)
	}
	out, err := s.cp.blendctl("agents").CombinedOutput()
	if err != nil || strings.Count(string(out), "READY") != 2 || !strings.Contains(string(out), "LOST") || !strings.Contains(string(out), "rack=b") {
		t.Fatalf("blendctl agents: %v\n%s", err, out)
	}
}

// waitSessions waits until the control plane lists n sessions on an agent.
func (s *studio) waitSessions(t *testing.T, a *studioAgent, n int) {
	t.Helper()
	var got *cpv1.Agent
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if got, _ = s.agent(t, a); got != nil && len(got.GetSessionIds()) == n {
			return
		}
	}
	t.Fatalf("agent %s lists sessions %v, want %d", a.host.name, got.GetSessionIds(), n)
}

// failoverOps is the plan of the failover scenarios: n independent creates
// (each its own object, so a duplicated effect shows as an extra object).
func failoverOps(n int) []*cpv1.Operation {
	ops := make([]*cpv1.Operation, n)
	for i := range ops {
		ops[i] = cubeOp(fmt.Sprintf("c%04d", i), fmt.Sprintf("F%04d", i), i)
	}
	return ops
}

// watched is what a client saw of a plan: every receipt it was sent, across
// stream breaks (it resumes from the sequence after the last it saw).
type watched struct {
	receipts []*cpv1.Receipt
}

// follow submits ops and reads receipts until the plan ends; at receipt
// count at (once), it calls hit. A broken stream (a control-plane restart)
// is resumed from the next sequence.
func (s *studio) follow(t *testing.T, sessionID, requestID string, ops []*cpv1.Operation, at int, hit func()) *watched {
	t.Helper()
	if _, err := s.cp.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: sessionID, RequestId: requestID, Operations: ops}); err != nil {
		t.Fatalf("submit %s: %v", requestID, err)
	}
	w := &watched{}
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		stream, err := s.cp.client.StreamReceipts(ctxT(t, 5*time.Minute), &cpv1.StreamReceiptsRequest{RequestId: requestID, StartSequence: int64(len(w.receipts)) + 1})
		if err != nil {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		for {
			resp, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return w
			}
			if err != nil {
				break // resume
			}
			if r := resp.GetReceipt(); r != nil {
				w.receipts = append(w.receipts, r)
				if len(w.receipts) == at && hit != nil {
					hit()
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("plan %s did not end within 5 minutes; %d receipts seen", requestID, len(w.receipts))
	return nil
}

// check is the failover checker over what the client observed and what the
// control plane says now: one receipt per operation in sequence 1…n, every
// one SUCCEEDED (no acknowledged receipt lost, none twice), the plan
// SUCCEEDED, the session's scene hash the uninterrupted run's, and n
// objects in the scene (no effect twice).
func (s *studio) check(t *testing.T, sessionID, requestID string, w *watched, n, baseObjects int, wantHash string) *cpv1.Session {
	t.Helper()
	seen := map[string]bool{}
	for i, r := range w.receipts {
		if r.GetSequence() != int64(i+1) || r.GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED || seen[r.GetOperationId()] {
			t.Fatalf("receipt %d of %s: sequence %d, %s, %v (seen before: %v)", i+1, requestID, r.GetSequence(), r.GetOperationId(), r.GetStatus(), seen[r.GetOperationId()])
		}
		seen[r.GetOperationId()] = true
	}
	if len(w.receipts) != n {
		t.Fatalf("%s: %d receipts, want %d", requestID, len(w.receipts), n)
	}
	p, err := s.cp.client.GetPlan(ctxT(t, time.Minute), &cpv1.GetPlanRequest{RequestId: requestID})
	if err != nil || p.GetPlan().GetState() != cpv1.Plan_STATE_SUCCEEDED || p.GetPlan().GetReceiptCount() != int64(n) {
		t.Fatalf("plan %s: %v %v", requestID, p.GetPlan(), err)
	}
	sess, err := s.cp.client.GetSession(ctxT(t, time.Minute), &cpv1.GetSessionRequest{SessionId: sessionID})
	if err != nil || sess.GetSession().GetSceneHash() != wantHash {
		t.Fatalf("session %s: scene %s, the uninterrupted run's %s (%v)", sessionID, sess.GetSession().GetSceneHash(), wantHash, err)
	}
	if got := s.objects(t, sessionID, requestID+"-count"); got != baseObjects+n {
		t.Fatalf("the scene holds %d objects after %s, want %d", got, requestID, baseObjects+n)
	}
	return sess.GetSession()
}

// objects counts the objects of a session's scene.
func (s *studio) objects(t *testing.T, sessionID, requestID string) int {
	t.Helper()
	_, rs := s.cp.run(t, sessionID, requestID, op("count", "scene.get_summary", map[string]any{}))
	return len(rs[0].GetResult().GetFields()["objects"].GetListValue().GetValues())
}

// restartAgent starts a stopped agent again on its host with its data dir
// and waits until it is READY.
func (s *studio) restartAgent(t *testing.T, a *studioAgent) {
	t.Helper()
	a.daemon = a.host.start(s.t, "agentd", a.args...)
	s.waitAgentState(t, a, cpv1.Agent_STATE_READY, 90*time.Second)
}

// grepLines returns the lines of a log that contain what.
func grepLines(log, what string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, what) {
			out = append(out, l)
		}
	}
	return out
}

// waitLog waits until a daemon's log says what.
func waitLog(t *testing.T, d *daemon, what string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(d.log.String(), what); {
		if time.Now().After(deadline) {
			t.Fatalf("%s never logged %q:\n%s", d.name, what, d.log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// negotiateOn negotiates a session on an agent carrying selector's labels.
func (s *studio) negotiateOn(t *testing.T, selector map[string]string) string {
	t.Helper()
	resp, err := s.cp.client.Negotiate(ctxT(t, time.Minute), negotiateReq(func(r *cpv1.NegotiateRequest) { r.AgentSelector = selector }))
	if err != nil {
		t.Fatalf("negotiate on %v: %v", selector, err)
	}
	return resp.GetContract().GetSessionId()
}

// agentOf is the studio agent a session is placed on now.
func (s *studio) agentOf(t *testing.T, sessionID string) *studioAgent {
	t.Helper()
	sess, err := s.cp.client.GetSession(ctxT(t, time.Minute), &cpv1.GetSessionRequest{SessionId: sessionID})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range s.agents {
		if a.id == sess.GetSession().GetAgentId() {
			return a
		}
	}
	t.Fatalf("session %s is on agent %s, not one of the studio's", sessionID, sess.GetSession().GetAgentId())
	return nil
}

// TestHostsFailover: a 2,000-operation plan survives losing its agent,
// three ways, one after the other on one studio of three agents: every
// process of the agent's host killed; the agent partitioned until LOST and
// then healed (its copy of the session stops); the control plane restarted
// while the agent is lost. Each time the plan finishes on another agent
// and the checker finds nothing lost, nothing twice, and the scene of an
// uninterrupted run.
func TestHostsFailover(t *testing.T) {
	const n = 2000
	// Allow all, but a delete of "Doomed" waits for approval ("preview").
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("rules:\n  - name: doomed\n    tools: [object.delete]\n    args: {name: Doomed}\n"+
		"    decision: require_approval\n    reason: e2e\n  - name: e2e-allow-all\n    decision: allow\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startStudio(t, 3, nil, "--agent-lost-after", "4s", "--policy", policy)
	for _, a := range s.agents {
		s.agent(t, a) // learn the ids
	}
	ref := s.cp.negotiate(t).GetSessionId()
	base := s.objects(t, ref, "baseline") // the baseline scene's camera and light
	w := s.follow(t, ref, "reference", failoverOps(n), 0, nil)
	refSess, _ := s.cp.client.GetSession(ctxT(t, time.Minute), &cpv1.GetSessionRequest{SessionId: ref})
	want := refSess.GetSession().GetSceneHash()
	s.check(t, ref, "reference", w, n, base, want)

	t.Run("kill", func(t *testing.T) {
		id := s.cp.negotiate(t).GetSessionId()
		victim := s.agentOf(t, id)
		w := s.follow(t, id, "kill", failoverOps(n), n/3, func() { victim.kill() })
		sess := s.check(t, id, "kill", w, n, base, want)
		if sess.GetAgentId() == victim.id || sess.GetEpoch() != 2 {
			t.Fatalf("after the kill the session is on %s at epoch %d (killed: %s)", sess.GetAgentId(), sess.GetEpoch(), victim.id)
		}
		t.Logf("rebuilds: %s", grepLines(s.cp.cp.log.String(), "session rebuilt"))
		// The host comes back with its disk: agentd drops the session it
		// holds in its journal, which runs elsewhere now.
		s.restartAgent(t, victim)
		waitLog(t, victim.daemon, "session moved to another agent")
		if got, _ := s.agent(t, victim); slices.Contains(got.GetSessionIds(), id) {
			t.Fatalf("the restarted agent lists %s", id)
		}
		s.check(t, id, "kill", w, n, base, want)
	})

	t.Run("checkpoint", func(t *testing.T) {
		// The control plane holds a copy of the session's checkpoint when the
		// agent is lost: the new agent starts from it and replays only what
		// came after.
		id := s.cp.negotiate(t).GetSessionId()
		victim := s.agentOf(t, id)
		ops := failoverOps(n)
		first := s.follow(t, id, "checkpoint-1", ops[:1200], 0, nil)
		if len(first.receipts) != 1200 {
			t.Fatalf("first half: %d receipts", len(first.receipts))
		}
		for deadline := time.Now().Add(30 * time.Second); !slices.ContainsFunc(grepLines(s.cp.cp.log.String(), "checkpoint copied"),
			func(l string) bool { return strings.Contains(l, id) }); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no checkpoint of %s reached the control plane", id)
			}
		}
		w := s.follow(t, id, "checkpoint-2", ops[1200:], 100, func() { victim.kill() })
		w.receipts = append(first.receipts, w.receipts...)
		for i, r := range w.receipts {
			r.Sequence = int64(i + 1) // two plans, checked as one
		}
		sess, err := s.cp.client.GetSession(ctxT(t, time.Minute), &cpv1.GetSessionRequest{SessionId: id})
		if err != nil || sess.GetSession().GetSceneHash() != want || sess.GetSession().GetAgentId() == victim.id {
			t.Fatalf("after the rebuild from a checkpoint: %v %v", sess.GetSession(), err)
		}
		if got := s.objects(t, id, "checkpoint-count"); got != base+n {
			t.Fatalf("the scene holds %d objects, want %d", got, base+n)
		}
		rebuilt := grepLines(s.cp.cp.log.String(), "session rebuilt")
		if !slices.ContainsFunc(rebuilt, func(l string) bool { return strings.Contains(l, id) && strings.Contains(l, "from_checkpoint=true") }) {
			t.Fatalf("the rebuild did not start from the checkpoint: %v", rebuilt)
		}
		t.Logf("rebuilds: %v", rebuilt)
		s.restartAgent(t, victim)
	})

	t.Run("preview", func(t *testing.T) {
		// A session moved off a lost agent, before any plan ran where it is
		// now: the preview of a plan waiting for approval rebuilds it there
		// first. (It failed, PREVIEW_UNAVAILABLE "session not found", until
		// a plan had run there; found by QA.)
		id := s.cp.negotiate(t).GetSessionId()
		victim := s.agentOf(t, id)
		if p, _ := s.cp.run(t, id, "made", cubeOp("cube", "Doomed", 0)); p.GetState() != cpv1.Plan_STATE_SUCCEEDED {
			t.Fatalf("a cube: %v", p)
		}
		victim.kill()
		s.waitAgentState(t, victim, cpv1.Agent_STATE_LOST, 30*time.Second)
		waitFor(t, "the session to move", func() bool { return s.agentOf(t, id) != victim })
		resp, err := s.cp.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: id, RequestId: "del-moved",
			Operations: []*cpv1.Operation{op("del", "object.delete", map[string]any{"name": "Doomed"})}})
		if err != nil || resp.GetPlan().GetApprovalId() == "" {
			t.Fatalf("a delete: %v %v", resp, err)
		}
		pv := waitPreview(t, s.cp, resp.GetPlan().GetApprovalId()).GetPreview()
		if pv.GetState() != cpv1.Preview_STATE_READY || !slices.ContainsFunc(pv.GetChanges(), func(ch *cpv1.DatablockChange) bool {
			return ch.GetKind() == cpv1.DatablockChange_KIND_REMOVED && ch.GetName() == "Doomed"
		}) {
			t.Fatalf("the preview in a moved session: %v", pv)
		}
		if _, err := s.cp.client.CancelPlan(ctxT(t, time.Minute), &cpv1.CancelPlanRequest{RequestId: "del-moved"}); err != nil {
			t.Fatal(err)
		}
		s.restartAgent(t, victim)
	})

	t.Run("partition", func(t *testing.T) {
		id := s.cp.negotiate(t).GetSessionId()
		victim := s.agentOf(t, id)
		w := s.follow(t, id, "partition", failoverOps(n), n/3, func() { victim.host.partition(t) })
		sess := s.check(t, id, "partition", w, n, base, want)
		if sess.GetAgentId() == victim.id {
			t.Fatalf("the session stayed on the partitioned agent")
		}
		victim.host.heal(t)
		s.waitAgentState(t, victim, cpv1.Agent_STATE_READY, 30*time.Second)
		// Its stale copy goes: Blender stopped, the session dropped.
		stale := filepath.Join(victim.dir, "sessions", id)
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(victim.daemon.log.String(), "session moved to another agent") || len(sessionBlender(t, stale)) > 0 || dirExists(stale) {
			if time.Now().After(deadline) {
				t.Fatalf("the healed agent kept its stale copy: Blender %v\n%s", sessionBlender(t, stale), victim.daemon.log.String())
			}
			time.Sleep(200 * time.Millisecond)
		}
		if got, _ := s.agent(t, victim); len(got.GetSessionIds()) != 0 && slices.Contains(got.GetSessionIds(), id) {
			t.Fatalf("the healed agent still lists %s", id)
		}
		// Nothing it could still say is taken: the scene is as checked.
		s.check(t, id, "partition", w, n, base, want)
	})

	t.Run("broken", func(t *testing.T) {
		// python.exec is nondeterministic: a history holding it cannot be
		// replayed exactly, so the session is reported broken, not moved on
		// a guess.
		resp, err := s.cp.client.Negotiate(ctxT(t, time.Minute), negotiateReq(func(r *cpv1.NegotiateRequest) {
			r.HostProfile.FeatureFlags = []string{"unsafe_ops", "nondeterministic_tools"}
		}))
		if err != nil {
			t.Fatal(err)
		}
		id := resp.GetContract().GetSessionId()
		victim := s.agentOf(t, id)
		if p, _ := s.cp.run(t, id, "exec", op("exec", "python.exec", map[string]any{"code": "import bpy\nbpy.data.objects.new('Made', None)"})); p.GetState() != cpv1.Plan_STATE_SUCCEEDED {
			t.Fatalf("python.exec: %v", p)
		}
		victim.kill()
		<-victim.daemon.done
		p, rs := s.cp.run(t, id, "after-loss", cubeOp("box", "Box", 0))
		if p.GetState() != cpv1.Plan_STATE_FAILED || rs[0].GetError().GetErrorCode() != "SESSION_LOST" {
			t.Fatalf("a plan after the loss: %v %v", p, rs)
		}
		sess, err := s.cp.client.GetSession(ctxT(t, time.Minute), &cpv1.GetSessionRequest{SessionId: id})
		if err != nil || sess.GetSession().GetState() != cpv1.Session_STATE_BROKEN {
			t.Fatalf("session after a failed rebuild: %v %v", sess.GetSession(), err)
		}
		_, err = s.cp.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: id, RequestId: "refused", Operations: []*cpv1.Operation{cubeOp("box", "Box", 0)}})
		if info, _ := details(status.Convert(err)); info.GetReason() != "SESSION_BROKEN" {
			t.Fatalf("a plan in a broken session: %v", err)
		}
		s.restartAgent(t, victim)
	})

	t.Run("import", func(t *testing.T) {
		// Files imported, then uploaded or exported again under their names:
		// the rebuild gives each replayed import the versions of the files it
		// read the first time (the model and the material library it names,
		// an export of the session's own) and leaves the newest in the
		// sandbox. (Before, the replay read the new model, or found no
		// export, and the session broke.) The rollback after the imports
		// makes the rebuild replay the whole log, whatever checkpoint the
		// control plane copied.
		id := s.cp.negotiate(t).GetSessionId()
		victim := s.agentOf(t, id)
		upload := func(name, content string) {
			t.Helper()
			up := &cpv1.ArtifactUpload{SessionId: id, Name: name, SizeBytes: int64(len(content)), Sha256: hexSHA([]byte(content))}
			if _, err := s.cp.upload(t, up, []byte(content), 1<<20); err != nil {
				t.Fatal(err)
			}
		}
		imp := func(name string) *cpv1.Operation {
			return op("imp", "scene.import", map[string]any{"format": "obj", "input": name})
		}
		read := func(r *cpv1.Receipt) string { return fmt.Sprint(r.GetResult().AsMap()["files_read"]) }
		tri, red := "mtllib model.mtl\no Tri\nv 0 0 0\nv 1 0 0\nv 0 1 0\nusemtl Paint\nf 1 2 3\n", "newmtl Paint\nKd 1 0 0\n"
		upload("model.obj", tri)
		upload("model.mtl", red)
		p, rs := s.cp.run(t, id, "import-tri", imp("model.obj"))
		if want := fmt.Sprintf("map[model.mtl:%s model.obj:%s]", hexSHA([]byte(red)), hexSHA([]byte(tri))); p.GetState() != cpv1.Plan_STATE_SUCCEEDED || read(rs[0]) != want {
			t.Fatalf("import: %v %v, want files_read %s", p, rs, want)
		}
		export := func(id string, deps ...string) *cpv1.Operation {
			return op(id, "scene.export", map[string]any{"format": "obj", "output": "made.obj"}, deps...)
		}
		// Plans apart: the control plane keeps each export before the next
		// plan runs.
		for _, ops := range [][]*cpv1.Operation{{export("out")}, {imp("made.obj")}, {export("again")}} {
			p, rs = s.cp.run(t, id, "made-"+ops[0].GetOperationId(), ops...)
			if p.GetState() != cpv1.Plan_STATE_SUCCEEDED {
				t.Fatalf("export, import, export: %v %v", p, rs)
			}
		}
		var newest string // made.obj as the second export wrote it
		for _, a := range rs[0].GetArtifacts() {
			if a.GetName() == "made.obj" {
				newest = a.GetSha256()
			}
		}
		// An export no import read: the new agent's sandbox has it too, for
		// an import after the loss. A distributed render's frames, which no
		// sandbox held, stay out of it.
		onlyPlan, onlyRs := s.cp.run(t, id, "export-only", op("only", "scene.export", map[string]any{"format": "obj", "output": "only.obj"}))
		if onlyPlan.GetState() != cpv1.Plan_STATE_SUCCEEDED {
			t.Fatalf("export only: %v %v", onlyPlan, onlyRs)
		}
		i := slices.IndexFunc(onlyRs[0].GetArtifacts(), func(a *cpv1.Artifact) bool { return a.GetName() == "only.obj" })
		if i < 0 {
			t.Fatalf("export only: no only.obj among %v", onlyRs[0].GetArtifacts())
		}
		only := onlyRs[0].GetArtifacts()[i]
		if p, rs := s.cp.run(t, id, "fan", op("fan", "render.animation", map[string]any{"output_prefix": "fan", "frame_start": 1, "frame_end": 2,
			"resolution": []any{32, 32}, "samples": 1, "distribute": true})); p.GetState() != cpv1.Plan_STATE_SUCCEEDED || len(rs[0].GetArtifacts()) != 2 {
			t.Fatalf("distributed render: %v %v", p, rs)
		}
		// A model imported without the material library Blender would load
		// beside it (<stem>.mtl), which comes later: the replayed import
		// must not find it either.
		upload("late.obj", "o Late\nv 0 0 0\nv 1 0 0\nv 0 1 0\nusemtl Late\nf 1 2 3\n")
		if p, rs := s.cp.run(t, id, "import-late", imp("late.obj")); p.GetState() != cpv1.Plan_STATE_SUCCEEDED || strings.Contains(read(rs[0]), "late.mtl") {
			t.Fatalf("import of late.obj: %v %v", p, rs)
		}
		upload("late.mtl", "newmtl Late\nKd 0 1 0\n")
		quad, blue := "mtllib model.mtl\no Quad\nv 0 0 0\nv 1 0 0\nv 1 1 0\nv 0 1 0\nusemtl Paint\nf 1 2 3 4\n", "newmtl Paint\nKd 0 0 1\n"
		upload("model.obj", quad)
		upload("model.mtl", blue)
		_, err := s.cp.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: id, RequestId: "import-rollback", Atomic: true,
			Operations: []*cpv1.Operation{cubeOp("c", "Temp", 0), op("d", "object.delete", map[string]any{"name": "Nope"}, "c")}})
		if err != nil {
			t.Fatal(err)
		}
		if rs := s.cp.receipts(t, "import-rollback", 1); rs[len(rs)-1].GetStatus() != cpv1.Receipt_STATUS_ROLLED_BACK {
			t.Fatalf("the atomic plan: %v", rs)
		}
		before, err := s.cp.client.GetSession(ctxT(t, time.Minute), &cpv1.GetSessionRequest{SessionId: id})
		if err != nil {
			t.Fatal(err)
		}
		victim.kill()
		<-victim.daemon.done
		p, rs = s.cp.run(t, id, "import-quad", imp("model.obj"))
		if p.GetState() != cpv1.Plan_STATE_SUCCEEDED || fmt.Sprint(rs[0].GetResult().AsMap()["objects"]) != "[Quad]" ||
			read(rs[0]) != fmt.Sprintf("map[model.mtl:%s model.obj:%s]", hexSHA([]byte(blue)), hexSHA([]byte(quad))) {
			t.Fatalf("the import after the rebuild (the newest model, Quad, blue): %v %v\n%s", p, rs, grepLines(s.cp.cp.log.String(), id))
		}
		sess, err := s.cp.client.GetSession(ctxT(t, time.Minute), &cpv1.GetSessionRequest{SessionId: id})
		if err != nil || sess.GetSession().GetAgentId() == victim.id || rs[0].GetSceneHashBefore() != before.GetSession().GetSceneHash() {
			t.Fatalf("after the rebuild: %v %v (before the loss: %v)", sess.GetSession(), err, before.GetSession())
		}
		rebuilt := grepLines(s.cp.cp.log.String(), "session rebuilt")
		if !slices.ContainsFunc(rebuilt, func(l string) bool { return strings.Contains(l, id) && strings.Contains(l, "from_checkpoint=false") }) {
			t.Fatalf("the rebuild did not replay the whole log: %v", rebuilt)
		}
		sandbox := filepath.Join(s.agentOf(t, id).dir, "sessions", id, "output")
		if made, err := os.ReadFile(filepath.Join(sandbox, "made.obj")); err != nil || hexSHA(made) != newest {
			t.Fatalf("made.obj on the new agent: sha256 %s (%v), the second export's %s", hexSHA(made), err, newest)
		}
		if _, err := os.Stat(filepath.Join(sandbox, "late.mtl")); err != nil {
			t.Fatalf("late.mtl, uploaded after every import of it, on the new agent: %v", err)
		}
		if got, err := os.ReadFile(filepath.Join(sandbox, "only.obj")); err != nil || hexSHA(got) != only.GetSha256() {
			t.Fatalf("only.obj, exported and never imported, on the new agent: sha256 %s (%v), the export's %s", hexSHA(got), err, only.GetSha256())
		}
		if p, rs := s.cp.run(t, id, "import-only", imp("only.obj")); p.GetState() != cpv1.Plan_STATE_SUCCEEDED {
			t.Fatalf("an import after the move of a file exported before it: %v %v", p, rs)
		}
		if _, err := os.Stat(filepath.Join(sandbox, "fan_0001.png")); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("a distributed render's frame in the new sandbox: %v", err)
		}
		s.restartAgent(t, victim)
	})

	t.Run("restart", func(t *testing.T) {
		id := s.cp.negotiate(t).GetSessionId()
		victim := s.agentOf(t, id)
		w := s.follow(t, id, "restart", failoverOps(n), n/3, func() {
			victim.kill()
			s.cp.cp.stop(t, syscall.SIGTERM)
			s.startCP(t)
		})
		sess := s.check(t, id, "restart", w, n, base, want)
		if sess.GetAgentId() == victim.id {
			t.Fatalf("the session stayed on the killed agent")
		}
	})
}

// TestHostsRenderFanOut: render.animation with "distribute": true on three
// agents renders the same bytes as one agent does, frame for frame, and
// lists which agent rendered each frame; with an agent killed halfway, its
// frames are rendered by the others and the bytes are still the same.
func TestHostsRenderFanOut(t *testing.T) {
	s := startStudio(t, 3, nil, "--agent-lost-after", "4s")
	for _, a := range s.agents {
		s.agent(t, a)
	}
	resp, err := s.cp.client.Negotiate(ctxT(t, time.Minute), negotiateReq(func(r *cpv1.NegotiateRequest) {
		r.HostProfile.FeatureFlags = []string{"progress_events"}
	}))
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetContract().GetSessionId()
	// A cube that moves, so that every frame differs.
	if p, _ := s.cp.run(t, id, "scene", cubeOp("cube", "Mover", 0),
		op("k1", "keyframe.insert", map[string]any{"object": "Mover", "data_path": "location", "frame": 1, "value": []any{-3, 0, 0}}, "cube"),
		op("k2", "keyframe.insert", map[string]any{"object": "Mover", "data_path": "location", "frame": 24, "value": []any{3, 0, 0}}, "k1"),
	); p.GetState() != cpv1.Plan_STATE_SUCCEEDED {
		t.Fatalf("scene: %v", p)
	}
	render := func(prefix string, distribute bool, last int, res []any) *cpv1.Operation {
		return op("render", "render.animation", map[string]any{"output_prefix": prefix, "frame_start": 1, "frame_end": last,
			"resolution": res, "samples": 2, "seed": 7, "distribute": distribute})
	}
	framesOf := func(r *cpv1.Receipt) (sums map[int]string, agents map[int]string) {
		sums, agents = map[int]string{}, map[int]string{}
		for _, f := range r.GetResult().GetFields()["frames"].GetListValue().GetValues() {
			m := f.GetStructValue().AsMap()
			n := int(m["frame"].(float64))
			sums[n], agents[n] = m["sha256"].(string), m["agent_id"].(string)
		}
		return sums, agents
	}
	small := []any{48, 32}
	p, rs := s.cp.run(t, id, "single", render("one", false, 12, small))
	if p.GetState() != cpv1.Plan_STATE_SUCCEEDED {
		t.Fatalf("single-agent render: %v %v", p, rs)
	}
	single := map[int]string{}
	for i, sum := range rs[0].GetResult().GetFields()["sha256"].GetListValue().GetValues() {
		single[i+1] = sum.GetStringValue()
	}
	if single[1] == single[12] {
		t.Fatal("the first and last frames are the same: the scene does not move")
	}

	p, rs = s.cp.run(t, id, "fanout", render("many", true, 12, small))
	if p.GetState() != cpv1.Plan_STATE_SUCCEEDED || len(rs) != 1 {
		t.Fatalf("distributed render: %v %v", p, rs)
	}
	sums, agents := framesOf(rs[0])
	used := map[string]bool{}
	for f := 1; f <= 12; f++ {
		if sums[f] != single[f] {
			t.Fatalf("frame %d: distributed %s, single %s", f, sums[f], single[f])
		}
		used[agents[f]] = true
	}
	if len(used) != 3 || len(rs[0].GetArtifacts()) != 12 {
		t.Fatalf("rendered by %d agents, %d artifacts; want 3 and 12", len(used), len(rs[0].GetArtifacts()))
	}
	arts, err := s.cp.client.ListArtifacts(ctxT(t, time.Minute), &cpv1.ListArtifactsRequest{SessionId: id, RequestId: "fanout"})
	if err != nil || len(arts.GetArtifacts()) != 12 || arts.GetArtifacts()[0].GetSha256() != single[1] {
		t.Fatalf("the session's artifacts of the render: %v %v", arts.GetArtifacts(), err)
	}
	sess, _ := s.cp.client.GetSession(ctxT(t, time.Minute), &cpv1.GetSessionRequest{SessionId: id})
	if rs[0].GetSceneHashAfter() != sess.GetSession().GetSceneHash() || rs[0].GetSceneHashBefore() != rs[0].GetSceneHashAfter() {
		t.Fatalf("a render changed the scene: %v", rs[0])
	}

	// After a change in the same plan: the forks render the scene as of the
	// render's place in the plan, as one agent would. (They replayed the
	// session from the store before the change's receipt was committed:
	// the frames were of the scene before it, or the render failed, and the
	// session's hash went back, found by QA.)
	move := op("move", "keyframe.insert", map[string]any{"object": "Mover", "data_path": "location", "frame": 12, "value": []any{0, 0, 3}})
	after := render("after", true, 12, small)
	after.DependsOn = []string{"move"}
	p, rs = s.cp.run(t, id, "fanout-after-change", move, after)
	if p.GetState() != cpv1.Plan_STATE_SUCCEEDED || len(rs) != 2 || rs[1].GetSceneHashBefore() != rs[0].GetSceneHashAfter() {
		t.Fatalf("a distributed render after a change in its plan: %v %v", p, rs)
	}
	moved, _ := framesOf(rs[1])
	p, rs = s.cp.run(t, id, "single-after-change", render("one-after", false, 12, small))
	if p.GetState() != cpv1.Plan_STATE_SUCCEEDED {
		t.Fatalf("single-agent render after the change: %v %v", p, rs)
	}
	for i, sum := range rs[0].GetResult().GetFields()["sha256"].GetListValue().GetValues() {
		if moved[i+1] != sum.GetStringValue() {
			t.Fatalf("frame %d after the change: distributed %s, single %s", i+1, moved[i+1], sum.GetStringValue())
		}
	}
	if moved[12] == single[12] {
		t.Fatal("frame 12 is the same before and after the change")
	}

	// An agent killed halfway: its frames are rendered by the others.
	var victim *studioAgent
	for _, a := range s.agents {
		if a != s.agentOf(t, id) {
			victim = a
			break
		}
	}
	big := []any{96, 64}
	if _, err := s.cp.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: id, RequestId: "fanout-kill",
		Operations: []*cpv1.Operation{render("kill", true, 24, big)}}); err != nil {
		t.Fatal(err)
	}
	stream, err := s.cp.client.StreamReceipts(ctxT(t, 5*time.Minute), &cpv1.StreamReceiptsRequest{RequestId: "fanout-kill"})
	if err != nil {
		t.Fatal(err)
	}
	var got *cpv1.Receipt
	killed, lastDone := false, int64(0)
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if pg := ev.GetProgress(); pg != nil {
			if pg.GetTotal() != 24 || pg.GetDone() > 24 {
				t.Fatalf("progress %v", pg)
			}
			lastDone = pg.GetDone()
			if pg.GetDone() >= 4 && !killed {
				killed = true
				victim.kill()
			}
		}
		if r := ev.GetReceipt(); r != nil {
			got = r
		}
	}
	if !killed || got.GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED {
		t.Fatalf("killed: %v (progress %d); receipt %v", killed, lastDone, got)
	}
	_, rs = s.cp.run(t, id, "single-kill", render("ref", false, 24, big))
	ref := rs[0].GetResult().GetFields()["sha256"].GetListValue().GetValues()
	sums, agents = framesOf(got)
	for f := 1; f <= 24; f++ {
		if sums[f] != ref[f-1].GetStringValue() {
			t.Fatalf("frame %d after the kill: %s, single agent %s", f, sums[f], ref[f-1].GetStringValue())
		}
	}
	if !strings.Contains(s.cp.cp.log.String(), "its frames go to the others") {
		t.Fatalf("the killed agent's frames were not handed on:\n%s", s.cp.cp.log.String())
	}
	t.Logf("frames by agent after killing %s: %v", victim.id, agents)
}
