package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// TestDescribeError: a refusal says what the call was for, its status once
// (a wrapped status's own text repeated its code and message), its reason;
// a missing token says how blendctl sends one.
func TestDescribeError(t *testing.T) {
	st, err := status.New(codes.InvalidArgument, "TOOL_UNKNOWN: operation \"a\": no tool \"object.creat\"").
		WithDetails(&errdetails.ErrorInfo{Reason: "TOOL_UNKNOWN"})
	if err != nil {
		t.Fatal(err)
	}
	got := describeError(fmt.Errorf("submit typo.json: %w", st.Err()))
	want := "submit typo.json: InvalidArgument: TOOL_UNKNOWN: operation \"a\": no tool \"object.creat\"\n  reason: TOOL_UNKNOWN"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if got := describeError(status.Error(codes.Unauthenticated, "no bearer token")); !strings.HasPrefix(got, "Unauthenticated: no bearer token\n  hint: blendctl sends the token of --token") {
		t.Errorf("no token: %s", got)
	}
	if got := describeError(fmt.Errorf("read x.json: %w", fmt.Errorf("boom"))); got != "read x.json: boom" {
		t.Errorf("not a status: %s", got)
	}
}

// TestProgressWaitingForAgent: a plan waiting for its agent is told once
// per wait, not at every retry's progress.
func TestProgressWaitingForAgent(t *testing.T) {
	var out strings.Builder
	p := newProgress(&out, 3, false)
	wait := func(until string) *cpv1.Progress {
		d, _ := structpb.NewStruct(map[string]any{"waiting_for_agent": "agent-1", "reason": "connection refused", "retry_until": until})
		return &cpv1.Progress{OperationId: "b", Detail: d}
	}
	p.step(wait("2026-11-29T10:05:00Z"))
	p.step(wait("2026-11-29T10:05:00Z"))
	p.step(&cpv1.Progress{OperationId: "b", Done: 1, Total: 4})
	want := "         waiting for agent agent-1 to answer (connection refused); retrying until 2026-11-29T10:05:00Z\n         b: 1/4\n"
	if out.String() != want {
		t.Errorf("got\n%q\nwant\n%q", out.String(), want)
	}
}

// TestProgressWaitingBehind: a plan queued behind one that waits for
// approval is told so once.
func TestProgressWaitingBehind(t *testing.T) {
	var out strings.Builder
	p := newProgress(&out, 1, false)
	d, _ := structpb.NewStruct(map[string]any{"waiting_behind": "del-1", "approval_id": "apr-3"})
	p.step(&cpv1.Progress{Detail: d})
	p.step(&cpv1.Progress{Detail: d})
	if want := "         waiting behind plan del-1, which waits for approval apr-3\n"; out.String() != want {
		t.Errorf("got\n%q\nwant\n%q", out.String(), want)
	}
}

// TestUndefinedFlag: the flag a command did not know, wrapped or not.
func TestUndefinedFlag(t *testing.T) {
	for err, want := range map[error]string{
		errors.New("flag provided but not defined: -json"):                                                "json",
		fmt.Errorf("%w (usage: blendctl approve ID)", errors.New("flag provided but not defined: -addr")): "addr",
		errors.New("flag provided but not defined: -"):                                                    "",
		errors.New("something else"):                                                                      "",
		nil:                                                                                               "",
	} {
		if got := undefinedFlag(err); got != want {
			t.Errorf("undefinedFlag(%v) = %q, want %q", err, got, want)
		}
	}
}

// TestBarOfAnyProgress: progress comes from the agent; numbers out of
// range draw a full or empty bar (strings.Repeat panicked on them).
func TestBarOfAnyProgress(t *testing.T) {
	for _, c := range []struct {
		done, total int
		want        string
	}{{5, 10, "[#####.....]"}, {30, 10, "[##########]"}, {-3, 10, "[..........]"}, {1, 0, ""}, {1, -2, ""}} {
		if got := bar(c.done, c.total, 10); got != c.want {
			t.Errorf("bar(%d, %d) = %q, want %q", c.done, c.total, got, c.want)
		}
	}
}

