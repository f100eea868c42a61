package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

func (c *cli) printJSON(m proto.Message) error {
	raw, err := protojson.MarshalOptions{Multiline: true}.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(c.out, string(raw))
	return err
}

// printList prints a list as one JSON array with --json (objects one after
// another were no JSON document a parser takes), else as table draws it.
func printList[T proto.Message](c *cli, list []T, table func(io.Writer, []T)) error {
	if !c.json {
		table(c.out, list)
		return nil
	}
	return printJSONList(c, list)
}

// printJSONList prints list as one JSON array, an element per line.
func printJSONList[T proto.Message](c *cli, list []T) error {
	var b strings.Builder
	b.WriteString("[")
	for i, m := range list {
		raw, err := protojson.Marshal(m)
		if err != nil {
			return err
		}
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("\n  ")
		b.Write(raw)
	}
	b.WriteString("\n]\n")
	_, err := io.WriteString(c.out, b.String())
	return err
}

// describeError renders a gRPC error with its reason, field violations and
// repair plan, so a refusal says what to fix.
func describeError(err error) string {
	var rpc interface {
		error
		GRPCStatus() *status.Status
	}
	if !errors.As(err, &rpc) {
		return err.Error()
	}
	st := rpc.GRPCStatus()
	// What the call was for ("submit plan.json: "), then the status once:
	// a wrapped status's own text repeats its code and message.
	var b strings.Builder
	fmt.Fprintf(&b, "%s%s: %s", strings.TrimSuffix(err.Error(), rpc.Error()), st.Code(), st.Message())
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			fmt.Fprintf(&b, "\n  reason: %s", d.GetReason())
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				fmt.Fprintf(&b, "\n  %s: %s", v.GetField(), v.GetDescription())
			}
		case *cpv1.RepairPlan:
			for _, s := range d.GetSteps() {
				fmt.Fprintf(&b, "\n  repair: %s %s", strings.TrimPrefix(s.GetAction().String(), "ACTION_"), s.GetOperationId())
			}
		}
	}
	switch msg := st.Message(); {
	case strings.Contains(msg, "first record does not look like a TLS handshake"):
		b.WriteString("\n  hint: the control plane there serves plain gRPC (as it does on loopback): drop --ca-file (or $BLENDPLANE_CA_FILE)")
	case strings.Contains(msg, "http2: frame too large"), strings.Contains(msg, "HTTP/1.1 header"):
		b.WriteString("\n  hint: that address answers HTTP/1, not gRPC: blendctl's --addr is the control plane's --listen (7400), not its --http-listen")
	}
	if st.Code() == codes.Unauthenticated {
		b.WriteString("\n  hint: blendctl sends the token of --token or --token-file (or $BLENDPLANE_TOKEN, $BLENDPLANE_TOKEN_FILE); " +
			"a control plane's first start writes <data-dir>/admin.token")
	}
	return b.String()
}

func stateName(s cpv1.Plan_State) string { return strings.TrimPrefix(s.String(), "STATE_") }

// plural is n with its noun: "1 operation", "2 operations".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

func abbreviate(ids []string, n int) string {
	if len(ids) <= n {
		return strings.Join(ids, " → ")
	}
	return strings.Join(ids[:n], " → ") + fmt.Sprintf(" → … (%d more)", len(ids)-n)
}

func short(hash string) string {
	if len(hash) > 12 {
		return hash[:12]
	}
	return hash
}

// progress prints one line per receipt, with a live counter.
type progress struct {
	out    io.Writer
	total  int
	seen   int // operations' receipts (not undos)
	undos  int // ROLLED_BACK receipts
	failed int
	start  time.Time
	tty    bool
	quiet  bool
	// waiting is the agent wait last told (agent and retry deadline).
	waiting string
}

func newProgress(out io.Writer, total int, quiet bool) *progress {
	return &progress{out: out, total: total, start: time.Now(), tty: isTerminal(out), quiet: quiet}
}

