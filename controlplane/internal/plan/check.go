package plan

import (
	"fmt"
	"strings"

	"github.com/blendplane/blendplane/internal/wireid"
)

// Operation is one node of a plan.
type Operation struct {
	ID   string
	Tool string
	// Args are the tool's arguments as encoding/json (or structpb) decodes
	// them: numbers are float64. Nil means {}.
	Args      map[string]any
	DependsOn []string
	Safety    SafetyLevel
	// Verify asks for the effect to be checked after the call (seed 001).
	Verify bool
	// MCPCallID is the MCP tool call the operation is part of (a macro's
	// steps keep their macro operation's).
	MCPCallID string
}

// OperationIDPattern is the wire rule for an operation_id: the buf.validate
// pattern of Operation.operation_id in the control plane's and the agent's
// protos (wireid.Pattern). [ValidOperationID] is the same rule; ids the
// control plane makes up (macro steps, "<operation_id>:<step>") are held to
// it before the agent's protovalidate refuses a whole plan for one.
const OperationIDPattern = wireid.Pattern

// MaxOperationIDLength is the longest operation_id [OperationIDPattern]
// allows, in characters (all of them ASCII, so also in bytes).
const MaxOperationIDLength = wireid.MaxLength

// ValidOperationID reports whether id matches [OperationIDPattern].
func ValidOperationID(id string) bool { return wireid.Valid(id) }

// maxListedTools bounds the tool names a TOOL_UNKNOWN message lists.
const maxListedTools = 40

// Check validates a whole plan against reg and returns its schedule: every
// index of ops exactly once, each operation after all of its dependencies,
// the lexically smallest ready operation_id first.
//
// A refusal is an *Error for the first failing stage (see the package doc),
// carrying every violation of that stage. A nil reg is an empty registry.
// Check does not modify ops.
func Check(ops []Operation, reg *Registry) ([]int, error) {
	index, err := checkIDs(ops)
	if err != nil {
		return nil, err
	}
	g, err := buildGraph(ops, index)
	if err != nil {
		return nil, err
	}
	schedule, err := g.schedule(ops)
	if err != nil {
		return nil, err
	}
	if err := checkTools(ops, reg); err != nil {
		return nil, err
	}
	if err := checkArgs(ops, reg); err != nil {
		return nil, err
	}
	if err := checkPolicy(ops, reg); err != nil {
		return nil, err
	}
	return schedule, nil
}

// checkIDs returns the index of every operation_id, or an
// OPERATION_ID_DUPLICATE refusal. The repair drops every later copy.
func checkIDs(ops []Operation) (map[string]int, error) {
	index := make(map[string]int, len(ops))
	var e *Error
	for i, op := range ops {
		first, dup := index[op.ID]
		if !dup {
			index[op.ID] = i
			continue
		}
		if e == nil {
			e = &Error{Reason: ReasonOperationIDDuplicate}
		}
		e.Violations = append(e.Violations, Violation{
			Field:       opField(i, "operation_id"),
			Description: fmt.Sprintf("operation_id %q is already used by operations[%d]", op.ID, first),
		})
		e.Repair = append(e.Repair, RepairStep{OperationID: op.ID, Action: ActionDrop})
	}
	if e != nil {
		e.Message = fmt.Sprintf("operation_id reused by %s; ids must be unique within a plan: "+
			"drop the later copies or give them new ids", plural(len(e.Violations), "operation", "operations"))
		return nil, e
	}
	return index, nil
}

// checkTools refuses operations whose tool the registry does not have.
func checkTools(ops []Operation, reg *Registry) error {
	var e *Error
	for i, op := range ops {
		if _, ok := reg.lookup(op.Tool); ok {
			continue
		}
		if e == nil {
			e = &Error{Reason: ReasonToolUnknown}
		}
		e.Violations = append(e.Violations, Violation{
			Field:       opField(i, "tool_name"),
			Description: fmt.Sprintf("operation %q: tool %q is not in the agent's registry", op.ID, op.Tool),
		})
		e.Repair = append(e.Repair, RepairStep{OperationID: op.ID, Action: ActionDrop})
	}
	if e == nil {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "unknown tool in %s", plural(len(e.Violations), "operation", "operations"))
	names := reg.Names()
	switch {
	case len(names) == 0:
		b.WriteString("; the agent has no tools")
	case len(names) <= maxListedTools:
		b.WriteString("; known tools: ")
		b.WriteString(strings.Join(names, ", "))
	default:
		fmt.Fprintf(&b, "; the agent has %d tools (see ListAgents)", len(names))
	}
	e.Message = b.String()
	return e
}

// checkPolicy refuses operations that declare a safety level below their
// tool's. Declaring a higher level than needed is allowed: it only asks for
// more caution. An unspecified or unknown level is always below.
func checkPolicy(ops []Operation, reg *Registry) error {
	var e *Error
	for i, op := range ops {
		t, _ := reg.lookup(op.Tool)
		if op.Safety.Valid() && op.Safety >= t.def.Safety {
			continue
		}
		if e == nil {
			e = &Error{Reason: ReasonPolicyBlocked}
		}
		e.Violations = append(e.Violations, Violation{
			Field: opField(i, "safety_level"),
			Description: fmt.Sprintf("operation %q declares %s but tool %q is %s",
				op.ID, op.Safety, op.Tool, t.def.Safety),
		})
		e.Repair = append(e.Repair, RepairStep{OperationID: op.ID, Action: ActionReplaceArgs})
	}
	if e == nil {
		return nil
	}
	e.Message = fmt.Sprintf("safety_level below the tool's in %s; "+
		"declare at least the tool's level (read_only < safe_write < destructive)",
		plural(len(e.Violations), "operation", "operations"))
	return e
}

// plural writes "1 operation", "2 operations".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func opField(i int, field string) string {
	return fmt.Sprintf("operations[%d].%s", i, field)
}
