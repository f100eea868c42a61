package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// mcpPython is the Python with the official MCP SDK (`make clients`).
func mcpPython(t *testing.T) string {
	t.Helper()
	py := filepath.Join(repoRoot(), ".clients", "py", "bin", "python")
	if _, err := os.Stat(py); err != nil {
		t.Fatalf("no Python MCP SDK at %s: run `make clients`", py)
	}
	return py
}

// TestMCPStdio: the Python MCP SDK drives `blendctl mcp` over stdio against
// a live cluster (e2e/testdata/mcp_client.py: tools and their schemas and
// annotations, calls, the failure contract, plan.submit with progress, an
// image result, resources, prompts). The control plane's side: the calls
// were plans of one session, their receipts and audit carry the MCP call
// ids, and the session is closed once the client hangs up.
func TestMCPStdio(t *testing.T) {
	py := mcpPython(t)
	c := startCluster(t)
	cmd := exec.Command(py, filepath.Join("testdata", "mcp_client.py"), "stdio", filepath.Join(binDir, "blendctl"), c.cpAddr, c.adminTokenFile())
	out, err := cmd.CombinedOutput()
	t.Logf("mcp_client.py:\n%s", out)
	if err != nil || !strings.Contains(string(out), "\ndone\n") {
		t.Fatalf("the Python MCP client failed: %v", err)
	}

	sessions, err := c.client.ListSessions(ctxT(t, 10*time.Second), &cpv1.ListSessionsRequest{State: cpv1.Session_STATE_CLOSED})
	if err != nil || len(sessions.GetSessions()) != 1 {
		t.Fatalf("the MCP session's Blendplane session, closed after the client left: %v %v", sessions, err)
	}
	s := sessions.GetSessions()[0]
	if hp := s.GetContract().GetHostProfile(); !strings.HasPrefix(hp.GetClientName(), "mcp:") {
		t.Errorf("negotiated from the MCP client's info: %v", hp)
	}
	audit, err := c.client.ListAuditRecords(ctxT(t, 10*time.Second), &cpv1.ListAuditRecordsRequest{})
	if err != nil || len(audit.GetAuditRecords()) == 0 {
		t.Fatalf("audit: %v %v", audit, err)
	}
	cancelled := false
	for _, r := range audit.GetAuditRecords() {
		if r.GetEvent() != "" {
			continue // the admin's token.created ones
		}
		if !strings.HasPrefix(r.GetMcpCallId(), "mcp:"+s.GetSessionId()+":") || r.GetSessionId() != s.GetSessionId() {
			t.Errorf("an audit record of an MCP call: %v", r)
		}
		if r.GetToolName() == "render.animation" {
			plan, err := c.client.GetPlan(ctxT(t, 10*time.Second), &cpv1.GetPlanRequest{RequestId: r.GetRequestId()})
			cancelled = err == nil && plan.GetPlan().GetState() == cpv1.Plan_STATE_CANCELLED
		}
	}
	if !cancelled {
		t.Error("the render the MCP client cancelled: its plan did not end CANCELLED")
	}
}

