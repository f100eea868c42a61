// Package e2e runs the real binaries (controlplane, agentd, blendctl) with a
// real Blender over loopback, the way a user does.
package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/types/known/structpb"

	agentv1 "github.com/blendplane/blendplane/gen/blendplane/agent/v1"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/internal/logbuf"
	"github.com/blendplane/blendplane/internal/panicguard"
)

// binDir holds the binaries built once for the whole package.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "blendplane-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	// The binaries as shipped, and an agentd built with the "faults" tag
	// for the fault tests (clusterOpts.faults). BLENDPLANE_E2E_RACE=1 builds
	// them with the race detector, whose reports fail the tests (checkLog).
	build := []string{"build"}
	if os.Getenv("BLENDPLANE_E2E_RACE") != "" {
		build = append(build, "-race")
	}
	for _, args := range [][]string{{"-o", dir + "/", "../cmd/controlplane", "../cmd/agentd", "../cmd/blendctl"},
		{"-tags", "faults", "-o", filepath.Join(dir, faultyAgent), "../cmd/agentd"}} {
		build := exec.Command("go", append(build, args...)...)
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build binaries:", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// faultyAgent is agentd built with the "faults" tag, under binDir: it reads
// test faults from BLENDPLANE_TEST_FAULTS, which a production agentd ignores.
const faultyAgent = "faults/agentd"

// repoRoot is the repository, where .blender/venv lives.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// blenderFlags picks the Blender of the tests: BLENDPLANE_TEST_BLENDER if
// set, else agentd's own discovery (the repo's venv, then PATH).
func blenderFlags() []string {
	if b := os.Getenv("BLENDPLANE_TEST_BLENDER"); b != "" {
		return []string{"--blender", b}
	}
	return nil
}

// daemon is one running binary.
type daemon struct {
	name     string
	cmd      *exec.Cmd
	log      *syncBuffer
	done     chan struct{}
	expected atomic.Bool // the test ends it, or expects it to end (expectExit)
}

// expectExit says the daemon may end before its test does: the test kills
// it, or it must refuse to start. Any other exit fails the test.
func (d *daemon) expectExit() { d.expected.Store(true) }

// syncBuffer holds a daemon's output while its test reads it.
type syncBuffer = logbuf.Buffer

func startDaemon(t testing.TB, name string, args ...string) *daemon {
	t.Helper()
	return startDaemonEnv(t, nil, name, args...)
}

func startDaemonEnv(t testing.TB, env []string, name string, args ...string) *daemon {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, name), args...)
	cmd.Env = append(os.Environ(), env...)
	return startCmd(t, name, cmd)
}

// startCmd starts a daemon's command (its Env, if set, is kept) and stops
// it with SIGTERM when the test ends.
func startCmd(t testing.TB, name string, cmd *exec.Cmd) *daemon {
	t.Helper()
	d := &daemon{name: name, log: &syncBuffer{}, done: make(chan struct{}), cmd: cmd}
	d.cmd.Dir = repoRoot()
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { d.cmd.Wait(); close(d.done) }()
	t.Cleanup(func() {
		select {
		case <-d.done:
			if !d.expected.Load() {
				t.Errorf("%s exited during the test, unasked: %v", name, d.cmd.ProcessState)
			}
		default:
		}
		d.stop(t, syscall.SIGTERM)
		checkLog(t, d)
		if t.Failed() {
			t.Logf("--- %s log ---\n%s", name, d.log.String())
		}
	})
	return d
}

// logKey is a key=value pair of a log line as slog's text handler writes
// it: a value with a space, '=' or '"' is quoted.
var logKey = regexp.MustCompile(`(?:^| )([^ ="]+)=("(?:[^"\\]|\\.)*"|[^ ]*)`)

