package lesson

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/planjson"
)

// Caller is who sends a request, as the control plane's authentication
// found it.
type Caller struct {
	Name  string
	Admin bool
	// Plans: the caller may run plans (the plans scope), which every route
	// but /audit needs, whether or not its lesson reaches Blender.
	Plans bool
}

// Options configure the lesson API.
type Options struct {
	// Authenticate resolves a bearer token (nil: authentication is off,
	// every caller is an anonymous admin).
	Authenticate func(ctx context.Context, token string) (Caller, error)
	// PublicKeys verify signed lessons; RequireSigned refuses unsigned ones,
	// signed ones without metadata.issued_at, and /run_operator.
	PublicKeys    []ed25519.PublicKey
	RequireSigned bool
	// CustomCommands lets X_CUSTOM.<name> run the registry's macro.<name>.
	CustomCommands bool
	// MaxAge is how far metadata.issued_at may lie from now, either way
	// (0: 10 minutes).
	MaxAge time.Duration
	Logger *slog.Logger
}

// Versions are the major versions of the API this server speaks
// (X-MCP-Version).
var Versions = []string{"1"}

// lessonClient is the client name of the lesson sessions, by which a
// principal's default one is found again.
const lessonClient = "blendplane-lessons"

// Server serves the lesson API, calling the control plane over cc with the
// caller's token.
type Server struct {
	cc   grpc.ClientConnInterface
	cp   cpv1.ControlPlaneServiceClient
	opts Options
	log  *slog.Logger

	mu       sync.Mutex
	sessions map[string]string // principal → default lesson session
}

// NewServer returns the lesson API.
func NewServer(cc grpc.ClientConnInterface, opts Options) *Server {
	if opts.MaxAge <= 0 {
		opts.MaxAge = 10 * time.Minute
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Server{cc: cc, cp: cpv1.NewControlPlaneServiceClient(cc), opts: opts, log: log.With("component", "lesson"),
		sessions: map[string]string{}}
}

// Register adds the routes to mux.
func (s *Server) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok"})
	})
	mux.Handle("POST /lesson", s.handle(plans(s.lesson)))
	mux.Handle("POST /run_operator", s.handle(plans(s.runOperator)))
	mux.Handle("POST /scene_summary", s.handle(plans(s.sceneSummary)))
	mux.Handle("GET /audit", s.handle(s.audit))
}

type call struct {
	ctx    context.Context // carries the caller's token to the API
	caller Caller
	r      *http.Request
	body   []byte
}

// handle checks the version and the token, reads the body, and writes the
// handler's answer or its error as JSON with the failure contract.
func (s *Server) handle(h func(c *call) (int, any, *Error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.Header.Get("X-MCP-Version"); v != "" {
			if major, _, _ := strings.Cut(v, "."); !slices.Contains(Versions, major) {
				writeError(w, &Error{Status: http.StatusBadRequest, Code: "VERSION_UNSUPPORTED",
					Message: fmt.Sprintf("X-MCP-Version %q is not supported", v), Recoverable: true,
					RetryHint: "send X-MCP-Version 1 (or none)", Extra: map[string]any{"supported": Versions}})
				return
			}
		}
		c := &call{ctx: r.Context(), r: r, caller: Caller{Name: "anonymous", Admin: true, Plans: true}}
		token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if token = strings.TrimSpace(token); s.opts.Authenticate != nil {
			who, err := s.opts.Authenticate(r.Context(), token)
			if token == "" || err != nil {
				w.Header().Set("WWW-Authenticate", "Bearer")
				writeError(w, &Error{Status: http.StatusUnauthorized, Code: "UNAUTHENTICATED",
					Message: "a valid bearer token is required (Authorization: Bearer <token>)", RetryHint: "send a token with the plans scope"})
				return
			}
			c.caller = who
			c.ctx = metadata.AppendToOutgoingContext(r.Context(), "authorization", "Bearer "+token)
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
		if err != nil {
			writeError(w, badRequest("reading the body: "+err.Error()))
			return
		}
		c.body = body
		code, out, e := h(c)
		if e != nil {
			if e.Status >= 500 {
				s.log.Warn("lesson request failed", "path", r.URL.Path, "code", e.Code, "message", e.Message)
			}
			writeError(w, e)
			return
		}
		writeJSON(w, code, out)
	})
}

