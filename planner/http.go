package planner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	plannerv1 "github.com/blendplane/blendplane/gen/blendplane/planner/v1"
	"github.com/blendplane/blendplane/planjson"
)

// HTTP is seed 002's routes, a client of PlannerService (over the control
// plane's in-process connection, with the request's bearer token), in the
// seed's camelCase JSON:
//
//	POST /api/agent/run                  {"prompt","threadId"?} → the run
//	POST /api/agent/run/stream           the same as application/x-ndjson events
//	GET  /api/agent/approvals/pending    {"approvals":[…]}
//	POST /api/agent/approvals/resolve    {"approvalId","decision"} → the run
//	GET  /api/agent/runs/{runId}         one run
//	GET  /api/agent/threads/{threadId}   one thread with its messages
//	GET  /api/agent/audit?runId=         the audit of the caller's actions
type HTTP struct {
	api plannerv1.PlannerServiceClient
	cp  cpv1.ControlPlaneServiceClient // its GetCaller: the token, before a body is read
}

// NewHTTP calls PlannerService (and the control plane's GetCaller) over cc.
func NewHTTP(cc grpc.ClientConnInterface) *HTTP {
	return &HTTP{api: plannerv1.NewPlannerServiceClient(cc), cp: cpv1.NewControlPlaneServiceClient(cc)}
}

// Register adds the routes to mux.
func (h *HTTP) Register(mux *http.ServeMux) {
	mux.HandleFunc("POST /api/agent/run", h.run)
	mux.HandleFunc("POST /api/agent/run/stream", h.stream)
	mux.HandleFunc("GET /api/agent/approvals/pending", h.pending)
	mux.HandleFunc("POST /api/agent/approvals/resolve", h.resolve)
	mux.HandleFunc("GET /api/agent/runs/{runId}", h.getRun)
	mux.HandleFunc("GET /api/agent/threads/{threadId}", h.getThread)
	mux.HandleFunc("GET /api/agent/audit", h.audit)
}

// audit lists the audit of the caller's actions (?runId= for one run's).
func (h *HTTP) audit(w http.ResponseWriter, req *http.Request) {
	resp, err := h.api.ListActionAudit(outgoing(req), &plannerv1.ListActionAuditRequest{RunId: req.URL.Query().Get("runId")})
	if err != nil {
		writeError(w, err)
		return
	}
	list := []any{}
	for _, e := range resp.GetEntries() {
		list = append(list, map[string]any{"time": e.GetTime().AsTime(), "runId": e.GetRunId(), "actionId": e.GetActionId(),
			"principal": e.GetPrincipal(), "modelName": e.GetModelName(), "toolName": e.GetToolName(), "inputHash": e.GetInputHash(),
			"policyDecision": e.GetPolicyDecision(), "approvalId": e.GetApprovalId(), "requestId": e.GetRequestId(),
			"executionStatus": e.GetExecutionStatus(), "errorCode": e.GetErrorCode(), "message": e.GetMessage()})
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "audit": list})
}

const maxBody = 64 << 10

type runBody struct {
	Prompt   string `json:"prompt"`
	ThreadID string `json:"threadId,omitempty"`
}

func (h *HTTP) run(w http.ResponseWriter, req *http.Request) {
	var in runBody
	if !h.decode(w, req, &in) {
		return
	}
	resp, err := h.api.Run(outgoing(req), &plannerv1.RunRequest{Prompt: in.Prompt, ThreadId: in.ThreadID})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, runJSON(resp.GetRun()))
}

// stream writes the run's events as NDJSON: a status first, deltas, then
// the result, or the error of a failed run.
func (h *HTTP) stream(w http.ResponseWriter, req *http.Request) {
	var in runBody
	if !h.decode(w, req, &in) {
		return
	}
	events, err := h.api.StreamRun(outgoing(req), &plannerv1.StreamRunRequest{Prompt: in.Prompt, ThreadId: in.ThreadID})
	if err == nil {
		var first *plannerv1.StreamRunResponse
		if first, err = events.Recv(); err == nil {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.Header().Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusOK)
			h.streamEvents(w, first, events)
			return
		}
	}
	writeError(w, err) // refused before the run began: a plain HTTP error
}