// checkLog fails the test for a line of the daemon's log that repeats a
// key (a log processor keeps one of the two: the executor's lines once
// named the app's component and their own, the MCP SDK's a client's
// level), and for a call that finished Internal, Unknown or DataLoss: a
// request gets a structured error, whatever a test sends.
func checkLog(t testing.TB, d *daemon) {
	t.Helper()
	for line := range strings.Lines(d.log.String()) {
		if strings.HasPrefix(line, "WARNING: DATA RACE") {
			t.Errorf("%s: the race detector found a data race (its report is in the log)", d.name)
		}
		if !strings.HasPrefix(line, "time=") {
			continue // not one of slog's: Blender's own output
		}
		kv := map[string]string{}
		for _, m := range logKey.FindAllStringSubmatch(line, -1) {
			if _, seen := kv[m[1]]; seen {
				t.Errorf("%s: a log line repeats the key %q: %s", d.name, m[1], line)
				break
			}
			kv[m[1]] = m[2]
		}
		if kv["msg"] == `"finished call"` && slices.Contains([]string{"Internal", "Unknown", "DataLoss"}, kv["grpc.code"]) {
			t.Errorf("%s: a call finished %s: %s", d.name, kv["grpc.code"], line)
		}
		if kv["msg"] == strconv.Quote(panicguard.Msg) {
			t.Errorf("%s: a call panicked: %s", d.name, line)
		}
	}
}

// stop signals the daemon and waits for it to exit. After SIGTERM, a
// daemon's shutdown must be clean: exit status 0, whatever it was doing.
func (d *daemon) stop(t testing.TB, sig syscall.Signal) {
	d.expectExit()
	select {
	case <-d.done:
		return
	default:
	}
	d.cmd.Process.Signal(sig)
	select {
	case <-d.done:
		if sig == syscall.SIGTERM && !d.cmd.ProcessState.Success() {
			t.Errorf("%s did not shut down cleanly on SIGTERM: %v", d.name, d.cmd.ProcessState)
		}
	case <-time.After(20 * time.Second):
		t.Errorf("%s did not exit within 20s of %v", d.name, sig)
		d.cmd.Process.Kill()
		<-d.done
	}
}

// cluster is a control plane with one agent.
type cluster struct {
	cpAddr, agentAddr string
	httpAddr          string // the control plane's --http-listen
	insecure          bool   // --allow-insecure-local
	tls               bool   // beyond loopback: clients trust cp/ca.pem
	adminToken        string // the admin token's secret
	dir               string // data dirs: cp/ and agent/
	agentArgs         []string
	agentEnv          []string
	agentBin          string // agentd or faultyAgent
	agentMetrics      string // agentd's --metrics-listen address, when a test gave one
	cp                *daemon
	agent             *daemon
	client            cpv1.ControlPlaneServiceClient
}

// freeAddr picks a free loopback port below Linux's ephemeral range
// (32768+), so that no outgoing connection can take it between this check
// and the daemon's bind.
func freeAddr(t testing.TB) string { t.Helper(); return freeAddrOn(t, "127.0.0.1") }

// handedOut holds the ports freeAddrOn returned: a port is free when it is
// handed out but bound only when its daemon starts, so two calls in a row
// (a cluster's control plane, HTTP and agent addresses) must not get the
// same one.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// freeAddrOn is freeAddr on another address of this machine.
func freeAddrOn(t testing.TB, ip string) string {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	for i := 0; i < 100; i++ {
		port := 20000 + rand.IntN(12000)
		if handedOut.ports[port] {
			continue
		}
		addr := net.JoinHostPort(ip, fmt.Sprint(port))
		l, err := net.Listen("tcp", addr)
		if err == nil {
			l.Close()
			handedOut.ports[port] = true
			return addr
		}
	}
	t.Fatal("no free port in 20000-32000")
	return ""
}

// startCluster starts both daemons with fresh data dirs and waits until the
// agent is registered.
func startCluster(t testing.TB) *cluster {
	t.Helper()
	return startClusterWith(t, nil, nil)
}