// plans refuses a caller without the plans scope before h runs: a lesson
// that never reaches Blender (SPEAK, WAIT) answers without a call that
// would check it.
func plans(h func(c *call) (int, any, *Error)) func(c *call) (int, any, *Error) {
	return func(c *call) (int, any, *Error) {
		if !c.caller.Plans {
			return 0, nil, &Error{Status: http.StatusForbidden, Code: "PERMISSION_DENIED",
				Message: fmt.Sprintf("%q lacks the plans scope this route needs", c.caller.Name), RetryHint: "send a token with the plans scope"}
		}
		return h(c)
	}
}

// lesson runs a lesson pack as one plan of the caller's lesson session.
func (s *Server) lesson(c *call) (int, any, *Error) {
	pack, md, perr := ParsePack(c.body)
	if perr != nil {
		return 0, nil, perr
	}
	if err := s.checkSignature(pack, md); err != nil {
		return 0, nil, err
	}
	actions, verr := Plan(pack.Lesson, s.opts.CustomCommands)
	if verr != nil {
		return 0, nil, verr
	}
	return s.run(c, md.ID, actions, func(res []any, _ []*cpv1.Receipt) any {
		return map[string]any{"status": "accepted", "id": md.ID, "result": map[string]any{"steps": res}}
	})
}

// checkSignature verifies a signed pack (401 when it does not verify),
// refuses an unsigned one when signatures are required, and a stale
// issued_at.
func (s *Server) checkSignature(p *Pack, md *Metadata) *Error {
	unauthorized := func(code, msg string) *Error {
		return &Error{Status: http.StatusUnauthorized, Code: code, Message: msg,
			RetryHint: "sign the lesson (blendctl lesson sign) with a key the server trusts (--lesson-public-key)"}
	}
	switch {
	case p.Signature != nil && *p.Signature != "":
		if err := Verify(p, s.opts.PublicKeys); err != nil {
			return unauthorized("SIGNATURE_INVALID", err.Error())
		}
	case s.opts.RequireSigned:
		return unauthorized("SIGNATURE_REQUIRED", "this server runs only signed lessons")
	}
	if s.opts.RequireSigned && md.IssuedAt == nil {
		// A signed pack without a time could be run again by anyone who
		// saw it, forever.
		return unauthorized("LESSON_STALE", "this server runs only signed lessons with metadata.issued_at (blendctl lesson sign sets it)")
	}
	if md.IssuedAt != nil {
		at := time.Unix(int64(*md.IssuedAt), 0)
		if d := time.Since(at); math.Abs(float64(d)) > float64(s.opts.MaxAge) {
			return unauthorized("LESSON_STALE", fmt.Sprintf("metadata.issued_at is %s from now; at most %s either way", d.Round(time.Second), s.opts.MaxAge))
		}
	}
	return nil
}

// runOperator is one whitelisted operator as a one-step plan. It carries
// no signature: a server that runs only signed lessons refuses it.
func (s *Server) runOperator(c *call) (int, any, *Error) {
	if s.opts.RequireSigned {
		return 0, nil, &Error{Status: http.StatusUnauthorized, Code: "SIGNATURE_REQUIRED",
			Message:   "this server runs only signed lessons, and /run_operator carries no signature",
			RetryHint: "send a signed lesson with a RUN_OPERATOR step to /lesson"}
	}
	var req struct {
		Operator string          `json:"operator"`
		Params   json.RawMessage `json:"params"`
	}
	if err := planjson.DecodeStrict(c.body, &req); err != nil {
		return 0, nil, badRequest("run_operator: " + err.Error())
	}
	args, e := operatorArgs(-1, req.Operator, req.Params)
	if e != nil {
		return 0, nil, e
	}
	id := "op-" + randomID()
	return s.run(c, id, []Action{{Command: "RUN_OPERATOR", Tool: "object.create", Args: args}}, func(_ []any, rs []*cpv1.Receipt) any {
		name, _ := rs[0].GetResult().AsMap()["name"].(string)
		return map[string]any{"status": "ok", "result": map[string]any{"object_name": name}}
	})
}

// sceneSummary describes the scene at a detail level: minimal (names and
// types, the active object), standard (and the object count) or full (what
// scene.get_summary returns).
func (s *Server) sceneSummary(c *call) (int, any, *Error) {
	var req struct {
		DetailLevel string `json:"detail_level"`
	}
	if len(c.body) > 0 {
		if err := planjson.DecodeStrict(c.body, &req); err != nil {
			return 0, nil, badRequest("scene_summary: " + err.Error())
		}
	}
	if req.DetailLevel == "" {
		req.DetailLevel = "minimal"
	}
	if !slices.Contains([]string{"minimal", "standard", "full"}, req.DetailLevel) {
		e := badRequest(fmt.Sprintf("detail_level %q: minimal, standard or full", req.DetailLevel)) // the schema's enum
		e.RetryHint = `send {"detail_level": "minimal"}, "standard" or "full"`
		return 0, nil, e
	}
	id := "summary-" + randomID()
	return s.run(c, id, []Action{{Command: "SCENE_SUMMARY", Tool: "scene.get_summary", Args: map[string]any{}}}, func(_ []any, rs []*cpv1.Receipt) any {
		sum := rs[0].GetResult().AsMap()
		switch req.DetailLevel {
		case "full":
			return sum
		case "standard":
			return map[string]any{"objects": sum["objects"], "active": sum["active_object"], "object_count": sum["object_count"]}
		}
		return map[string]any{"objects": sum["objects"], "active": sum["active_object"]}
	})
}

