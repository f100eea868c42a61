package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/internal/llmreplay"
)

// plannerSecret is the provider key the tests give the control plane: it
// must reach the provider and nothing else (no response, no log line).
const plannerSecret = "sk-e2e-planner-secret-9f3a"

// agentAPI calls a planner route as a principal and decodes the answer.
func agentAPI(t *testing.T, c *cluster, token, method, route, body string) (int, map[string]any) {
	t.Helper()
	return lessonCall(t, method, "http://"+c.httpAddr+route, token, body)
}

func wantRun(t *testing.T, code int, run map[string]any, status string) {
	t.Helper()
	if code != 200 || run["ok"] != true || run["status"] != status {
		t.Fatalf("want a %s run (200), got %d: %v", status, code, run)
	}
}

func actions(run map[string]any) []map[string]any {
	var out []map[string]any
	for _, a := range asSlice(run["actions"]) {
		out = append(out, a.(map[string]any))
	}
	return out
}

func asSlice(v any) []any { l, _ := v.([]any); return l }

// plan is a plan.submit call's arguments.
func planArgs(ops ...string) string {
	return `{"operations": [` + strings.Join(ops, ",") + `]}`
}

// lastRequestText is everything the model was sent in its last request, as
// text, for looking for what it must have seen.
func lastRequestText(t *testing.T, llm *llmreplay.Server) string {
	t.Helper()
	reqs := llm.Requests()
	if len(reqs) == 0 {
		t.Fatal("the model was never called")
	}
	b, _ := json.Marshal(reqs[len(reqs)-1])
	return string(b)
}