// startClusterWith passes extra flags and environment to agentd.
func startClusterWith(t testing.TB, agentArgs, agentEnv []string) *cluster {
	t.Helper()
	return startClusterOpts(t, clusterOpts{agentArgs: agentArgs, agentEnv: agentEnv})
}

// clusterOpts are extra flags for each daemon and environment for agentd.
// insecure runs both with --allow-insecure-local (no tokens, no TLS).
type clusterOpts struct {
	cpArgs, agentArgs, agentEnv, cpEnv []string
	insecure                           bool
	// host, if set, is a non-loopback address of this machine both daemons
	// listen on: every listener is then TLS.
	host string
	// policy is the control plane's policy file: "" allows everything (the
	// tests of all but the policy gate, which would otherwise wait for
	// approvals), defaultPolicy runs it without --policy.
	policy string
	// faults runs the agentd built with test faults (faultyAgent).
	faults bool
}

// allowAll is the policy of the tests that are not about the policy gate.
const allowAll = "rules:\n  - name: e2e-allow-all\n    decision: allow\n"

// defaultPolicy (as clusterOpts.policy) runs the control plane on its
// default policy.
const defaultPolicy = "default"

// startClusterOpts starts a control plane, waits for the admin token its
// first start writes, makes an agent token with it and starts agentd with
// that token. c.client calls as admin.
func startClusterOpts(t testing.TB, o clusterOpts) *cluster {
	t.Helper()
	agentArgs := o.agentArgs
	c := &cluster{cpAddr: freeAddr(t), agentAddr: freeAddr(t), httpAddr: freeAddr(t), agentEnv: o.agentEnv, insecure: o.insecure, agentBin: "agentd"}
	if o.faults {
		c.agentBin = faultyAgent
	}
	dir := t.TempDir()
	c.dir = dir
	if o.host != "" {
		c.cpAddr, c.agentAddr, c.httpAddr, c.tls = freeAddrOn(t, o.host), freeAddrOn(t, o.host), freeAddrOn(t, o.host), true
		agentArgs = append([]string{"--ca-file", c.caFile()}, agentArgs...)
	}
	cpArgs := append([]string{"--listen", c.cpAddr, "--http-listen", c.httpAddr, "--data-dir", filepath.Join(dir, "cp"), "--heartbeat", "1s",
		"--agent-retry-window", "1m"}, o.cpArgs...)
	switch o.policy {
	case defaultPolicy:
	case "":
		o.policy = allowAll
		fallthrough
	default:
		file := filepath.Join(dir, "policy.yaml")
		if err := os.WriteFile(file, []byte(o.policy), 0o600); err != nil {
			t.Fatal(err)
		}
		cpArgs = append(cpArgs, "--policy", file)
	}
	auth := []string{"--token-file", filepath.Join(dir, "agent.token")}
	if o.insecure {
		cpArgs = append(cpArgs, "--allow-insecure-local")
		auth = []string{"--allow-insecure-local"}
	}
	c.cp = startDaemonEnv(t, o.cpEnv, "controlplane", cpArgs...)
	if !o.insecure {
		c.adminToken = c.waitAdminToken(t)
	}
	c.client = c.clientAs(t, c.adminToken)
	if !o.insecure {
		secret := c.createToken(t, "agent-1", "agent")
		if err := os.WriteFile(filepath.Join(dir, "agent.token"), []byte(secret+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c.agentArgs = append(append(append([]string{"--listen", c.agentAddr, "--control-plane", c.cpAddr,
		"--data-dir", filepath.Join(dir, "agent")}, auth...), blenderFlags()...), agentArgs...)
	c.agent = startDaemonEnv(t, o.agentEnv, c.agentBin, c.agentArgs...)
	c.waitAgent(t)
	return c
}

// waitAdminToken reads the admin token the control plane's first start
// writes.
func (c *cluster) waitAdminToken(t testing.TB) string {
	t.Helper()
	path := c.adminTokenFile()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		if raw, err := os.ReadFile(path); err == nil && len(raw) > 0 {
			return strings.TrimSpace(string(raw))
		}
		select {
		case <-c.cp.done:
			t.Fatalf("controlplane exited:\n%s", c.cp.log.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("no %s after 30s:\n%s", path, c.cp.log.String())
	return ""
}

func (c *cluster) adminTokenFile() string { return filepath.Join(c.dir, "cp", "admin.token") }

func (c *cluster) caFile() string { return filepath.Join(c.dir, "cp", "ca.pem") }

// clientAs is a ControlPlaneService client that calls with a token ("":
// none).
func (c *cluster) clientAs(t testing.TB, token string) cpv1.ControlPlaneServiceClient {
	t.Helper()
	creds := insecure.NewCredentials()
	if c.tls {
		pem, err := os.ReadFile(c.caFile())
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			t.Fatalf("%s holds no certificate", c.caFile())
		}
		creds = credentials.NewTLS(&tls.Config{RootCAs: pool})
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20))}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer(token)))
	}
	conn, err := grpc.NewClient(c.cpAddr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return cpv1.NewControlPlaneServiceClient(conn)
}

