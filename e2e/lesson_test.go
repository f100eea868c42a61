package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/internal/jcs"
)

// lessonCall is one request to the lesson API with Go's HTTP client.
func lessonCall(t *testing.T, method, url, token, body string, headers ...string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s %s: %d, not a JSON object: %s", method, url, resp.StatusCode, raw)
	}
	return resp.StatusCode, out
}

// opensslSign signs payload with an openssl Ed25519 key and returns the
// signature as base64.
func opensslSign(t *testing.T, key string, payload []byte) string {
	t.Helper()
	in := filepath.Join(t.TempDir(), "payload")
	os.WriteFile(in, payload, 0o600)
	out, err := exec.Command("openssl", "pkeyutl", "-sign", "-rawin", "-inkey", key, "-in", in).Output()
	if err != nil {
		t.Fatalf("openssl pkeyutl -sign: %v", err)
	}
	return base64.StdEncoding.EncodeToString(out)
}

// signedPack is a lesson pack signed over the canonical JSON of its lesson
// and metadata, as seed 004 says.
func signedPack(t *testing.T, key string, lesson []any, metadata map[string]any) string {
	t.Helper()
	payload, err := jcs.Marshal(map[string]any{"lesson": lesson, "metadata": metadata})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]any{"lesson": lesson, "metadata": metadata, "signature": opensslSign(t, key, payload)})
	return string(b)
}