// isTerminal reports whether out is a terminal (for live counters and
// pictures).
func isTerminal(out io.Writer) bool {
	f, ok := out.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func (p *progress) receipt(r *cpv1.Receipt) {
	undo := r.GetStatus() == cpv1.Receipt_STATUS_ROLLED_BACK // of an operation counted already
	if undo {
		p.undos++
	} else {
		p.seen++
	}
	status := strings.TrimPrefix(r.GetStatus().String(), "STATUS_")
	if r.GetStatus() == cpv1.Receipt_STATUS_FAILED || r.GetStatus() == cpv1.Receipt_STATUS_NOT_RUN {
		p.failed++
	}
	width := len(fmt.Sprint(p.total))
	if p.tty {
		fmt.Fprint(p.out, "\r\033[K")
	}
	// The operation's place: its receipt's sequence less the undos before
	// it (the receipts after a rollback's numbered past the total).
	counter := fmt.Sprintf("%*d/%d", width, r.GetSequence()-int64(p.undos), p.total)
	if undo {
		counter = fmt.Sprintf("%-*s", 2*width+1, "undo")
	}
	line := fmt.Sprintf("[%s] %-24s %-22s %-18s", counter, r.GetOperationId(), r.GetToolName(), status)
	if r.GetSceneHashAfter() != "" {
		line += " scene " + short(r.GetSceneHashAfter())
	}
	if d := r.GetDurationMicros(); d > 0 {
		line += fmt.Sprintf(" %6.1fms", float64(d)/1000)
	}
	fmt.Fprintln(p.out, line)
	for _, a := range r.GetArtifacts() {
		fmt.Fprintf(p.out, "         wrote %s (%d bytes, sha256 %s)%s\n", a.GetName(), a.GetSizeBytes(), short(a.GetSha256()), leftNote(a))
	}
	if e := r.GetError(); e != nil && r.GetStatus() == cpv1.Receipt_STATUS_FAILED {
		fmt.Fprintf(p.out, "         %s: %s\n         hint: %s\n", e.GetErrorCode(), e.GetMessage(), e.GetRetryHint())
	}
	if p.tty && p.seen < p.total {
		fmt.Fprintf(p.out, "%s %d/%d done, %s", bar(p.seen, p.total, 30), p.seen, p.total, time.Since(p.start).Round(100*time.Millisecond))
	}
}

// step shows a running operation's progress (e.g. frames rendered), or
// that the plan waits for its agent to answer again, or behind a plan that
// waits for approval (told once per wait).
func (p *progress) step(pg *cpv1.Progress) {
	if f := pg.GetDetail().GetFields(); f["waiting_behind"].GetStringValue() != "" {
		if key := "behind " + f["waiting_behind"].GetStringValue(); key != p.waiting {
			p.waiting = key
			fmt.Fprintf(p.out, "         waiting behind plan %s, which waits for approval %s\n", f["waiting_behind"].GetStringValue(),
				f["approval_id"].GetStringValue())
		}
		return
	}
	if f := pg.GetDetail().GetFields(); f["waiting_for_agent"].GetStringValue() != "" {
		agent, until := f["waiting_for_agent"].GetStringValue(), f["retry_until"].GetStringValue()
		if agent+until == p.waiting {
			return
		}
		p.waiting = agent + until
		if p.tty {
			fmt.Fprint(p.out, "\r\033[K")
		}
		fmt.Fprintf(p.out, "         waiting for agent %s to answer (%s); retrying until %s\n", agent, f["reason"].GetStringValue(), until)
		return
	}
	if p.tty {
		fmt.Fprintf(p.out, "\r\033[K  %s: %s %d/%d", pg.GetOperationId(), bar(int(pg.GetDone()), int(pg.GetTotal()), 20), pg.GetDone(), pg.GetTotal())
		return
	}
	fmt.Fprintf(p.out, "         %s: %d/%d\n", pg.GetOperationId(), pg.GetDone(), pg.GetTotal())
}

func bar(done, total, width int) string {
	if total <= 0 {
		return ""
	}
	n := min(max(done*width/total, 0), width) // the agent's numbers
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", width-n) + "]"
}

