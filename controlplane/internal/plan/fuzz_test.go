package plan

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
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
// with a known reason, violations and a repair; everything is deterministic.
// The seed corpus is in testdata/fuzz/FuzzCheck.
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
			return
		}

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
