package macro

import (
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/blendplane/blendplane/controlplane/internal/plan"
)

// ExpandPlan replaces every operation whose tool is a macro by the macro's
// steps: ids "<operation_id>:<step>", the steps without dependencies of
// their own inherit the operation's depends_on, and operations that depended
// on the macro operation depend on all of its steps. Steps keep the macro
// operation's declared safety level, which must cover each step's tool (the
// plan checker holds them to it). Plans without macros come back unchanged.
func (r *Registry) ExpandPlan(ops []plan.Operation) ([]plan.Operation, error) {
	expanded := map[string][]string{} // macro op id → its step ids
	var out []plan.Operation
	var violations []plan.Violation
	var repair []plan.RepairStep
	for i, op := range ops {
		if !strings.HasPrefix(op.Tool, Prefix) {
			out = append(out, op)
			continue
		}
		m, ok := r.Lookup(op.Tool)
		if !ok {
			out = append(out, op) // the checker reports TOOL_UNKNOWN
			continue
		}
		steps, err := m.Expand(op.Args)
		if err != nil {
			violations = append(violations, plan.Violation{
				Field:       fmt.Sprintf("operations[%d].args", i),
				Description: fmt.Sprintf("operation %q: args of %s: %s", op.ID, m.Name, schemaMessage(err)),
			})
			repair = append(repair, plan.RepairStep{OperationID: op.ID, Action: plan.ActionReplaceArgs})
			continue
		}
		var ids []string
		for _, s := range steps {
			deps := make([]string, 0, len(s.DependsOn))
			for _, d := range s.DependsOn {
				deps = append(deps, op.ID+":"+d)
			}
			if len(deps) == 0 {
				deps = append(deps, op.DependsOn...)
			}
			id := op.ID + ":" + s.ID
			ids = append(ids, id)
			out = append(out, plan.Operation{ID: id, Tool: s.Tool, Args: s.Args, DependsOn: deps, Safety: op.Safety, Verify: op.Verify})
		}
		expanded[op.ID] = ids
	}
	if len(violations) > 0 {
		return nil, &plan.Error{Reason: plan.ReasonSchemaInvalid, Violations: violations, Repair: repair,
			Message: "macro args do not match the macro's schema (see ListMacros for its schema and example args)"}
	}
	if len(expanded) == 0 {
		return ops, nil
	}
	for i := range out {
		var deps []string
		changed := false
		for _, d := range out[i].DependsOn {
			if steps, ok := expanded[d]; ok {
				deps = append(deps, steps...)
				changed = true
			} else {
				deps = append(deps, d)
			}
		}
		if changed {
			out[i].DependsOn = deps
		}
	}
	return out, nil
}

func schemaMessage(err error) string {
	if ve, ok := err.(*jsonschema.ValidationError); ok {
		var parts []string
		for _, c := range ve.Causes {
			parts = append(parts, c.Error())
		}
		if len(parts) > 0 {
			return strings.Join(parts, "; ")
		}
	}
	return err.Error()
}
