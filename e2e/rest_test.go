package e2e

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/textproto"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// curl runs curl and returns the status code and the body.
func curl(t testing.TB, method, url, token, body string) (string, []byte) {
	t.Helper()
	args := []string{"-s", "-X", method, url, "-w", "\n%{http_code}"}
	if token != "" {
		args = append(args, "-H", "Authorization: Bearer "+token)
	}
	if body != "" {
		args = append(args, "-H", "Content-Type: application/json", "-d", body)
	}
	out, err := exec.Command("curl", args...).Output()
	if err != nil {
		t.Fatalf("curl %s %s: %v", method, url, err)
	}
	i := bytes.LastIndexByte(out, '\n')
	return string(out[i+1:]), out[:i]
}

// TestREST: the whole API as JSON over HTTP under /v1 (grpc-gateway),
// through the same authentication and ownership as gRPC, driven with curl;
// its OpenAPI document is served at /openapi.json and valid for a
// third-party validator.
func TestREST(t *testing.T) {
	c := startCluster(t)
	base := "http://" + c.httpAddr

	code, doc := curl(t, "GET", base+"/openapi.json", "", "")
	var spec struct {
		OpenAPI string         `json:"openapi"`
		Paths   map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(doc, &spec); code != "200" || err != nil || spec.OpenAPI != "3.1.0" || spec.Paths["/v1/sessions:negotiate"] == nil ||
		!bytes.Contains(doc, []byte(`"security":[{"bearer":[]}]`)) || !bytes.Contains(doc, []byte(`"scheme":"bearer"`)) {
		t.Fatalf("GET /openapi.json (its routes, and the bearer token they need): %s %v %.200s", code, err, doc)
	}
	py := filepath.Join(repoRoot(), ".clients", "py", "bin")
	validator := exec.Command(filepath.Join(py, "python"), "-c",
		"import json,sys; from openapi_spec_validator import validate; validate(json.load(sys.stdin)); print('valid')")
	validator.Stdin = bytes.NewReader(doc)
	if out, err := validator.CombinedOutput(); err != nil || !strings.Contains(string(out), "valid") {
		t.Fatalf("openapi-spec-validator: %v\n%s", err, out)
	}
	// A client generated from the document (openapi-python-client), which
	// calls its routes below.
	gen := t.TempDir()
	specFile := filepath.Join(gen, "openapi.json")
	os.WriteFile(specFile, doc, 0o600)
	cfg := filepath.Join(gen, "config.yaml")
	os.WriteFile(cfg, []byte("project_name_override: blendplane-rest-client\npackage_name_override: blendplane_rest_client\n"), 0o600)
	generate := exec.Command(filepath.Join(py, "openapi-python-client"), "generate", "--path", specFile, "--output-path", filepath.Join(gen, "client"),
		"--meta", "none", "--config", cfg)
	if out, err := generate.CombinedOutput(); err != nil {
		t.Fatalf("openapi-python-client generate: %v\n%s", err, out)
	}
	pkg := filepath.Join(gen, "pkg")
	os.MkdirAll(pkg, 0o700)
	if err := os.Rename(filepath.Join(gen, "client"), filepath.Join(pkg, "blendplane_rest_client")); err != nil {
		t.Fatal(err)
	}

	if code, body := curl(t, "POST", base+"/v1/sessions:negotiate", "", `{"contractVersion":"1.0.0","hostProfile":{"clientName":"curl"}}`); code != "401" {
		t.Fatalf("negotiate without a token: %s %s", code, body)
	}
	code, body := curl(t, "POST", base+"/v1/sessions:negotiate", c.adminToken, `{"contractVersion":"1.0.0","hostProfile":{"clientName":"curl"}}`)
	var neg struct {
		Contract struct {
			SessionID string `json:"sessionId"`
		} `json:"contract"`
	}
	if err := json.Unmarshal(body, &neg); code != "200" || err != nil || neg.Contract.SessionID == "" {
		t.Fatalf("negotiate: %s %v %s", code, err, body)
	}
	sid := neg.Contract.SessionID
	plan := `{"requestId":"rest-1","operations":[{"operationId":"box","toolName":"object.create","safetyLevel":"SAFETY_LEVEL_SAFE_WRITE","args":{"type":"cube","name":"RestBox"}}]}`
	if code, body := curl(t, "POST", base+"/v1/sessions/"+sid+"/plans", c.adminToken, plan); code != "200" || !strings.Contains(string(body), `"requestId":"rest-1"`) {
		t.Fatalf("submit: %s %s", code, body)
	}
	// The receipts: newline-delimited JSON, one {"result": ...} per event.
	code, body = curl(t, "GET", base+"/v1/plans/rest-1/receipts", c.adminToken, "")
	var statuses []string
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		var ev struct {
			Result struct {
				Receipt *struct {
					Status string `json:"status"`
				} `json:"receipt"`
			} `json:"result"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("a receipt line: %v: %s", err, sc.Text())
		}
		if ev.Result.Receipt != nil {
			statuses = append(statuses, ev.Result.Receipt.Status)
		}
	}
	if code != "200" || strings.Join(statuses, ",") != "STATUS_SUCCEEDED" {
		t.Fatalf("receipts: %s %q %s", code, statuses, body)
	}
	if code, body := curl(t, "GET", base+"/v1/plans/rest-1", c.adminToken, ""); code != "200" || !strings.Contains(string(body), `"state":"STATE_SUCCEEDED"`) {
		t.Fatalf("get plan: %s %s", code, body)
	}
	if out, err := exec.Command(filepath.Join(py, "python"), filepath.Join("testdata", "openapi_client.py"), pkg, base, c.adminToken, sid, "rest-1").CombinedOutput(); err != nil ||
		!strings.Contains(string(out), "done") {
		t.Fatalf("the generated client: %v\n%s", err, out)
	}
	// Another principal: its session does not exist for them; a bad plan is
	// refused with the failure contract's details.
	ana := c.createToken(t, "ana", "plans")
	if code, body := curl(t, "POST", base+"/v1/sessions/"+sid+"/plans", ana, strings.Replace(plan, "rest-1", "rest-2", 1)); code != "404" {
		t.Fatalf("another principal's session: %s %s", code, body)
	}
	bad := strings.Replace(strings.Replace(plan, "rest-1", "rest-3", 1), `"type":"cube"`, `"type":"nonsense"`, 1)
	if code, body := curl(t, "POST", base+"/v1/sessions/"+sid+"/plans", c.adminToken, bad); code != "400" || !strings.Contains(string(body), "SCHEMA_INVALID") {
		t.Fatalf("a bad plan: %s %s", code, body)
	}
	// A stream that fails before its first message: its HTTP status, and the
	// google.rpc.Status as a stream's one line, {"error": …} (API.md).
	for route, reason := range map[string]string{"/v1/sessions/" + sid + "/artifacts/nope.png": "ARTIFACT_NOT_FOUND", "/v1/plans/nope/receipts": "PLAN_NOT_FOUND"} {
		code, body := curl(t, "GET", base+route, c.adminToken, "")
		var line struct {
			Error struct {
				Code    int    `json:"code"`
				Details []any  `json:"details"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(body, &line); code != "404" || err != nil || line.Error.Code != 5 || !strings.Contains(string(body), `"reason":"`+reason+`"`) {
			t.Fatalf("GET %s: %s %v %s", route, code, err, body)
		}
	}
	if code, body := curl(t, "GET", base+"/v1/agents", ana, ""); code != "403" {
		t.Fatalf("ListAgents without admin: %s %s", code, body)
	}
}

// curlArgs runs curl with args and returns the status code, the headers
// and the body.
func curlArgs(t *testing.T, args ...string) (code string, header http.Header, body map[string]any) {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("curl", append([]string{"-s", "-o", filepath.Join(dir, "body"), "-D", filepath.Join(dir, "head"), "-w", "%{http_code}"}, args...)...).Output()
	if err != nil {
		t.Fatalf("curl %v: %v", args, err)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "head"))
	head, _ := textproto.NewReader(bufio.NewReader(bytes.NewReader(bytes.SplitN(raw, []byte("\r\n"), 2)[1]))).ReadMIMEHeader()
	b, _ := os.ReadFile(filepath.Join(dir, "body"))
	_ = json.Unmarshal(b, &body)
	return string(out), http.Header(head), body
}