// TestPlannerOpenAI: the planner runtime of seed 002 on the OpenAI
// provider (the real openai-go client against a scripted server that
// answers as the chat completions API does, streaming), on the default
// policy (object.delete needs approval): a prompt that becomes a plan that
// runs, a thread's second prompt seeing the first, the NDJSON stream in
// order, a repair from the failure contract, a model that never produces a
// valid plan, a provider error, a model that answers nothing, an approved and a rejected destructive
// plan, a restart while a run waits, the routes' auth, blendctl prompt.
// The provider key and the prompts never reach a response or the log.
func TestPlannerOpenAI(t *testing.T) {
	llm := llmreplay.NewOpenAI()
	t.Cleanup(llm.Close)
	env := []string{"OPENAI_API_KEY=" + plannerSecret}
	c := startClusterOpts(t, clusterOpts{policy: defaultPolicy, cpEnv: env,
		cpArgs: []string{"--planner", "openai", "--planner-base-url", llm.URL(), "--planner-model", "replay-model"}})
	tok := c.adminToken
	var thread string
	top := t // daemons restarted in a subtest live on after it

	t.Run("a prompt becomes a plan that runs", func(t *testing.T) {
		llm.Push(llmreplay.Reply{Calls: []llmreplay.Call{{Name: "plan.submit", Args: planArgs(
			`{"operation_id": "crate", "tool_name": "object.create", "args": {"type": "cube", "name": "Crate", "size": 1.5}}`,
			`{"operation_id": "ball", "tool_name": "object.create", "depends_on": ["crate"], "args": {"type": "uv_sphere", "name": "Ball", "location": [3, 0, 0]}}`)}}},
			llmreplay.Reply{Text: "I added a cube named Crate and a ball beside it."})
		code, run := agentAPI(t, c, tok, "POST", "/api/agent/run", `{"prompt": "Put a crate and a ball in the scene"}`)
		wantRun(t, code, run, "completed")
		thread = run["threadId"].(string)
		acts := actions(run)
		if len(acts) != 1 || acts[0]["status"] != "completed" || acts[0]["tool"] != "plan.submit" || acts[0]["policyDecision"] != "allow" ||
			!strings.HasPrefix(acts[0]["inputHash"].(string), "sha256:") || run["summary"] != "I added a cube named Crate and a ball beside it." || run["turns"] != 2.0 {
			t.Fatalf("run: %v", run)
		}
		receipts := c.receipts(t, acts[0]["requestId"].(string), 0)
		if len(receipts) != 2 || receipts[1].GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED || receipts[1].GetOperationId() != "ball" {
			t.Fatalf("the plan's receipts: %v", receipts)
		}
		// The model saw the receipts of its plan before it summed up.
		if sent := lastRequestText(t, llm); !strings.Contains(sent, receipts[1].GetSceneHashAfter()) || !strings.Contains(sent, "object-create") {
			t.Fatalf("the model's second turn did not carry the receipts and the tool names: %.2000s", sent)
		}
	})

	t.Run("a thread's second prompt sees the first", func(t *testing.T) {
		llm.Push(llmreplay.Reply{Text: "Earlier you asked for a crate and a ball; both are there."})
		code, run := agentAPI(t, c, tok, "POST", "/api/agent/run", fmt.Sprintf(`{"prompt": "What did I ask for before?", "threadId": %q}`, thread))
		wantRun(t, code, run, "completed")
		if run["threadId"] != thread {
			t.Fatalf("the run went to thread %v, not %s", run["threadId"], thread)
		}
		sent := lastRequestText(t, llm)
		if !strings.Contains(sent, "Put a crate and a ball in the scene") || !strings.Contains(sent, "I added a cube named Crate") {
			t.Fatalf("the second prompt's request lacks the thread's history: %.2000s", sent)
		}
		code, th := agentAPI(t, c, tok, "GET", "/api/agent/threads/"+thread, "")
		if code != 200 || len(asSlice(th["messages"])) != 4 {
			t.Fatalf("thread: %d %v", code, th)
		}
	})

	t.Run("stream events in order", func(t *testing.T) {
		text := "Streaming: the scene has a crate and a ball, lit and ready."
		llm.Push(llmreplay.Reply{Text: text})
		status, body := curl(t, "POST", "http://"+c.httpAddr+"/api/agent/run/stream", tok, fmt.Sprintf(`{"prompt": "Describe the scene", "threadId": %q}`, thread))
		if status != "200" {
			t.Fatalf("stream: %s %s", status, body)
		}
		var events []map[string]any
		sc := bufio.NewScanner(bytes.NewReader(body))
		for sc.Scan() {
			var ev map[string]any
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Fatalf("not NDJSON: %q", sc.Text())
			}
			events = append(events, ev)
		}
		var kinds, states []string
		var deltas strings.Builder
		for _, ev := range events {
			kinds = append(kinds, ev["type"].(string))
			switch ev["type"] {
			case "status":
				states = append(states, ev["status"].(string))
			case "delta":
				deltas.WriteString(ev["delta"].(string))
			}
		}
		if len(events) < 4 || kinds[0] != "status" || kinds[len(kinds)-1] != "result" || deltas.String() != text ||
			strings.Join(states, ",") != "queued,planning,completed" || strings.Count(strings.Join(kinds, ","), "delta") < 2 {
			t.Fatalf("events: %v (states %v, text %q)", kinds, states, deltas.String())
		}
		if r := events[len(events)-1]["result"].(map[string]any); r["status"] != "completed" || r["summary"] != text {
			t.Fatalf("result: %v", r)
		}
	})

	t.Run("a refused plan is repaired from the failure contract", func(t *testing.T) {
		llm.Push(
			llmreplay.Reply{Calls: []llmreplay.Call{{Name: "plan.submit", Args: planArgs(`{"operation_id": "lamp", "tool_name": "object.creat", "args": {"type": "cube", "name": "Lamp"}}`)}}},
			llmreplay.Reply{Calls: []llmreplay.Call{{Name: "plan.submit", Args: planArgs(`{"operation_id": "lamp", "tool_name": "object.create", "args": {"type": "cube", "name": "Lamp"}}`)}}},
			llmreplay.Reply{Text: "Added Lamp after fixing the tool name."})
		code, run := agentAPI(t, c, tok, "POST", "/api/agent/run", fmt.Sprintf(`{"prompt": "Add a lamp", "threadId": %q}`, thread))
		wantRun(t, code, run, "completed")
		acts := actions(run)
		if len(acts) != 2 || acts[0]["status"] != "failed" || acts[0]["executionStatus"] != "REFUSED" || acts[0]["errorCode"] == "" || acts[1]["status"] != "completed" {
			t.Fatalf("actions: %v", acts)
		}
		// The repair turn carried the failure contract.
		reqs := llm.Requests()
		repair, _ := json.Marshal(reqs[len(reqs)-2])
		if !strings.Contains(string(repair), acts[0]["errorCode"].(string)) || !strings.Contains(string(repair), "retry_hint") {
			t.Fatalf("the repair turn lacks the failure contract (%v): %.3000s", acts[0]["errorCode"], repair)
		}
	})

	t.Run("a model that never produces a valid plan", func(t *testing.T) {
		llm.Push(
			llmreplay.Reply{Calls: []llmreplay.Call{{Name: "object.explode", Args: `{}`}}},
			llmreplay.Reply{Calls: []llmreplay.Call{{Name: "plan.submit", Args: `{"operations": [`}}},
			llmreplay.Reply{Calls: []llmreplay.Call{{Name: "plan.submit", Args: planArgs(`{"operation_id": "x", "tool_name": "object.create", "args": {"type": "teapot"}}`)}}})
		code, run := agentAPI(t, c, tok, "POST", "/api/agent/run", fmt.Sprintf(`{"prompt": "Do something odd", "threadId": %q}`, thread))
		wantRun(t, code, run, "failed")
		e, _ := run["error"].(map[string]any)
		if e["type"] != "ModelError" || run["turns"] != 3.0 || len(actions(run)) != 3 || !strings.Contains(e["message"].(string), "3 turns") {
			t.Fatalf("run: %v", run)
		}
		for i, a := range actions(run) {
			if a["status"] != "failed" {
				t.Fatalf("action %d: %v", i, a)
			}
		}
	})

	t.Run("a provider error", func(t *testing.T) {
		llm.Push(llmreplay.Reply{Status: 500})
		code, run := agentAPI(t, c, tok, "POST", "/api/agent/run", fmt.Sprintf(`{"prompt": "Anything", "threadId": %q}`, thread))
		wantRun(t, code, run, "failed")
		e, _ := run["error"].(map[string]any)
		if e["type"] != "ModelError" || !strings.Contains(e["message"].(string), "HTTP 500") {
			t.Fatalf("run: %v", run)
		}
	})

	t.Run("a model that answers nothing", func(t *testing.T) {
		llm.Push(llmreplay.Reply{}) // an empty stream
		code, run := agentAPI(t, c, tok, "POST", "/api/agent/run", fmt.Sprintf(`{"prompt": "Anything", "threadId": %q}`, thread))
		wantRun(t, code, run, "failed")
		e, _ := run["error"].(map[string]any)
		if e["type"] != "ModelError" || !strings.Contains(e["message"].(string), "answered nothing") {
			t.Fatalf("run: %v", run)
		}
	})

	var waiting map[string]any
	t.Run("a destructive plan waits, is approved and resumes", func(t *testing.T) {
		llm.Push(llmreplay.Reply{Calls: []llmreplay.Call{{Name: "object.delete", Args: `{"name": "Ball"}`}}})
		code, run := agentAPI(t, c, tok, "POST", "/api/agent/run", fmt.Sprintf(`{"prompt": "Remove the ball", "threadId": %q}`, thread))
		wantRun(t, code, run, "awaiting_confirmation")
		a := actions(run)[0]
		if a["status"] != "awaiting_confirmation" || a["requiresApproval"] != true || a["policyDecision"] != "require_approval" || a["approvalId"] == nil {
			t.Fatalf("action: %v", a)
		}
		// Another prompt in the thread waits for this one.
		if code, out := agentAPI(t, c, tok, "POST", "/api/agent/run", fmt.Sprintf(`{"prompt": "And more", "threadId": %q}`, thread)); code != 400 || out["errorType"] != "ValidationError" {
			t.Fatalf("a prompt for a busy thread: %d %v", code, out)
		}
		code, pending := agentAPI(t, c, tok, "GET", "/api/agent/approvals/pending", "")
		list := asSlice(pending["approvals"])
		if code != 200 || len(list) != 1 || list[0].(map[string]any)["approvalId"] != a["approvalId"] || list[0].(map[string]any)["runId"] != run["runId"] {
			t.Fatalf("pending: %d %v", code, pending)
		}
		llm.Push(llmreplay.Reply{Text: "The ball is gone."})
		code, done := agentAPI(t, c, tok, "POST", "/api/agent/approvals/resolve", fmt.Sprintf(`{"approvalId": %q, "decision": "approve_once"}`, a["approvalId"]))
		wantRun(t, code, done, "completed")
		if got := actions(done)[0]; got["status"] != "completed" || got["executionStatus"] != "SUCCEEDED" || done["summary"] != "The ball is gone." {
			t.Fatalf("after approval: %v", done)
		}
	})

	t.Run("a rejected plan", func(t *testing.T) {
		llm.Push(llmreplay.Reply{Calls: []llmreplay.Call{{Name: "object.delete", Args: `{"name": "Crate"}`}}})
		code, run := agentAPI(t, c, tok, "POST", "/api/agent/run", fmt.Sprintf(`{"prompt": "Remove the crate", "threadId": %q}`, thread))
		wantRun(t, code, run, "awaiting_confirmation")
		id := actions(run)[0]["approvalId"]
		// Decided by another principal, an approver: the answer says how
		// the run ended, not what is in it (GetRun would refuse it the run).
		carol := c.createToken(t, "carol", "approve")
		code, decided := agentAPI(t, c, carol, "POST", "/api/agent/approvals/resolve", fmt.Sprintf(`{"approvalId": %q, "decision": "reject"}`, id))
		if code != 200 || decided["runId"] != run["runId"] || decided["status"] != "completed" || decided["summary"] != nil && decided["summary"] != "" ||
			decided["threadId"] != nil && decided["threadId"] != "" || len(actions(decided)) != 0 {
			t.Fatalf("another principal's run, as its approver sees it: %d %v", code, decided)
		}
		code, done := agentAPI(t, c, tok, "GET", "/api/agent/runs/"+run["runId"].(string), "")
		wantRun(t, code, done, "completed")
		if a := actions(done)[0]; a["status"] != "rejected" || a["errorCode"] != "APPROVAL_REJECTED" || !strings.Contains(done["summary"].(string), "rejected") {
			t.Fatalf("after rejection: %v", done)
		}
		if n := llm.Pending(); n != 0 {
			t.Fatalf("%d scripted answers left", n)
		}
		if code, out := agentAPI(t, c, tok, "POST", "/api/agent/approvals/resolve", `{"approvalId": "nope", "decision": "maybe"}`); code != 400 || out["errorType"] != "ValidationError" {
			t.Fatalf("a bad decision: %d %v", code, out)
		}
	})

	t.Run("a restart while a run waits", func(t *testing.T) {
		llm.Push(llmreplay.Reply{Calls: []llmreplay.Call{{Name: "object.delete", Args: `{"name": "Lamp"}`}}})
		code, run := agentAPI(t, c, tok, "POST", "/api/agent/run", fmt.Sprintf(`{"prompt": "Remove the lamp", "threadId": %q}`, thread))
		wantRun(t, code, run, "awaiting_confirmation")
		waiting = run
		c.cp.stop(t, syscall.SIGTERM)
		c.cp = startDaemonEnv(top, env, "controlplane", c.cp.cmd.Args[1:]...)
		c.waitAgent(t)
		code, got := agentAPI(t, c, tok, "GET", "/api/agent/runs/"+run["runId"].(string), "")
		wantRun(t, code, got, "awaiting_confirmation")
		llm.Push(llmreplay.Reply{Text: "The lamp is gone."})
		code, done := agentAPI(t, c, tok, "POST", "/api/agent/approvals/resolve", fmt.Sprintf(`{"approvalId": %q, "decision": "approve_once"}`, actions(run)[0]["approvalId"]))
		wantRun(t, code, done, "completed")
		if done["runId"] != run["runId"] || actions(done)[0]["status"] != "completed" || done["summary"] != "The lamp is gone." {
			t.Fatalf("after the restart and approval: %v", done)
		}
	})

	t.Run("audit per action", func(t *testing.T) {
		code, out := agentAPI(t, c, tok, "GET", "/api/agent/audit?runId="+waiting["runId"].(string), "")
		entries := asSlice(out["audit"])
		if code != 200 || len(entries) != 2 {
			t.Fatalf("audit of the restarted run: %d %v", code, out)
		}
		wait, done := entries[0].(map[string]any), entries[1].(map[string]any)
		if wait["executionStatus"] != "AWAITING_CONFIRMATION" || wait["policyDecision"] != "require_approval" || wait["approvalId"] == "" ||
			done["executionStatus"] != "SUCCEEDED" || done["modelName"] != "replay-model" || done["toolName"] != "object.delete" ||
			!strings.HasPrefix(done["inputHash"].(string), "sha256:") || done["principal"] != "admin" {
			t.Fatalf("audit entries: %v", entries)
		}
		code, all := agentAPI(t, c, tok, "GET", "/api/agent/audit", "")
		raw, _ := json.Marshal(all)
		if code != 200 || len(asSlice(all["audit"])) < 10 || strings.Contains(string(raw), "Remove the lamp") || strings.Contains(string(raw), `"Lamp"`) {
			t.Fatalf("the whole audit (no prompts, no arguments): %d %s", code, raw)
		}
	})

	t.Run("auth", func(t *testing.T) {
		if code, out := agentAPI(t, c, "", "POST", "/api/agent/run", `{"prompt": "hi"}`); code != 401 || out["errorType"] != "AuthError" {
			t.Fatalf("no token: %d %v", code, out)
		}
		// The token first, the body after: a bad body without a token is 401.
		for _, route := range []string{"/api/agent/run", "/api/agent/run/stream", "/api/agent/approvals/resolve"} {
			if code, out := agentAPI(t, c, "", "POST", route, `{"prompt": 1, "x": [`); code != 401 || out["errorType"] != "AuthError" {
				t.Fatalf("%s, no token and a bad body: %d %v", route, code, out)
			}
		}
		bob := c.createToken(t, "bob", "plans")
		if code, out := agentAPI(t, c, bob, "POST", "/api/agent/run", fmt.Sprintf(`{"prompt": "hi", "threadId": %q}`, thread)); code != 403 || out["errorType"] != "AuthError" {
			t.Fatalf("another principal's thread: %d %v", code, out)
		}
		if code, out := agentAPI(t, c, bob, "GET", "/api/agent/runs/"+waiting["runId"].(string), ""); code != 404 {
			t.Fatalf("another principal's run: %d %v", code, out)
		}
		if code, out := agentAPI(t, c, bob, "POST", "/api/agent/approvals/resolve", `{"approvalId": "x", "decision": "reject"}`); code != 403 {
			t.Fatalf("resolving without the approve scope: %d %v", code, out)
		}
		if code, out := agentAPI(t, c, tok, "POST", "/api/agent/run", `{"prompt": ""}`); code != 400 || out["errorType"] != "ValidationError" {
			t.Fatalf("an empty prompt: %d %v", code, out)
		}
		if code, out := agentAPI(t, c, tok, "POST", "/api/agent/run", `{"prompt": "hi", "thread": "x"}`); code != 400 {
			t.Fatalf("an unknown field: %d %v", code, out)
		}
	})

	t.Run("blendctl prompt", func(t *testing.T) {
		llm.Push(llmreplay.Reply{Text: "Hello from the planner."})
		out, err := c.blendctl("prompt", "Say hello", "--thread", thread).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "Hello from the planner.") || !strings.Contains(string(out), "[completed]") {
			t.Fatalf("blendctl prompt: %v\n%s", err, out)
		}
	})

	for _, secret := range []string{plannerSecret, "Put a crate and a ball in the scene", "Remove the lamp"} {
		if strings.Contains(c.cp.log.String(), secret) {
			t.Errorf("the control plane's log holds %q", secret)
		}
	}
	if h := llm.AuthHeaders(); len(h) == 0 || h[0] != "Bearer "+plannerSecret {
		t.Errorf("the provider was not called with the key: %v", h)
	}
}