func (p *progress) done(plan *cpv1.Plan) {
	if p.tty {
		fmt.Fprint(p.out, "\r\033[K")
	}
	took := time.Since(p.start) // the watch's own, for a plan that says nothing of its times
	if plan.GetCreateTime() != nil && plan.GetUpdateTime() != nil {
		took = plan.GetUpdateTime().AsTime().Sub(plan.GetCreateTime().AsTime()) // a plan watched after it ended too
	}
	fmt.Fprintf(p.out, "plan %s %s: %s in %s\n", plan.GetRequestId(), stateName(plan.GetState()),
		plural(int(plan.GetReceiptCount()), "receipt"), took.Round(time.Millisecond))
	if f := plan.GetFailure(); f != nil {
		fmt.Fprintf(p.out, "  %s: %s\n  hint: %s\n", f.GetErrorCode(), f.GetMessage(), f.GetRetryHint())
	}
}

func printPlan(out io.Writer, p *cpv1.Plan) {
	// Receipts, not operations done: an undone operation has a second.
	fmt.Fprintf(out, "plan %s\n  session:   %s\n  state:     %s\n  receipts:  %d (%d operations)\n  registry:  %s\n  schedule:  %s\n",
		p.GetRequestId(), p.GetSessionId(), stateName(p.GetState()), p.GetReceiptCount(), len(p.GetSchedule()),
		short(p.GetRegistryFingerprint()), abbreviate(p.GetSchedule(), 12))
	if f := p.GetFailure(); f != nil {
		fmt.Fprintf(out, "  failure:   %s: %s\n  hint:      %s\n", f.GetErrorCode(), f.GetMessage(), f.GetRetryHint())
	}
}

func printPlans(out io.Writer, plans []*cpv1.Plan) {
	if len(plans) == 0 {
		fmt.Fprintln(out, "no plans")
		return
	}
	fmt.Fprintf(out, "%-32s %-20s %-10s %-12s %-24s %s\n", "REQUEST", "STATE", "RECEIPTS", "OWNER", "CREATED", "FAILURE")
	for _, p := range plans {
		fmt.Fprintf(out, "%-32s %-20s %-10s %-12s %-24s %s\n", p.GetRequestId(), stateName(p.GetState()),
			strconv.FormatInt(p.GetReceiptCount(), 10), p.GetOwner(),
			p.GetCreateTime().AsTime().UTC().Format("2006-01-02T15:04:05.000Z"), p.GetFailure().GetErrorCode())
	}
}

func printContract(out io.Writer, c *cpv1.SessionContract) {
	bp := c.GetBlenderProfile()
	fmt.Fprintf(out, "session %s\n  contract:  %s\n  agent:     %s\n  blender:   %s (%s, %s, python %s)\n  registry:  %s %s\n  baseline:  %s\n",
		c.GetSessionId(), c.GetContractVersion(), c.GetAgentId(), bp.GetVersion(), bp.GetRuntime(), bp.GetPlatform(),
		bp.GetPythonVersion(), c.GetToolRegistryRef().GetVersion(), short(c.GetToolRegistryRef().GetFingerprint()),
		short(c.GetBaselineSceneHash()))
	caps, cons, lim := c.GetCapabilities(), c.GetConstraints(), c.GetLimits()
	fmt.Fprintf(out, "  flags:     %s\n  tools:     %d callable\n  macros:    %s %s\n",
		strings.Join(caps.GetFeatureFlags(), ", "), len(caps.GetTools()), c.GetMacroRegistryRef().GetVersion(),
		short(c.GetMacroRegistryRef().GetFingerprint()))
	fmt.Fprintf(out, "  budget:    %d ms per tool call; memory %d MiB; storage %d MiB; rails %s\n",
		cons.GetToolTimeBudgetMs(), cons.GetMaxMemoryMib(), cons.GetTempStorageMib(), strings.Join(cons.GetSafetyRails(), ", "))
	fmt.Fprintf(out, "  limits:    %d operations, %d bytes per plan, %d tools, %d concurrent call\n  contract:  %s\n",
		lim.GetMaxOperationsPerPlan(), lim.GetMaxPayloadBytes(), lim.GetToolSurfaceCap(), lim.GetMaxConcurrentCalls(),
		short(c.GetFingerprints()["contract"]))
}