// createToken makes a token as admin and returns its secret.
func (c *cluster) createToken(t testing.TB, name string, scopes ...string) string {
	t.Helper()
	resp, err := c.client.CreateToken(ctxT(t, 10*time.Second), &cpv1.CreateTokenRequest{Name: name, Scopes: scopes})
	if err != nil {
		t.Fatalf("create token %s: %v", name, err)
	}
	return resp.GetSecret()
}

// blendctl runs the CLI against the cluster as admin.
func (c *cluster) blendctl(args ...string) *exec.Cmd {
	base := []string{"--addr", c.cpAddr}
	if !c.insecure {
		base = append(base, "--token-file", c.adminTokenFile())
	}
	if c.tls {
		base = append(base, "--ca-file", c.caFile())
	}
	return exec.Command(filepath.Join(binDir, "blendctl"), append(base, args...)...)
}

// bearer sends a token with every call, over plain loopback too.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

func (c *cluster) waitAgent(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		resp, err := c.client.ListAgents(ctx, &cpv1.ListAgentsRequest{})
		cancel()
		if err == nil {
			for _, a := range resp.GetAgents() {
				if a.GetAddress() == c.agentAddr && a.GetState() == cpv1.Agent_STATE_READY {
					return
				}
			}
		}
		select {
		case <-c.agent.done:
			t.Fatalf("agentd exited before registering:\n%s", c.agent.log.String())
		case <-time.After(200 * time.Millisecond):
		}
	}
	t.Fatalf("agent did not register within 90s:\n%s", c.agent.log.String())
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// negotiateUnsafe negotiates a session that may run python.exec.
func (c *cluster) negotiateUnsafe(t testing.TB) *cpv1.SessionContract {
	t.Helper()
	resp, err := c.client.Negotiate(ctxT(t, 2*time.Minute), negotiateReq(func(r *cpv1.NegotiateRequest) {
		r.HostProfile.FeatureFlags = []string{"unsafe_ops", "nondeterministic_tools"}
	}))
	if err != nil {
		t.Fatalf("negotiate: %v", err)
	}
	return resp.GetContract()
}

func (c *cluster) negotiate(t testing.TB) *cpv1.SessionContract {
	t.Helper()
	resp, err := c.client.Negotiate(ctxT(t, 2*time.Minute), &cpv1.NegotiateRequest{
		ContractVersion: "1.0.0",
		HostProfile:     &cpv1.HostProfile{ClientName: "e2e", ClientVersion: "1"},
	})
	if err != nil {
		t.Fatalf("negotiate: %v", err)
	}
	return resp.GetContract()
}

