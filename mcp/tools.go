package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/internal/receiptwire"
	"github.com/blendplane/blendplane/planjson"
)

// receiptSchema is the output schema of every tool: the receipt of the
// call (or, with isError, the failure contract).
var receiptSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "status": {"type": "string", "description": "SUCCEEDED, FAILED, SKIPPED_IDEMPOTENT, NOT_RUN, ROLLED_BACK; AWAITING_APPROVAL: the plan waits for a person (approval_id), plan.wait returns its receipts once decided"},
    "approval_id": {"type": "string"},
    "result": {"type": "object", "description": "the tool's output"},
    "scene_hash_before": {"type": "string"},
    "scene_hash_after": {"type": "string"},
    "blender_mutation_id": {"type": "string"},
    "mcp_call_id": {"type": "string"},
    "determinism_class": {"type": "string"},
    "duration_micros": {"type": "integer"},
    "sequence": {"type": "integer"},
    "request_id": {"type": "string"},
    "operation_id": {"type": "string"},
    "receipts": {"type": "array", "description": "plan.submit: every receipt, in order"},
    "error_code": {"type": "string"},
    "recoverable": {"type": "boolean"},
    "retry_hint": {"type": "string"},
    "minimal_repair_plan": {"type": "array"}
  }
}`)

// toolFor is the MCP tool of a registry tool: its name, its schema as the
// input schema, a description for a model and the registry's hints.
func toolFor(t *cpv1.ToolDefinition) *sdk.Tool {
	schema, _ := protojson.Marshal(t.GetInputSchema())
	destructive := t.GetSafetyLevel() == cpv1.SafetyLevel_SAFETY_LEVEL_DESTRUCTIVE
	desc := t.GetDescription()
	if t.GetSafetyMode() == "unsafe_ops" {
		desc += " Runs arbitrary code: needs approval."
	} else if destructive {
		desc += " Destructive: may wait for a person's approval."
	}
	return &sdk.Tool{
		Name:         t.GetName(),
		Title:        t.GetName(),
		Description:  desc,
		InputSchema:  json.RawMessage(schema),
		OutputSchema: receiptSchema,
		Annotations: &sdk.ToolAnnotations{
			ReadOnlyHint:    t.GetSafetyLevel() == cpv1.SafetyLevel_SAFETY_LEVEL_READ_ONLY,
			DestructiveHint: &destructive,
			IdempotentHint:  t.GetIdempotenceClass() == "idempotent",
			OpenWorldHint:   new(bool),
		},
	}
}

// macroTool is the MCP tool of a macro whose steps run at level (the
// highest of its tools').
func macroTool(m *cpv1.MacroDefinition, level cpv1.SafetyLevel) *sdk.Tool {
	schema, _ := protojson.Marshal(m.GetInputSchema())
	destructive := level == cpv1.SafetyLevel_SAFETY_LEVEL_DESTRUCTIVE
	return &sdk.Tool{
		Name:         m.GetName(),
		Description:  m.GetDescription() + " (a macro: expands into several operations, each with its receipt).",
		InputSchema:  json.RawMessage(schema),
		OutputSchema: receiptSchema,
		Annotations: &sdk.ToolAnnotations{
			ReadOnlyHint:    level == cpv1.SafetyLevel_SAFETY_LEVEL_READ_ONLY,
			DestructiveHint: &destructive,
			OpenWorldHint:   new(bool),
		},
	}
}

// macroSafety is the highest safety level of a macro's tools: what its
// steps are declared at (destructive for a tool the session does not know).
// The caller holds s.mu.
func (s *Session) macroSafety(m *cpv1.MacroDefinition) cpv1.SafetyLevel {
	level := cpv1.SafetyLevel_SAFETY_LEVEL_READ_ONLY
	for _, t := range m.GetTools() {
		level = max(level, s.levelOf(t))
	}
	return level
}

func planTool() *sdk.Tool {
	no := true
	return &sdk.Tool{
		Name:         "plan.submit",
		Description:  planjson.PlanDescription + " Progress per receipt.",
		InputSchema:  planjson.Schema,
		OutputSchema: receiptSchema,
		Annotations:  &sdk.ToolAnnotations{DestructiveHint: &no},
	}
}

// waitTool is plan.wait: the end of a plan that waited for approval.
func waitTool() *sdk.Tool {
	return &sdk.Tool{
		Name: "plan.wait",
		Description: "Wait for a plan of this session to end and return its receipts, or its failure contract: " +
			"the plan of a call that returned status AWAITING_APPROVAL, once a person decides it (a rejection fails it " +
			"with APPROVAL_REJECTED). Progress while it waits.",
		InputSchema: json.RawMessage(`{"type": "object", "required": ["request_id"], "additionalProperties": false,
  "properties": {"request_id": {"type": "string", "description": "the request_id the waiting call returned"}}}`),
		OutputSchema: receiptSchema,
		// Not read-only: it may ask the user to decide the approval.
		Annotations: &sdk.ToolAnnotations{IdempotentHint: true, DestructiveHint: new(bool), OpenWorldHint: new(bool)},
	}
}

// waitPlan is plan.wait.
func (s *Session) waitPlan(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	if req.Params.RequestState != "" {
		return s.resume(ctx, req), nil
	}
	var in struct {
		RequestID string `json:"request_id"`
	}
	if err := json.Unmarshal(req.Params.Arguments, &in); err != nil || !s.owns(in.RequestID) {
		return toolError(map[string]any{"error_code": "SCHEMA_INVALID", "recoverable": true,
			"message": "request_id does not name a plan of this MCP session", "retry_hint": "pass the request_id a call of this session returned"}), nil
	}
	resp, err := s.cp.GetPlan(ctx, &cpv1.GetPlanRequest{RequestId: in.RequestID})
	if err != nil {
		return refused(err), nil
	}
	return s.follow(ctx, req, in.RequestID, len(resp.GetPlan().GetSchedule()), nil, true), nil
}

// callTool runs one registry tool as a one-operation plan.
func (s *Session) callTool(t *cpv1.ToolDefinition) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		if req.Params.RequestState != "" {
			return s.resume(ctx, req), nil
		}
		args, err := planjson.Args(req.Params.Arguments)
		if err != nil {
			return invalid(err), nil
		}
		op := &cpv1.Operation{OperationId: "call", ToolName: t.GetName(), Args: args, SafetyLevel: t.GetSafetyLevel()}
		return s.run(ctx, req, []*cpv1.Operation{op}, false)
	}
}

func (s *Session) callMacro(m *cpv1.MacroDefinition, level cpv1.SafetyLevel) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		if req.Params.RequestState != "" {
			return s.resume(ctx, req), nil
		}
		args, err := planjson.Args(req.Params.Arguments)
		if err != nil {
			return invalid(err), nil
		}
		op := &cpv1.Operation{OperationId: "macro", ToolName: m.GetName(), Args: args, SafetyLevel: level}
		return s.run(ctx, req, []*cpv1.Operation{op}, false)
	}
}

// submitPlan is plan.submit.
func (s *Session) submitPlan(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	if req.Params.RequestState != "" {
		return s.resume(ctx, req), nil
	}
	ops, atomic, err := planjson.Plan(req.Params.Arguments, s.safetyOf)
	if err != nil {
		return invalid(err), nil
	}
	return s.run(ctx, req, ops, atomic)
}

// safetyOf is a tool's own level (the least an operation may declare);
// destructive for what the session does not know (macros), which asks for
// the most caution.
func (s *Session) safetyOf(tool string) cpv1.SafetyLevel {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.levelOf(tool)
}

// levelOf is safetyOf for a caller that holds s.mu.
func (s *Session) levelOf(tool string) cpv1.SafetyLevel {
	if t, ok := s.tools[tool]; ok {
		return t.GetSafetyLevel()
	}
	return cpv1.SafetyLevel_SAFETY_LEVEL_DESTRUCTIVE
}

// run submits ops as a plan of the session and follows it to its end.
func (s *Session) run(ctx context.Context, req *sdk.CallToolRequest, ops []*cpv1.Operation, atomic bool) (*sdk.CallToolResult, error) {
	// The MCP call's id: its session's and its number in the session.
	n := s.calls.Add(1)
	callID := planjson.Sanitize(fmt.Sprintf("mcp:%s:%d", s.sessionID, n))
	for _, op := range ops {
		op.McpCallId = callID
	}
	requestID := s.requestID(n)
	submitted, err := s.cp.SubmitPlan(ctx, &cpv1.SubmitPlanRequest{SessionId: s.sessionID, RequestId: requestID, Operations: ops, Atomic: atomic})
	if err != nil {
		return refused(err), nil
	}
	return s.follow(ctx, req, requestID, len(submitted.GetPlan().GetSchedule()), nil, false), nil
}

// requestID is the request id of the session's n-th plan.
func (s *Session) requestID(n uint64) string {
	return planjson.Sanitize(fmt.Sprintf("mcp-%s-%d", s.sessionID, n))
}

// follow streams a plan's receipts to its end: progress per receipt, an MCP
// cancel becomes CancelPlan, a wait for approval is reported as progress.
// When the approval's preview is ready and the client can be asked, it is
// asked: by an elicitation request, or on 2026-07-28 by returning an input
// request whose retry comes back with the user's answer (decided) to
// resume here. A client that cannot be asked gets a result that says the
// plan waits, with the approval id, at once; plan.wait (wait) then follows
// the plan to its end, and its cancel ends only the wait. Its result is the
// last receipt (all of them for plan.submit) or the failure contract.
func (s *Session) follow(ctx context.Context, req *sdk.CallToolRequest, requestID string, scheduled int, decided *sdk.ElicitResult, wait bool) *sdk.CallToolResult {
	ctx, stop := context.WithCancel(ctx) // ends the stream when the call returns to ask
	defer stop()
	// Results stay in wire form until they are written as JSON (receiptwire).
	stream, err := s.cp.StreamReceipts(ctx, &cpv1.StreamReceiptsRequest{RequestId: requestID}, grpc.ForceCodecV2(receiptwire.Codec{}))
	if err != nil {
		return s.broken(requestID, err, wait)
	}
	var receipts []*cpv1.Receipt
	asked := decided != nil // once per call: a user who cancels is not asked again
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return s.broken(requestID, err, wait)
		}
		switch {
		case ev.GetReceipt() != nil:
			r := ev.GetReceipt()
			receipts = append(receipts, r)
			s.progress(ctx, req, float64(len(receipts)), float64(scheduled), fmt.Sprintf("%s %s: %s", r.GetOperationId(), r.GetToolName(), planjson.Short(r.GetStatus().String())))
		case ev.GetAwaitingApproval() != nil:
			ap := ev.GetAwaitingApproval()
			s.progress(ctx, req, float64(len(receipts)), float64(scheduled), waitMessage(ap))
			if req != nil && req.Session != nil {
				// Also as a log message, for hosts that asked for logs but
				// sent no progress token.
				req.Session.Log(ctx, &sdk.LoggingMessageParams{Level: "notice", Logger: "blendplane", Data: waitMessage(ap)})
			}
			if req != nil && !wait && !asked && !canElicit(req) {
				return awaitingApproval(requestID, ap)
			}
			if ap.GetPreview().GetState() == cpv1.Preview_STATE_PENDING {
				break
			}
			switch {
			case decided != nil:
				s.decide(ctx, req, ap, decided)
				decided = nil
			case asked || !canElicit(req):
			case roundTrips(req):
				state := requestID
				if wait {
					state = waitState + requestID // the retry resumes plan.wait, whose cancel leaves the plan
				}
				return askApproval(state, ap)
			default:
				// Older revisions: asked from here, while the stream is
				// followed (a cancel of the call still cancels the plan).
				answer, err := req.Session.Elicit(ctx, approvalQuestion(ap))
				if err != nil {
					s.b.log.Warn("asking for an approval", "approval_id", ap.GetApprovalId(), "err", err)
				} else {
					s.decide(ctx, req, ap, answer)
				}
			}
			asked = true
		case ev.GetProgress() != nil:
			p := ev.GetProgress()
			msg := fmt.Sprintf("%s: %d/%d", p.GetOperationId(), p.GetDone(), p.GetTotal())
			if f := p.GetDetail().GetFields(); f["waiting_for_agent"].GetStringValue() != "" {
				msg = fmt.Sprintf("waiting for agent %s to answer (%s); retrying until %s", f["waiting_for_agent"].GetStringValue(),
					f["reason"].GetStringValue(), f["retry_until"].GetStringValue())
			} else if f["waiting_behind"].GetStringValue() != "" {
				msg = fmt.Sprintf("waiting behind plan %s, which waits for approval %s", f["waiting_behind"].GetStringValue(),
					f["approval_id"].GetStringValue())
			}
			s.progress(ctx, req, float64(len(receipts)), float64(scheduled), msg)
		}
	}
	// A receipt per scheduled operation, all of them succeeded: the plan
	// did. Anything else asks the plan how it ended (and why).
	plan := &cpv1.Plan{RequestId: requestID, State: cpv1.Plan_STATE_SUCCEEDED}
	if !allSucceeded(receipts, scheduled) {
		resp, err := s.cp.GetPlan(ctx, &cpv1.GetPlanRequest{RequestId: requestID})
		if err != nil {
			return refused(err)
		}
		plan = resp.GetPlan()
	}
	return s.result(ctx, req, plan, receipts)
}

func allSucceeded(receipts []*cpv1.Receipt, scheduled int) bool {
	if len(receipts) != scheduled {
		return false
	}
	for _, r := range receipts {
		if r.GetStatus() != cpv1.Receipt_STATUS_SUCCEEDED && r.GetStatus() != cpv1.Receipt_STATUS_SKIPPED_IDEMPOTENT {
			return false
		}
	}
	return true
}

// broken ends a call whose stream broke: plan.wait's (wait) ends only the
// wait; any other call's cancel becomes CancelPlan.
func (s *Session) broken(requestID string, err error, wait bool) *sdk.CallToolResult {
	if !wait {
		return s.cancelled(requestID, err)
	}
	code := "CANCELLED"
	switch status.Code(err) {
	case codes.Canceled, codes.DeadlineExceeded:
	case codes.Unavailable:
		code = "WAIT_FAILED"
	default: // a refusal (a revoked token, a plan that is gone): waiting again will not help
		return refused(err)
	}
	return toolError(map[string]any{"error_code": code, "recoverable": true, "request_id": requestID,
		"message": "the wait ended (" + planjson.Describe(err) + "); the plan goes on", "retry_hint": "call plan.wait again"})
}

// cancelled ends a call whose stream broke: the client's cancel (ctx)
// becomes CancelPlan.
func (s *Session) cancelled(requestID string, err error) *sdk.CallToolResult {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, cerr := s.cp.CancelPlan(ctx, &cpv1.CancelPlanRequest{RequestId: requestID})
	if cerr != nil {
		return toolError(map[string]any{"error_code": "CANCEL_FAILED", "message": planjson.Describe(cerr)})
	}
	s.b.log.Info("call cancelled", "request_id", requestID, "state", resp.GetPlan().GetState().String(), "cause", planjson.Describe(err))
	return toolError(map[string]any{"error_code": "CANCELLED", "recoverable": true, "message": "the call was cancelled: " + planjson.Describe(err),
		"request_id": requestID, "plan_state": planjson.Short(resp.GetPlan().GetState().String())})
}

func (s *Session) progress(ctx context.Context, req *sdk.CallToolRequest, done, total float64, msg string) {
	if req == nil {
		return // a resource read
	}
	token := req.Params.GetProgressToken()
	if token == nil {
		return
	}
	req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: token, Progress: done, Total: total, Message: msg}) // best effort
}

// approvalSchema is what the user is asked, through MCP elicitation.
var approvalSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"decision": map[string]any{"type": "string", "title": "Decision", "enum": []any{"approve", "approve_always", "reject"},
			"description": "approve: run it once; approve_always: run it and allow the same kind from now on; reject: run none of it"},
	},
	"required": []any{"decision"},
}

// approvalInput is the key of the one input request a call makes: the
// user's decision on the plan's approval.
const approvalInput = "approval"

// canElicit reports whether the client can be asked (it declared
// elicitation: at initialization, or with each request on 2026-07-28).
func canElicit(req *sdk.CallToolRequest) bool {
	if req == nil || req.Session == nil {
		return false
	}
	c := req.ClientCapabilities()
	return c != nil && c.Elicitation != nil
}

// roundTrips reports whether the client speaks a revision (2026-07-28 on)
// where the server may not send it requests: it is asked through an input
// request in the call's result, and retries the call with the answer.
func roundTrips(req *sdk.CallToolRequest) bool {
	p := req.Session.InitializeParams()
	return p != nil && p.ProtocolVersion >= sessionlessVersion
}

// approvalQuestion asks a person to decide a waiting plan, showing what its
// preview says it would do.
func approvalQuestion(ap *cpv1.Approval) *sdk.ElicitParams {
	return &sdk.ElicitParams{Message: approvalMessage(ap), RequestedSchema: approvalSchema}
}

// awaitingApproval is the answer of a call whose plan waits for an approval
// the client cannot ask the user about: it says what waits and how to go
// on. The plan keeps waiting.
func awaitingApproval(requestID string, ap *cpv1.Approval) *sdk.CallToolResult {
	return structured(map[string]any{"status": "AWAITING_APPROVAL", "request_id": requestID, "approval_id": ap.GetApprovalId(),
		"message": waitMessage(ap),
		"next": "a person with the approve scope decides it (blendctl approve " + ap.GetApprovalId() + ", or reject; the web console); " +
			"plan.wait with this request_id returns the plan's receipts once it is decided"}, false)
}

// askApproval is a call's answer while its plan waits for approval and the
// client can ask the user: an input request showing what the preview says
// the plan would do, and the plan's request id as the state the retry
// brings back (the plan keeps waiting meanwhile).
func askApproval(requestID string, ap *cpv1.Approval) *sdk.CallToolResult {
	return &sdk.CallToolResult{
		InputRequests: sdk.InputRequestMap{approvalInput: approvalQuestion(ap)},
		RequestState:  requestID,
	}
}

// resume is the retry of a call that asked the user: it takes the answer
// and follows the plan (named by the request state, one of this session's)
// to its end.
func (s *Session) resume(ctx context.Context, req *sdk.CallToolRequest) *sdk.CallToolResult {
	requestID, wait := strings.CutPrefix(req.Params.RequestState, waitState)
	if !s.owns(requestID) {
		return toolError(map[string]any{"error_code": "SCHEMA_INVALID", "recoverable": false,
			"message": "requestState does not name a plan of this MCP session", "retry_hint": "call the tool again without requestState"})
	}
	answer, _ := req.Params.InputResponses[approvalInput].(*sdk.ElicitResult)
	if answer == nil {
		answer = &sdk.ElicitResult{Action: "cancel"}
	}
	resp, err := s.cp.GetPlan(ctx, &cpv1.GetPlanRequest{RequestId: requestID})
	if err != nil {
		return refused(err)
	}
	return s.follow(ctx, req, requestID, len(resp.GetPlan().GetSchedule()), answer, wait)
}

// waitState prefixes the request state of a question plan.wait asked.
const waitState = "wait:"

// owns reports whether requestID is one of this session's plans.
func (s *Session) owns(requestID string) bool {
	i := strings.LastIndexByte(requestID, '-')
	n, err := strconv.ParseUint(requestID[i+1:], 10, 64)
	return i > 0 && err == nil && n >= 1 && n <= s.calls.Load() && s.requestID(n) == requestID
}

// decide resolves a waiting plan's approval with the user's answer. The
// user's token must hold the approve scope; if it does not, or the user
// cancelled, the plan waits for someone who can decide (blendctl approve,
// another front door).
func (s *Session) decide(ctx context.Context, req *sdk.CallToolRequest, ap *cpv1.Approval, answer *sdk.ElicitResult) {
	decision := cpv1.Decision_DECISION_UNSPECIFIED
	switch d, _ := answer.Content["decision"].(string); {
	case answer.Action == "decline", answer.Action == "accept" && d == "reject":
		decision = cpv1.Decision_DECISION_REJECT
	case answer.Action == "accept" && d == "approve":
		decision = cpv1.Decision_DECISION_APPROVE_ONCE
	case answer.Action == "accept" && d == "approve_always":
		decision = cpv1.Decision_DECISION_APPROVE_AND_ALWAYS_ALLOW
	default:
		return // cancelled: the plan waits for someone else
	}
	if _, err := s.cp.ResolveApproval(ctx, &cpv1.ResolveApprovalRequest{ApprovalId: ap.GetApprovalId(), Decision: decision}); err != nil {
		s.b.log.Info("the user's decision was not taken; the plan waits", "approval_id", ap.GetApprovalId(), "err", planjson.Describe(err))
		s.progress(ctx, req, 0, 0, "your decision was not taken ("+planjson.Describe(err)+"); waiting for someone with the approve scope")
	}
}

// approvalMessage shows a person what a waiting plan would do.
func approvalMessage(ap *cpv1.Approval) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Approve plan %s (approval %s, asked by %s)?\n", ap.GetRequestId(), ap.GetApprovalId(), ap.GetRequestedBy())
	for _, d := range ap.GetDecisions() {
		fmt.Fprintf(&b, "- %s %s (%s): %s\n", d.GetOperationId(), d.GetToolName(), d.GetTarget(), d.GetReason())
	}
	pv := ap.GetPreview()
	if pv.GetFailure() != nil {
		fmt.Fprintf(&b, "The dry run says operation %s would fail: %s %s\n", pv.GetFailedOperationId(), pv.GetFailure().GetErrorCode(), pv.GetFailure().GetMessage())
	}
	if len(pv.GetChanges()) > 0 {
		b.WriteString("It would change the scene:\n")
	}
	sign := map[cpv1.DatablockChange_Kind]string{cpv1.DatablockChange_KIND_ADDED: "+", cpv1.DatablockChange_KIND_REMOVED: "-", cpv1.DatablockChange_KIND_CHANGED: "~"}
	for i, ch := range pv.GetChanges() {
		if i == 50 {
			fmt.Fprintf(&b, "... and %d more\n", len(pv.GetChanges())-i)
			break
		}
		fmt.Fprintf(&b, "%s %s/%s", sign[ch.GetKind()], ch.GetCollection(), ch.GetName())
		for _, f := range ch.GetFields() {
			before, _ := json.Marshal(f.GetBefore().AsInterface())
			after, _ := json.Marshal(f.GetAfter().AsInterface())
			fmt.Fprintf(&b, " %s: %s -> %s;", f.GetField(), before, after)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func waitMessage(ap *cpv1.Approval) string {
	var b strings.Builder
	fmt.Fprintf(&b, "waiting for approval %s", ap.GetApprovalId())
	for _, d := range ap.GetDecisions() {
		fmt.Fprintf(&b, "; %s: %s", d.GetToolName(), d.GetReason())
	}
	if pv := ap.GetPreview(); pv.GetState() != cpv1.Preview_STATE_PENDING {
		fmt.Fprintf(&b, "; preview: %d changes", len(pv.GetChanges()))
	}
	return b.String()
}

// result turns a finished plan into the call's result: the receipt (or all
// of them) as structured content, isError with the failure contract when it
// failed, and the PNGs it rendered as images.
func (s *Session) result(ctx context.Context, req *sdk.CallToolRequest, plan *cpv1.Plan, receipts []*cpv1.Receipt) *sdk.CallToolResult {
	if plan.GetState() != cpv1.Plan_STATE_SUCCEEDED {
		f := plan.GetFailure()
		out := planjson.Failure(f)
		out["request_id"] = plan.GetRequestId()
		out["plan_state"] = planjson.Short(plan.GetState().String())
		if len(receipts) > 0 {
			out["receipts"] = planjson.Receipts(receipts)
		}
		return toolError(out)
	}
	var res *sdk.CallToolResult
	if req != nil && req.Params.Name == "plan.submit" || len(receipts) != 1 {
		out := map[string]any{"request_id": plan.GetRequestId(), "status": "SUCCEEDED", "receipts": planjson.Receipts(receipts)}
		if n := len(receipts); n > 0 {
			out["scene_hash_after"] = receipts[n-1].GetSceneHashAfter()
		}
		res = structured(out, false)
	} else {
		res = encoded(planjson.Receipt(receipts[0]), false)
	}
	for _, r := range receipts {
		for _, a := range r.GetArtifacts() {
			res.Content = append(res.Content, s.artifactContent(ctx, a, r)...)
		}
	}
	return res
}

func toolError(out map[string]any) *sdk.CallToolResult { return structured(out, true) }

// structured is a result whose structured content is out, encoded once and
// also sent as text (for clients that read only text).
func structured(out map[string]any, isError bool) *sdk.CallToolResult {
	b, err := json.Marshal(out)
	if err != nil {
		b, _ = json.Marshal(map[string]any{"error_code": "INTERNAL", "message": "encoding the result: " + err.Error()})
		isError = true
	}
	return encoded(b, isError)
}

// encoded is a result whose structured content is the JSON object b, also
// sent as text.
func encoded(b json.RawMessage, isError bool) *sdk.CallToolResult {
	return &sdk.CallToolResult{IsError: isError, StructuredContent: b, Content: []sdk.Content{&sdk.TextContent{Text: string(b)}}}
}

func invalid(err error) *sdk.CallToolResult {
	return toolError(map[string]any{"error_code": "SCHEMA_INVALID", "recoverable": true, "message": err.Error(),
		"retry_hint": "send the arguments as a JSON object that matches the tool's input schema"})
}

// refused is a plan the control plane refused (or any other RPC error), as
// the failure contract.
func refused(err error) *sdk.CallToolResult { return toolError(planjson.Refusal(err)) }
