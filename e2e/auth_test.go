package e2e

import (
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	agentv1 "github.com/blendplane/blendplane/gen/blendplane/agent/v1"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/internal/toolregistry"
)

// TestIdentities: every call carries a principal; what a token may do is
// its scopes; what a principal made is its own; agentd answers only the
// control plane.
func TestIdentities(t *testing.T) {
	c := startClusterOpts(t, clusterOpts{cpArgs: []string{"--agent-forget-after", "3s", "--max-agents-per-principal", "2"}})
	cpDir := filepath.Join(c.dir, "cp")
	if fi, err := os.Stat(filepath.Join(cpDir, "admin.token")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("admin.token: %v %v", fi.Mode(), err)
	}
	if _, err := os.Stat(filepath.Join(cpDir, "ca.pem")); err != nil {
		t.Fatal(err)
	}
	alice := c.clientAs(t, c.createToken(t, "alice", "plans"))
	bobSecret := c.createToken(t, "bob", "plans", "unsafe")
	bob := c.clientAs(t, bobSecret)
	anonymous := c.clientAs(t, "")
	negotiate := func(cl cpv1.ControlPlaneServiceClient, flags ...string) (*cpv1.SessionContract, error) {
		resp, err := cl.Negotiate(ctxT(t, time.Minute), negotiateReq(func(r *cpv1.NegotiateRequest) { r.HostProfile.FeatureFlags = flags }))
		return resp.GetContract(), err
	}

	t.Run("Unauthenticated", func(t *testing.T) {
		_, err := negotiate(anonymous)
		wantRefusal(t, "no token", err, codes.Unauthenticated, "UNAUTHENTICATED")
		_, err = negotiate(c.clientAs(t, "bpt_"+strings.Repeat("A", 43)))
		wantRefusal(t, "an unknown token", err, codes.Unauthenticated, "UNAUTHENTICATED")
		_, err = negotiate(c.clientAs(t, "not-a-token"))
		wantRefusal(t, "a malformed token", err, codes.Unauthenticated, "UNAUTHENTICATED")
		stream, err := anonymous.StreamReceipts(ctxT(t, time.Minute), &cpv1.StreamReceiptsRequest{RequestId: "x"})
		if err == nil {
			_, err = stream.Recv()
		}
		wantRefusal(t, "a stream without a token", err, codes.Unauthenticated, "UNAUTHENTICATED")
		// Health and reflection stay open.
		conn := dial(t, c.cpAddr)
		if resp, err := grpc_health_v1.NewHealthClient(conn).Check(ctxT(t, 5*time.Second), &grpc_health_v1.HealthCheckRequest{}); err != nil ||
			resp.GetStatus() != grpc_health_v1.HealthCheckResponse_SERVING {
			t.Fatalf("health without a token: %v %v", resp, err)
		}
		if names := listServices(t, conn); !strings.Contains(strings.Join(names, " "), "ControlPlaneService") {
			t.Fatalf("reflection without a token: %v", names)
		}
	})

	t.Run("Scopes", func(t *testing.T) {
		_, err := negotiate(alice, "unsafe_ops", "nondeterministic_tools")
		wantRefusal(t, "unsafe_ops without the unsafe scope", err, codes.PermissionDenied, "PERMISSION_DENIED")
		if st := status.Convert(err); !strings.Contains(st.Message(), "unsafe") {
			t.Fatalf("the refusal does not name the scope: %v", st.Message())
		}
		if _, err := negotiate(bob, "unsafe_ops", "nondeterministic_tools"); err != nil {
			t.Fatalf("bob has the unsafe scope: %v", err)
		}
		_, err = alice.ListAgents(ctxT(t, 10*time.Second), &cpv1.ListAgentsRequest{})
		wantRefusal(t, "ListAgents with plans", err, codes.PermissionDenied, "PERMISSION_DENIED")
		_, err = alice.CreateToken(ctxT(t, 10*time.Second), &cpv1.CreateTokenRequest{Name: "mallory", Scopes: []string{"admin"}})
		wantRefusal(t, "CreateToken with plans", err, codes.PermissionDenied, "PERMISSION_DENIED")
		_, err = alice.RegisterAgent(ctxT(t, 10*time.Second), &cpv1.RegisterAgentRequest{AgentId: "fake", Address: "127.0.0.1:1",
			Runtimes: []*cpv1.Runtime{{RuntimeId: "x"}}})
		wantRefusal(t, "RegisterAgent with plans", err, codes.PermissionDenied, "PERMISSION_DENIED")
		_, err = c.client.RegisterAgent(ctxT(t, 10*time.Second), &cpv1.RegisterAgentRequest{AgentId: "fake", Address: "127.0.0.1:1",
			Runtimes: []*cpv1.Runtime{{RuntimeId: "x"}}})
		wantRefusal(t, "RegisterAgent as admin", err, codes.PermissionDenied, "PERMISSION_DENIED")
	})

	t.Run("Ownership", func(t *testing.T) {
		s, err := negotiate(alice)
		if err != nil {
			t.Fatal(err)
		}
		id := s.GetSessionId()
		if _, err := alice.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: id, RequestId: "mine",
			Operations: []*cpv1.Operation{op("shot", "render.still", map[string]any{"output": "a.png", "resolution": []any{16, 16}, "samples": 1})}}); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(time.Minute); ; {
			resp, err := alice.GetPlan(ctxT(t, 10*time.Second), &cpv1.GetPlanRequest{RequestId: "mine"})
			if err == nil && resp.GetPlan().GetState() == cpv1.Plan_STATE_SUCCEEDED {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("alice's plan: %v %v", resp, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		notFound := map[string]error{}
		_, notFound["GetSession"] = bob.GetSession(ctxT(t, 10*time.Second), &cpv1.GetSessionRequest{SessionId: id})
		_, notFound["GetPlan"] = bob.GetPlan(ctxT(t, 10*time.Second), &cpv1.GetPlanRequest{RequestId: "mine"})
		_, notFound["CancelPlan"] = bob.CancelPlan(ctxT(t, 10*time.Second), &cpv1.CancelPlanRequest{RequestId: "mine"})
		_, notFound["CloseSession"] = bob.CloseSession(ctxT(t, 10*time.Second), &cpv1.CloseSessionRequest{SessionId: id})
		_, notFound["ListArtifacts"] = bob.ListArtifacts(ctxT(t, 10*time.Second), &cpv1.ListArtifactsRequest{SessionId: id})
		_, notFound["ListPlans"] = bob.ListPlans(ctxT(t, 10*time.Second), &cpv1.ListPlansRequest{SessionId: id})
		_, notFound["SubmitPlan"] = bob.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: id, RequestId: "theirs",
			Operations: []*cpv1.Operation{op("a", "scene.get_summary", map[string]any{})}})
		stream, err := bob.DownloadArtifact(ctxT(t, 10*time.Second), &cpv1.DownloadArtifactRequest{SessionId: id, Name: "a.png"})
		if err == nil {
			_, err = stream.Recv()
		}
		notFound["DownloadArtifact"] = err
		for call, err := range notFound {
			if status.Code(err) != codes.NotFound {
				t.Errorf("bob's %s on alice's session or plan: %v, want NOT_FOUND", call, err)
			}
		}
		audit, err := bob.ListAuditRecords(ctxT(t, 10*time.Second), &cpv1.ListAuditRecordsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range audit.GetAuditRecords() {
			if r.GetPrincipal() != "bob" {
				t.Fatalf("bob sees another principal's audit record %v", r)
			}
		}
		_, err = bob.GetPlan(ctxT(t, 10*time.Second), &cpv1.GetPlanRequest{RequestId: "mine", Owner: "alice"})
		wantRefusal(t, "bob naming alice's plan", err, codes.PermissionDenied, "PERMISSION_DENIED")
		// The admin sees everything.
		if resp, err := c.client.GetPlan(ctxT(t, 10*time.Second), &cpv1.GetPlanRequest{RequestId: "mine", Owner: "alice"}); err != nil ||
			resp.GetPlan().GetState() != cpv1.Plan_STATE_SUCCEEDED {
			t.Fatalf("admin reading alice's plan: %v %v", resp, err)
		}
		all, err := c.client.ListAuditRecords(ctxT(t, 10*time.Second), &cpv1.ListAuditRecordsRequest{Owner: "alice", RequestId: "mine"})
		if err != nil || len(all.GetAuditRecords()) != 1 || all.GetAuditRecords()[0].GetPrincipal() != "alice" {
			t.Fatalf("admin reading alice's audit: %v %v", all, err)
		}
		if resp, err := c.client.GetSession(ctxT(t, 10*time.Second), &cpv1.GetSessionRequest{SessionId: id}); err != nil || resp.GetSession().GetOwner() != "alice" {
			t.Fatalf("admin reading alice's session: %v %v", resp, err)
		}
		// And so does blendctl, with --owner and sessions --all.
		for _, args := range [][]string{{"plan", "mine", "--owner", "alice"}, {"watch", "mine", "--owner", "alice"},
			{"audit", "mine", "--owner", "alice"}, {"sessions", "--all"}} {
			out, err := c.blendctl(args...).CombinedOutput()
			if want := map[string]string{"plan": "SUCCEEDED", "watch": "SUCCEEDED", "audit": "render.still", "sessions": id}[args[0]]; err != nil || !strings.Contains(string(out), want) {
				t.Errorf("admin's blendctl %v: %v\n%s", args, err, out)
			}
		}
		if out, err := c.blendctl("plan", "mine").CombinedOutput(); err == nil || !strings.Contains(string(out), "PLAN_NOT_FOUND") {
			t.Errorf("admin's blendctl plan without --owner names its own plan: %v\n%s", err, out)
		}
		for name, client := range map[string]cpv1.ControlPlaneServiceClient{"alice": alice, "admin": c.client} {
			plans, err := client.ListPlans(ctxT(t, 10*time.Second), &cpv1.ListPlansRequest{SessionId: id})
			if err != nil || len(plans.GetPlans()) != 1 || plans.GetPlans()[0].GetRequestId() != "mine" || plans.GetPlans()[0].GetOwner() != "alice" {
				t.Fatalf("%s listing alice's session's plans: %v %v", name, plans, err)
			}
		}
		// Who am I: any principal may ask, and learns its scopes only.
		for _, who := range []struct {
			name, scopes string
			client       cpv1.ControlPlaneServiceClient
		}{{"bob", "[plans unsafe]", bob}, {"admin", "[admin approve plans unsafe]", c.client}} {
			me, err := who.client.GetCaller(ctxT(t, 10*time.Second), &cpv1.GetCallerRequest{})
			if err != nil || me.GetPrincipal() != who.name || fmt.Sprint(me.GetScopes()) != who.scopes || me.GetAuthDisabled() {
				t.Fatalf("GetCaller as %s: %v %v", who.name, me, err)
			}
		}
		if _, err := anonymous.GetCaller(ctxT(t, 10*time.Second), &cpv1.GetCallerRequest{}); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("GetCaller without a token: %v", err)
		}
		// Request ids are per principal: bob may use "mine" too.
		sb, err := negotiate(bob)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bob.SubmitPlan(ctxT(t, time.Minute), &cpv1.SubmitPlanRequest{SessionId: sb.GetSessionId(), RequestId: "mine",
			Operations: []*cpv1.Operation{op("a", "scene.get_summary", map[string]any{})}}); err != nil {
			t.Fatalf("bob's own plan named like alice's: %v", err)
		}
	})

	t.Run("RevokeAndExpire", func(t *testing.T) {
		carolSecret := c.createToken(t, "carol", "plans")
		carol := c.clientAs(t, carolSecret)
		if _, err := carol.ListSessions(ctxT(t, 10*time.Second), &cpv1.ListSessionsRequest{}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.client.RevokeToken(ctxT(t, 10*time.Second), &cpv1.RevokeTokenRequest{Name: "carol"}); err != nil {
			t.Fatal(err)
		}
		_, err := carol.ListSessions(ctxT(t, 10*time.Second), &cpv1.ListSessionsRequest{})
		wantRefusal(t, "a revoked token", err, codes.Unauthenticated, "UNAUTHENTICATED")
		// The admin's audit says who made and revoked carol's token.
		trail, err := c.client.ListAuditRecords(ctxT(t, 10*time.Second), &cpv1.ListAuditRecordsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var events []string
		for _, r := range trail.GetAuditRecords() {
			if r.GetSubject() == "carol" {
				events = append(events, r.GetEvent()+" by "+r.GetPrincipal())
			}
		}
		if fmt.Sprint(events) != "[token.created by admin token.revoked by admin]" {
			t.Errorf("the audit of carol's token: %v", events)
		}
		resp, err := c.client.CreateToken(ctxT(t, 10*time.Second), &cpv1.CreateTokenRequest{Name: "dave", Scopes: []string{"plans"},
			Ttl: durationOf(time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond)
		_, err = c.clientAs(t, resp.GetSecret()).ListSessions(ctxT(t, 10*time.Second), &cpv1.ListSessionsRequest{})
		wantRefusal(t, "an expired token", err, codes.Unauthenticated, "UNAUTHENTICATED")
		_, err = c.client.CreateToken(ctxT(t, 10*time.Second), &cpv1.CreateTokenRequest{Name: "carol", Scopes: []string{"plans"}})
		wantRefusal(t, "a token name used before", err, codes.AlreadyExists, "TOKEN_EXISTS")
		list, err := c.client.ListTokens(ctxT(t, 10*time.Second), &cpv1.ListTokensRequest{})
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := proto.Marshal(list)
		if strings.Contains(string(raw), carolSecret) || strings.Contains(string(raw), "bpt_") {
			t.Fatal("ListTokens shows a secret")
		}
	})

	t.Run("AgentAnswersOnlyTheControlPlane", func(t *testing.T) {
		s, err := negotiate(alice)
		if err != nil {
			t.Fatal(err)
		}
		call := func(conn *grpc.ClientConn) error {
			stream, err := agentv1.NewAgentServiceClient(conn).Execute(ctxT(t, 10*time.Second), &agentv1.ExecuteRequest{
				SessionId: s.GetSessionId(), RequestId: "direct", Operations: []*agentv1.OperationCall{{OperationId: "a",
					ToolName: "python.exec", Args: op("", "", map[string]any{"code": "print(1)"}).GetArgs(),
					IdempotencyKey: strings.Repeat("cd", 32), McpCallId: "call-direct"}}})
			if err != nil {
				return err
			}
			_, err = stream.Recv()
			return err
		}
		if err := call(dial(t, c.agentAddr)); err == nil {
			t.Fatal("agentd ran a plain, unauthenticated Execute")
		}
		// A client certificate from another CA, and one of the right CA that
		// is not the control plane's.
		other := t.TempDir()
		mintCA(t, other)
		for name, dir := range map[string]string{"another CA": other, "not the control plane": cpDir} {
			cn := "controlplane"
			if dir == cpDir {
				cn = "mallory"
			}
			cert, _ := mintClientCert(t, dir, cn)
			_, pool := mintClientCert(t, cpDir, "controlplane")
			conn, err := grpc.NewClient(c.agentAddr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
				Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: agentServerName(c.agentID(t))})))
			if err != nil {
				t.Fatal(err)
			}
			if err := call(conn); err == nil {
				t.Fatalf("agentd answered a client with a certificate of %s", name)
			}
			conn.Close()
		}
	})

	t.Run("Registration", func(t *testing.T) {
		agentToken := c.createToken(t, "agent-2", "agent")
		agent2 := c.clientAs(t, agentToken)
		real := c.describe(t)
		rt := proto.Clone(real.GetRuntimes()[0]).(*cpv1.Runtime)
		_, err := agent2.RegisterAgent(ctxT(t, 10*time.Second), &cpv1.RegisterAgentRequest{AgentId: real.GetAgentId(),
			Address: "127.0.0.1:1", Runtimes: []*cpv1.Runtime{rt}})
		wantRefusal(t, "another principal's agent id", err, codes.PermissionDenied, "AGENT_IDENTITY")
		// Registries are kept and compiled by fingerprint: one under another's
		// fingerprint (object.create taking any args, say) would stand in for
		// it in every session on every agent that has it.
		// invalid registers runtimes under a new agent id and wants them
		// refused as REGISTRY_INVALID, saying says.
		invalid := func(what, id string, rt *cpv1.Runtime, says string) {
			t.Helper()
			_, err := agent2.RegisterAgent(ctxT(t, 10*time.Second), &cpv1.RegisterAgentRequest{AgentId: id,
				Address: "127.0.0.1:1", Runtimes: []*cpv1.Runtime{rt}})
			wantRefusal(t, what, err, codes.FailedPrecondition, "REGISTRY_INVALID")
			if !strings.Contains(err.Error(), says) {
				t.Errorf("%s: %v", what, err)
			}
		}
		loose := proto.Clone(rt).(*cpv1.Runtime)
		for _, tool := range loose.GetRegistry().GetTools() {
			if tool.GetName() == "object.create" {
				tool.InputSchema = &structpb.Struct{}
			}
		}
		invalid("a registry under another's fingerprint", "agent-loose", loose, "its tools give the fingerprint")
		// Args are a JSON object: a tool whose schema says otherwise is
		// refused (the MCP SDK would not list a session's tools).
		scalar := proto.Clone(rt).(*cpv1.Runtime)
		scalar.Registry.Tools[0].InputSchema, _ = structpb.NewStruct(map[string]any{"type": "string"})
		if scalar.Registry.Fingerprint, err = toolregistry.Fingerprint(scalar.GetRegistry()); err != nil {
			t.Fatal(err)
		}
		invalid("a tool whose args are not an object", "agent-scalar", scalar, "is not a JSON object")
		// A registry may be what its fingerprint names and still lie about
		// the tools the control plane knows.
		for _, tool := range rt.GetRegistry().GetTools() {
			if tool.GetName() == "python.exec" {
				tool.SafetyMode, tool.DeterminismClass = "headless_safe", "deterministic"
			}
		}
		if rt.Registry.Fingerprint, err = toolregistry.Fingerprint(rt.GetRegistry()); err != nil {
			t.Fatal(err)
		}
		invalid("a forged registry", "agent-forged", rt, "declares python.exec")
		_, err = agent2.RegisterAgent(ctxT(t, 10*time.Second), &cpv1.RegisterAgentRequest{AgentId: "agent-neg",
			Address: "127.0.0.1:1", Runtimes: real.GetRuntimes(), SessionCount: -5})
		wantRefusal(t, "a negative session count", err, codes.InvalidArgument, "SCHEMA_INVALID")
		// A registry is kept in memory for every agent that has it: at most
		// 4 MiB (Blendplane's is far smaller).
		if n := proto.Size(real.GetRuntimes()[0].GetRegistry()); n > 200<<10 {
			t.Errorf("the real registry is %d bytes", n)
		}
		huge := proto.Clone(real.GetRuntimes()[0]).(*cpv1.Runtime)
		huge.Registry.Tools[0].Description = strings.Repeat("x", 4<<20)
		invalid("a registry over 4 MiB", "agent-huge", huge, "at most 4194304")
		// Real-looking agents that never heartbeat again are forgotten; an
		// agent token registers at most --max-agents-per-principal agents
		// until then.
		for _, id := range []string{"agent-once", "agent-twice"} {
			if _, err := agent2.RegisterAgent(ctxT(t, 10*time.Second), &cpv1.RegisterAgentRequest{AgentId: id,
				Address: "127.0.0.1:1", Runtimes: real.GetRuntimes()}); err != nil {
				t.Fatal(err)
			}
		}
		third := &cpv1.RegisterAgentRequest{AgentId: "agent-thrice", Address: "127.0.0.1:1", Runtimes: real.GetRuntimes()}
		_, err = agent2.RegisterAgent(ctxT(t, 10*time.Second), third)
		wantRefusal(t, "a third agent of one token", err, codes.ResourceExhausted, "QUOTA_EXCEEDED")
		// The refusal bound nothing: another principal may take that id.
		agent3 := c.clientAs(t, c.createToken(t, "agent-3", "agent"))
		if _, err := agent3.RegisterAgent(ctxT(t, 10*time.Second), third); err != nil {
			t.Fatalf("the refused agent's id under another principal: %v", err)
		}
		page, err := c.client.ListAgents(ctxT(t, 10*time.Second), &cpv1.ListAgentsRequest{PageSize: 1})
		if err != nil || len(page.GetAgents()) != 1 || page.GetNextPageToken() == "" {
			t.Fatalf("ListAgents pages: %v %v", page, err)
		}
		for deadline := time.Now().Add(30 * time.Second); ; {
			resp, err := c.client.ListAgents(ctxT(t, 10*time.Second), &cpv1.ListAgentsRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.GetAgents()) == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the silent agents were never forgotten: %v", resp.GetAgents())
			}
			time.Sleep(500 * time.Millisecond)
		}
		third.AgentId = "agent-fourth"
		if _, err := agent2.RegisterAgent(ctxT(t, 10*time.Second), third); err != nil {
			t.Fatalf("a third agent once the others were forgotten: %v", err)
		}
	})

	t.Run("Blendctl", func(t *testing.T) {
		out, err := c.blendctl("token", "create", "--name", "erin", "--scope", "plans").Output()
		if err != nil {
			t.Fatal(err)
		}
		secret := strings.TrimSpace(string(out))
		if !strings.HasPrefix(secret, "bpt_") {
			t.Fatalf("token create printed %q", out)
		}
		if out, err := c.blendctl("token", "list").CombinedOutput(); err != nil || !strings.Contains(string(out), "erin") || strings.Contains(string(out), secret) {
			t.Fatalf("token list: %v\n%s", err, out)
		}
		withSecret := func() *exec.Cmd {
			cmd := c.blendctl("sessions")
			cmd.Args = []string{cmd.Args[0], "--addr", c.cpAddr, "--token", secret, "sessions"}
			return cmd
		}
		if out, err := withSecret().CombinedOutput(); err != nil {
			t.Fatalf("blendctl with --token: %v\n%s", err, out)
		}
		if out, err := c.blendctl("token", "revoke", "erin").CombinedOutput(); err != nil || !strings.Contains(string(out), "revoked") {
			t.Fatalf("token revoke: %v\n%s", err, out)
		}
		if out, err := withSecret().CombinedOutput(); err == nil || !strings.Contains(string(out), "UNAUTHENTICATED") {
			t.Fatalf("a revoked token through blendctl: %v\n%s", err, out)
		}
	})
}

