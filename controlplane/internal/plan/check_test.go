package plan

import (
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestCheckRefusals(t *testing.T) {
	reg := testRegistry(t)
	create := func(id string, args string, deps ...string) Operation {
		return Operation{ID: id, Tool: "object.create", Args: decodeJSON(t, args), DependsOn: deps, Safety: SafetySafeWrite}
	}
	tests := []struct {
		name       string
		ops        []Operation
		reason     string
		message    []string // substrings of Message
		violations []Violation
		repair     []RepairStep
	}{
		{
			name:    "duplicate ids, every later copy",
			ops:     []Operation{op("a"), op("b"), op("a"), op("a")},
			reason:  ReasonOperationIDDuplicate,
			message: []string{"operation_id reused by 2 operations"},
			violations: []Violation{
				{"operations[2].operation_id", `operation_id "a" is already used by operations[0]`},
				{"operations[3].operation_id", `operation_id "a" is already used by operations[0]`},
			},
			repair: []RepairStep{{"a", ActionDrop}, {"a", ActionDrop}},
		},
		{
			name: "duplicates win over later stages",
			ops: []Operation{
				{ID: "x", Tool: "nope", DependsOn: []string{"ghost", "x"}},
				{ID: "x", Tool: "nope"},
			},
			reason:     ReasonOperationIDDuplicate,
			violations: []Violation{{"operations[1].operation_id", `operation_id "x" is already used by operations[0]`}},
			repair:     []RepairStep{{"x", ActionDrop}},
		},
		{
			name: "missing dependencies win over a self edge",
			// b's self edges are a cycle, but missing dependencies are
			// checked first: only they are listed.
			ops:     []Operation{op("a", "ghost"), op("b", "a", "ghost", "b", "b"), op("c", "phantom")},
			reason:  ReasonDependencyMissing,
			message: []string{"depends_on names no operation of the plan in 3 entries"},
			violations: []Violation{
				{"operations[0].depends_on[0]", `operation "a" depends on "ghost", which is not in the plan`},
				{"operations[1].depends_on[1]", `operation "b" depends on "ghost", which is not in the plan`},
				{"operations[2].depends_on[0]", `operation "c" depends on "phantom", which is not in the plan`},
			},
			repair: []RepairStep{
				{"ghost", ActionInsertPrecondition},
				{"phantom", ActionInsertPrecondition},
			},
		},
		{
			name:    "an operation that depends on itself is a cycle of one",
			ops:     []Operation{op("a", "a")},
			reason:  ReasonGraphCycle,
			message: []string{"dependency cycle a → a (", "1 operation can never run"},
			violations: []Violation{
				{"operations[0].depends_on[0]", `operation "a" depends on "a" on a cycle of 1 operation`},
			},
			repair: []RepairStep{{"a", ActionDrop}},
		},
		{
			name: "a self edge among other edges, and its dependents",
			// b also waits on a and repeats its self edge; c waits on b.
			ops:     []Operation{op("c", "b"), op("b", "a", "b", "b"), op("a")},
			reason:  ReasonGraphCycle,
			message: []string{"dependency cycle b → b (", "2 operations can never run"},
			violations: []Violation{
				{"operations[1].depends_on[1]", `operation "b" depends on "b" on a cycle of 1 operation`},
			},
			repair: []RepairStep{{"b", ActionDrop}},
		},
		{
			name: "three-node cycle with a tail",
			// d waits on the cycle but is not on it; e is fine.
			ops:     []Operation{op("e"), op("d", "b"), op("c", "b"), op("b", "a"), op("a", "e", "c")},
			reason:  ReasonGraphCycle,
			message: []string{"dependency cycle a → c → b → a", "4 operations can never run"},
			violations: []Violation{
				{"operations[4].depends_on[1]", `operation "a" depends on "c" on a cycle of 3 operations`},
				{"operations[2].depends_on[0]", `operation "c" depends on "b" on a cycle of 3 operations`},
				{"operations[3].depends_on[0]", `operation "b" depends on "a" on a cycle of 3 operations`},
			},
			repair: []RepairStep{{"b", ActionDrop}},
		},
		{
			name:    "two-node cycle",
			ops:     []Operation{op("y", "x"), op("x", "y")},
			reason:  ReasonGraphCycle,
			message: []string{"dependency cycle x → y → x"},
			violations: []Violation{
				{"operations[1].depends_on[0]", `operation "x" depends on "y" on a cycle of 2 operations`},
				{"operations[0].depends_on[0]", `operation "y" depends on "x" on a cycle of 2 operations`},
			},
			repair: []RepairStep{{"y", ActionDrop}},
		},
		{
			name: "unknown tools list the known ones",
			ops: []Operation{
				op("a"),
				{ID: "b", Tool: "object.explode", Safety: SafetyDestructive},
				{ID: "c", Tool: "", Safety: SafetyReadOnly},
			},
			reason:  ReasonToolUnknown,
			message: []string{"unknown tool in 2 operations", "known tools: object.create, object.delete, object.select, scene.export, scene.inspect"},
			violations: []Violation{
				{"operations[1].tool_name", `operation "b": tool "object.explode" is not in the agent's registry`},
				{"operations[2].tool_name", `operation "c": tool "" is not in the agent's registry`},
			},
			repair: []RepairStep{{"b", ActionDrop}, {"c", ActionDrop}},
		},
		{
			name: "args against the schema, sorted by field",
			ops: []Operation{
				create("a", `{"name": "Cube", "kind": "MESH", "location": [0, 0, 0]}`),
				create("b", `{"name": "", "kind": "BLOB", "location": [1, "up"], "color": "red", "mesh": {"size": -1}}`, "a"),
				create("c", `{}`, "a"),
			},
			reason:  ReasonSchemaInvalid,
			message: []string{"input schema in 2 operations"},
			violations: []Violation{
				{"operations[1].args.color", `operation "b": property is not allowed`},
				{"operations[1].args.kind", `operation "b": value must be one of 'MESH', 'LIGHT', 'CAMERA', 'EMPTY'`},
				{"operations[1].args.location", `operation "b": minItems: got 2, want 3`},
				{"operations[1].args.location[1]", `operation "b": got string, want number`},
				{"operations[1].args.mesh.size", `operation "b": exclusiveMinimum: got -1, want 0`},
				{"operations[1].args.name", `operation "b": "" does not match the pattern ^[^\x00-\x1f\x7f]+$`},
				{"operations[1].args.name", `operation "b": minLength: got 0, want 1`},
				{"operations[2].args.kind", `operation "c": required property is missing`},
				{"operations[2].args.name", `operation "c": required property is missing`},
			},
			repair: []RepairStep{{"b", ActionReplaceArgs}, {"c", ActionReplaceArgs}},
		},
		{
			name: "args that are not JSON",
			ops: []Operation{
				{ID: "a", Tool: "scene.inspect", Safety: SafetyReadOnly, Args: map[string]any{
					"nan": math.NaN(), "odd key": []any{1.0, math.Inf(-1)}, "bad": "\xff", "ch": make(chan int),
				}},
			},
			reason: ReasonSchemaInvalid,
			violations: []Violation{
				{"operations[0].args.bad", `operation "a": string is not valid UTF-8`},
				{"operations[0].args.ch", `operation "a": chan int is not a JSON value`},
				{"operations[0].args.nan", `operation "a": NaN is not a JSON number`},
				{`operations[0].args["odd key"][1]`, `operation "a": -Inf is not a JSON number`},
			},
			repair: []RepairStep{{"a", ActionReplaceArgs}},
		},
		{
			name: "names over 63 UTF-8 bytes (x-max-bytes), nested too",
			ops: []Operation{
				create("a", `{"name": "Cube", "kind": "MESH"}`),
				// 63 characters pass maxLength, 63 bytes would not.
				create("b", `{"name": "`+strings.Repeat("a", 62)+`é", "kind": "MESH"}`),
				create("c", `{"name": "`+strings.Repeat("é", 63)+`", "kind": "MESH", "collection": "`+strings.Repeat("🧊", 16)+`"}`),
				{ID: "d", Tool: "object.select", Safety: SafetySafeWrite, Args: map[string]any{
					"names": []any{"Cube", strings.Repeat("ж", 32), strings.Repeat("ж", 31) + "a"},
				}},
			},
			reason:  ReasonSchemaInvalid,
			message: []string{"input schema in 3 operations"},
			violations: []Violation{
				{"operations[1].args.name", `operation "b": is 64 bytes in UTF-8, at most 63`},
				{"operations[2].args.collection", `operation "c": is 64 bytes in UTF-8, at most 63`},
				{"operations[2].args.name", `operation "c": is 126 bytes in UTF-8, at most 63`},
				{"operations[3].args.names[1]", `operation "d": is 64 bytes in UTF-8, at most 63`},
			},
			repair: []RepairStep{{"b", ActionReplaceArgs}, {"c", ActionReplaceArgs}, {"d", ActionReplaceArgs}},
		},
		{
			name: "control characters in names (pattern)",
			ops: []Operation{
				{ID: "nl", Tool: "object.create", Safety: SafetySafeWrite, Args: map[string]any{"name": "Cube\n", "kind": "MESH"}},
				{ID: "nul", Tool: "object.select", Safety: SafetySafeWrite, Args: map[string]any{"names": []any{"a\x00b"}, "active": "del\x7f"}},
				{ID: "ok", Tool: "object.create", Safety: SafetySafeWrite, Args: map[string]any{"name": "Cube é\u0085🧊", "kind": "MESH"}},
			},
			reason: ReasonSchemaInvalid,
			violations: []Violation{
				{"operations[0].args.name", `operation "nl": "Cube\n" does not match the pattern ^[^\x00-\x1f\x7f]+$`},
				{"operations[1].args.active", `operation "nul": "del\x7f" does not match the pattern ^[^\x00-\x1f\x7f]+$`},
				{"operations[1].args.names[0]", `operation "nul": "a\x00b" does not match the pattern ^[^\x00-\x1f\x7f]+$`},
			},
			repair: []RepairStep{{"nl", ActionReplaceArgs}, {"nul", ActionReplaceArgs}},
		},
		{
			name: "declared safety below the tool's",
			ops: []Operation{
				{ID: "look", Tool: "scene.inspect", Safety: SafetyDestructive},
				{ID: "del", Tool: "object.delete", Args: map[string]any{"name": "Cube"}, Safety: SafetyReadOnly},
				{ID: "mk", Tool: "object.create", Args: map[string]any{"name": "Cube", "kind": "MESH"}, Safety: SafetyUnspecified},
				{ID: "odd", Tool: "scene.inspect", Safety: SafetyLevel(9)},
			},
			reason:  ReasonPolicyBlocked,
			message: []string{"safety_level below the tool's in 3 operations"},
			violations: []Violation{
				{"operations[1].safety_level", `operation "del" declares read_only but tool "object.delete" is destructive`},
				{"operations[2].safety_level", `operation "mk" declares unspecified but tool "object.create" is safe_write`},
				{"operations[3].safety_level", `operation "odd" declares SafetyLevel(9) but tool "scene.inspect" is read_only`},
			},
			repair: []RepairStep{{"del", ActionReplaceArgs}, {"mk", ActionReplaceArgs}, {"odd", ActionReplaceArgs}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			schedule, err := Check(tt.ops, reg)
			if err == nil {
				t.Fatalf("Check accepted the plan with schedule %v", schedule)
			}
			pe := asPlanError(t, err)
			if pe.Reason != tt.reason {
				t.Fatalf("Reason = %s (%s), want %s", pe.Reason, pe.Message, tt.reason)
			}
			for _, m := range tt.message {
				if !strings.Contains(pe.Message, m) {
					t.Errorf("Message %q does not contain %q", pe.Message, m)
				}
			}
			if !strings.Contains(pe.Error(), pe.Reason) {
				t.Errorf("Error() %q does not name the reason", pe.Error())
			}
			if !slices.Equal(pe.Violations, tt.violations) {
				t.Errorf("Violations:\n got %q\nwant %q", pe.Violations, tt.violations)
			}
			if !slices.Equal(pe.Repair, tt.repair) {
				t.Errorf("Repair = %q, want %q", pe.Repair, tt.repair)
			}
		})
	}
}

func TestCheckToolUnknownManyTools(t *testing.T) {
	defs := make([]ToolDef, maxListedTools+1)
	for i := range defs {
		defs[i] = ToolDef{Name: "tool." + string(rune('a'+i%26)) + strings.Repeat("x", i/26), Safety: SafetyReadOnly, InputSchema: map[string]any{}}
	}
	reg, err := NewRegistry(defs)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Check([]Operation{op("a")}, reg)
	pe := asPlanError(t, err)
	if pe.Reason != ReasonToolUnknown || !strings.Contains(pe.Message, "the agent has 41 tools") || strings.Contains(pe.Message, "tool.a") {
		t.Fatalf("got %s: %s", pe.Reason, pe.Message)
	}

	_, err = Check([]Operation{op("a")}, nil)
	if pe := asPlanError(t, err); pe.Reason != ReasonToolUnknown || !strings.Contains(pe.Message, "the agent has no tools") {
		t.Fatalf("nil registry: got %s: %s", pe.Reason, pe.Message)
	}
}

func TestCheckArgsTooDeep(t *testing.T) {
	var args any = map[string]any{}
	for range MaxArgsDepth {
		args = map[string]any{"n": args}
	}
	_, err := Check([]Operation{{ID: "a", Tool: "scene.inspect", Args: args.(map[string]any), Safety: SafetyReadOnly}}, testRegistry(t))
	pe := asPlanError(t, err)
	if pe.Reason != ReasonSchemaInvalid || len(pe.Violations) != 1 ||
		!strings.HasSuffix(pe.Violations[0].Field, strings.Repeat(".n", MaxArgsDepth-1)) ||
		!strings.Contains(pe.Violations[0].Description, "nested deeper than 64 levels") {
		t.Fatalf("got %s: %+v", pe.Reason, pe.Violations)
	}

	// One level less is accepted.
	_, err = Check([]Operation{{ID: "a", Tool: "scene.inspect", Args: args.(map[string]any)["n"].(map[string]any), Safety: SafetyReadOnly}}, testRegistry(t))
	if err != nil {
		t.Fatal(err)
	}
}

func TestCheckAccepts(t *testing.T) {
	ops := []Operation{
		{ID: "make", Tool: "object.create", Args: decodeJSON(t, `{"name": "Cube", "kind": "MESH", "location": [0, 0, 1.5]}`), Safety: SafetySafeWrite},
		// Declaring more than the tool needs is allowed.
		{ID: "look", Tool: "scene.inspect", DependsOn: []string{"make"}, Safety: SafetyDestructive},
		{ID: "drop", Tool: "object.delete", Args: map[string]any{"name": "Cube"}, DependsOn: []string{"look"}, Safety: SafetyDestructive},
	}
	schedule, err := Check(ops, testRegistry(t))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(schedule, []int{0, 1, 2}) {
		t.Fatalf("schedule = %v", schedule)
	}
	if schedule, err := Check(nil, nil); err != nil || len(schedule) != 0 {
		t.Fatalf("empty plan: %v, %v", schedule, err)
	}
}

func TestCheckDoesNotModifyOps(t *testing.T) {
	ops := []Operation{op("b", "a"), op("a")}
	before := Digest(ops, false)
	if _, err := Check(ops, testRegistry(t)); err != nil {
		t.Fatal(err)
	}
	if Digest(ops, false) != before {
		t.Fatal("Check modified the plan")
	}
}

func TestValidOperationID(t *testing.T) {
	re := regexp.MustCompile(OperationIDPattern)
	ids := map[string]bool{
		"a": true, "op-000001": true, "lights:key": true, "A.b_c-d:9": true, strings.Repeat("x", 128): true,
		"": false, strings.Repeat("x", 129): false, "a b": false, "a/b": false, "é": false, "a\n": false, "a\x00": false, "🧊": false,
	}
	for r := rune(0); r < 0x100; r++ {
		ids["a"+string(r)] = re.MatchString("a" + string(r))
	}
	for id, want := range ids {
		if got := ValidOperationID(id); got != want || got != re.MatchString(id) {
			t.Errorf("ValidOperationID(%q) = %v, want %v (pattern says %v)", id, got, want, re.MatchString(id))
		}
	}
}

// TestOperationIDPatternMatchesProtos: OperationIDPattern is the protos'
// rule for operation_id, so that ids made up here pass the agent's check.
func TestOperationIDPatternMatchesProtos(t *testing.T) {
	for _, p := range []string{"controlplane/v1/controlplane.proto", "agent/v1/agent.proto"} {
		b, err := os.ReadFile(filepath.Join("../../../proto/blendplane", p))
		if err != nil {
			t.Skipf("no protos: %v", err)
		}
		want := `string operation_id = 1 [(buf.validate.field).string.pattern = "` + OperationIDPattern + `"]`
		if !strings.Contains(string(b), want) {
			t.Errorf("%s has no %s", p, want)
		}
	}
}
