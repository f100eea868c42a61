// Package planner is Blendplane's planner runtime (seed 002 around seed
// 000's planner): a prompt becomes model turns, the model's function calls
// become plans that the control plane validates, puts through the policy,
// journals and runs as any client's, refusals and failures go back to the
// model as the failure contract for a repair turn, and approvals pause a
// run until someone decides. Providers: Gemini (genai) and OpenAI-compatible
// chat completions (openai-go: Ollama, llama.cpp's server, vLLM).
//
// Like every front door it is a client of ControlPlaneService (importing
// gen/ only). It acts for the principal who asked: its calls carry that
// principal's name on an in-process connection only it can reach, so the
// control plane authorizes each of them as that principal's own.
package planner

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	plannerv1 "github.com/blendplane/blendplane/gen/blendplane/planner/v1"
	"github.com/blendplane/blendplane/internal/jcs"
	"github.com/blendplane/blendplane/planjson"
)

// PrincipalMetadata is the metadata that names the principal the planner
// acts for, on its own in-process connection to the control plane.
const PrincipalMetadata = "x-blendplane-on-behalf-of"

// PlanFunction is the function that takes a whole plan.
const PlanFunction = "plan.submit"

// Options configure a Runtime.
type Options struct {
	// Provider is the model; nil: every run is refused with
	// ErrNotConfigured.
	Provider Provider
	// MaxTurns bounds the model turns of a run: 1 to 3 (default 3).
	MaxTurns int
	// History is how many recent thread messages a run sends (default 20).
	History int
	// Caller is the name of the principal an authenticated call runs as.
	Caller func(context.Context) string
	Logger *slog.Logger
}

// Runtime runs prompts. Everything it knows is in its bbolt file: a
// restart resumes every run that was not finished.
type Runtime struct {
	cp   cpv1.ControlPlaneServiceClient
	st   *store
	opts Options
	log  *slog.Logger

	ctx    context.Context // the runtime's life: runs outlive their requests
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	subs   map[string][]*subscriber // run id → who follows it
	active map[string]activeRun     // thread id → its unfinished run
}