// op builds an operation; args is a JSON-like map.
func op(id, tool string, args map[string]any, deps ...string) *cpv1.Operation {
	s, err := structpb.NewStruct(args)
	if err != nil {
		panic(err)
	}
	level := cpv1.SafetyLevel_SAFETY_LEVEL_SAFE_WRITE
	switch {
	case tool == "scene.get_summary", tool == "scene.snapshot", tool == "ui.highlight":
		level = cpv1.SafetyLevel_SAFETY_LEVEL_READ_ONLY
	case tool == "object.delete", tool == "python.exec":
		level = cpv1.SafetyLevel_SAFETY_LEVEL_DESTRUCTIVE
	}
	return &cpv1.Operation{OperationId: id, ToolName: tool, Args: s, DependsOn: deps, SafetyLevel: level}
}

// run submits a plan and collects all of its receipts.
func (c *cluster) run(t testing.TB, sessionID, requestID string, ops ...*cpv1.Operation) (*cpv1.Plan, []*cpv1.Receipt) {
	t.Helper()
	_, err := c.client.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: sessionID, RequestId: requestID, Operations: ops})
	if err != nil {
		t.Fatalf("submit %s: %v", requestID, err)
	}
	receipts := c.receipts(t, requestID, 1)
	resp, err := c.client.GetPlan(ctxT(t, time.Minute), &cpv1.GetPlanRequest{RequestId: requestID})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetPlan(), receipts
}

func (c *cluster) receipts(t testing.TB, requestID string, from int64) []*cpv1.Receipt {
	t.Helper()
	stream, err := c.client.StreamReceipts(ctxT(t, 5*time.Minute), &cpv1.StreamReceiptsRequest{RequestId: requestID, StartSequence: from})
	if err != nil {
		t.Fatal(err)
	}
	var out []*cpv1.Receipt
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("stream %s: %v", requestID, err)
		}
		if resp.GetReceipt() != nil {
			out = append(out, resp.GetReceipt())
		}
	}
}

func dial(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// listServices asks server reflection for the services, as `grpcurl list` does.
func listServices(t testing.TB, conn *grpc.ClientConn) []string {
	t.Helper()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	return names
}

// restartAgent starts agentd again with the same flags and data dir.
func (c *cluster) restartAgent(t testing.TB) {
	t.Helper()
	c.agent = startDaemonEnv(t, c.agentEnv, c.agentBin, c.agentArgs...)
}

// agentConn dials agentd as the control plane does: with a client
// certificate for "controlplane" from the control plane's CA (made here from
// the CA's key in its data dir), checking that the agent's certificate is
// from that CA.
func (c *cluster) agentConn(t testing.TB) *grpc.ClientConn {
	t.Helper()
	if c.insecure {
		return dial(t, c.agentAddr)
	}
	cert, pool := mintClientCert(t, filepath.Join(c.dir, "cp"), "controlplane")
	conn, err := grpc.NewClient(c.agentAddr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: agentServerName(c.agentID(t))})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// agentID returns the id of the cluster's agent, as the control plane knows it.
func (c *cluster) agentID(t testing.TB) string {
	t.Helper()
	c.waitAgent(t)
	resp, err := c.client.ListAgents(ctxT(t, 10*time.Second), &cpv1.ListAgentsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range resp.GetAgents() {
		if a.GetAddress() == c.agentAddr {
			return a.GetAgentId()
		}
	}
	t.Fatalf("no agent at %s", c.agentAddr)
	return ""
}

// describe calls the agent's Describe as the control plane.
func (c *cluster) describe(t testing.TB) *agentv1.DescribeResponse {
	t.Helper()
	resp, err := agentv1.NewAgentServiceClient(c.agentConn(t)).Describe(ctxT(t, 10*time.Second), &agentv1.DescribeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func (c *cluster) plan(t testing.TB, requestID string) *cpv1.Plan {
	t.Helper()
	resp, err := c.client.GetPlan(ctxT(t, 10*time.Second), &cpv1.GetPlanRequest{RequestId: requestID})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetPlan()
}