// audit lists a lesson's audit records (admins). Lesson ids are per
// principal, so owner names whose lesson it is; without it, the caller's.
func (s *Server) audit(c *call) (int, any, *Error) {
	if !c.caller.Admin {
		return 0, nil, &Error{Status: http.StatusForbidden, Code: "PERMISSION_DENIED", Message: "the audit endpoint is for admins"}
	}
	id, owner := c.r.URL.Query().Get("lesson_id"), c.r.URL.Query().Get("owner")
	if !idPattern.MatchString(id) {
		return 0, nil, badRequest("lesson_id: required, ^[a-zA-Z0-9_.:-]{1,128}$")
	}
	if owner != "" && !ownerPattern.MatchString(owner) {
		return 0, nil, badRequest("owner: a principal's name, ^[a-z0-9][a-z0-9_.-]{0,62}$")
	}
	resp, err := s.cp.ListAuditRecords(c.ctx, &cpv1.ListAuditRecordsRequest{RequestId: id, Owner: owner, PageSize: 1000})
	if err != nil {
		return 0, nil, fromRPC(err)
	}
	var records []any
	for _, r := range resp.GetAuditRecords() {
		records = append(records, map[string]any{"sequence": r.GetSequence(), "time": r.GetTimestamp().AsTime(),
			"operation_id": r.GetOperationId(), "tool_name": r.GetToolName(), "status": r.GetStatus().String(),
			"principal": r.GetPrincipal(), "policy_decision": r.GetPolicyDecision(), "approval_id": r.GetApprovalId(),
			"input_hash": r.GetInputHash(), "scene_hash_after": r.GetSceneHashAfter(), "error_code": r.GetErrorCode(),
			"event": r.GetEvent()})
	}
	out := map[string]any{"lesson_id": id, "records": records}
	if owner != "" {
		out["owner"] = owner
	}
	return http.StatusOK, out, nil
}

// run submits the Blender steps of actions as one plan (request id id) in
// the caller's lesson session and waits for it: 202 with the approval id
// when it waits for one (it runs once approved), the answer made by ok when
// it succeeded, the failure contract when it did not (planError).
func (s *Server) run(c *call, id string, actions []Action, ok func(steps []any, receipts []*cpv1.Receipt) any) (int, any, *Error) {
	if h := c.r.Header.Get("X-Blendplane-Session"); h != "" && !idPattern.MatchString(h) {
		// A malformed request, like a malformed body: 400 (the API would
		// refuse it with 422 as a plan's SCHEMA_INVALID).
		return 0, nil, &Error{Status: http.StatusBadRequest, Code: "SCHEMA_INVALID", Recoverable: true,
			Message:   "X-Blendplane-Session: a session id, ^[a-zA-Z0-9_.:-]{1,128}$",
			RetryHint: "name one of your sessions, or send no X-Blendplane-Session for your default lesson session"}
	}
	var ops []*cpv1.Operation
	prev := ""
	for _, a := range actions {
		if a.Tool == "" {
			continue
		}
		args, err := structpb.NewStruct(a.Args)
		if err != nil {
			return 0, nil, &Error{Status: http.StatusInternalServerError, Code: "INTERNAL", Message: err.Error()}
		}
		op := &cpv1.Operation{OperationId: stepID(a.Index, a.Command), ToolName: a.Tool, Args: args, SafetyLevel: safety(a.Tool)}
		if prev != "" {
			op.DependsOn = []string{prev}
		}
		prev = op.GetOperationId()
		ops = append(ops, op)
	}
	var receipts []*cpv1.Receipt
	if len(ops) > 0 {
		sid, e := s.session(c)
		if e != nil {
			return 0, nil, e
		}
		resp, err := s.cp.SubmitPlan(c.ctx, &cpv1.SubmitPlanRequest{SessionId: sid, RequestId: id, Operations: ops})
		if err != nil {
			return 0, nil, fromRPC(err)
		}
		if p := resp.GetPlan(); p.GetState() == cpv1.Plan_STATE_AWAITING_APPROVAL {
			return http.StatusAccepted, map[string]any{"status": "awaiting_approval", "id": id, "approval_id": p.GetApprovalId(),
				"result": map[string]any{"steps": steps(actions, nil)}}, nil
		}
		if receipts, err = s.receipts(c.ctx, id); err != nil {
			return 0, nil, fromRPC(err)
		}
		plan, err := s.cp.GetPlan(c.ctx, &cpv1.GetPlanRequest{RequestId: id})
		if err != nil {
			return 0, nil, fromRPC(err)
		}
		if p := plan.GetPlan(); p.GetState() != cpv1.Plan_STATE_SUCCEEDED {
			return 0, nil, planError(id, p, steps(actions, receipts))
		}
	}
	return http.StatusOK, ok(steps(actions, receipts), receipts), nil
}