func (h *HTTP) streamEvents(w http.ResponseWriter, ev *plannerv1.StreamRunResponse, events grpc.ServerStreamingClient[plannerv1.StreamRunResponse]) {
	enc := json.NewEncoder(w)
	flusher, _ := w.(http.Flusher)
	var failure *plannerv1.RunError
	for {
		var line map[string]any
		switch e := ev.GetEvent().(type) {
		case *plannerv1.StreamRunResponse_Status:
			line = map[string]any{"type": "status", "status": stateName(e.Status.GetState()), "runId": e.Status.GetRunId(), "threadId": e.Status.GetThreadId()}
		case *plannerv1.StreamRunResponse_Delta:
			line = map[string]any{"type": "delta", "delta": e.Delta}
		case *plannerv1.StreamRunResponse_Error:
			failure = e.Error // told with the run, next
		case *plannerv1.StreamRunResponse_Result:
			if failure != nil {
				line = map[string]any{"type": "error", "error": failure.GetMessage(), "errorType": ErrorTypes[failure.GetType()], "result": runJSON(e.Result)}
			} else {
				line = map[string]any{"type": "result", "result": runJSON(e.Result)}
			}
		}
		if line != nil {
			enc.Encode(line)
			if flusher != nil {
				flusher.Flush()
			}
		}
		var err error
		if ev, err = events.Recv(); err != nil {
			if !errors.Is(err, io.EOF) {
				enc.Encode(map[string]any{"type": "error", "error": status.Convert(err).Message(), "errorType": errorType(err)})
			}
			return
		}
	}
}

func (h *HTTP) pending(w http.ResponseWriter, req *http.Request) {
	resp, err := h.api.ListPendingApprovals(outgoing(req), &plannerv1.ListPendingApprovalsRequest{})
	if err != nil {
		writeError(w, err)
		return
	}
	list := []any{}
	for _, p := range resp.GetApprovals() {
		m := map[string]any{"approvalId": p.GetApprovalId(), "runId": p.GetRunId(), "threadId": p.GetThreadId(),
			"actionId": p.GetActionId(), "tool": p.GetTool(), "requestId": p.GetRequestId()}
		if ap := p.GetApproval(); ap != nil {
			var reasons []any
			for _, d := range ap.GetDecisions() {
				reasons = append(reasons, map[string]any{"operationId": d.GetOperationId(), "tool": d.GetToolName(), "target": d.GetTarget(), "reason": d.GetReason()})
			}
			m["reasons"] = reasons
			m["preview"] = previewJSON(ap.GetPreview())
		}
		list = append(list, m)
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "approvals": list})
}

// Decisions are seed 002's names of the decisions.
var Decisions = map[string]cpv1.Decision{
	"reject":                   cpv1.Decision_DECISION_REJECT,
	"approve_once":             cpv1.Decision_DECISION_APPROVE_ONCE,
	"approve_and_always_allow": cpv1.Decision_DECISION_APPROVE_AND_ALWAYS_ALLOW,
}

func (h *HTTP) resolve(w http.ResponseWriter, req *http.Request) {
	var in struct {
		ApprovalID string `json:"approvalId"`
		Decision   string `json:"decision"`
	}
	if !h.decode(w, req, &in) {
		return
	}
	d, ok := Decisions[in.Decision]
	if !ok {
		writeJSON(w, http.StatusBadRequest, map[string]any{"ok": false, "errorType": "ValidationError",
			"error": fmt.Sprintf("decision %q: one of reject, approve_once, approve_and_always_allow", in.Decision)})
		return
	}
	resp, err := h.api.ResolveApproval(outgoing(req), &plannerv1.ResolveApprovalRequest{ApprovalId: in.ApprovalID, Decision: d})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, runJSON(resp.GetRun()))
}

func (h *HTTP) getRun(w http.ResponseWriter, req *http.Request) {
	resp, err := h.api.GetRun(outgoing(req), &plannerv1.GetRunRequest{RunId: req.PathValue("runId")})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, runJSON(resp.GetRun()))
}

