package plan

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// fuzzPlan is the seed's planner output, decoded as loosely as possible so
// that the fuzzer reaches Check with odd ids, tools and levels.
type fuzzPlan struct {
	Atomic     bool `json:"atomic"`
	Operations []struct {
		OperationID string         `json:"operation_id"`
		ToolName    string         `json:"tool_name"`
		Args        map[string]any `json:"args"`
		DependsOn   []string       `json:"depends_on"`
		SafetyLevel string         `json:"safety_level"`
	} `json:"operations"`
}

// FuzzCheck holds Check's contract on arbitrary plans: it never panics; an
// accepted plan's schedule is a permutation in which every operation follows
// its dependencies, and the same in any input order; a refusal is an *Error
// with a known reason, violations and a repair; a reported cycle is a real
// one (a self-dependency is a cycle of one); accepted names fit Blender (63
// UTF-8 bytes, no control characters) and the contract gate refuses exactly
// the sandbox file names that are not plain; everything is deterministic.
// The seed corpus is in testdata/fuzz/FuzzCheck (self-dependencies, control
// characters and multi-byte names among others).
func FuzzCheck(f *testing.F) {
	reg := testRegistry(f)
	f.Add([]byte(`{"operations":[{"operation_id":"a","tool_name":"scene.inspect","args":{},"depends_on":[],"safety_level":"read_only"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var p fuzzPlan
		if err := json.Unmarshal(data, &p); err != nil {
			return
		}
		ops := make([]Operation, len(p.Operations))
		for i, o := range p.Operations {
			level, err := ParseSafetyLevel(o.SafetyLevel)
			if err != nil && o.SafetyLevel != "" {
				level = SafetyLevel(len(o.SafetyLevel)) // odd levels too
			}
			ops[i] = Operation{ID: o.OperationID, Tool: o.ToolName, Args: o.Args, DependsOn: o.DependsOn, Safety: level}
		}

		schedule, err := Check(ops, reg)
		schedule2, err2 := Check(ops, reg)
		if !slices.Equal(schedule, schedule2) || !reflect.DeepEqual(err, err2) {
			t.Fatalf("Check is not deterministic: %v %v / %v %v", schedule, err, schedule2, err2)
		}
		if first, again := Digest(ops, p.Atomic), Digest(ops, p.Atomic); first != again {
			t.Fatal("Digest is not deterministic")
		}

		if err != nil {
			pe := asPlanError(t, err)
			if !knownReason(pe.Reason) || pe.Message == "" || len(pe.Violations) == 0 || len(pe.Repair) == 0 {
				t.Fatalf("malformed refusal %+v", pe)
			}
			for _, v := range pe.Violations {
				if !strings.HasPrefix(v.Field, "operations[") || v.Description == "" {
					t.Fatalf("malformed violation %+v", v)
				}
			}
			for _, r := range pe.Repair {
				switch r.Action {
				case ActionRetry, ActionReplaceArgs, ActionDrop, ActionInsertPrecondition:
				default:
					t.Fatalf("unknown repair action %+v", r)
				}
			}
			if pe.Reason == ReasonGraphCycle {
				checkCycleReport(t, ops, pe)
			}
			if selfDependent(ops) && pe.Reason != ReasonOperationIDDuplicate && pe.Reason != ReasonDependencyMissing &&
				pe.Reason != ReasonGraphCycle {
				t.Fatalf("a self-dependency passed the graph stages: %s", pe.Reason)
			}
			return
		}
		if selfDependent(ops) {
			t.Fatal("accepted an operation that depends on itself")
		}
		checkAcceptedNames(t, ops)
		checkSandboxGate(t, ops, reg)

		checkSchedule(t, ops, schedule)
		reversed := slices.Clone(ops)
		slices.Reverse(reversed)
		s, err := Check(reversed, reg)
		if err != nil {
			t.Fatalf("reversed plan refused: %v", err)
		}
		if got, want := scheduleIDs(reversed, s), scheduleIDs(ops, schedule); !slices.Equal(got, want) {
			t.Fatalf("reversed order %q, want %q", got, want)
		}

		// Accepted args are canonical JSON, and canonical JSON is a fixed
		// point of decode+encode.
		for _, op := range ops {
			c, err := CanonicalJSON(map[string]any(op.Args))
			if err != nil {
				t.Fatalf("accepted args of %q do not canonicalize: %v", op.ID, err)
			}
			if op.Args != nil && !slices.Equal(c, canonicalArgs(op.Args)) {
				t.Fatal("canonicalArgs differs from CanonicalJSON")
			}
			var back any
			if err := json.Unmarshal(c, &back); err != nil {
				t.Fatalf("canonical %s is not JSON: %v", c, err)
			}
			c2, err := CanonicalJSON(back)
			if err != nil || !slices.Equal(c, c2) {
				t.Fatalf("canonical form is not stable: %s then %s (%v)", c, c2, err)
			}
			_ = IdempotencyKey("req", op.ID, op.Args)
		}
	})
}

// knownReason reports whether r is one of the Reason* constants.
func knownReason(r string) bool {
	switch r {
	case ReasonOperationIDDuplicate, ReasonDependencyMissing, ReasonGraphCycle,
		ReasonToolUnknown, ReasonSchemaInvalid, ReasonPolicyBlocked:
		return true
	}
	return false
}

// selfDependent reports whether some operation lists its own id in
// depends_on.
func selfDependent(ops []Operation) bool {
	return slices.ContainsFunc(ops, func(op Operation) bool { return slices.Contains(op.DependsOn, op.ID) })
}

// checkCycleReport: the violations of a GRAPH_CYCLE walk a real cycle, each
// naming a depends_on entry that is the id of the next one's operation.
func checkCycleReport(t *testing.T, ops []Operation, pe *Error) {
	t.Helper()
	type entry struct{ i, j int }
	cycle := make([]entry, len(pe.Violations))
	for p, v := range pe.Violations {
		e := &cycle[p]
		if _, err := fmt.Sscanf(v.Field, "operations[%d].depends_on[%d]", &e.i, &e.j); err != nil ||
			e.i < 0 || e.i >= len(ops) || e.j < 0 || e.j >= len(ops[e.i].DependsOn) {
			t.Fatalf("cycle violation %+v names no depends_on entry", v)
		}
	}
	for p, e := range cycle {
		if next := cycle[(p+1)%len(cycle)]; ops[e.i].DependsOn[e.j] != ops[next.i].ID {
			t.Fatalf("cycle %q: %q depends on %q, the next on the cycle is %q",
				pe.Violations, ops[e.i].ID, ops[e.i].DependsOn[e.j], ops[next.i].ID)
		}
	}
	if closing := ops[cycle[len(cycle)-1].i].ID; len(pe.Repair) != 1 || pe.Repair[0] != (RepairStep{closing, ActionDrop}) {
		t.Fatalf("cycle repair %+v does not drop %q, which closes the cycle", pe.Repair, closing)
	}
}

// checkAcceptedNames: the datablock names of an accepted plan are names
// Blender keeps as given.
func checkAcceptedNames(t *testing.T, ops []Operation) {
	t.Helper()
	for _, op := range ops {
		var names []any
		switch op.Tool {
		case "object.create":
			names = []any{op.Args["name"], op.Args["collection"]}
		case "object.select":
			list, _ := op.Args["names"].([]any)
			names = append(slices.Clone(list), op.Args["active"])
		}
		for _, n := range names {
			s, ok := n.(string)
			if !ok {
				continue
			}
			if len(s) > 63 || strings.ContainsFunc(s, func(r rune) bool { return r < utf8.RuneSelf && unicode.IsControl(r) }) {
				t.Fatalf("operation %q: accepted name %q (%d bytes)", op.ID, s, len(s))
			}
		}
	}
}

// checkSandboxGate: with every tool callable, the contract gate refuses an
// accepted plan exactly when a scene.export output is not a plain file
// name, written here from the bridge's rules independently of escapingPath.
func checkSandboxGate(t *testing.T, ops []Operation, reg *Registry) {
	t.Helper()
	plain := func(s string) bool {
		return s != "" && s != "." && s != ".." && !strings.ContainsFunc(s, func(r rune) bool {
			return r == '/' || r == '\\' || r < utf8.RuneSelf && unicode.IsControl(r)
		})
	}
	var want []string
	for i, op := range ops {
		if out, ok := op.Args["output"].(string); ok && op.Tool == "scene.export" && !plain(out) {
			want = append(want, fmt.Sprintf("operations[%d].args.output", i))
		}
	}
	callable := make(map[string]bool)
	for _, name := range reg.Names() {
		callable[name] = true
	}
	err := CheckContract(ops, reg, Contract{Callable: callable})
	if len(want) == 0 {
		if err != nil {
			t.Fatalf("contract gate refused plain names: %v", err)
		}
		return
	}
	pe := asPlanError(t, err)
	var got []string
	for _, v := range pe.Violations {
		got = append(got, v.Field)
	}
	if pe.Reason != ReasonPolicyRefused || !slices.Equal(got, want) {
		t.Fatalf("contract gate: %s %q, want POLICY_REFUSED on %q", pe.Reason, got, want)
	}
}