// TestProgressOfARollback: the receipts of a rolled-back plan's undos are
// counted as undos, not as steps past the plan's end ("[3/2]"), a file
// left on its agent says so, and the end counts its receipts in English.
func TestProgressOfARollback(t *testing.T) {
	var out strings.Builder
	p := newProgress(&out, 3, false)
	p.receipt(&cpv1.Receipt{Sequence: 1, OperationId: "a", ToolName: "render.still", Status: cpv1.Receipt_STATUS_SUCCEEDED,
		Artifacts: []*cpv1.Artifact{{Name: "big.png", SizeBytes: 5, Sha256: "ab", LeftOnAgent: true}}})
	p.receipt(&cpv1.Receipt{Sequence: 2, OperationId: "b", ToolName: "scene.import", Status: cpv1.Receipt_STATUS_FAILED})
	p.receipt(&cpv1.Receipt{Sequence: 3, OperationId: "a", ToolName: "render.still", Status: cpv1.Receipt_STATUS_ROLLED_BACK})
	p.receipt(&cpv1.Receipt{Sequence: 4, OperationId: "c", ToolName: "object.create", Status: cpv1.Receipt_STATUS_NOT_RUN})
	p.done(&cpv1.Plan{RequestId: "r", State: cpv1.Plan_STATE_FAILED, ReceiptCount: 4})
	text := out.String()
	for _, want := range []string{"[1/3] a ", "[2/3] b ", "[undo] a ", "[3/3] c ", "wrote big.png (5 bytes, sha256 ab) [left on the agent", ": 4 receipts in "} {
		if !strings.Contains(text, want) {
			t.Errorf("lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "[4/3]") || strings.Contains(text, "[3/2]") {
		t.Errorf("a receipt counted past the end:\n%s", text)
	}
	out.Reset()
	p.done(&cpv1.Plan{RequestId: "r", State: cpv1.Plan_STATE_SUCCEEDED, ReceiptCount: 1,
		CreateTime: &timestamppb.Timestamp{Seconds: 100}, UpdateTime: &timestamppb.Timestamp{Seconds: 102, Nanos: 5e8}})
	if !strings.Contains(out.String(), ": 1 receipt in 2.5s") { // the plan's time, not the watch's
		t.Errorf("one receipt: %s", out.String())
	}
}

// TestUsageErrors: a command line blendctl cannot take is a usage error
// (exit status 2), told apart from a call or a file that failed (1).
func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{{}, {"nope"}, {"download", "x.png"}, {"submit"}, {"sessions", "--bogus"},
		{"approve"}, {"policy", "frob"}, {"--bogus"}, {"token", "frob"}, {"token", "create", "--bogus"}, {"lesson", "frob"},
		{"prompt"}, {"sessions", "--state", "frob"}, {"agents", "extra"}, {"sessions", "extra"}, {"tools", "extra"},
		{"macros", "extra"}, {"negotiate", "extra"}, {"approvals", "--state", "bogus"}, {"approvals", "extra"},
		{"negotiate", "--selector", "gpu"}} {
		if err := run(args); !errors.As(err, new(usageError)) {
			t.Errorf("blendctl %q: %v, want a usage error", args, err)
		}
	}
	plan := filepath.Join(t.TempDir(), "plan.json")
	os.WriteFile(plan, []byte(`{"request_id": "r", "operations": [{"operation_id": "a", "tool_name": "scene.get_summary", "safety_level": "read_only"}]}`), 0o600)
	if err := run([]string{"submit", plan, "--session", "s-1", "--flag", "progress_events"}); !errors.As(err, new(usageError)) ||
		!strings.Contains(err.Error(), "--flag") {
		t.Errorf("session terms with --session: %v, want a usage error naming --flag", err)
	}
	if err := run([]string{"submit", filepath.Join(t.TempDir(), "missing.json")}); err == nil || errors.As(err, new(usageError)) {
		t.Errorf("a plan file that is not there: %v, want an error that is not a usage error", err)
	}
}

// TestJSONList: --json prints a list as one JSON array, which a JSON parser
// takes whole (it printed objects one after another), an empty one as [].
func TestJSONList(t *testing.T) {
	for _, n := range []int{0, 1, 3} {
		var out strings.Builder
		c := &cli{json: true, out: &out}
		var list []*cpv1.Session
		for i := range n {
			list = append(list, &cpv1.Session{SessionId: fmt.Sprint("s-", i), Owner: "ana"})
		}
		if err := printList(c, list, printSessions); err != nil {
			t.Fatal(err)
		}
		var got []map[string]any
		if err := json.Unmarshal([]byte(out.String()), &got); err != nil || len(got) != n || n > 0 && got[n-1]["sessionId"] != fmt.Sprint("s-", n-1) {
			t.Errorf("%d sessions: %v %v\n%s", n, got, err, out.String())
		}
	}
}
