package service

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"buf.build/go/protovalidate"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"

	agentv1 "github.com/blendplane/blendplane/gen/blendplane/agent/v1"
	"github.com/blendplane/blendplane/internal/wireid"
)

const idPattern = wireid.Pattern

// callRules are OperationCall's rules, which operationValid works out by
// hand, and those of ExecuteRequest, whose operations Validator checks
// apart from the rest: none may look at two operations at once.
var callRules = map[protoreflect.FullName]map[string]string{
	"blendplane.agent.v1.OperationCall": {
		"operation_id":    `string:{pattern:"` + idPattern + `"}`,
		"tool_name":       `string:{min_len:1 max_len:128}`,
		"args":            `ignore:IGNORE_ALWAYS`,
		"idempotency_key": `string:{pattern:"^[0-9a-f]{64}$"}`,
		"mcp_call_id":     `string:{pattern:"` + idPattern + `"}`,
		"time_budget_ms":  `int64:{gte:0}`,
	},
	"blendplane.agent.v1.ExecuteRequest": {
		"session_id": `string:{pattern:"` + wireid.SessionPattern + `"}`,
		"request_id": `string:{pattern:"` + idPattern + `"}`,
		"operations": `repeated:{min_items:1}`,
		"epoch":      `int64:{gte:0}`,
	},
}

// TestOperationRulesUnchanged: the rules are still the ones operationValid
// and Validator were written for. A change to them must change those too.
func TestOperationRulesUnchanged(t *testing.T) {
	for _, m := range []proto.Message{&agentv1.OperationCall{}, &agentv1.ExecuteRequest{}} {
		md := m.ProtoReflect().Descriptor()
		if proto.HasExtension(md.Options(), validate.E_Message) || md.Oneofs().Len() != 0 {
			t.Errorf("%s has message rules or oneofs now", md.FullName())
		}
		want := callRules[md.FullName()]
		fields := md.Fields()
		for i := range fields.Len() {
			fd := fields.Get(i)
			got := ""
			if proto.HasExtension(fd.Options(), validate.E_Field) {
				got = strings.Join(strings.Fields(prototext.Format(proto.GetExtension(fd.Options(), validate.E_Field).(*validate.FieldRules))), "")
			}
			if got != strings.Join(strings.Fields(want[string(fd.Name())]), "") {
				t.Errorf("%s.%s has rules %q; Validator was written for %q", md.FullName(), fd.Name(), got, want[string(fd.Name())])
			}
		}
	}
}

// TestOperationValidAgrees: over operations built from good and bad parts,
// whatever operationValid passes protovalidate passes too, and most valid
// ones pass it (else the fast path would never be taken); and Validator's
// verdict on a whole request, its error included, is protovalidate's.
func TestOperationValidAgrees(t *testing.T) {
	pv, err := protovalidate.New()
	if err != nil {
		t.Fatal(err)
	}
	val := Validator{Validator: pv}
	key := strings.Repeat("0a", 32)
	ids := []string{"a", "op-1", "A.b:c_d-9", strings.Repeat("x", 128), strings.Repeat("x", 129), "", "bad id",
		"é", "a\n", "a/b", "a$", "\x00", "ok\u00e9"}
	tools := []string{"object.create", "x", strings.Repeat("t", 128), strings.Repeat("é", 64), "",
		strings.Repeat("t", 129), strings.Repeat("é", 65), strings.Repeat("é", 128), strings.Repeat("é", 129)}
	keys := []string{key, strings.Repeat("f", 64), "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", key[:63],
		key + "0", strings.ToUpper(key), "", strings.Repeat("g", 64), strings.Repeat("é", 32)}
	budgets := []int64{0, 1, 60000, 1 << 40, -1, -60000}
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(n int) int { // mostly one of the first four (good)
		if rng.IntN(5) > 0 {
			return rng.IntN(min(4, n))
		}
		return rng.IntN(n)
	}
	randomOp := func() *agentv1.OperationCall {
		return &agentv1.OperationCall{OperationId: ids[pick(len(ids))], ToolName: tools[pick(len(tools))], Args: &structpb.Struct{},
			IdempotencyKey: keys[pick(len(keys))], McpCallId: ids[pick(len(ids))], TimeBudgetMs: budgets[pick(len(budgets))],
			SafetyLevel: 2, Verify: rng.IntN(2) == 0}
	}
	passed, valid := 0, 0
	for range 20000 {
		op := randomOp()
		verr := pv.Validate(op)
		if operationValid(op) {
			passed++
			if verr != nil {
				t.Fatalf("operationValid passes %v; protovalidate: %v", op, verr)
			}
		}
		if verr == nil {
			valid++
		}
	}
	if passed == 0 || passed < valid/2 {
		t.Fatalf("operationValid passed %d of the %d operations protovalidate passes", passed, valid)
	}
	wholeSame, fast := 0, 0
	for range 3000 {
		req := &agentv1.ExecuteRequest{SessionId: ids[pick(len(ids))], RequestId: "r", Epoch: budgets[pick(len(budgets))]}
		for range 1 + rng.IntN(5) {
			req.Operations = append(req.Operations, randomOp())
		}
		ops := req.GetOperations()
		got, want := val.Validate(req), pv.Validate(req)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("Validator: %v\nprotovalidate: %v", got, want)
		}
		if len(req.GetOperations()) != len(ops) {
			t.Fatalf("Validator left the request with %d operations of %d", len(req.GetOperations()), len(ops))
		}
		wholeSame++
		if len(ops) > 1 && want == nil {
			fast++
		}
	}
	if fast == 0 {
		t.Fatal("no valid request of several operations: the fast path went untested")
	}
	t.Logf("operationValid passed %d, protovalidate %d, of 20000 operations; %d requests, %d valid with several operations", passed, valid, wholeSame, fast)
}

// TestSessionIDRules: every session id agentd is sent has the rule that
// keeps it a directory of its own (wireid.SessionPattern), the one its
// session manager checks again.
func TestSessionIDRules(t *testing.T) {
	msgs := agentv1.File_blendplane_agent_v1_agent_proto.Messages()
	n := 0
	for i := range msgs.Len() {
		fd := msgs.Get(i).Fields().ByName("session_id")
		if fd == nil {
			continue
		}
		n++
		rules, _ := proto.GetExtension(fd.Options(), validate.E_Field).(*validate.FieldRules)
		if got := rules.GetString().GetPattern(); got != wireid.SessionPattern {
			t.Errorf("%s: pattern %q, want %q", fd.FullName(), got, wireid.SessionPattern)
		}
	}
	if n < 10 {
		t.Errorf("%d session ids found", n)
	}
}