func printAgents(out io.Writer, agents []*cpv1.Agent) {
	if len(agents) == 0 {
		fmt.Fprintln(out, "no agents registered")
		return
	}
	fmt.Fprintf(out, "%-20s %-22s %-12s %-9s %-9s %-10s %-20s %s\n", "AGENT", "ADDRESS", "STATE", "SESSIONS", "BLENDERS", "HEARTBEAT", "LABELS", "RUNTIMES")
	for _, a := range agents {
		var rts []string
		for _, rt := range a.GetRuntimes() {
			rts = append(rts, fmt.Sprintf("%s (%d tools)", rt.GetRuntimeId(), len(rt.GetRegistry().GetTools())))
		}
		sort.Strings(rts)
		labels := make([]string, 0, len(a.GetLabels()))
		for k, v := range a.GetLabels() {
			labels = append(labels, k+"="+v)
		}
		sort.Strings(labels)
		blenders := fmt.Sprintf("%d/%d", a.GetLiveSessionCount(), a.GetMaxSessions())
		if a.GetState() == cpv1.Agent_STATE_LOST { // what it said last: its Blenders are gone with it
			blenders = "-"
		}
		fmt.Fprintf(out, "%-20s %-22s %-12s %-9d %-9s %-10s %-20s %s\n", a.GetAgentId(), a.GetAddress(),
			strings.TrimPrefix(a.GetState().String(), "STATE_"), len(a.GetSessionIds()), blenders,
			time.Since(a.GetLastSeenTime().AsTime()).Round(time.Second).String()+" ago", cmp.Or(strings.Join(labels, ","), "-"), strings.Join(rts, ", "))
	}
}

// printAudit draws one audit record as a row: a receipt's status, or the
// event of a record that is not a receipt (an approval, a rejection), with
// who did it.
func printAudit(out io.Writer, r *cpv1.AuditRecord, header bool) {
	if header {
		fmt.Fprintf(out, "%-6s %-24s %-24s %-16s %-20s %-18s %-12s %-12s %-12s %s\n",
			"SEQ", "TIME", "REQUEST", "OPERATION", "TOOL", "STATUS / EVENT", "PRINCIPAL", "BEFORE", "AFTER", "DETAIL")
	}
	what, detail := strings.TrimPrefix(r.GetStatus().String(), "STATUS_"), strings.TrimSpace(r.GetBlenderMutationId()+" "+r.GetMcpCallId())
	if r.GetEvent() != "" {
		what, detail = r.GetEvent(), strings.TrimSpace(r.GetApprovalId()+" "+r.GetSubject())
		if by := r.GetApprovedBy(); by != "" {
			detail += " by " + by
		}
	}
	if r.GetErrorCode() != "" {
		detail = strings.TrimSpace(r.GetErrorCode() + " " + detail)
	}
	fmt.Fprintf(out, "%-6d %-24s %-24s %-16s %-20s %-18s %-12s %-12s %-12s %s\n",
		r.GetSequence(), r.GetTimestamp().AsTime().UTC().Format("2006-01-02T15:04:05.000Z"),
		r.GetRequestId(), cmp.Or(r.GetOperationId(), "-"), cmp.Or(r.GetToolName(), "-"), what, cmp.Or(r.GetPrincipal(), "-"),
		cmp.Or(short(r.GetSceneHashBefore()), "-"), cmp.Or(short(r.GetSceneHashAfter()), "-"), detail)
}

