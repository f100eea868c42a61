package lesson

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// TestSessionHeaderMalformed: a malformed X-Blendplane-Session is a
// malformed request, 400 SCHEMA_INVALID like a malformed body, refused
// before any call to the API (the server has no connection here).
func TestSessionHeaderMalformed(t *testing.T) {
	mux := http.NewServeMux()
	NewServer(nil, Options{}).Register(mux)
	for _, path := range []string{"/lesson", "/run_operator", "/scene_summary"} {
		body := map[string]string{
			"/lesson":        `{"lesson":[{"command":"SPEAK","params":{"text":"x"}}],"metadata":{"id":"h1"}}`,
			"/run_operator":  `{"operator":"mesh.primitive_cube_add"}`,
			"/scene_summary": `{}`,
		}[path]
		req := httptest.NewRequest("POST", path, strings.NewReader(body))
		req.Header.Set("X-Blendplane-Session", "not a session/id")
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), `"error_code":"SCHEMA_INVALID"`) ||
			!strings.Contains(rec.Body.String(), "X-Blendplane-Session") {
			t.Errorf("POST %s with a malformed session header: %d %s", path, rec.Code, rec.Body)
		}
	}
}

// TestPlanError: a plan that ended without succeeding is answered with a
// code and the status its end calls for, never an empty 500.
func TestPlanError(t *testing.T) {
	for _, tc := range []struct {
		what   string
		plan   *cpv1.Plan
		status int
		code   string
	}{
		{"cancelled before it ran (no failure stored)", &cpv1.Plan{State: cpv1.Plan_STATE_CANCELLED}, http.StatusConflict, "CANCELLED"},
		{"cancelled while it ran", &cpv1.Plan{State: cpv1.Plan_STATE_CANCELLED, Failure: &cpv1.Failure{ErrorCode: "CANCELLED", Message: "cancelled by CancelPlan"}}, http.StatusConflict, "CANCELLED"},
		{"rejected by an approver", &cpv1.Plan{State: cpv1.Plan_STATE_FAILED, Failure: &cpv1.Failure{ErrorCode: "APPROVAL_REJECTED", Message: "ana rejected the plan"}}, http.StatusUnprocessableEntity, "APPROVAL_REJECTED"},
		{"a step failed", &cpv1.Plan{State: cpv1.Plan_STATE_FAILED, Failure: &cpv1.Failure{ErrorCode: "NOT_FOUND", Message: "no object"}}, http.StatusInternalServerError, "NOT_FOUND"},
		{"failed without a failure", &cpv1.Plan{State: cpv1.Plan_STATE_FAILED}, http.StatusInternalServerError, "INTERNAL"},
	} {
		steps := []any{map[string]any{"index": 0, "command": "DELETE_OBJECT", "tool": "object.delete", "status": "PENDING"}}
		e := planError("l1", tc.plan, steps)
		if e.Status != tc.status || e.Code != tc.code || e.Message == "" || e.Extra["id"] != "l1" {
			t.Errorf("%s: %v, want %d %s", tc.what, e, tc.status, tc.code)
		}
		if st := steps[0].(map[string]any)["status"]; st != "NOT_RUN" {
			t.Errorf("%s: a step without a receipt is %v", tc.what, st)
		}
	}
}