// New opens the planner's store at path and returns a runtime that calls
// the control plane over cc (a connection that carries PrincipalMetadata).
func New(path string, cc grpc.ClientConnInterface, opts Options) (*Runtime, error) {
	st, err := openStore(path)
	if err != nil {
		return nil, err
	}
	if opts.MaxTurns <= 0 || opts.MaxTurns > 3 {
		opts.MaxTurns = 3
	}
	if opts.History <= 0 {
		opts.History = 20
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Caller == nil {
		opts.Caller = func(context.Context) string { return "" }
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Runtime{cp: cpv1.NewControlPlaneServiceClient(cc), st: st, opts: opts, log: opts.Logger.With("component", "planner"),
		ctx: ctx, cancel: cancel, subs: map[string][]*subscriber{}, active: map[string]activeRun{}}, nil
}

// Start resumes the runs a stop interrupted: planning ones ask the model
// again, waiting and executing ones follow their plan.
func (r *Runtime) Start() error {
	var unfinished []*plannerv1.Run
	err := r.st.runs(func(run *plannerv1.Run) error {
		if !resting(run.GetState()) || run.GetState() == plannerv1.Run_STATE_AWAITING_CONFIRMATION {
			unfinished = append(unfinished, run)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, run := range unfinished {
		_, transcript, err := r.st.run(run.GetRunId())
		if err != nil {
			return err
		}
		r.log.Info("resuming run", "run_id", run.GetRunId(), "state", run.GetState().String())
		r.launch(run, transcript)
	}
	return nil
}

// Close stops the runs (their state stays for the next start) and closes
// the store.
func (r *Runtime) Close() error {
	r.cancel()
	r.wg.Wait()
	return r.st.close()
}

// Model is the configured model's name ("" without one).
func (r *Runtime) Model() string {
	if r.opts.Provider == nil {
		return ""
	}
	return r.opts.Provider.Model()
}

// Error is a run request refused before any run exists, in seed 002's
// taxonomy, with the gRPC code it maps to.
type Error struct {
	Type plannerv1.RunError_Type
	Code codes.Code
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// maxRunsPerPrincipal bounds a principal's unfinished runs.
const maxRunsPerPrincipal = 8

// activeRun is a thread's unfinished run and its principal.
type activeRun struct{ runID, principal string }

// activeOf counts who's unfinished runs. The caller holds r.mu.
func (r *Runtime) activeOf(who string) int {
	n := 0
	for _, a := range r.active {
		if a.principal == who {
			n++
		}
	}
	return n
}

// start makes a run of prompt in the principal's thread (a new one when
// threadID is empty) and sets it going; sub, if not nil, follows it from
// its first event.
func (r *Runtime) start(who, prompt, threadID string, sub *subscriber) (*plannerv1.Run, error) {
	if r.opts.Provider == nil {
		return nil, &Error{Type: plannerv1.RunError_TYPE_MODEL, Code: codes.Unavailable, Msg: ErrNotConfigured.Error()}
	}
	if who == "" {
		return nil, &Error{Type: plannerv1.RunError_TYPE_AUTH, Code: codes.Unauthenticated, Msg: "no principal"}
	}
	now := timestamppb.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	var thread *plannerv1.Thread
	if threadID == "" {
		thread = &plannerv1.Thread{ThreadId: newID("th"), Principal: who, CreateTime: now}
	} else {
		t, err := r.st.thread(threadID)
		switch {
		case errors.Is(err, errNotFound):
			return nil, &Error{Type: plannerv1.RunError_TYPE_VALIDATION, Code: codes.NotFound, Msg: fmt.Sprintf("no thread %q", threadID)}
		case err != nil:
			return nil, err
		case t.GetPrincipal() != who:
			return nil, &Error{Type: plannerv1.RunError_TYPE_AUTH, Code: codes.PermissionDenied, Msg: fmt.Sprintf("thread %q belongs to another principal", threadID)}
		}
		if busy, ok := r.active[threadID]; ok {
			return nil, &Error{Type: plannerv1.RunError_TYPE_VALIDATION, Code: codes.FailedPrecondition,
				Msg: fmt.Sprintf("thread %q has run %s unfinished (waiting for approval or still running); resolve or wait for it first", threadID, busy.runID)}
		}
		thread = t
	}
	if n := r.activeOf(who); n >= maxRunsPerPrincipal {
		// Each may call a paid model: a principal's runs are bounded.
		return nil, &Error{Type: plannerv1.RunError_TYPE_VALIDATION, Code: codes.ResourceExhausted,
			Msg: fmt.Sprintf("you have %d runs unfinished (running or waiting for approval), the most at once; let one end first", n)}
	}
	run := &plannerv1.Run{RunId: newID("run"), ThreadId: thread.GetThreadId(), Principal: who, State: plannerv1.Run_STATE_QUEUED,
		Model: r.opts.Provider.Model(), SessionId: thread.GetSessionId(), CreateTime: now, UpdateTime: now}
	thread.Messages = append(thread.Messages, &plannerv1.ThreadMessage{Role: plannerv1.ThreadMessage_ROLE_USER, Text: prompt, RunId: run.GetRunId(), CreateTime: now})
	if err := r.st.putThread(thread); err != nil {
		return nil, err
	}
	if err := r.st.putRun(run, nil, nil); err != nil {
		return nil, err
	}
	if sub != nil {
		r.subs[run.GetRunId()] = append(r.subs[run.GetRunId()], sub)
	}
	r.active[run.GetThreadId()] = activeRun{run.GetRunId(), who}
	out := proto.Clone(run).(*plannerv1.Run) // before drive changes run
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.drive(run, nil)
	}()
	return out, nil
}

// launch resumes a stored run.
func (r *Runtime) launch(run *plannerv1.Run, transcript []Message) {
	r.mu.Lock()
	r.active[run.GetThreadId()] = activeRun{run.GetRunId(), run.GetPrincipal()}
	r.mu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.drive(run, transcript)
	}()
}

// resting: the run waits for nobody but a person, or is over.
func resting(s plannerv1.Run_State) bool {
	return s == plannerv1.Run_STATE_COMPLETED || s == plannerv1.Run_STATE_FAILED || s == plannerv1.Run_STATE_AWAITING_CONFIRMATION
}

// run is one run being driven: its record, its conversation with the
// model, and the audit entries not yet written.
type runState struct {
	*plannerv1.Run
	transcript []Message
	audit      []*plannerv1.ActionAudit
	failure    *plannerv1.RunError // the last action's failure, for the end of the turns
	tools      []*cpv1.ToolDefinition
}

// drive runs the loop of seed 002 (at most MaxTurns model turns) from
// wherever the run stands.
func (r *Runtime) drive(run *plannerv1.Run, transcript []Message) {
	rs := &runState{Run: run, transcript: transcript}
	ctx := r.ctx
	defer func() {
		if ctx.Err() == nil && !resting(rs.GetState()) {
			r.fail(rs, plannerv1.RunError_TYPE_MODEL, "the run stopped unexpectedly", "")
		}
	}()
	// A model turn whose calls were not all answered (the control plane was
	// stopped while a plan ran or waited): answer them first. Plans have
	// fixed request ids, so nothing runs twice.
	if n := len(rs.transcript); n > 0 && rs.transcript[n-1].Role == RoleModel && len(rs.transcript[n-1].Calls) > 0 {
		if !r.act(ctx, rs, rs.transcript[n-1].Calls) {
			return
		}
	}
	for ctx.Err() == nil {
		if rs.GetTurns() >= int32(r.opts.MaxTurns) {
			r.outOfTurns(rs)
			return
		}
		r.setState(rs, plannerv1.Run_STATE_PLANNING)
		req, err := r.request(ctx, rs)
		if err != nil {
			r.failErr(rs, err)
			return
		}
		turn, err := r.opts.Provider.Generate(ctx, req, func(d string) {
			r.emit(rs.GetRunId(), &plannerv1.StreamRunResponse{Event: &plannerv1.StreamRunResponse_Delta{Delta: d}})
		})
		if ctx.Err() != nil {
			return // stopping: the next start asks again
		}
		rs.Turns++
		if err != nil {
			r.log.Warn("model call failed", "run_id", rs.GetRunId(), "model", r.Model(), "err", err)
			r.fail(rs, plannerv1.RunError_TYPE_MODEL, "the model provider failed: "+safeProviderError(err), "")
			return
		}
		if strings.TrimSpace(turn.Text) == "" && len(turn.Calls) == 0 {
			// Nothing usable: an empty stream, or a server that did not
			// stream (the runtime asks for a streamed answer).
			r.log.Warn("model answered nothing", "run_id", rs.GetRunId(), "model", r.Model())
			r.fail(rs, plannerv1.RunError_TYPE_MODEL, "the model provider answered nothing: no text and no function call "+
				"(a server that does not stream its answers gives none)", "")
			return
		}
		rs.transcript = append(rs.transcript, Message{Role: RoleModel, Text: turn.Text, Calls: turn.Calls})
		if len(turn.Calls) == 0 {
			r.complete(rs, turn.Text)
			return
		}
		if err := r.save(rs); err != nil {
			r.failErr(rs, err)
			return
		}
		if !r.act(ctx, rs, turn.Calls) {
			return
		}
	}
}

// request is the model call of the run's next turn: the system
// instruction, the thread's recent messages, this run's turns so far, and
// the functions of the session's registry.
func (r *Runtime) request(ctx context.Context, rs *runState) (Request, error) {
	thread, err := r.st.thread(rs.GetThreadId())
	if err != nil {
		return Request{}, err
	}
	// The thread before this run (its last History messages), this run's
	// prompt, then this run's turns.
	var before []Message
	var prompt string
	for _, m := range thread.GetMessages() {
		switch {
		case m.GetRunId() != rs.GetRunId() && m.GetRole() == plannerv1.ThreadMessage_ROLE_ASSISTANT:
			before = append(before, Message{Role: RoleModel, Text: m.GetText()})
		case m.GetRunId() != rs.GetRunId():
			before = append(before, Message{Role: RoleUser, Text: m.GetText()})
		case m.GetRole() == plannerv1.ThreadMessage_ROLE_USER:
			prompt = m.GetText()
		}
	}
	req := Request{System: systemInstruction, Messages: before[max(0, len(before)-r.opts.History):]}
	req.Messages = append(req.Messages, Message{Role: RoleUser, Text: prompt})
	req.Messages = append(req.Messages, rs.transcript...)
	tools, err := r.tools(ctx, rs)
	if err != nil {
		return Request{}, err
	}
	req.Functions = append(req.Functions, Function{Name: PlanFunction, Description: planjson.PlanDescription +
		" Prefer it for several steps: the whole plan is checked before any of it runs.", Parameters: planjson.Schema})
	for _, t := range tools {
		schema, err := json.Marshal(t.GetInputSchema().AsMap())
		if err != nil {
			return Request{}, err
		}
		req.Functions = append(req.Functions, Function{Name: t.GetName(), Description: t.GetDescription(), Parameters: schema})
	}
	return req, nil
}

const systemInstruction = `You plan changes to a Blender scene for Blendplane. You act only through the functions offered: each registry tool runs as one checked, journaled operation; plan.submit runs several operations as one plan (operation_id, tool_name, args, depends_on), checked as a whole before any of it runs. Call scene.get_summary to see the scene when you need to. Make one function call per turn. When a call fails you get the failure contract (error_code, retry_hint, minimal_repair_plan): repair the call as it says. Some operations wait for a person's approval. When the work is done, answer in plain text with a short summary of what changed; do not call a function then. Never invent tool names or arguments that the schemas do not allow.`

// tools are the registry tools the thread's session may call, negotiating
// the session on the thread's first run (or again, once it was closed).
func (r *Runtime) tools(ctx context.Context, rs *runState) ([]*cpv1.ToolDefinition, error) {
	if rs.tools != nil {
		return rs.tools, nil
	}
	var err error
	rs.tools, err = r.sessionTools(ctx, rs)
	return rs.tools, err
}

func (r *Runtime) sessionTools(ctx context.Context, rs *runState) ([]*cpv1.ToolDefinition, error) {
	ctx = r.as(ctx, rs.GetPrincipal())
	if rs.GetSessionId() != "" {
		s, err := r.cp.GetSession(ctx, &cpv1.GetSessionRequest{SessionId: rs.GetSessionId()})
		if err == nil && s.GetSession().GetState() != cpv1.Session_STATE_CLOSED {
			return r.callable(ctx, rs.GetSessionId(), s.GetSession().GetContract())
		}
		if err != nil && status.Code(err) != codes.NotFound {
			return nil, err
		}
	}
	resp, err := r.cp.Negotiate(ctx, &cpv1.NegotiateRequest{ContractVersion: "1.0.0",
		HostProfile: &cpv1.HostProfile{ClientName: "blendplane-planner", ClientVersion: r.Model(), FeatureFlags: []string{"progress_events"}, Capabilities: []string{"planner"}}})
	if err != nil {
		return nil, err
	}
	c := resp.GetContract()
	rs.SessionId = c.GetSessionId()
	if err := r.st.setSession(rs.GetThreadId(), rs.GetSessionId()); err != nil {
		return nil, err
	}
	r.log.Info("session negotiated", "run_id", rs.GetRunId(), "session_id", rs.GetSessionId())
	return r.callable(ctx, rs.GetSessionId(), c)
}

func (r *Runtime) callable(ctx context.Context, sessionID string, c *cpv1.SessionContract) ([]*cpv1.ToolDefinition, error) {
	resp, err := r.cp.ListTools(ctx, &cpv1.ListToolsRequest{SessionId: sessionID})
	if err != nil {
		return nil, err
	}
	allowed := map[string]bool{}
	for _, t := range c.GetCapabilities().GetTools() {
		allowed[t] = true
	}
	var out []*cpv1.ToolDefinition
	for _, t := range resp.GetTools() {
		if allowed[t.GetName()] {
			out = append(out, t)
		}
	}
	return out, nil
}

// as is ctx acting for principal on the planner's connection.
func (r *Runtime) as(ctx context.Context, principal string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, PrincipalMetadata, principal)
}

// act answers a model turn's calls: the first one becomes a plan and runs
// (seed 002: no parallel tool execution), any further ones are answered
// "not run". It reports whether the loop goes on (false: the run rests or
// the runtime stops).
func (r *Runtime) act(ctx context.Context, rs *runState, calls []Call) bool {
	first := calls[0]
	res, goOn := r.call(ctx, rs, first)
	results := []Result{{ID: first.ID, Name: first.Name, Response: bounded(res)}}
	for _, c := range calls[1:] {
		results = append(results, Result{ID: c.ID, Name: c.Name, Response: mustJSON(map[string]any{"error_code": "NOT_RUN", "recoverable": true,
			"message": "one function call per turn: only the first call of the turn ran", "retry_hint": "call it again in a turn of its own, or put all steps in one plan.submit"})})
	}
	if !goOn {
		return false
	}
	rs.transcript = append(rs.transcript, Message{Role: RoleTool, Results: results})
	if err := r.save(rs); err != nil {
		r.failErr(rs, err)
		return false
	}
	return true
}

// call turns one function call into a plan, runs it and returns what the
// model gets back: the receipts, or the failure contract.
func (r *Runtime) call(ctx context.Context, rs *runState, c Call) (json.RawMessage, bool) {
	actionID := fmt.Sprintf("a%d", rs.GetTurns())
	a := rs.action(actionID)
	if a == nil {
		now := timestamppb.Now()
		a = &plannerv1.Action{ActionId: actionID, Tool: c.Name, State: plannerv1.Action_STATE_PLANNED, InputHash: inputHash(c.Args),
			RequestId: planjson.Sanitize(rs.GetRunId() + "-" + actionID), Turn: rs.GetTurns(), CreateTime: now, UpdateTime: now}
		rs.Actions = append(rs.Actions, a)
	}
	ops, atomic, contract := r.plan(ctx, rs, c)
	if contract != nil {
		r.finishAction(rs, a, plannerv1.Action_STATE_FAILED, "INVALID", contract)
		rs.failure = &plannerv1.RunError{Type: plannerv1.RunError_TYPE_MODEL, Message: "the model's call was not usable: " + str(contract["message"]), ErrorCode: str(contract["error_code"])}
		return mustJSON(contract), true
	}
	a.Operations = int32(len(ops))
	pctx := r.as(ctx, rs.GetPrincipal())
	_, err := r.cp.SubmitPlan(pctx, &cpv1.SubmitPlanRequest{SessionId: rs.GetSessionId(), RequestId: a.GetRequestId(), Operations: ops, Atomic: atomic})
	if str(planjson.Refusal(err)["error_code"]) == "SESSION_CLOSED" {
		// Someone closed the thread's session: a new one, and the plan again.
		rs.tools = nil
		if _, err = r.tools(ctx, rs); err == nil {
			_, err = r.cp.SubmitPlan(pctx, &cpv1.SubmitPlanRequest{SessionId: rs.GetSessionId(), RequestId: a.GetRequestId(), Operations: ops, Atomic: atomic})
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, false
		}
		contract := planjson.Refusal(err)
		kind := plannerv1.RunError_TYPE_MODEL
		switch code := str(contract["error_code"]); {
		case code == "POLICY_BLOCKED":
			a.PolicyDecision, kind = "deny", plannerv1.RunError_TYPE_POLICY
		case status.Code(err) == codes.Unauthenticated || status.Code(err) == codes.PermissionDenied:
			r.finishAction(rs, a, plannerv1.Action_STATE_FAILED, "REFUSED", contract)
			r.fail(rs, plannerv1.RunError_TYPE_AUTH, str(contract["message"]), code)
			return nil, false
		case status.Code(err) == codes.ResourceExhausted || status.Code(err) == codes.Unavailable || status.Code(err) == codes.Internal:
			r.finishAction(rs, a, plannerv1.Action_STATE_FAILED, "REFUSED", contract)
			r.fail(rs, plannerv1.RunError_TYPE_TOOL_EXECUTION, str(contract["message"]), code)
			return nil, false
		}
		r.finishAction(rs, a, plannerv1.Action_STATE_FAILED, "REFUSED", contract)
		rs.failure = &plannerv1.RunError{Type: kind, Message: str(contract["message"]), ErrorCode: str(contract["error_code"])}
		return mustJSON(contract), true
	}
	plan, receipts, err := r.follow(ctx, rs, a)
	if err != nil {
		if ctx.Err() == nil {
			r.failErr(rs, err)
		}
		return nil, false
	}
	if plan.GetState() == cpv1.Plan_STATE_SUCCEEDED {
		r.finishAction(rs, a, plannerv1.Action_STATE_COMPLETED, "SUCCEEDED", nil)
		rs.failure = nil
		return mustJSON(map[string]any{"status": "SUCCEEDED", "request_id": plan.GetRequestId(), "receipts": planjson.Receipts(receipts)}), true
	}
	contract = planjson.Failure(plan.GetFailure())
	contract["plan_state"] = planjson.Short(plan.GetState().String())
	if plan.GetFailure().GetErrorCode() == "APPROVAL_REJECTED" {
		r.finishAction(rs, a, plannerv1.Action_STATE_REJECTED, "REJECTED", contract)
		rs.transcript = append(rs.transcript, Message{Role: RoleTool, Results: []Result{{ID: c.ID, Name: c.Name, Response: mustJSON(contract)}}})
		r.complete(rs, "The plan was rejected; nothing of it ran. "+str(contract["message"]))
		return nil, false
	}
	if len(receipts) > 0 {
		contract["receipts"] = planjson.Receipts(receipts)
	}
	r.finishAction(rs, a, plannerv1.Action_STATE_FAILED, planjson.Short(plan.GetState().String()), contract)
	rs.failure = &plannerv1.RunError{Type: plannerv1.RunError_TYPE_TOOL_EXECUTION, Message: str(contract["message"]), ErrorCode: str(contract["error_code"])}
	return mustJSON(contract), true
}

// plan is the plan a call asks for, or the failure contract that says why
// the call is not one (an unknown function, arguments that are not a JSON
// object): seed 002's repair turn.
func (r *Runtime) plan(ctx context.Context, rs *runState, c Call) ([]*cpv1.Operation, bool, map[string]any) {
	bad := func(code, msg, hint string) map[string]any {
		return map[string]any{"error_code": code, "recoverable": true, "message": msg, "retry_hint": hint}
	}
	if !json.Valid([]byte(c.Args)) {
		return nil, false, bad("SCHEMA_INVALID", fmt.Sprintf("the arguments of %s are not valid JSON", c.Name), "send the arguments as one JSON object that matches the function's parameters")
	}
	tools, err := r.tools(ctx, rs)
	if err != nil {
		return nil, false, bad("UNAVAILABLE", "the session's tools could not be listed: "+planjson.Describe(err), "try again")
	}
	safety := map[string]cpv1.SafetyLevel{}
	for _, t := range tools {
		safety[t.GetName()] = t.GetSafetyLevel()
	}
	safetyOf := func(tool string) cpv1.SafetyLevel {
		if l, ok := safety[tool]; ok {
			return l
		}
		return cpv1.SafetyLevel_SAFETY_LEVEL_DESTRUCTIVE // macros, unknown: the most caution
	}
	if c.Name == PlanFunction {
		ops, atomic, err := planjson.Plan(json.RawMessage(c.Args), safetyOf)
		if err != nil {
			return nil, false, bad("SCHEMA_INVALID", "plan.submit: "+err.Error(), "send {\"operations\": [{\"operation_id\", \"tool_name\", \"args\"}, ...]}")
		}
		return ops, atomic, nil
	}
	if _, ok := safety[c.Name]; !ok {
		return nil, false, bad("UNKNOWN_FUNCTION", fmt.Sprintf("there is no function %q", c.Name), "call plan.submit or one of the functions offered, by its exact name")
	}
	args, err := planjson.Args(json.RawMessage(c.Args))
	if err != nil {
		return nil, false, bad("SCHEMA_INVALID", err.Error(), "send the arguments as one JSON object")
	}
	return []*cpv1.Operation{{OperationId: "call", ToolName: c.Name, Args: args, SafetyLevel: safetyOf(c.Name)}}, false, nil
}

// follow streams a submitted plan's receipts to its end. A wait for
// approval rests the run (awaiting_confirmation) while the stream goes on:
// whoever decides, here or through any other front door, the run resumes.
func (r *Runtime) follow(ctx context.Context, rs *runState, a *plannerv1.Action) (*cpv1.Plan, []*cpv1.Receipt, error) {
	pctx := r.as(ctx, rs.GetPrincipal())
	if a.GetState() == plannerv1.Action_STATE_PLANNED {
		a.State, a.PolicyDecision, a.UpdateTime = plannerv1.Action_STATE_EXECUTING, "allow", timestamppb.Now()
	}
	if rs.GetState() != plannerv1.Run_STATE_AWAITING_CONFIRMATION {
		r.setState(rs, plannerv1.Run_STATE_EXECUTING)
	}
	stream, err := r.cp.StreamReceipts(pctx, &cpv1.StreamReceiptsRequest{RequestId: a.GetRequestId()})
	if err != nil {
		return nil, nil, err
	}
	var receipts []*cpv1.Receipt
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, err
		}
		switch {
		case ev.GetAwaitingApproval() != nil:
			if rs.GetState() != plannerv1.Run_STATE_AWAITING_CONFIRMATION {
				ap := ev.GetAwaitingApproval()
				a.State, a.PolicyDecision, a.RequiresApproval, a.ApprovalId, a.UpdateTime = plannerv1.Action_STATE_AWAITING_CONFIRMATION, "require_approval", true, ap.GetApprovalId(), timestamppb.Now()
				rs.audit = append(rs.audit, r.auditOf(rs, a, ""))
				msg := fmt.Sprintf("The plan %s waits for approval %s before it runs.", a.GetRequestId(), ap.GetApprovalId())
				if err := r.st.appendMessage(rs.GetThreadId(), plannerv1.ThreadMessage_ROLE_ASSISTANT, msg, rs.GetRunId()); err != nil {
					return nil, nil, err
				}
				rs.Summary = msg
				r.setState(rs, plannerv1.Run_STATE_AWAITING_CONFIRMATION)
			}
		case ev.GetReceipt() != nil:
			if rs.GetState() == plannerv1.Run_STATE_AWAITING_CONFIRMATION {
				a.State, a.UpdateTime = plannerv1.Action_STATE_EXECUTING, timestamppb.Now()
				r.setState(rs, plannerv1.Run_STATE_EXECUTING)
			}
			receipts = append(receipts, ev.GetReceipt())
		}
	}
	resp, err := r.cp.GetPlan(pctx, &cpv1.GetPlanRequest{RequestId: a.GetRequestId()})
	if err != nil {
		return nil, nil, err
	}
	return resp.GetPlan(), receipts, nil
}

func (rs *runState) action(id string) *plannerv1.Action {
	for _, a := range rs.GetActions() {
		if a.GetActionId() == id {
			return a
		}
	}
	return nil
}

func (r *Runtime) finishAction(rs *runState, a *plannerv1.Action, st plannerv1.Action_State, execution string, contract map[string]any) {
	a.State, a.ExecutionStatus, a.UpdateTime = st, execution, timestamppb.Now()
	if contract != nil {
		a.ErrorCode, a.ErrorMessage = str(contract["error_code"]), str(contract["message"])
	}
	rs.audit = append(rs.audit, r.auditOf(rs, a, a.GetErrorMessage()))
}

func (r *Runtime) auditOf(rs *runState, a *plannerv1.Action, msg string) *plannerv1.ActionAudit {
	return &plannerv1.ActionAudit{Time: timestamppb.Now(), RunId: rs.GetRunId(), ActionId: a.GetActionId(), Principal: rs.GetPrincipal(), ModelName: rs.GetModel(),
		ToolName: a.GetTool(), InputHash: a.GetInputHash(), PolicyDecision: a.GetPolicyDecision(), ApprovalId: a.GetApprovalId(),
		RequestId: a.GetRequestId(), ExecutionStatus: executionOf(a), ErrorCode: a.GetErrorCode(), Message: msg}
}

func executionOf(a *plannerv1.Action) string {
	if a.GetExecutionStatus() != "" {
		return a.GetExecutionStatus()
	}
	return planjson.Short(a.GetState().String())
}

// outOfTurns ends a run whose turns are used up: completed if its last
// action did, failed otherwise, in the class of the last failure (a model
// that never produced a usable plan: ModelError).
func (r *Runtime) outOfTurns(rs *runState) {
	if rs.failure == nil {
		r.complete(rs, fmt.Sprintf("Done after %d turns: %s", rs.GetTurns(), actionsSummary(rs.GetActions())))
		return
	}
	f := rs.failure
	if f.GetType() == plannerv1.RunError_TYPE_MODEL {
		f = &plannerv1.RunError{Type: plannerv1.RunError_TYPE_MODEL, ErrorCode: f.GetErrorCode(),
			Message: fmt.Sprintf("the model did not produce a valid plan in %d turns; last: %s", rs.GetTurns(), f.GetMessage())}
	}
	r.fail(rs, f.GetType(), f.GetMessage(), f.GetErrorCode())
}

func actionsSummary(actions []*plannerv1.Action) string {
	var ok, n int
	for _, a := range actions {
		n++
		if a.GetState() == plannerv1.Action_STATE_COMPLETED {
			ok++
		}
	}
	return fmt.Sprintf("%d of %d actions completed", ok, n)
}

func (r *Runtime) complete(rs *runState, summary string) {
	rs.Summary = summary
	if err := r.st.appendMessage(rs.GetThreadId(), plannerv1.ThreadMessage_ROLE_ASSISTANT, summary, rs.GetRunId()); err != nil {
		r.log.Error("thread message", "run_id", rs.GetRunId(), "err", err)
	}
	r.setState(rs, plannerv1.Run_STATE_COMPLETED)
}

func (r *Runtime) fail(rs *runState, kind plannerv1.RunError_Type, msg, code string) {
	rs.Error = &plannerv1.RunError{Type: kind, Message: msg, ErrorCode: code}
	rs.Summary = msg
	if err := r.st.appendMessage(rs.GetThreadId(), plannerv1.ThreadMessage_ROLE_ASSISTANT, "The run failed: "+msg, rs.GetRunId()); err != nil {
		r.log.Error("thread message", "run_id", rs.GetRunId(), "err", err)
	}
	r.setState(rs, plannerv1.Run_STATE_FAILED)
}

// failErr fails a run on an error of the control plane or the store.
func (r *Runtime) failErr(rs *runState, err error) {
	r.log.Warn("run failed", "run_id", rs.GetRunId(), "err", err)
	kind := plannerv1.RunError_TYPE_TOOL_EXECUTION
	switch status.Code(err) {
	case codes.Unauthenticated, codes.PermissionDenied:
		kind = plannerv1.RunError_TYPE_AUTH
	}
	r.fail(rs, kind, planjson.Describe(err), str(planjson.Refusal(err)["error_code"]))
}

// setState persists the run in its new state and tells its followers; a
// run that rests also gets its result out.
func (r *Runtime) setState(rs *runState, st plannerv1.Run_State) {
	changed := rs.GetState() != st
	rs.State, rs.UpdateTime = st, timestamppb.Now()
	if err := r.save(rs); err != nil {
		r.log.Error("saving run", "run_id", rs.GetRunId(), "err", err)
	}
	if changed {
		r.emit(rs.GetRunId(), &plannerv1.StreamRunResponse{Event: &plannerv1.StreamRunResponse_Status{Status: &plannerv1.StatusEvent{State: st, RunId: rs.GetRunId(), ThreadId: rs.GetThreadId()}}})
	}
	if !resting(st) {
		return
	}
	run := proto.Clone(rs.Run).(*plannerv1.Run)
	if st == plannerv1.Run_STATE_FAILED {
		r.emit(rs.GetRunId(), &plannerv1.StreamRunResponse{Event: &plannerv1.StreamRunResponse_Error{Error: rs.GetError()}})
	}
	r.emit(rs.GetRunId(), &plannerv1.StreamRunResponse{Event: &plannerv1.StreamRunResponse_Result{Result: run}})
	if st != plannerv1.Run_STATE_AWAITING_CONFIRMATION {
		r.mu.Lock()
		if r.active[rs.GetThreadId()].runID == rs.GetRunId() {
			delete(r.active, rs.GetThreadId())
		}
		r.mu.Unlock()
	}
}

func (r *Runtime) save(rs *runState) error {
	err := r.st.putRun(rs.Run, rs.transcript, rs.audit)
	if err == nil {
		rs.audit = nil
	}
	return err
}

// inputHash is the SHA-256 of the call's arguments in RFC 8785 form (of
// their bytes when they are not JSON): what the audit keeps instead of them.
func inputHash(args string) string {
	var v any
	b := []byte(args)
	if json.Unmarshal(b, &v) == nil {
		if c, err := jcs.Marshal(v); err == nil {
			b = c
		}
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func newID(prefix string) string {
	b := make([]byte, 8)
	rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// maxResultBytes bounds what one call's result gives the model: it is sent
// again with every later turn, and kept with the run (300 receipts came to
// 550 KB, a big scene's snapshot to megabytes).
const maxResultBytes = 32 << 10

// bounded is res, or when it is longer than maxResultBytes its outcome
// (status, request_id, the failure's code, message and hint), its start,
// and that the rest was left out.
func bounded(res json.RawMessage) json.RawMessage {
	if len(res) <= maxResultBytes {
		return res
	}
	var whole map[string]any
	json.Unmarshal(res, &whole)
	out := map[string]any{"truncated": true, "bytes": len(res),
		"hint": "the result was too long to show whole: ask for less (scene.get_summary rather than scene.snapshot, fewer operations per plan)"}
	for _, k := range []string{"status", "request_id", "plan_state", "error_code", "message", "retry_hint"} {
		if v, ok := whole[k]; ok {
			out[k] = v
		}
	}
	start := res[:maxResultBytes/2]
	for len(start) > 0 && !utf8.Valid(start) {
		start = start[:len(start)-1]
	}
	out["start"] = string(start)
	return mustJSON(out)
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(map[string]any{"error_code": "INTERNAL", "message": err.Error()})
	}
	return b
}

func str(v any) string { s, _ := v.(string); return s }

// safeProviderError is what a client may see of a provider's error: its
// HTTP status when it has one, never its body (which may echo the prompt).
func safeProviderError(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "it did not answer in time"
	}
	var pe *ProviderError
	switch {
	case errors.As(err, &pe) && pe.Status != 0:
		return fmt.Sprintf("%s answered HTTP %d", pe.Provider, pe.Status)
	case errors.As(err, &pe):
		return pe.Provider + " could not be reached (the control plane's log has the detail)"
	}
	return "see the control plane's log"
}