func printTools(out io.Writer, resp *cpv1.ListToolsResponse) {
	ref := resp.GetRegistryRef()
	fmt.Fprintf(out, "registry %s %s, %d tools\n", ref.GetVersion(), short(ref.GetFingerprint()), len(resp.GetTools()))
	fmt.Fprintf(out, "%-22s %-8s %-12s %-14s %-13s %-13s %-10s %s\n", "TOOL", "VERSION", "SAFETY", "MODE", "DETERMINISM", "ROLLBACK", "BLENDER", "DESCRIPTION")
	for _, t := range resp.GetTools() {
		fmt.Fprintf(out, "%-22s %-8s %-12s %-14s %-13s %-13s %-10s %s\n", t.GetName(), t.GetVersion(),
			strings.ToLower(strings.TrimPrefix(t.GetSafetyLevel().String(), "SAFETY_LEVEL_")), t.GetSafetyMode(),
			t.GetDeterminismClass(), t.GetRollbackMethod(), t.GetBlenderVersions(), t.GetDescription())
	}
}

func printMacros(out io.Writer, resp *cpv1.ListMacrosResponse) {
	ref := resp.GetRegistryRef()
	fmt.Fprintf(out, "macro registry %s %s\n", ref.GetVersion(), short(ref.GetFingerprint()))
	for _, m := range resp.GetMacros() {
		example, _ := protojson.Marshal(m.GetExampleArgs())
		fmt.Fprintf(out, "\n%s %s\n  %s\n  tools:   %s\n  example: %s\n", m.GetName(), m.GetVersion(), m.GetDescription(),
			strings.Join(m.GetTools(), ", "), example)
	}
}

func sessionState(s cpv1.Session_State) string { return strings.TrimPrefix(s.String(), "STATE_") }

func printSessions(out io.Writer, sessions []*cpv1.Session) {
	if len(sessions) == 0 {
		fmt.Fprintln(out, "no sessions")
		return
	}
	fmt.Fprintf(out, "%-28s %-8s %-12s %-20s %-26s %-6s %-12s %s\n", "SESSION", "STATE", "OWNER", "AGENT", "RUNTIME", "PLANS", "SCENE", "LAST USED")
	for _, s := range sessions {
		fmt.Fprintf(out, "%-28s %-8s %-12s %-20s %-26s %-6d %-12s %s\n", s.GetSessionId(), sessionState(s.GetState()), s.GetOwner(), s.GetAgentId(),
			s.GetRuntimeId(), s.GetPlanCount(), short(s.GetSceneHash()), s.GetUpdateTime().AsTime().Local().Format(time.DateTime))
	}
}

func printSession(out io.Writer, s *cpv1.Session) {
	fmt.Fprintf(out, "session %s\n  owner:     %s\n  state:     %s\n  agent:     %s\n  runtime:   %s\n  scene:     %s\n  plans:     %d (%d unfinished)\n  created:   %s\n  last used: %s\n",
		s.GetSessionId(), s.GetOwner(), sessionState(s.GetState()), s.GetAgentId(), s.GetRuntimeId(), s.GetSceneHash(),
		s.GetPlanCount(), s.GetActivePlanCount(), s.GetCreateTime().AsTime().Local().Format(time.DateTime),
		s.GetUpdateTime().AsTime().Local().Format(time.DateTime))
	if s.GetCloseTime() != nil {
		fmt.Fprintf(out, "  closed:    %s\n", s.GetCloseTime().AsTime().Local().Format(time.DateTime))
	}
}

func printArtifacts(out io.Writer, list []*cpv1.Artifact) {
	if len(list) == 0 {
		fmt.Fprintln(out, "no artifacts")
		return
	}
	fmt.Fprintf(out, "%-32s %12s %-12s %-20s %s\n", "NAME", "BYTES", "SHA256", "PLAN", "OPERATION")
	for _, a := range list {
		plan, op := a.GetRequestId(), a.GetOperationId()
		if plan == "" {
			plan, op = "(upload)", ""
		}
		fmt.Fprintf(out, "%-32s %12d %-12s %-20s %s%s\n", a.GetName(), a.GetSizeBytes(), short(a.GetSha256()), plan, op, leftNote(a))
	}
}

// leftNote marks a file only its agent has: it goes with its session.
func leftNote(a *cpv1.Artifact) string {
	if !a.GetLeftOnAgent() {
		return ""
	}
	return " [left on the agent: download it before the session closes]"
}
