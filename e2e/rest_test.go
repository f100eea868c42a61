package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// curl runs curl and returns the status code and the body.
func curl(t *testing.T, method, url, token, body string) (string, []byte) {
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
	if err := json.Unmarshal(doc, &spec); code != "200" || err != nil || spec.OpenAPI != "3.1.0" || spec.Paths["/v1/sessions:negotiate"] == nil {
		t.Fatalf("GET /openapi.json: %s %v %.200s", code, err, doc)
	}
	py := filepath.Join(repoRoot(), ".clients", "py", "bin")
	validator := exec.Command(filepath.Join(py, "python"), "-c",
		"import json,sys; from openapi_spec_validator import validate; validate(json.load(sys.stdin)); print('valid')")
	validator.Stdin = bytes.NewReader(doc)
	if out, err := validator.CombinedOutput(); err != nil || !strings.Contains(string(out), "valid") {
		t.Fatalf("openapi-spec-validator: %v\n%s", err, out)
	}
	// A client generated from the document (openapi-python-client) calls a route.
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
	if out, err := exec.Command(filepath.Join(py, "python"), filepath.Join("testdata", "openapi_client.py"), pkg, base, c.adminToken).CombinedOutput(); err != nil ||
		!strings.Contains(string(out), "done") {
		t.Fatalf("the generated client: %v\n%s", err, out)
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
	if code, body := curl(t, "GET", base+"/v1/agents", ana, ""); code != "403" {
		t.Fatalf("ListAgents without admin: %s %s", code, body)
	}
}