// planError is the answer for a lesson whose plan ended without
// succeeding, with the failure contract of the plan: 409 when it was
// cancelled (also before it ran, which stores no failure: the id stays
// taken), 422 when an approver rejected it (refused, like a policy denial),
// 500 when a step failed. Steps without a receipt never ran.
func planError(id string, p *cpv1.Plan, res []any) *Error {
	f := p.GetFailure()
	if f.GetErrorCode() == "" {
		f = &cpv1.Failure{ErrorCode: "INTERNAL", Message: "the lesson's plan is " + strings.TrimPrefix(p.GetState().String(), "STATE_") + ", without a failure"}
		if p.GetState() == cpv1.Plan_STATE_CANCELLED {
			f = &cpv1.Failure{ErrorCode: "CANCELLED", Recoverable: true, Message: "the lesson was cancelled (CancelPlan) before it ran"}
		}
	}
	e := &Error{Status: http.StatusInternalServerError, Code: f.GetErrorCode(), Message: f.GetMessage(),
		Recoverable: f.GetRecoverable(), RetryHint: f.GetRetryHint(), Extra: map[string]any{"id": id, "result": map[string]any{"steps": res}}}
	switch {
	case p.GetState() == cpv1.Plan_STATE_CANCELLED:
		e.Status, e.Code = http.StatusConflict, "CANCELLED"
		e.RetryHint = "send the lesson again under a new metadata.id: this one names the cancelled lesson"
	case f.GetErrorCode() == "APPROVAL_REJECTED":
		e.Status = http.StatusUnprocessableEntity
		e.RetryHint = "change the lesson and send it under a new metadata.id: this one names the rejected lesson"
	}
	for _, st := range f.GetMinimalRepairPlan() {
		e.Repair = append(e.Repair, map[string]any{"operation_id": st.GetOperationId(),
			"action": strings.ToLower(strings.TrimPrefix(st.GetAction().String(), "ACTION_"))})
	}
	for _, st := range res {
		if st := st.(map[string]any); st["status"] == "PENDING" {
			st["status"] = "NOT_RUN"
		}
	}
	return e
}

// steps is each step's outcome: its receipt's essentials, or what the front
// end must do.
func steps(actions []Action, receipts []*cpv1.Receipt) []any {
	byOp := map[string]*cpv1.Receipt{}
	for _, r := range receipts {
		byOp[r.GetOperationId()] = r
	}
	out := make([]any, 0, len(actions))
	for _, a := range actions {
		st := map[string]any{"index": a.Index, "command": a.Command}
		if a.Tool == "" {
			st["frontend"] = a.Frontend
		} else if strings.HasPrefix(a.Tool, "macro.") {
			// A macro runs as its steps: <operation id>:<step id>.
			st["tool"], st["status"] = a.Tool, "PENDING"
			var parts []any
			for _, r := range receipts {
				if strings.HasPrefix(r.GetOperationId(), stepID(a.Index, a.Command)+":") {
					status := strings.TrimPrefix(r.GetStatus().String(), "STATUS_")
					parts = append(parts, map[string]any{"operation_id": r.GetOperationId(), "tool": r.GetToolName(), "status": status})
					if st["status"] == "PENDING" || status != "SUCCEEDED" && st["status"] == "SUCCEEDED" {
						st["status"] = status
					}
					st["scene_hash_after"] = r.GetSceneHashAfter()
				}
			}
			st["steps"] = parts
		} else if r, ok := byOp[stepID(a.Index, a.Command)]; ok {
			st["tool"] = a.Tool
			st["status"] = strings.TrimPrefix(r.GetStatus().String(), "STATUS_")
			st["result"] = r.GetResult().AsMap()
			st["scene_hash_after"] = r.GetSceneHashAfter()
			if r.GetError() != nil {
				st["error_code"] = r.GetError().GetErrorCode()
			}
		} else {
			st["tool"], st["status"] = a.Tool, "PENDING"
		}
		out = append(out, st)
	}
	return out
}