// TestLessons: the lesson API of seed 004 end to end on the default policy:
// every route and status, the whitelist and its refusals, signatures made
// with openssl and with blendctl, the idempotent repeat, a destructive
// lesson that waits for approval, the audit endpoint, another principal's
// session.
func TestLessons(t *testing.T) {
	dir := t.TempDir()
	osslKey, osslPub := filepath.Join(dir, "k.pem"), filepath.Join(dir, "k.pub.pem")
	if out, err := exec.Command("openssl", "genpkey", "-algorithm", "ed25519", "-out", osslKey).CombinedOutput(); err != nil {
		t.Fatalf("openssl genpkey: %v %s", err, out)
	}
	if out, err := exec.Command("openssl", "pkey", "-in", osslKey, "-pubout", "-out", osslPub).CombinedOutput(); err != nil {
		t.Fatalf("openssl pkey -pubout: %v %s", err, out)
	}
	ctlKey, ctlPub := filepath.Join(dir, "b.pem"), filepath.Join(dir, "b.pub.pem")
	if out, err := exec.Command(filepath.Join(binDir, "blendctl"), "lesson", "keygen", "--private", ctlKey, "--public", ctlPub).CombinedOutput(); err != nil {
		t.Fatalf("blendctl lesson keygen: %v %s", err, out)
	}
	c := startClusterOpts(t, clusterOpts{policy: defaultPolicy, cpArgs: []string{"--lesson-public-key", osslPub, "--lesson-public-key", ctlPub}})
	base := "http://" + c.httpAddr
	admin := c.adminToken

	validator := exec.Command(filepath.Join(repoRoot(), ".clients", "py", "bin", "python"), "-c",
		"import json,sys; from openapi_spec_validator import validate; validate(json.load(open(sys.argv[1]))); print('valid')",
		filepath.Join(repoRoot(), "docs", "lesson-openapi.json"))
	if out, err := validator.CombinedOutput(); err != nil || !strings.Contains(string(out), "valid") {
		t.Fatalf("openapi-spec-validator on docs/lesson-openapi.json: %v\n%s", err, out)
	}
	if code, out := lessonCall(t, "GET", base+"/health", "", ""); code != 200 || out["status"] != "ok" {
		t.Fatalf("GET /health: %d %v", code, out)
	}
	hello := `{"lesson":[{"command":"SPEAK","params":{"text":"Hello"}},{"command":"ADD_CUBE","params":{"size":1.5,"location":[0,0,1],"name":"LessonCube"}},` +
		`{"command":"UI_HIGHLIGHT","params":{"selector":"#outliner","duration_ms":500}},{"command":"SELECT_OBJECT","params":{"name":"LessonCube"}},` +
		`{"command":"WAIT","params":{"ms":100}},{"command":"RUN_OPERATOR","params":{"operator":"mesh.primitive_uv_sphere_add","params":{"radius":0.5}}}],` +
		`"metadata":{"id":"lesson-1","source":"e2e"}}`

	// Refusals, each with its status and the failure contract.
	for _, tc := range []struct {
		what, token, body string
		headers           []string
		code              int
		errorCode         string
	}{
		{"no token", "", hello, nil, 401, "UNAUTHENTICATED"},
		{"a bad token", "bpt_nope", hello, nil, 401, "UNAUTHENTICATED"},
		{"an unsupported version", admin, hello, []string{"X-MCP-Version", "2"}, 400, "VERSION_UNSUPPORTED"},
		{"invalid JSON", admin, `{"lesson":[`, nil, 400, "SCHEMA_INVALID"},
		{"an extra key", admin, `{"lesson":[{"command":"SPEAK","params":{"text":"x"}}],"metadata":{"id":"x1"},"extra":1}`, nil, 400, "SCHEMA_INVALID"},
		{"an extra step key", admin, `{"lesson":[{"command":"SPEAK","params":{"text":"x"},"when":1}],"metadata":{"id":"x2"}}`, nil, 400, "SCHEMA_INVALID"},
		{"no metadata.id", admin, `{"lesson":[{"command":"SPEAK","params":{"text":"x"}}]}`, nil, 400, "SCHEMA_INVALID"},
		{"an unknown command", admin, `{"lesson":[{"command":"EXEC_PYTHON","params":{"code":"x"}}],"metadata":{"id":"x3"}}`, nil, 422, "COMMAND_REFUSED"},
		{"a custom command", admin, `{"lesson":[{"command":"X_CUSTOM.boom"}],"metadata":{"id":"x4"}}`, nil, 422, "COMMAND_REFUSED"},
		{"an unwhitelisted operator", admin, `{"lesson":[{"command":"RUN_OPERATOR","params":{"operator":"wm.quit_blender"}}],"metadata":{"id":"x5"}}`, nil, 422, "COMMAND_REFUSED"},
		{"a size out of range", admin, `{"lesson":[{"command":"ADD_CUBE","params":{"size":-1}}],"metadata":{"id":"x6"}}`, nil, 422, "COMMAND_REFUSED"},
		{"an unknown param", admin, `{"lesson":[{"command":"ADD_CUBE","params":{"size":1,"color":"red"}}],"metadata":{"id":"x7"}}`, nil, 422, "COMMAND_REFUSED"},
		{"a wait too long", admin, `{"lesson":[{"command":"WAIT","params":{"ms":3600000}}],"metadata":{"id":"x8"}}`, nil, 422, "COMMAND_REFUSED"},
		{"a bad signature", admin, `{"lesson":[{"command":"SPEAK","params":{"text":"x"}}],"metadata":{"id":"x9"},"signature":"bm90IGEgc2lnbmF0dXJl"}`, nil, 401, "SIGNATURE_INVALID"},
		{"a malformed session header", admin, hello, []string{"X-Blendplane-Session", "not/a session"}, 400, "SCHEMA_INVALID"},
		{"a name over 63 bytes", admin, `{"lesson":[{"command":"DELETE_OBJECT","params":{"name":"` + strings.Repeat("é", 40) + `"}}],"metadata":{"id":"x10"}}`, nil, 422, "COMMAND_REFUSED"},
	} {
		code, out := lessonCall(t, "POST", base+"/lesson", tc.token, tc.body, tc.headers...)
		if code != tc.code || out["error_code"] != tc.errorCode || out["retry_hint"] == nil || out["minimal_repair_plan"] == nil {
			t.Errorf("%s: %d %v, want %d %s", tc.what, code, out, tc.code, tc.errorCode)
		}
	}
	if _, out := lessonCall(t, "POST", base+"/lesson", admin, hello, "X-MCP-Version", "2"); fmt.Sprint(out["supported"]) != "[1]" {
		t.Errorf("an unsupported version names the supported ones: %v", out)
	}
	// Refusals name no file of the server's machine, and count names in bytes.
	if _, out := lessonCall(t, "POST", base+"/lesson", admin, `{"lesson":[{"command":"SPEAK","params":{"text":"x"}}],"metadata":{"id":"bad id"}}`); strings.Contains(fmt.Sprint(out["message"]), "file:") ||
		strings.Contains(fmt.Sprint(out["message"]), os.TempDir()) || strings.Contains(fmt.Sprint(out["message"]), repoRoot()) || out["error_code"] != "SCHEMA_INVALID" {
		t.Errorf("a bad metadata.id: %v", out)
	}
	if _, out := lessonCall(t, "POST", base+"/lesson", admin, `{"lesson":[{"command":"SELECT_OBJECT","params":{"name":"`+strings.Repeat("é", 40)+`"}}],"metadata":{"id":"x11"}}`); !strings.Contains(fmt.Sprint(out["message"]), "63 bytes") {
		t.Errorf("an 80-byte name: %v", out)
	}

	// A lesson: front-end steps come back for the front end, Blender steps
	// with their receipts; the repeat runs nothing again.
	code, out := lessonCall(t, "POST", base+"/lesson", admin, hello, "X-MCP-Version", "1")
	if code != 200 || out["status"] != "accepted" || out["id"] != "lesson-1" {
		t.Fatalf("a lesson: %d %v", code, out)
	}
	steps := out["result"].(map[string]any)["steps"].([]any)
	first, second := steps[0].(map[string]any), steps[1].(map[string]any)
	last := steps[len(steps)-1].(map[string]any)
	if len(steps) != 6 || first["frontend"] == nil || second["status"] != "SUCCEEDED" || second["tool"] != "object.create" ||
		last["status"] != "SUCCEEDED" || last["result"].(map[string]any)["name"] != "Sphere" {
		t.Fatalf("the lesson's steps: %v", steps)
	}
	again, out2 := lessonCall(t, "POST", base+"/lesson", admin, hello)
	if again != 200 || fmt.Sprint(out2) != fmt.Sprint(out) {
		t.Errorf("the repeated lesson: %d %v", again, out2)
	}
	code, sum := lessonCall(t, "POST", base+"/scene_summary", admin, `{"detail_level":"minimal"}`)
	objects, _ := sum["objects"].([]any)
	cubes := 0
	for _, o := range objects {
		if m := o.(map[string]any); m["name"] == "LessonCube" && m["type"] == "MESH" {
			cubes++
		}
	}
	if code != 200 || cubes != 1 || sum["active"] != "Sphere" {
		t.Fatalf("scene_summary after the lesson and its repeat: %d %v", code, sum)
	}
	if code, out := lessonCall(t, "POST", base+"/scene_summary", admin, `{"detail_level":"everything"}`); code != 400 || out["error_code"] != "SCHEMA_INVALID" {
		t.Errorf("an unknown detail level: %d %v", code, out)
	}

	// run_operator.
	code, out = lessonCall(t, "POST", base+"/run_operator", admin, `{"operator":"mesh.primitive_cube_add","params":{"size":1.0}}`)
	if code != 200 || out["status"] != "ok" || out["result"].(map[string]any)["object_name"] != "Cube" {
		t.Fatalf("run_operator: %d %v", code, out)
	}
	if code, out := lessonCall(t, "POST", base+"/run_operator", admin, `{"operator":"object.delete","params":{}}`); code != 422 {
		t.Errorf("an unwhitelisted operator: %d %v", code, out)
	}

	// Signatures: openssl's key, blendctl's key; a tampered lesson, a stale one.
	lesson := []any{map[string]any{"command": "ADD_CUBE", "params": map[string]any{"name": "Signed", "size": 1.0}}}
	md := map[string]any{"id": "signed-1", "source": "e2e", "issued_at": float64(time.Now().Unix())}
	if code, out := lessonCall(t, "POST", base+"/lesson", admin, signedPack(t, osslKey, lesson, md)); code != 200 {
		t.Fatalf("a lesson signed with openssl: %d %v", code, out)
	}
	tampered := strings.Replace(signedPack(t, osslKey, lesson, map[string]any{"id": "signed-2", "issued_at": md["issued_at"]}), `"Signed"`, `"Forged"`, 1)
	if code, out := lessonCall(t, "POST", base+"/lesson", admin, tampered); code != 401 || out["error_code"] != "SIGNATURE_INVALID" {
		t.Errorf("a tampered signed lesson: %d %v", code, out)
	}
	stale := map[string]any{"id": "signed-3", "issued_at": float64(time.Now().Add(-2 * time.Hour).Unix())}
	if code, out := lessonCall(t, "POST", base+"/lesson", admin, signedPack(t, osslKey, lesson, stale)); code != 401 || out["error_code"] != "LESSON_STALE" {
		t.Errorf("a stale lesson: %d %v", code, out)
	}
	packFile := filepath.Join(dir, "pack.json")
	os.WriteFile(packFile, []byte(`{"lesson":[{"command":"ADD_CUBE","params":{"name":"ByBlendctl"}}],"metadata":{"id":"signed-4"}}`), 0o600)
	signed, err := exec.Command(filepath.Join(binDir, "blendctl"), "lesson", "sign", packFile, "--key", ctlKey).Output()
	if err != nil {
		t.Fatalf("blendctl lesson sign: %v", err)
	}
	if code, out := lessonCall(t, "POST", base+"/lesson", admin, string(signed)); code != 200 {
		t.Errorf("a lesson signed by blendctl: %d %v", code, out)
	}

	// An execution error: 500 with the failure contract.
	code, out = lessonCall(t, "POST", base+"/lesson", admin, `{"lesson":[{"command":"SELECT_OBJECT","params":{"name":"Missing"}}],"metadata":{"id":"fails-1"}}`)
	if code != 500 || out["error_code"] != "NOT_FOUND" || len(out["minimal_repair_plan"].([]any)) == 0 {
		t.Errorf("a lesson whose step fails: %d %v", code, out)
	}

	// A destructive lesson waits for approval (202), and runs once approved.
	code, out = lessonCall(t, "POST", base+"/lesson", admin, `{"lesson":[{"command":"DELETE_OBJECT","params":{"name":"LessonCube"}}],"metadata":{"id":"delete-1"}}`)
	apID, _ := out["approval_id"].(string)
	if code != 202 || out["status"] != "awaiting_approval" || apID == "" {
		t.Fatalf("a destructive lesson: %d %v", code, out)
	}
	if _, err := c.client.ResolveApproval(ctxT(t, 10*time.Second), &cpv1.ResolveApprovalRequest{ApprovalId: apID, Decision: cpv1.Decision_DECISION_APPROVE_ONCE}); err != nil {
		t.Fatal(err)
	}
	if rs := c.receipts(t, "delete-1", 1); len(rs) != 1 || rs[0].GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED {
		t.Fatalf("the approved lesson: %v", rs)
	}

	// The audit endpoint, for admins only.
	code, out = lessonCall(t, "GET", base+"/audit?lesson_id=delete-1", admin, "")
	if records, _ := out["records"].([]any); code != 200 || len(records) < 2 {
		t.Errorf("GET /audit: %d %v", code, out)
	}
	ana := c.createToken(t, "ana", "plans")
	if code, out := lessonCall(t, "GET", base+"/audit?lesson_id=delete-1", ana, ""); code != 403 {
		t.Errorf("GET /audit as a non-admin: %d %v", code, out)
	}
	// Another principal's session, named by the header: it does not exist for them.
	sessions, err := c.client.ListSessions(ctxT(t, 10*time.Second), &cpv1.ListSessionsRequest{})
	if err != nil || len(sessions.GetSessions()) == 0 {
		t.Fatal(err)
	}
	code, out = lessonCall(t, "POST", base+"/lesson", ana, `{"lesson":[{"command":"ADD_CUBE"}],"metadata":{"id":"intrude"}}`,
		"X-Blendplane-Session", sessions.GetSessions()[0].GetSessionId())
	if code != 404 {
		t.Errorf("another principal's session: %d %v", code, out)
	}
	// Bodies never carry stack traces.
	if b, _ := json.Marshal(out); bytes.Contains(b, []byte("goroutine")) || bytes.Contains(b, []byte(".go:")) {
		t.Errorf("an error body with a trace: %s", b)
	}
}