// TestPlannerGemini: the same runtime on the Gemini provider (the real
// genai client against a scripted server answering as the Gemini API's
// streamGenerateContent does): a prompt becomes a registry tool call that
// runs, streamed; and a control plane without a planner answers 503 saying
// how to configure one.
func TestPlannerGemini(t *testing.T) {
	llm := llmreplay.NewGemini()
	t.Cleanup(llm.Close)
	c := startClusterOpts(t, clusterOpts{cpEnv: []string{"GEMINI_API_KEY=" + plannerSecret},
		cpArgs: []string{"--planner", "gemini", "--planner-base-url", llm.URL(), "--planner-model", "gemini-replay"}})
	llm.Push(llmreplay.Reply{Calls: []llmreplay.Call{{Name: "object.create", Args: `{"type": "cone", "name": "Spire"}`}}},
		llmreplay.Reply{Text: "I added a cone called Spire."})
	status, body := curl(t, "POST", "http://"+c.httpAddr+"/api/agent/run/stream", c.adminToken, `{"prompt": "Add a cone"}`)
	lines := strings.Split(strings.TrimSpace(string(body)), "\n")
	var last map[string]any
	if status != "200" || json.Unmarshal([]byte(lines[len(lines)-1]), &last) != nil || last["type"] != "result" {
		t.Fatalf("stream: %s %s", status, body)
	}
	run := last["result"].(map[string]any)
	acts := actions(run)
	if run["status"] != "completed" || len(acts) != 1 || acts[0]["tool"] != "object.create" || acts[0]["status"] != "completed" || run["model"] != "gemini-replay" {
		t.Fatalf("run: %v", run)
	}
	if sent := lastRequestText(t, llm); !strings.Contains(sent, "functionResponse") || !strings.Contains(sent, "Spire") {
		t.Fatalf("the second turn lacks the call's result: %.2000s", sent)
	}
	if h := llm.AuthHeaders(); len(h) == 0 || h[0] != plannerSecret {
		t.Errorf("the provider was not called with the key: %v", h)
	}

	bare := startClusterOpts(t, clusterOpts{insecure: true})
	code, out := agentAPI(t, bare, "", "POST", "/api/agent/run", `{"prompt": "hi"}`)
	if code != 503 || !strings.Contains(fmt.Sprint(out["error"]), "--planner") {
		t.Fatalf("no planner configured: %d %v", code, out)
	}
}
