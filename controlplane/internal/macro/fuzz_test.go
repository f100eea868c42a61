package macro

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/blendplane/blendplane/controlplane/internal/plan"
)

// FuzzExpandPlan holds ExpandPlan's contract on arbitrary plans: it never
// panics and is deterministic; a refusal is a *plan.Error whose violations
// and repair name operations of the submitted plan; an expanded plan has
// unique ids, and every id a macro made up is a valid operation_id.
func FuzzExpandPlan(f *testing.F) {
	for _, seed := range []string{
		`[{"id":"hero","tool":"object.create"},{"id":"l","tool":"macro.three_point_lighting","args":{"target":"Suzanne"},"deps":["hero"]},{"id":"s","tool":"render.still","deps":["l"]}]`,
		`[{"id":"l","tool":"macro.three_point_lighting","args":{"target":"Suzanne"}},{"id":"l:key","tool":"scene.inspect"}]`,
		`[{"id":"` + strings.Repeat("t", 122) + `","tool":"macro.turntable_camera","args":{}}]`,
		`[{"id":"p","tool":"macro.product_shot","args":{"target":"é🧊"},"deps":["p"]},{"id":"p","tool":"macro.product_shot","args":{"target":"x"}}]`,
		`[{"id":"a b","tool":"macro.three_point_lighting","args":{"target":"Suzanne","distance":-1}},{"id":"","tool":"macro.nope"}]`,
	} {
		f.Add([]byte(seed))
	}
	r := Default()
	f.Fuzz(func(t *testing.T, data []byte) {
		var in []struct {
			ID   string         `json:"id"`
			Tool string         `json:"tool"`
			Args map[string]any `json:"args"`
			Deps []string       `json:"deps"`
		}
		if json.Unmarshal(data, &in) != nil {
			return
		}
		ops := make([]plan.Operation, len(in))
		for i, o := range in {
			ops[i] = plan.Operation{ID: o.ID, Tool: o.Tool, Args: o.Args, DependsOn: o.Deps, Safety: plan.SafetyDestructive}
		}
		out, err := r.ExpandPlan(ops)
		out2, err2 := r.ExpandPlan(ops)
		if !reflect.DeepEqual(out, out2) || !reflect.DeepEqual(err, err2) {
			t.Fatal("ExpandPlan is not deterministic")
		}
		if err != nil {
			pe, ok := err.(*plan.Error)
			if !ok || (pe.Reason != plan.ReasonSchemaInvalid && pe.Reason != plan.ReasonOperationIDDuplicate) ||
				pe.Message == "" || len(pe.Violations) == 0 || len(pe.Repair) == 0 {
				t.Fatalf("malformed refusal %#v", err)
			}
			ids := map[string]bool{}
			for _, op := range ops {
				ids[op.ID] = true
			}
			for _, v := range pe.Violations {
				var i int
				if _, err := fmt.Sscanf(v.Field, "operations[%d].", &i); err != nil || i < 0 || i >= len(ops) ||
					!strings.Contains(v.Description, fmt.Sprintf("%q", ops[i].ID)) {
					t.Fatalf("violation %+v does not name an operation of the plan", v)
				}
			}
			for _, s := range pe.Repair {
				if !ids[s.OperationID] {
					t.Fatalf("repair %+v names no operation of the plan", s)
				}
			}
			return
		}
		if !slices.ContainsFunc(ops, r.isMacro) {
			if !reflect.DeepEqual(out, ops) {
				t.Fatal("a plan without macros changed")
			}
			return
		}
		submitted := map[string]bool{}
		for _, op := range ops {
			submitted[op.ID] = true
		}
		seen := map[string]bool{}
		for _, op := range out {
			if seen[op.ID] {
				t.Fatalf("id %q twice in the expanded plan", op.ID)
			}
			seen[op.ID] = true
			if !submitted[op.ID] && !plan.ValidOperationID(op.ID) {
				t.Fatalf("expanded to an invalid id %q", op.ID)
			}
		}
	})
}