func (h *HTTP) getThread(w http.ResponseWriter, req *http.Request) {
	resp, err := h.api.GetThread(outgoing(req), &plannerv1.GetThreadRequest{ThreadId: req.PathValue("threadId")})
	if err != nil {
		writeError(w, err)
		return
	}
	t := resp.GetThread()
	msgs := []any{}
	for _, m := range t.GetMessages() {
		msgs = append(msgs, map[string]any{"role": strings.ToLower(strings.TrimPrefix(m.GetRole().String(), "ROLE_")), "text": m.GetText(),
			"runId": m.GetRunId(), "createTime": m.GetCreateTime().AsTime()})
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "threadId": t.GetThreadId(), "sessionId": t.GetSessionId(), "messages": msgs})
}

// runJSON is a run in seed 002's response shape, with the audit fields of
// its actions.
func runJSON(run *plannerv1.Run) map[string]any {
	actions := []any{}
	for _, a := range run.GetActions() {
		m := map[string]any{"actionId": a.GetActionId(), "tool": a.GetTool(), "status": stateName(a.GetState()),
			"requiresApproval": a.GetRequiresApproval(), "requestId": a.GetRequestId(), "inputHash": a.GetInputHash(),
			"policyDecision": a.GetPolicyDecision(), "executionStatus": a.GetExecutionStatus(), "turn": a.GetTurn()}
		if a.GetApprovalId() != "" {
			m["approvalId"] = a.GetApprovalId()
		}
		if a.GetErrorCode() != "" {
			m["errorCode"], m["error"] = a.GetErrorCode(), a.GetErrorMessage()
		}
		actions = append(actions, m)
	}
	out := map[string]any{"ok": true, "runId": run.GetRunId(), "threadId": run.GetThreadId(), "status": stateName(run.GetState()),
		"summary": run.GetSummary(), "actions": actions, "model": run.GetModel(), "turns": run.GetTurns(), "sessionId": run.GetSessionId()}
	if e := run.GetError(); e != nil {
		out["error"] = map[string]any{"type": ErrorTypes[e.GetType()], "message": e.GetMessage(), "errorCode": e.GetErrorCode()}
	}
	return out
}

func previewJSON(p *cpv1.Preview) map[string]any {
	changes := []any{}
	for _, ch := range p.GetChanges() {
		changes = append(changes, map[string]any{"kind": strings.ToLower(planjson.Short(ch.GetKind().String())), "collection": ch.GetCollection(), "name": ch.GetName()})
	}
	m := map[string]any{"state": strings.ToLower(planjson.Short(p.GetState().String())), "changes": changes}
	if f := p.GetFailure(); f != nil {
		m["failure"] = planjson.Failure(f)
	}
	return m
}

// stateName is a run's or an action's state as seed 002 spells it:
// STATE_AWAITING_CONFIRMATION → awaiting_confirmation.
func stateName(s interface{ String() string }) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "STATE_"))
}

// decode reads the request's body into v, once its caller is known: nothing
// reads a request of a caller without a valid token.
func (h *HTTP) decode(w http.ResponseWriter, req *http.Request, v any) bool {
	if _, err := h.cp.GetCaller(outgoing(req), &cpv1.GetCallerRequest{}); err != nil {
		writeError(w, err)
		return false
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, req.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"ok": false, "errorType": "ValidationError", "error": "the body must be one JSON object of the route's fields: " + err.Error()})
		return false
	}
	return true
}

// outgoing passes the request's bearer token on.
func outgoing(req *http.Request) context.Context {
	ctx := req.Context()
	if a := req.Header.Get("Authorization"); a != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", a)
	}
	return ctx
}

func writeError(w http.ResponseWriter, err error) {
	st := status.Convert(err)
	code := runtime.HTTPStatusFromCode(st.Code())
	if st.Code() == codes.Unauthenticated {
		w.Header().Set("WWW-Authenticate", `Bearer realm="blendplane"`)
	}
	writeJSON(w, code, map[string]any{"ok": false, "error": st.Message(), "errorType": errorType(err), "code": st.Code().String()})
}

// errorType is seed 002's class of an RPC error.
func errorType(err error) string {
	st := status.Convert(err)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == "planner.blendplane" {
			return info.GetReason()
		}
	}
	switch st.Code() {
	case codes.Unauthenticated, codes.PermissionDenied:
		return "AuthError"
	case codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition, codes.OutOfRange:
		if strings.Contains(planjson.Describe(err), "POLICY") {
			return "PolicyError"
		}
		return "ValidationError"
	}
	return "ToolExecutionError"
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}