func (s *Server) receipts(ctx context.Context, id string) ([]*cpv1.Receipt, error) {
	stream, err := s.cp.StreamReceipts(ctx, &cpv1.StreamReceiptsRequest{RequestId: id})
	if err != nil {
		return nil, err
	}
	var out []*cpv1.Receipt
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if r := ev.GetReceipt(); r != nil {
			out = append(out, r)
		}
	}
}

// session is the lesson session of a request: the one its
// X-Blendplane-Session header names, else the caller's default one, found
// among its open sessions or negotiated on first use.
func (s *Server) session(c *call) (string, *Error) {
	if id := c.r.Header.Get("X-Blendplane-Session"); id != "" {
		return id, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if id, ok := s.sessions[c.caller.Name]; ok {
		if resp, err := s.cp.GetSession(c.ctx, &cpv1.GetSessionRequest{SessionId: id}); err == nil && resp.GetSession().GetState() != cpv1.Session_STATE_CLOSED {
			return id, nil
		}
	}
	list, err := s.cp.ListSessions(c.ctx, &cpv1.ListSessionsRequest{PageSize: 1000})
	if err != nil {
		return "", fromRPC(err)
	}
	for _, sess := range list.GetSessions() {
		if sess.GetContract().GetHostProfile().GetClientName() == lessonClient && sess.GetState() != cpv1.Session_STATE_CLOSED {
			s.sessions[c.caller.Name] = sess.GetSessionId()
			return sess.GetSessionId(), nil
		}
	}
	resp, err := s.cp.Negotiate(c.ctx, &cpv1.NegotiateRequest{ContractVersion: "1.0.0",
		HostProfile: &cpv1.HostProfile{ClientName: lessonClient, ClientVersion: Versions[len(Versions)-1]}})
	if err != nil {
		return "", fromRPC(err)
	}
	id := resp.GetContract().GetSessionId()
	s.sessions[c.caller.Name] = id
	s.log.Info("lesson session negotiated", "session_id", id, "principal", c.caller.Name)
	return id, nil
}

// safety is the level each tool a lesson uses declares.
func safety(tool string) cpv1.SafetyLevel {
	switch tool {
	case "object.delete":
		return cpv1.SafetyLevel_SAFETY_LEVEL_DESTRUCTIVE
	case "scene.get_summary":
		return cpv1.SafetyLevel_SAFETY_LEVEL_READ_ONLY
	}
	if strings.HasPrefix(tool, "macro.") {
		return cpv1.SafetyLevel_SAFETY_LEVEL_DESTRUCTIVE // the most any of its steps may need
	}
	return cpv1.SafetyLevel_SAFETY_LEVEL_SAFE_WRITE
}

// fromRPC maps an API error onto the lesson API's statuses, with the
// failure contract from its details.
func fromRPC(err error) *Error {
	st := status.Convert(err)
	e := &Error{Status: http.StatusInternalServerError, Code: st.Code().String(), Message: st.Message()}
	switch st.Code() {
	case codes.Unauthenticated:
		e.Status = http.StatusUnauthorized
	case codes.PermissionDenied:
		e.Status = http.StatusForbidden
	case codes.NotFound:
		e.Status = http.StatusNotFound
	case codes.InvalidArgument, codes.FailedPrecondition, codes.ResourceExhausted:
		e.Status, e.Recoverable = http.StatusUnprocessableEntity, true
	}
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			e.Code = d.GetReason()
		case *cpv1.RepairPlan:
			for _, step := range d.GetSteps() {
				e.Repair = append(e.Repair, map[string]any{"operation_id": step.GetOperationId(),
					"action": strings.ToLower(strings.TrimPrefix(step.GetAction().String(), "ACTION_"))})
			}
		}
	}
	if e.Recoverable {
		e.RetryHint = st.Message()
	}
	return e
}

func writeError(w http.ResponseWriter, e *Error) {
	body := map[string]any{"status": "error", "error_code": e.Code, "message": e.Message, "recoverable": e.Recoverable,
		"retry_hint": e.RetryHint, "minimal_repair_plan": e.Repair}
	if e.Repair == nil {
		body["minimal_repair_plan"] = []any{}
	}
	for k, v := range e.Extra {
		body[k] = v
	}
	writeJSON(w, e.Status, body)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func randomID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}