// TestMCPHTTP: the same client over streamable HTTP at /mcp on the control
// plane's --http-listen, with a bearer token; curl without a token gets 401,
// with an agent's token (no plans scope) 403.
func TestMCPHTTP(t *testing.T) {
	py := mcpPython(t)
	c := startCluster(t)
	url := "http://" + c.httpAddr + "/mcp"
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}`
	for _, tc := range []struct {
		token string
		want  string
	}{{"", "401"}, {"not-a-token", "401"}, {c.createToken(t, "joiner", "agent"), "403"}} {
		args := []string{"-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST", url, "-H", "Content-Type: application/json",
			"-H", "Accept: application/json, text/event-stream", "-d", init}
		if tc.token != "" {
			args = append(args, "-H", "Authorization: Bearer "+tc.token)
		}
		out, err := exec.Command("curl", args...).Output()
		if err != nil || string(out) != tc.want {
			t.Errorf("POST /mcp with token %q: %s %v, want %s", tc.token, out, err, tc.want)
		}
	}
	out, err := exec.Command(py, filepath.Join("testdata", "mcp_client.py"), "http", url, c.adminToken).CombinedOutput()
	t.Logf("mcp_client.py:\n%s", out)
	if err != nil || !strings.Contains(string(out), "\ndone\n") {
		t.Fatalf("the Python MCP client over HTTP failed: %v", err)
	}
	// The client's DELETE ends the MCP session, and its Blendplane session.
	waitFor(t, "the MCP session's Blendplane session to close", func() bool {
		s, err := c.client.ListSessions(ctxT(t, 10*time.Second), &cpv1.ListSessionsRequest{State: cpv1.Session_STATE_CLOSED})
		return err == nil && len(s.GetSessions()) == 1
	})

	// With --allow-insecure-local, no token is needed.
	open := startClusterOpts(t, clusterOpts{insecure: true})
	code, err := exec.Command("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST", "http://"+open.httpAddr+"/mcp",
		"-H", "Content-Type: application/json", "-H", "Accept: application/json, text/event-stream", "-d", init).Output()
	if err != nil || string(code) != "200" {
		t.Errorf("POST /mcp without a token, --allow-insecure-local: %s %v, want 200", code, err)
	}
}

// TestMCPApprovals: on the default policy a destructive call waits for
// approval; the server asks the user through MCP elicitation with the
// preview's diff, and the user's answer approves or rejects it.
func TestMCPApprovals(t *testing.T) {
	py := mcpPython(t)
	c := startClusterOpts(t, clusterOpts{policy: defaultPolicy})
	// A plan of another MCP session, which plan.wait must not follow.
	otherPlan := func() string {
		audit, err := c.client.ListAuditRecords(ctxT(t, 10*time.Second), &cpv1.ListAuditRecordsRequest{})
		if err != nil || len(audit.GetAuditRecords()) == 0 {
			t.Fatalf("audit: %v %v", audit, err)
		}
		return audit.GetAuditRecords()[0].GetRequestId()
	}
	for _, args := range [][]string{
		{"stdio-approvals", filepath.Join(binDir, "blendctl"), c.cpAddr, c.adminTokenFile()},
		// The sessionless revision, where the server may not ask: the call's
		// result asks, and the client retries it with the answer.
		{"http-approvals-2026", "http://" + c.httpAddr + "/mcp", c.adminToken},
		// A client without elicitation: told that the call waits, it
		// follows the plan with plan.wait once blendctl approves it.
		{"stdio-waiting", filepath.Join(binDir, "blendctl"), c.cpAddr, c.adminTokenFile(), ""},
	} {
		if args[0] == "stdio-waiting" {
			args[4] = otherPlan()
		}
		cmd := exec.Command(py, append([]string{filepath.Join("testdata", "mcp_client.py")}, args...)...)
		out, err := cmd.CombinedOutput()
		t.Logf("mcp_client.py %s:\n%s", args[0], out)
		if err != nil || !strings.Contains(string(out), "\ndone\n") {
			t.Fatalf("the Python MCP client failed (%s): %v", args[0], err)
		}
	}
	audit, err := c.client.ListAuditRecords(ctxT(t, 10*time.Second), &cpv1.ListAuditRecordsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	for _, r := range audit.GetAuditRecords() {
		if strings.HasPrefix(r.GetEvent(), "approval.") { // the admin's token.created ones too
			events = append(events, r.GetEvent())
		}
	}
	if strings.Join(events, ",") != "approval.approved,approval.rejected,approval.approved,approval.rejected,approval.approved" {
		t.Errorf("the decisions made through elicitation, audited: %v", events)
	}
}

// inspector runs the MCP Inspector's CLI (Node 22, `make clients`) with
// args and returns the JSON it prints; failed says it exited non-zero (as
// it does for a tool result with isError).
func inspector(t *testing.T, args ...string) (out map[string]any, failed bool) {
	t.Helper()
	bin := nodeClient(t, "mcp-inspector")
	cmd := exec.Command(filepath.Join(bin, "mcp-inspector"), append([]string{"--cli"}, args...)...)
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "HOME="+t.TempDir())
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err := json.NewDecoder(strings.NewReader(stdout.String())).Decode(&out); err != nil {
		t.Fatalf("mcp-inspector %v: %v; no JSON: %v\n%s\n%s", args, cmd.ProcessState, err, stdout.String(), stderr.String())
	}
	return out, err != nil
}

// TestMCPInspector: the MCP Inspector's CLI lists and calls the tools, over
// stdio (blendctl mcp) and over HTTP with a bearer token.
func TestMCPInspector(t *testing.T) {
	c := startCluster(t)
	stdio := []string{filepath.Join(binDir, "blendctl"), "--addr", c.cpAddr, "--token-file", c.adminTokenFile(), "mcp"}
	http := []string{"http://" + c.httpAddr + "/mcp", "--transport", "http", "--header", "Authorization: Bearer " + c.adminToken}
	for name, target := range map[string][]string{"stdio": stdio, "http": http} {
		t.Run(name, func(t *testing.T) {
			list, failed := inspector(t, append(target, "--method", "tools/list")...)
			if failed {
				t.Fatalf("tools/list failed: %v", list)
			}
			found := map[string]map[string]any{}
			for _, tool := range list["tools"].([]any) {
				m := tool.(map[string]any)
				found[m["name"].(string)] = m
			}
			del, ok := found["object.delete"]
			if !ok || found["plan.submit"] == nil || found["scene.get_summary"] == nil {
				t.Fatalf("tools/list: %v", list)
			}
			if ann, _ := del["annotations"].(map[string]any); ann["destructiveHint"] != true {
				t.Errorf("object.delete's annotations: %v", del["annotations"])
			}
			// The registry's schema, as the input schema.
			in, _ := found["object.create"]["inputSchema"].(map[string]any)
			props, _ := in["properties"].(map[string]any)
			if typ, _ := props["type"].(map[string]any); in["additionalProperties"] != false || typ["enum"] == nil {
				t.Errorf("object.create's input schema: %v", in)
			}
			if _, ok := found["object.create"]["outputSchema"].(map[string]any); !ok {
				t.Errorf("object.create has no output schema: %v", found["object.create"])
			}
			res, failed := inspector(t, append(target, "--method", "tools/call", "--tool-name", "object.create",
				"--tool-arg", "type=cube", "--tool-arg", "name=Insp_"+name)...)
			if sc, _ := res["structuredContent"].(map[string]any); failed || res["isError"] == true || sc["status"] != "SUCCEEDED" {
				t.Errorf("tools/call object.create: %v", res)
			}
			res, failed = inspector(t, append(target, "--method", "tools/call", "--tool-name", "object.delete", "--tool-arg", "name=Missing")...)
			if sc, _ := res["structuredContent"].(map[string]any); !failed || res["isError"] != true || sc["error_code"] != "NOT_FOUND" {
				t.Errorf("a failing call: %v", res)
			}
		})
	}
}

// nodeClient is the directory of .clients/node's executables, which holds
// the named one (`make clients`).
func nodeClient(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(repoRoot(), ".clients", "node", "node_modules", ".bin")
	if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
		t.Fatalf("no %s in %s: run `make clients`", name, bin)
	}
	return bin
}

// mcpHost is an MCP host's set-up against a cluster: a token of the plans
// scope (and its file), its home and its working directory.
type mcpHost struct {
	c                            *cluster
	token, tokenFile, home, work string
}

func newMCPHost(t *testing.T, name string) mcpHost {
	t.Helper()
	h := mcpHost{c: startCluster(t), home: t.TempDir(), work: t.TempDir()}
	h.token = h.c.createToken(t, name, "plans")
	h.tokenFile = filepath.Join(h.home, name+".token")
	os.WriteFile(h.tokenFile, []byte(h.token), 0o600)
	return h
}

// stdio is docs/MCP.md's server entry for blendctl mcp over stdio.
func (h mcpHost) stdio() map[string]any {
	return map[string]any{"command": filepath.Join(binDir, "blendctl"), "args": []string{"--addr", h.c.cpAddr, "--token-file", h.tokenFile, "mcp"}}
}

// list runs the host's `<bin> mcp list` in its working directory and
// checks that each server's line says what want says.
func (h mcpHost) list(t *testing.T, bin string, want map[string]string, env ...string) {
	t.Helper()
	dir := nodeClient(t, bin)
	cmd := exec.Command(filepath.Join(dir, bin), "mcp", "list")
	cmd.Dir = h.work
	cmd.Env = append(append(os.Environ(), "HOME="+h.home, "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH")), env...)
	out, err := cmd.CombinedOutput()
	t.Logf("%s mcp list:\n%s", bin, out)
	if err != nil {
		t.Fatal(err)
	}
	for server, says := range want {
		if !slices.ContainsFunc(strings.Split(string(out), "\n"), func(line string) bool {
			return slices.Contains(strings.Fields(line), server+":") && strings.Contains(line, says)
		}) {
			t.Errorf("%s: %s does not say %q", bin, server, says)
		}
	}
}

// TestMCPGeminiCLI: Gemini CLI (`gemini mcp list`, which needs no model
// access) connects to both servers of docs/MCP.md's configuration: blendctl
// mcp over stdio, and /mcp over HTTP with a bearer token.
func TestMCPGeminiCLI(t *testing.T) {
	h := newMCPHost(t, "gemini")
	settings := map[string]any{"mcpServers": map[string]any{
		"blendplane": h.stdio(),
		"blendplane-http": map[string]any{"httpUrl": "http://" + h.c.httpAddr + "/mcp",
			"headers": map[string]string{"Authorization": "Bearer " + h.token}},
	}}
	b, _ := json.Marshal(settings)
	os.MkdirAll(filepath.Join(h.home, ".gemini"), 0o700)
	os.WriteFile(filepath.Join(h.home, ".gemini", "settings.json"), b, 0o600)
	trust, _ := json.Marshal(map[string]string{h.work: "TRUST_FOLDER"})
	os.WriteFile(filepath.Join(h.home, ".gemini", "trustedFolders.json"), trust, 0o600)
	h.list(t, "gemini", map[string]string{"blendplane": "Connected", "blendplane-http": "Connected"})
}

// TestMCPClaudeCode: Claude Code (`claude mcp list`, which needs no model
// access; Claude Desktop has no Linux build) connects to blendctl mcp over
// stdio configured exactly as docs/MCP.md's Claude Desktop snippet (the same
// mcpServers format, here as the project's .mcp.json), and to /mcp over HTTP
// with a bearer token; with a wrong token it does not.
func TestMCPClaudeCode(t *testing.T) {
	h := newMCPHost(t, "claude")
	remote := func(token string) map[string]any {
		return map[string]any{"type": "http", "url": "http://" + h.c.httpAddr + "/mcp", "headers": map[string]string{"Authorization": "Bearer " + token}}
	}
	config := map[string]any{"mcpServers": map[string]any{
		"blendplane":       h.stdio(),
		"blendplane-http":  remote(h.token),
		"blendplane-wrong": remote("not-a-token"),
	}}
	b, _ := json.Marshal(config)
	os.WriteFile(filepath.Join(h.work, ".mcp.json"), b, 0o600)
	os.MkdirAll(filepath.Join(h.home, ".claude"), 0o700)
	os.WriteFile(filepath.Join(h.home, ".claude", "settings.json"), []byte(`{"enableAllProjectMcpServers": true}`), 0o600)
	// The wrong token's server is the same URL as one that connects.
	h.list(t, "claude", map[string]string{"blendplane": "Connected", "blendplane-http": "Connected", "blendplane-wrong": "Failed to connect"},
		"CLAUDE_CONFIG_DIR="+filepath.Join(h.home, ".claude"), "DISABLE_AUTOUPDATER=1", "DISABLE_TELEMETRY=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1")
}

// TestMCPSessionless: a client of the newest, sessionless revision
// (2026-07-28: the Go SDK's client by default) is served too, in the SDK's
// stateless mode, with one Blendplane session per bearer token across its
// requests; a client of an older revision still gets an MCP session.
func TestMCPSessionless(t *testing.T) {
	c := startCluster(t)
	ctx := ctxT(t, 2*time.Minute)
	for _, version := range []string{"2026-07-28", "2025-11-25"} {
		cs := connectMCP(t, c, "go-sdk-"+version, version)
		if got := cs.InitializeResult().ProtocolVersion; got != version {
			t.Errorf("asked for %s, got %s", version, got)
		}
		var ids []string
		for i := 0; i < 2; i++ {
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "object.create", Arguments: map[string]any{"type": "cube", "name": fmt.Sprintf("V%d", i)}})
			if err != nil || res.IsError {
				t.Fatalf("%s: call %d: %v %v", version, i, res, err)
			}
			var receipt struct {
				MCPCallID string `json:"mcp_call_id"`
			}
			b, _ := json.Marshal(res.StructuredContent)
			json.Unmarshal(b, &receipt)
			ids = append(ids, receipt.MCPCallID)
		}
		// Both calls in one Blendplane session: mcp:<session>:1 and :2.
		s1, _, _ := strings.Cut(strings.TrimPrefix(ids[0], "mcp:"), ":")
		s2, _, _ := strings.Cut(strings.TrimPrefix(ids[1], "mcp:"), ":")
		if s1 == "" || s1 != s2 {
			t.Errorf("%s: the calls ran in sessions %q and %q", version, s1, s2)
		}
		// A retry's request state must name a plan of this MCP session:
		// another session's (or a made-up one) is refused, and nothing runs.
		for _, state := range []string{"mcp-" + s1 + "-99", "mcp-other-1", "x"} {
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "object.create", Arguments: map[string]any{"type": "cube"}, RequestState: state})
			if err != nil || !res.IsError || !strings.Contains(fmt.Sprint(res.StructuredContent), "requestState does not name a plan") {
				t.Errorf("%s: a call with request state %q: %v %v", version, state, res, err)
			}
		}
		cs.Close()
	}
}

// TestMCPHTTPSessionsEndWithControlPlane: MCP sessions over HTTP live in the
// control plane's memory, so their Blendplane sessions are negotiated
// ephemeral, and a control plane killed and started again closes them: a
// plan of one that waits for approval ends CANCELLED, and the agent lets
// them go. A session negotiated over gRPC stays as it was.
func TestMCPHTTPSessionsEndWithControlPlane(t *testing.T) {
	c := startClusterOpts(t, clusterOpts{policy: defaultPolicy})
	ctx := ctxT(t, 2*time.Minute)
	var ephemeral []string
	for _, version := range []string{"2026-07-28", "2025-11-25"} {
		cs := connectMCP(t, c, "go-sdk-"+version, version)
		defer cs.Close()
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "object.create", Arguments: map[string]any{"type": "cube", "name": "Doomed"}})
		if err != nil || res.IsError {
			t.Fatalf("%s: %v %v", version, res, err)
		}
		var receipt struct {
			MCPCallID string `json:"mcp_call_id"`
		}
		b, _ := json.Marshal(res.StructuredContent)
		json.Unmarshal(b, &receipt)
		id, _, _ := strings.Cut(strings.TrimPrefix(receipt.MCPCallID, "mcp:"), ":")
		if caps := c.session(t, id).GetContract().GetHostProfile().GetCapabilities(); !slices.Contains(caps, "ephemeral") {
			t.Fatalf("%s: the MCP session's Blendplane session %s has capabilities %v, want ephemeral", version, id, caps)
		}
		ephemeral = append(ephemeral, id)
	}
	kept := c.negotiate(t).GetSessionId()
	c.run(t, kept, "kept", cubeOp("create", "Kept", 0))
	// A destructive plan in an MCP session waits for approval.
	if _, err := c.client.SubmitPlan(ctx, &cpv1.SubmitPlanRequest{SessionId: ephemeral[1], RequestId: "waits",
		Operations: []*cpv1.Operation{op("del", "object.delete", map[string]any{"name": "Doomed"})}}); err != nil {
		t.Fatal(err)
	}
	if got := c.plan(t, "waits").GetState(); got != cpv1.Plan_STATE_AWAITING_APPROVAL {
		t.Fatalf("plan waits: %v", got)
	}
	if n := c.describe(t).GetSessionCount(); n != 3 {
		t.Fatalf("the agent holds %d sessions, want 3", n)
	}

	args := c.cp.cmd.Args[1:]
	c.cp.stop(t, syscall.SIGKILL)
	c.cp = startDaemon(t, "controlplane", args...)
	waitFor(t, "the control plane to serve again", func() bool {
		_, err := c.client.GetSession(ctxT(t, 10*time.Second), &cpv1.GetSessionRequest{SessionId: kept})
		return err == nil
	})
	for _, id := range ephemeral {
		c.waitState(t, id, cpv1.Session_STATE_CLOSED)
	}
	waitFor(t, "the waiting plan of a closed session to end", func() bool {
		return c.plan(t, "waits").GetState() == cpv1.Plan_STATE_CANCELLED
	})
	waitFor(t, "the agent to let the closed sessions go", func() bool { return c.describe(t).GetSessionCount() == 1 })
	if s := c.session(t, kept); s.GetState() == cpv1.Session_STATE_CLOSED {
		t.Errorf("the gRPC session was closed: %v", s)
	}
	c.run(t, kept, "kept-after", cubeOp("create", "KeptToo", 1))
}

// connectMCP connects the official Go SDK's client, named name, to the
// cluster's /mcp over streamable HTTP as admin, speaking protocol revision
// version.
func connectMCP(t testing.TB, c *cluster, name, version string) *sdk.ClientSession {
	t.Helper()
	client := sdk.NewClient(&sdk.Implementation{Name: name, Version: "1"}, nil)
	transport := &sdk.StreamableClientTransport{Endpoint: "http://" + c.httpAddr + "/mcp",
		HTTPClient: &http.Client{Transport: bearerTransport{c.adminToken, http.DefaultTransport}}}
	cs, err := client.Connect(context.Background(), transport, &sdk.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("%s: connect: %v", version, err)
	}
	return cs
}