// TestLessonsRequireSigned: with --require-signed-lessons an unsigned
// lesson is refused (401), a signed one runs, a signed one without
// issued_at and /run_operator are refused.
func TestLessonsRequireSigned(t *testing.T) {
	dir := t.TempDir()
	key, pub := filepath.Join(dir, "k.pem"), filepath.Join(dir, "k.pub.pem")
	if out, err := exec.Command(filepath.Join(binDir, "blendctl"), "lesson", "keygen", "--private", key, "--public", pub).CombinedOutput(); err != nil {
		t.Fatalf("blendctl lesson keygen: %v %s", err, out)
	}
	c := startClusterOpts(t, clusterOpts{cpArgs: []string{"--lesson-public-key", pub, "--require-signed-lessons", "--lesson-custom-commands"}})
	// With --lesson-custom-commands, X_CUSTOM.<name> runs the registry's macro.<name>.
	pack := `{"lesson":[{"command":"ADD_CUBE","params":{"name":"Hero"}},{"command":"X_CUSTOM.three_point_lighting","params":{"target":"Hero"}}],"metadata":{"id":"must-sign"}}`
	if code, out := lessonCall(t, "POST", "http://"+c.httpAddr+"/lesson", c.adminToken, pack); code != 401 || out["error_code"] != "SIGNATURE_REQUIRED" {
		t.Fatalf("an unsigned lesson where signatures are required: %d %v", code, out)
	}
	file := filepath.Join(dir, "pack.json")
	os.WriteFile(file, []byte(pack), 0o600)
	signed, err := exec.Command(filepath.Join(binDir, "blendctl"), "lesson", "sign", file, "--key", key).Output()
	if err != nil {
		t.Fatal(err)
	}
	code, out := lessonCall(t, "POST", "http://"+c.httpAddr+"/lesson", c.adminToken, string(signed))
	steps, _ := out["result"].(map[string]any)["steps"].([]any)
	if code != 200 || len(steps) != 2 || steps[1].(map[string]any)["status"] != "SUCCEEDED" || len(steps[1].(map[string]any)["steps"].([]any)) != 3 {
		t.Fatalf("the signed lesson with a custom command: %d %v", code, out)
	}
	// Signed without a time, it could be run again by anyone who saw it,
	// forever: refused where signatures are required.
	timeless, err := exec.Command(filepath.Join(binDir, "blendctl"), "lesson", "sign", file, "--key", key, "--stamp=false").Output()
	if err != nil {
		t.Fatal(err)
	}
	if code, out := lessonCall(t, "POST", "http://"+c.httpAddr+"/lesson", c.adminToken, string(timeless)); code != 401 || out["error_code"] != "LESSON_STALE" {
		t.Fatalf("a signed lesson without issued_at where signatures are required: %d %v", code, out)
	}
	// /run_operator carries no signature.
	if code, out := lessonCall(t, "POST", "http://"+c.httpAddr+"/run_operator", c.adminToken, `{"operator":"mesh.primitive_cube_add","params":{}}`); code != 401 || out["error_code"] != "SIGNATURE_REQUIRED" {
		t.Fatalf("/run_operator where signatures are required: %d %v", code, out)
	}
}