// TestInsecureLocalOnlyOnLoopback: --allow-insecure-local is refused on a
// listener beyond loopback.
func TestInsecureLocalOnlyOnLoopback(t *testing.T) {
	d := startDaemon(t, "controlplane", "--listen", "0.0.0.0:"+strings.Split(freeAddr(t), ":")[1],
		"--data-dir", t.TempDir(), "--allow-insecure-local")
	d.expectExit()
	select {
	case <-d.done:
	case <-time.After(20 * time.Second):
		t.Fatal("the control plane started with --allow-insecure-local beyond loopback")
	}
	if d.cmd.ProcessState.ExitCode() == 0 || !strings.Contains(d.log.String(), "not on loopback") {
		t.Fatalf("exit %d:\n%s", d.cmd.ProcessState.ExitCode(), d.log.String())
	}
}

// TestStudioOverTLS: both daemons on a network address, not loopback. Every
// listener is TLS: agentd joins with the control plane's CA and its agent
// token, blendctl runs a plan with --ca-file, and nothing plain gets in.
func TestStudioOverTLS(t *testing.T) {
	host := networkAddress(t)
	c := startClusterOpts(t, clusterOpts{host: host})
	plan := filepath.Join(t.TempDir(), "plan.json")
	if err := os.WriteFile(plan, []byte(`{"request_id": "studio", "operations": [
		{"operation_id": "box", "tool_name": "object.create", "depends_on": [], "safety_level": "safe_write", "args": {"type": "cube", "name": "Box"}},
		{"operation_id": "look", "tool_name": "scene.get_summary", "depends_on": ["box"], "safety_level": "read_only", "args": {}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := c.blendctl("submit", plan, "--watch").CombinedOutput(); err != nil || !strings.Contains(string(out), "SUCCEEDED") {
		t.Fatalf("a plan over TLS: %v\n%s", err, out)
	}
	// Without the CA, blendctl says what it needs; a plain client gets nothing.
	out, err := exec.Command(filepath.Join(binDir, "blendctl"), "--addr", c.cpAddr, "--token-file", c.adminTokenFile(), "sessions").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--ca-file") {
		t.Fatalf("blendctl without --ca-file: %v\n%s", err, out)
	}
	for name, addr := range map[string]string{"controlplane": c.cpAddr, "agentd": c.agentAddr} {
		conn := dial(t, addr)
		if _, err := grpc_health_v1.NewHealthClient(conn).Check(ctxT(t, 5*time.Second), &grpc_health_v1.HealthCheckRequest{}); err == nil {
			t.Errorf("%s answered a plaintext call on %s", name, addr)
		}
	}
}

// networkAddress is an IPv4 address of this machine beyond loopback.
func networkAddress(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	t.Skip("this machine has no network address beyond loopback")
	return ""
}

// TestUnauthenticatedNotRead: a call without a valid token is refused as its
// headers arrive, before its request is read. Four concurrent 100 MiB
// requests without a token leave the control plane's peak memory where it
// was (read, they would take over 400 MiB), and each is refused with the
// structured UNAUTHENTICATED.
func TestUnauthenticatedNotRead(t *testing.T) {
	c := startCluster(t)
	conn, err := grpc.NewClient(c.cpAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(200<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	anon := cpv1.NewControlPlaneServiceClient(conn)
	pid := c.cp.cmd.Process.Pid
	before := procStatus(t, pid, "VmHWM:")
	big := &cpv1.NegotiateRequest{ContractVersion: strings.Repeat("A", 100<<20)}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			_, err := anon.Negotiate(ctxT(t, time.Minute), big)
			if info, _ := details(status.Convert(err)); status.Code(err) != codes.Unauthenticated || info.GetReason() != "UNAUTHENTICATED" {
				t.Errorf("a 100 MiB call without a token: %v (%v)", err, info)
			}
		})
	}
	wg.Wait()
	if grew := procStatus(t, pid, "VmHWM:") - before; grew > 100<<20 {
		t.Errorf("the control plane's peak memory grew by %d MiB for calls it refused", grew>>20)
	}
}
