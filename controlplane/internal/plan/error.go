package plan

import "strings"

// Reasons of a refused plan: the seed's error codes, used as
// google.rpc.ErrorInfo.reason by the gRPC layer.
const (
	ReasonOperationIDDuplicate = "OPERATION_ID_DUPLICATE"
	ReasonDependencyMissing    = "DEPENDENCY_MISSING"
	ReasonGraphCycle           = "GRAPH_CYCLE"
	ReasonToolUnknown          = "TOOL_UNKNOWN"
	ReasonSchemaInvalid        = "SCHEMA_INVALID"
	ReasonPolicyBlocked        = "POLICY_BLOCKED"
)

// Repair actions of the seed's minimal_repair_plan.
const (
	ActionRetry              = "retry"
	ActionReplaceArgs        = "replace_args"
	ActionDrop               = "drop"
	ActionInsertPrecondition = "insert_precondition"
)

// Error is a refused plan. Every refusal is recoverable: the client (or its
// planner) can submit a corrected plan, and Message is written to be used as
// the seed's retry_hint.
type Error struct {
	// Reason is one of the Reason* constants.
	Reason string
	// Message says what is wrong and what to do, in one or two sentences.
	Message string
	// Violations lists every violation of the failing stage, in operation
	// order. It is never empty.
	Violations []Violation
	// Repair is the seed's minimal_repair_plan.
	Repair []RepairStep
	// Precondition: a well-formed plan that the session's rules refuse
	// (FAILED_PRECONDITION rather than INVALID_ARGUMENT), such as an
	// operation the policy denies.
	Precondition bool
}

// Violation is one offending field, in the shape of
// google.rpc.BadRequest.FieldViolation.
type Violation struct {
	// Field is a path into the request, such as "operations[3].depends_on[0]"
	// or "operations[2].args.location[1]".
	Field string
	// Description names the operation by id and says what is wrong.
	Description string
}

// RepairStep is one entry of the seed's minimal_repair_plan.
type RepairStep struct {
	OperationID string
	// Action is one of the Action* constants.
	Action string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("plan refused: ")
	b.WriteString(e.Reason)
	b.WriteString(": ")
	b.WriteString(e.Message)
	return b.String()
}