// TestLessonsEndedAndAudit: a lesson sent again after its plan was
// cancelled (before it ran: no failure stored) or rejected answers with a
// code and the status of that end, never an empty 500; an admin reads
// another principal's lesson in /audit by naming its owner.
func TestLessonsEndedAndAudit(t *testing.T) {
	c := startClusterOpts(t, clusterOpts{policy: defaultPolicy})
	base := "http://" + c.httpAddr
	admin, alice := c.adminToken, c.createToken(t, "alice", "plans")

	// Cancelled while it waited for approval, then sent again.
	del := `{"lesson":[{"command":"DELETE_OBJECT","params":{"name":"L1"}}],"metadata":{"id":"les-del"}}`
	if code, out := lessonCall(t, "POST", base+"/lesson", alice, del); code != 202 {
		t.Fatalf("a destructive lesson: %d %v", code, out)
	}
	if _, err := c.clientAs(t, alice).CancelPlan(ctxT(t, 10*time.Second), &cpv1.CancelPlanRequest{RequestId: "les-del"}); err != nil {
		t.Fatal(err)
	}
	code, out := lessonCall(t, "POST", base+"/lesson", alice, del)
	steps, _ := out["result"].(map[string]any)["steps"].([]any)
	if code != 409 || out["error_code"] != "CANCELLED" || out["message"] == "" || out["recoverable"] != true || out["retry_hint"] == "" ||
		len(steps) != 1 || steps[0].(map[string]any)["status"] != "NOT_RUN" {
		t.Errorf("the cancelled lesson sent again: %d %v", code, out)
	}

	// Rejected by an approver, then sent again.
	rej := `{"lesson":[{"command":"DELETE_OBJECT","params":{"name":"L2"}}],"metadata":{"id":"les-rej"}}`
	_, out = lessonCall(t, "POST", base+"/lesson", alice, rej)
	if _, err := c.client.ResolveApproval(ctxT(t, 10*time.Second), &cpv1.ResolveApprovalRequest{ApprovalId: fmt.Sprint(out["approval_id"]), Decision: cpv1.Decision_DECISION_REJECT}); err != nil {
		t.Fatal(err)
	}
	if code, out := lessonCall(t, "POST", base+"/lesson", alice, rej); code != 422 || out["error_code"] != "APPROVAL_REJECTED" || out["message"] == "" {
		t.Errorf("the rejected lesson sent again: %d %v", code, out)
	}

	// alice's lesson in the audit: lesson ids are per principal, so the
	// admin names her; without owner it reads its own (none).
	if code, out := lessonCall(t, "POST", base+"/lesson", alice, `{"lesson":[{"command":"ADD_CUBE","params":{"name":"AliceCube"}}],"metadata":{"id":"les-add"}}`); code != 200 {
		t.Fatalf("alice's lesson: %d %v", code, out)
	}
	code, out = lessonCall(t, "GET", base+"/audit?lesson_id=les-add&owner=alice", admin, "")
	records, _ := out["records"].([]any)
	if code != 200 || len(records) == 0 || out["owner"] != "alice" {
		t.Fatalf("GET /audit of alice's lesson as admin: %d %v", code, out)
	}
	for _, r := range records {
		if r := r.(map[string]any); r["principal"] != "alice" || r["tool_name"] != "object.create" {
			t.Errorf("a record of alice's lesson: %v", r)
		}
	}
	if code, out := lessonCall(t, "GET", base+"/audit?lesson_id=les-del&owner=alice", admin, ""); code != 200 || !strings.Contains(fmt.Sprint(out["records"]), "approval.cancelled") {
		t.Errorf("GET /audit of alice's cancelled lesson: %d %v", code, out)
	}
	if code, out := lessonCall(t, "GET", base+"/audit?lesson_id=les-add", admin, ""); code != 200 || out["records"] != nil {
		t.Errorf("GET /audit without owner reads the admin's own lesson (none): %d %v", code, out)
	}
	if code, out := lessonCall(t, "GET", base+"/audit?lesson_id=les-add&owner=Alice!", admin, ""); code != 400 || out["error_code"] != "SCHEMA_INVALID" {
		t.Errorf("GET /audit with a malformed owner: %d %v", code, out)
	}
	if code, out := lessonCall(t, "GET", base+"/audit?lesson_id=les-add&owner=alice", alice, ""); code != 403 {
		t.Errorf("GET /audit as a non-admin naming an owner: %d %v", code, out)
	}

	// Without the plans scope, every route but /audit is refused, a lesson
	// that never reaches Blender too.
	rev := c.createToken(t, "rev", "approve")
	for _, body := range []string{`{"lesson":[{"command":"SPEAK","params":{"text":"hi"}}],"metadata":{"id":"rev-1"}}`,
		`{"lesson":[{"command":"ADD_CUBE","params":{"name":"RevCube"}}],"metadata":{"id":"rev-2"}}`} {
		if code, out := lessonCall(t, "POST", base+"/lesson", rev, body); code != 403 || out["error_code"] != "PERMISSION_DENIED" {
			t.Errorf("a lesson without the plans scope: %d %v", code, out)
		}
	}

	// alice's token revoked while her lesson waits for approval: her
	// session closes and the audit names the admin who cancelled it (it
	// named alice).
	if code, out := lessonCall(t, "POST", base+"/lesson", alice, `{"lesson":[{"command":"DELETE_OBJECT","params":{"name":"L3"}}],"metadata":{"id":"les-rev"}}`); code != 202 {
		t.Fatalf("a destructive lesson: %d %v", code, out)
	}
	if _, err := c.client.RevokeToken(ctxT(t, 10*time.Second), &cpv1.RevokeTokenRequest{Name: "alice"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the revoked principal's waiting plan to end", func() bool {
		p, err := c.client.GetPlan(ctxT(t, 10*time.Second), &cpv1.GetPlanRequest{RequestId: "les-rev", Owner: "alice"})
		return err == nil && p.GetPlan().GetState() == cpv1.Plan_STATE_CANCELLED
	})
	trail, err := c.client.ListAuditRecords(ctxT(t, 10*time.Second), &cpv1.ListAuditRecordsRequest{RequestId: "les-rev", Owner: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	for _, r := range trail.GetAuditRecords() {
		if r.GetEvent() != "" {
			events = append(events, r.GetEvent()+" by "+r.GetPrincipal())
		}
	}
	if fmt.Sprint(events) != "[approval.cancelled by admin]" {
		t.Errorf("the audit of a plan cancelled by its principal's revocation: %v", events)
	}
}