// reasonOf is the ErrorInfo reason of a REST error body.
func reasonOf(body map[string]any) string {
	details, _ := body["details"].([]any)
	for _, d := range details {
		if m, _ := d.(map[string]any); m["reason"] != nil {
			return m["reason"].(string)
		}
	}
	return ""
}

// TestRESTGuards: /v1 refuses a caller without a token before reading its
// body (four 60 MiB bodies leave the control plane's peak memory where it
// was) with a bearer challenge, caps bodies at --max-message-bytes
// (PAYLOAD_TOO_LARGE, with or without Content-Length; an upload's limit is
// per line), answers a wrong method 405 and a body that is not JSON with
// SCHEMA_INVALID, as it does a misspelt field or enum name. With --allow-insecure-local, where every request acts as
// an admin, only loopback Hosts and same-origin browser requests get in.
func TestRESTGuards(t *testing.T) {
	c := startCluster(t)
	base := "http://" + c.httpAddr
	big := filepath.Join(t.TempDir(), "big.json")
	if err := os.WriteFile(big, []byte(`{"contractVersion":"`+strings.Repeat("A", 60<<20)+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	pid := c.cp.cmd.Process.Pid
	before := procStatus(t, pid, "VmHWM:")
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			code, head, body := curlArgs(t, "-X", "POST", base+"/v1/sessions:negotiate", "-H", "Content-Type: application/json", "--data-binary", "@"+big)
			if code != "401" || head.Get("WWW-Authenticate") != `Bearer realm="blendplane"` || reasonOf(body) != "UNAUTHENTICATED" {
				t.Errorf("60 MiB without a token: %s %v %v", code, head, body)
			}
		})
	}
	wg.Wait()
	if grew := procStatus(t, pid, "VmHWM:") - before; grew > 100<<20 {
		t.Errorf("the control plane's peak memory grew by %d MiB for bodies it refused unread", grew>>20)
	}

	small := startClusterOpts(t, clusterOpts{cpArgs: []string{"--max-message-bytes", "1048576"}})
	base = "http://" + small.httpAddr
	auth := []string{"-H", "Authorization: Bearer " + small.adminToken, "-H", "Content-Type: application/json"}
	two := filepath.Join(t.TempDir(), "two.json")
	os.WriteFile(two, []byte(`{"contractVersion":"`+strings.Repeat("A", 2<<20)+`"}`), 0o600)
	for name, extra := range map[string][]string{"with Content-Length": nil, "chunked": {"-H", "Transfer-Encoding: chunked"}} {
		args := append(append([]string{"-X", "POST", base + "/v1/sessions:negotiate", "--data-binary", "@" + two}, auth...), extra...)
		if code, _, body := curlArgs(t, args...); code != "413" || reasonOf(body) != "PAYLOAD_TOO_LARGE" {
			t.Errorf("a 2 MiB body over a 1 MiB limit, %s: %s %v", name, code, body)
		}
	}
	// A GET reads no body: its Content-Length is not held against it.
	if code, _, body := curlArgs(t, append([]string{"-X", "GET", base + "/v1/sessions", "--data-binary", "@" + two}, auth...)...); code != "200" {
		t.Errorf("a GET with a 2 MiB body: %s %v", code, body)
	}
	s := small.negotiate(t).GetSessionId()
	line := func(chunk int) string {
		return `{"chunk":"` + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{'x'}, chunk)) + `"}` + "\n"
	}
	header := `{"header":{"sessionId":"` + s + `","name":"ok.bin","sizeBytes":"1200000"}}` + "\n"
	ndjson := filepath.Join(t.TempDir(), "upload.ndjson")
	os.WriteFile(ndjson, []byte(header+line(600000)+line(600000)), 0o600) // 1.6 MB of lines, each under 1 MiB
	if code, _, body := curlArgs(t, append([]string{"-X", "POST", base + "/v1/artifacts:upload", "--data-binary", "@" + ndjson}, auth...)...); code != "200" {
		t.Errorf("an upload of lines each under the limit: %s %v", code, body)
	}
	os.WriteFile(ndjson, []byte(strings.Replace(header, "ok.bin", "big.bin", 1)+line(900000)), 0o600) // one line of 1.2 MB
	if code, _, body := curlArgs(t, append([]string{"-X", "POST", base + "/v1/artifacts:upload", "--data-binary", "@" + ndjson}, auth...)...); code != "413" || reasonOf(body) != "PAYLOAD_TOO_LARGE" {
		t.Errorf("an upload line over the limit: %s %v", code, body)
	}
	// One message over the limit in lines under it (JSON allows newlines
	// anywhere between tokens): the limit is per message, not per line.
	spread := `{"header":` + strings.Repeat("\n"+strings.Repeat(" ", 100000), 15) + `{"sessionId":"` + s + `","name":"x.bin"}}` + "\n"
	os.WriteFile(ndjson, []byte(spread), 0o600)
	if code, _, body := curlArgs(t, append([]string{"-X", "POST", base + "/v1/artifacts:upload", "--data-binary", "@" + ndjson}, auth...)...); code != "413" || reasonOf(body) != "PAYLOAD_TOO_LARGE" {
		t.Errorf("an upload message over the limit in short lines: %s %v", code, body)
	}
	if code, _, body := curlArgs(t, append([]string{"-X", "DELETE", base + "/v1/sessions/" + s}, auth...)...); code != "405" || reasonOf(body) != "METHOD_NOT_ALLOWED" {
		t.Errorf("DELETE on a GET route: %s %v", code, body)
	}
	if code, _, body := curlArgs(t, append([]string{"-X", "POST", base + "/v1/sessions:negotiate", "-d", "not json"}, auth...)...); code != "400" || reasonOf(body) != "SCHEMA_INVALID" {
		t.Errorf("a body that is not JSON: %s %v", code, body)
	}
	// A misspelt field or enum name is refused, not dropped: dropped, the
	// first ran a plan that was meant to be checked only.
	plans := base + "/v1/sessions/" + s + "/plans"
	for name, req := range map[string]string{
		"validate_onyl":          `{"requestId":"typo-1","validate_onyl":true,"operations":[{"operationId":"a","toolName":"object.create","safetyLevel":"SAFETY_LEVEL_SAFE_WRITE","args":{"type":"cube"}}]}`,
		"SAFETY_LEVEL_SAFE_WRIT": `{"requestId":"typo-2","validateOnly":true,"operations":[{"operationId":"a","toolName":"object.create","safetyLevel":"SAFETY_LEVEL_SAFE_WRIT","args":{"type":"cube"}}]}`,
	} {
		code, _, body := curlArgs(t, append([]string{"-X", "POST", plans, "-d", req}, auth...)...)
		if msg, _ := body["message"].(string); code != "400" || reasonOf(body) != "SCHEMA_INVALID" || !strings.Contains(msg, name) {
			t.Errorf("a plan with %s: %s %v", name, code, body)
		}
	}
	if code, _, body := curlArgs(t, append([]string{base + "/v1/plans/typo-1"}, auth...)...); code != "404" {
		t.Errorf("the plan with a misspelt field was stored: %s %v", code, body)
	}

	open := startClusterOpts(t, clusterOpts{insecure: true})
	port := open.httpAddr[strings.LastIndexByte(open.httpAddr, ':')+1:]
	negotiate := []string{"-X", "POST", "http://" + open.httpAddr + "/v1/sessions:negotiate", "-d", `{"contractVersion":"1.0.0","hostProfile":{"clientName":"x"}}`}
	for name, headers := range map[string][]string{
		"a rebound DNS name":  {"-H", "Host: evil.example:" + port, "-H", "Content-Type: application/json"},
		"a cross-site simple": {"-H", "Origin: http://evil.example", "-H", "Content-Type: text/plain"},
		"a cross-site fetch":  {"-H", "Sec-Fetch-Site: cross-site", "-H", "Content-Type: application/json"},
	} {
		if code, _, _ := curlArgs(t, append(negotiate, headers...)...); code != "403" {
			t.Errorf("insecure mode, %s: %s, want 403", name, code)
		}
	}
	if code, _, body := curlArgs(t, append(negotiate, "-H", "Origin: http://127.0.0.1:"+port, "-H", "Content-Type: application/json")...); code != "200" {
		t.Errorf("insecure mode, same origin: %s %v", code, body)
	}
	if code, _, _ := curlArgs(t, "-H", "Host: localhost:"+port, "http://"+open.httpAddr+"/console/"); code != "200" {
		t.Errorf("insecure mode, the console at localhost: %s", code)
	}
}
