package macro

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/blendplane/blendplane/controlplane/internal/plan"
)

// ExpandPlan replaces every operation whose tool is a macro by the macro's
// steps: ids "<operation_id>:<step>", the steps without dependencies of
// their own inherit the operation's depends_on, and operations that depended
// on the macro operation depend on all of its steps. Steps keep the macro
// operation's declared safety level, which must cover each step's tool (the
// plan checker holds them to it). Plans without macros come back unchanged.
//
// plan.Check sees only the expanded plan, so ExpandPlan itself refuses what
// it would misplace, blaming operations by their index in ops:
//
//   - OPERATION_ID_DUPLICATE: two operations share an id, or a step's id is
//     another operation's id or another step's ("a:b" and the step b of a
//     macro operation a). The later operation is blamed, as in plan.Check.
//   - SCHEMA_INVALID: a macro operation's args fail the macro's schema, or a
//     step id would not be a valid operation_id (plan.ValidOperationID),
//     which the agent would refuse for the whole plan at run time.
//
// Duplicates come first, as in plan.Check.
func (r *Registry) ExpandPlan(ops []plan.Operation) ([]plan.Operation, error) {
	if !slices.ContainsFunc(ops, r.isMacro) {
		return ops, nil
	}
	expanded := map[string][]string{} // macro op id → its step ids
	var out []plan.Operation
	ids := idOwners{ops: ops, owner: make(map[string]idOwner, len(ops))}
	var invalid []plan.Violation
	var repair []plan.RepairStep
	badArgs, badIDs := 0, 0
	for i, op := range ops {
		if !ids.claim(op.ID, idOwner{index: i}) {
			continue // refused; its steps would only repeat the clash
		}
		m, steps, err := r.expand(op)
		if m == nil {
			out = append(out, op)
			continue
		}
		if err != nil {
			invalid = append(invalid, plan.Violation{
				Field:       fmt.Sprintf("operations[%d].args", i),
				Description: fmt.Sprintf("operation %q: args of %s: %s", op.ID, m.Name, schemaMessage(err)),
			})
			repair = append(repair, plan.RepairStep{OperationID: op.ID, Action: plan.ActionReplaceArgs})
			badArgs++
			continue
		}
		stepIDs := make([]string, len(steps))
		for k, s := range steps {
			stepIDs[k] = op.ID + ":" + s.ID
		}
		if v, ok := stepIDViolation(i, op, m, stepIDs); ok {
			// Dropped, not replace_args: the args do not make the ids
			// long, the operation's own id does. A planner drops the
			// operation and plans it again under a shorter id, as it
			// does for a duplicate id.
			invalid = append(invalid, v)
			repair = append(repair, plan.RepairStep{OperationID: op.ID, Action: plan.ActionDrop})
			badIDs++
			continue
		}
		for k, s := range steps {
			ids.claim(stepIDs[k], idOwner{index: i, step: s.ID})
			deps := make([]string, 0, len(s.DependsOn))
			for _, d := range s.DependsOn {
				deps = append(deps, op.ID+":"+d)
			}
			if len(deps) == 0 {
				deps = append(deps, op.DependsOn...)
			}
			out = append(out, plan.Operation{ID: stepIDs[k], Tool: s.Tool, Args: s.Args, DependsOn: deps, Safety: op.Safety, Verify: op.Verify,
				MCPCallID: op.MCPCallID})
		}
		expanded[op.ID] = stepIDs
	}
	if ids.err != nil {
		ids.err.Message = fmt.Sprintf("operation_id reused by %s (a macro operation's steps take the ids \"<operation_id>:<step>\"); "+
			"ids must be unique within a plan: drop the later copies or give them new ids", plural(len(ids.err.Repair), "operation", "operations"))
		return nil, ids.err
	}
	if len(invalid) > 0 {
		var msgs []string
		if badArgs > 0 {
			msgs = append(msgs, "macro args do not match the macro's schema (see ListMacros for its schema and example args)")
		}
		if badIDs > 0 {
			msgs = append(msgs, fmt.Sprintf("%s would give macro steps ids (\"<operation_id>:<step>\") that are not valid operation ids (%s): "+
				"give them shorter operation ids", plural(badIDs, "operation", "operations"), plan.OperationIDPattern))
		}
		return nil, &plan.Error{Reason: plan.ReasonSchemaInvalid, Violations: invalid, Repair: repair, Message: strings.Join(msgs, "; ")}
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

// expand is the macro op calls and its steps for op's args; no macro (nil)
// for an operation that calls none.
func (r *Registry) expand(op plan.Operation) (*Macro, []Step, error) {
	if !r.isMacro(op) {
		return nil, nil, nil
	}
	m, _ := r.Lookup(op.Tool)
	steps, err := m.Expand(op.Args)
	return m, steps, err
}

// isMacro reports whether op calls one of r's macros. An unknown "macro."
// tool is left to plan.Check, which refuses it as TOOL_UNKNOWN.
func (r *Registry) isMacro(op plan.Operation) bool {
	if !strings.HasPrefix(op.Tool, Prefix) {
		return false
	}
	_, ok := r.Lookup(op.Tool)
	return ok
}

// stepIDViolation reports, on the macro operation ops[i] itself, step ids
// that plan.ValidOperationID refuses: almost always too long, since a
// valid operation_id and a step id from the macro make valid characters.
func stepIDViolation(i int, op plan.Operation, m *Macro, stepIDs []string) (plan.Violation, bool) {
	longest, bad := "", ""
	for _, id := range stepIDs {
		if len(id) > len(longest) {
			longest = id
		}
		if bad == "" && !plan.ValidOperationID(id) {
			bad = id
		}
	}
	if bad == "" {
		return plan.Violation{}, false
	}
	v := plan.Violation{Field: fmt.Sprintf("operations[%d].operation_id", i)}
	if len(longest) <= plan.MaxOperationIDLength {
		v.Description = fmt.Sprintf("operation %q: %s would give a step the id %q, which does not match %s",
			op.ID, m.Name, bad, plan.OperationIDPattern)
		return v, true
	}
	v.Description = fmt.Sprintf("operation %q: %s would give a step the id %q of %d characters; an operation_id has at most %d",
		op.ID, m.Name, longest, len(longest), plan.MaxOperationIDLength)
	if fit := plan.MaxOperationIDLength - (len(longest) - len(op.ID)); fit > 0 {
		v.Description += fmt.Sprintf(", so this operation's id may have at most %d", fit)
	}
	return v, true
}

// idOwner is where an id of the expanded plan comes from: operations[index]
// of the submitted plan itself, or its macro step step.
type idOwner struct {
	index int
	step  string // "" for the operation's own id
}

// idOwners finds ids of the expanded plan claimed twice. Claims come in
// the order of the submitted plan, so the later claimant is blamed.
type idOwners struct {
	ops   []plan.Operation
	owner map[string]idOwner
	err   *plan.Error // OPERATION_ID_DUPLICATE, without its Message
	// lastBlamed is the index of the operation last blamed, so that a
	// macro operation clashing more than once gets one repair step.
	lastBlamed int
}

// claim records that by produces id, or reports that it cannot, since an
// earlier one does.
func (o *idOwners) claim(id string, by idOwner) bool {
	first, dup := o.owner[id]
	if !dup {
		o.owner[id] = by
		return true
	}
	if o.err == nil {
		o.err = &plan.Error{Reason: plan.ReasonOperationIDDuplicate}
	}
	v := plan.Violation{Field: fmt.Sprintf("operations[%d].operation_id", by.index)}
	if by.step == "" {
		v.Description = fmt.Sprintf("operation_id %q is already used by %s", id, o.describe(first))
	} else {
		v.Description = fmt.Sprintf("operation %q: the id %q of its macro step %q is already used by %s",
			o.ops[by.index].ID, id, by.step, o.describe(first))
	}
	o.err.Violations = append(o.err.Violations, v)
	if len(o.err.Repair) == 0 || o.lastBlamed != by.index {
		o.err.Repair = append(o.err.Repair, plan.RepairStep{OperationID: o.ops[by.index].ID, Action: plan.ActionDrop})
	}
	o.lastBlamed = by.index
	return false
}

func (o *idOwners) describe(w idOwner) string {
	if w.step == "" {
		return fmt.Sprintf("operations[%d]", w.index)
	}
	return fmt.Sprintf("step %q of macro operation %q (operations[%d])", w.step, o.ops[w.index].ID, w.index)
}

// plural writes "1 operation", "2 operations".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// schemaMessage lists what failed in a macro's args, one "at '<pointer>':
// <what>" per failing keyword, sorted: the validator visits object members
// in map order, and the message must not change from run to run. It walks
// the error tree iteratively, descending only through nodes that merely
// group causes (as plan.Check does for tool args).
func schemaMessage(err error) string {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return err.Error()
	}
	var parts []string
	stack := []*jsonschema.ValidationError{ve}
	for len(stack) > 0 {
		e := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		what := e.ErrorKind
		switch k := what.(type) {
		case *kind.Schema, *kind.Reference, *kind.Group, *kind.AllOf:
			if len(e.Causes) > 0 {
				stack = append(stack, e.Causes...)
				continue
			}
		case *kind.AdditionalProperties:
			what = &kind.AdditionalProperties{Properties: slices.Sorted(slices.Values(k.Properties))} // in map order
		}
		var ptr strings.Builder
		for _, tok := range e.InstanceLocation {
			ptr.WriteByte('/')
			ptr.WriteString(pointerEscaper.Replace(tok))
		}
		parts = append(parts, fmt.Sprintf("at %s: %s", quote(ptr.String()), what.LocalizedString(printer)))
	}
	slices.Sort(parts)
	return strings.Join(slices.Compact(parts), "; ")
}

var (
	printer        = message.NewPrinter(language.English)
	pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1") // RFC 6901
)

// quote writes s in single quotes, as the schema library's messages do.
func quote(s string) string {
	q := strconv.Quote(s)
	return "'" + strings.ReplaceAll(strings.ReplaceAll(q[1:len(q)-1], `\"`, `"`), "'", `\'`) + "'"
}

// operationField is a violation's field in an operation: its index, and
// the path inside it.
var operationField = regexp.MustCompile(`^operations\[(\d{1,9})\](.*)$`)

// Blame restates a refusal of the expanded plan in terms of the operations
// the client sent (ops, which ExpandPlan turned into the plan checked): a
// violation of a macro's step names the macro operation ("operations[i]",
// the step in its description), and a repair of a step repairs the macro
// operation, once. Without it a refusal named operations and ids the
// request does not have. Other errors, and plans without macros, pass.
func (r *Registry) Blame(ops []plan.Operation, err error) error {
	var perr *plan.Error
	if !errors.As(err, &perr) || !slices.ContainsFunc(ops, r.isMacro) {
		return err
	}
	// The expanded plan holds each operation in place, a macro's as its
	// steps: origin[k] is the request's index of expanded operation k.
	var origin []int
	stepOf := map[string]string{} // step id → its macro operation's id
	for i, op := range ops {
		m, steps, xerr := r.expand(op)
		if m == nil {
			origin = append(origin, i)
			continue
		}
		if xerr != nil {
			return err // ExpandPlan refused it first
		}
		for _, s := range steps {
			origin = append(origin, i)
			stepOf[op.ID+":"+s.ID] = op.ID
		}
	}
	out := *perr
	out.Violations = make([]plan.Violation, len(perr.Violations))
	for n, v := range perr.Violations {
		out.Violations[n] = v
		m := operationField.FindStringSubmatch(v.Field)
		if m == nil {
			continue
		}
		k, _ := strconv.Atoi(m[1])
		if k >= len(origin) {
			continue
		}
		i := origin[k]
		if op := ops[i]; r.isMacro(op) {
			out.Violations[n] = plan.Violation{Field: fmt.Sprintf("operations[%d]", i),
				Description: fmt.Sprintf("a step of macro operation %q (%s): %s", op.ID, op.Tool, v.Description)}
		} else {
			out.Violations[n].Field = fmt.Sprintf("operations[%d]", i) + m[2]
		}
	}
	out.Repair = nil
	seen := map[string]bool{}
	for _, s := range perr.Repair {
		if id, ok := stepOf[s.OperationID]; ok {
			s.OperationID = id
		}
		if key := s.OperationID + "\x00" + s.Action; !seen[key] {
			seen[key] = true
			out.Repair = append(out.Repair, s)
		}
	}
	return &out
}
