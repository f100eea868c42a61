package service

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"

	"github.com/blendplane/blendplane/controlplane/internal/app"
	"github.com/blendplane/blendplane/controlplane/internal/blob"
	"github.com/blendplane/blendplane/controlplane/internal/contract"
	"github.com/blendplane/blendplane/controlplane/internal/fleet"
	"github.com/blendplane/blendplane/controlplane/internal/plan"
	"github.com/blendplane/blendplane/controlplane/internal/store"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// ErrorDomain is the google.rpc.ErrorInfo domain of every Blendplane error.
const ErrorDomain = "blendplane.dev"

// errorTable maps sentinel errors to a gRPC code and an ErrorInfo reason.
// The first entry whose error matches with errors.Is wins.
var errorTable = []struct {
	target error
	code   codes.Code
	reason string
}{
	{store.ErrSessionNotFound, codes.NotFound, "SESSION_NOT_FOUND"},
	{store.ErrPlanNotFound, codes.NotFound, "PLAN_NOT_FOUND"},
	{store.ErrArtifactNotFound, codes.NotFound, "ARTIFACT_NOT_FOUND"},
	{app.ErrRuntimeNotFound, codes.NotFound, "RUNTIME_NOT_FOUND"},
	{store.ErrSessionClosed, codes.FailedPrecondition, "SESSION_CLOSED"},
	{store.ErrSessionBroken, codes.FailedPrecondition, "SESSION_BROKEN"},
	{store.ErrStaleEpoch, codes.FailedPrecondition, "STALE_EPOCH"},
	{store.ErrTokenNotFound, codes.NotFound, "TOKEN_NOT_FOUND"},
	{store.ErrTokenExists, codes.AlreadyExists, "TOKEN_EXISTS"},
	{store.ErrLastAdmin, codes.FailedPrecondition, "LAST_ADMIN"},
	{store.ErrApprovalNotFound, codes.NotFound, "APPROVAL_NOT_FOUND"},
	{store.ErrApprovalResolved, codes.FailedPrecondition, "APPROVAL_RESOLVED"},
	{store.ErrRuleNotFound, codes.NotFound, "POLICY_RULE_NOT_FOUND"},
	{app.ErrUnauthenticated, codes.Unauthenticated, "UNAUTHENTICATED"},
	{app.ErrAgentIdentity, codes.PermissionDenied, "AGENT_IDENTITY"},
	{app.ErrIdempotencyConflict, codes.FailedPrecondition, "IDEMPOTENCY_CONFLICT"},
	{app.ErrRegistryInvalid, codes.FailedPrecondition, "REGISTRY_INVALID"},
	{app.ErrChecksumMismatch, codes.InvalidArgument, "CHECKSUM_MISMATCH"},
	{app.ErrArtifactUnavailable, codes.NotFound, "ARTIFACT_UNAVAILABLE"},
	{app.ErrArtifactConflict, codes.FailedPrecondition, "ARTIFACT_CONFLICT"},
	{app.ErrCapacityExhausted, codes.ResourceExhausted, "CAPACITY_EXHAUSTED"},
	{app.ErrQuotaExceeded, codes.ResourceExhausted, "QUOTA_EXCEEDED"},
	{blob.ErrDiskShort, codes.ResourceExhausted, "STORAGE_EXHAUSTED"},
	{fleet.ErrNoAgent, codes.Unavailable, "NO_AGENT_AVAILABLE"},
	{app.ErrAgentUnavailable, codes.Unavailable, "AGENT_UNAVAILABLE"},
	{context.DeadlineExceeded, codes.DeadlineExceeded, "DEADLINE_EXCEEDED"},
	{context.Canceled, codes.Canceled, "CANCELLED"},
}

// toStatus turns a domain error into a gRPC status error carrying exactly one
// ErrorInfo, plus BadRequest and RepairPlan details for refused plans.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	var perr *plan.Error
	if errors.As(err, &perr) {
		return planRefusal(perr)
	}
	var cv *contract.Violation
	if errors.As(err, &cv) {
		return contractRefusal(cv)
	}
	var se *app.ScopeError
	if errors.As(err, &se) {
		st, derr := status.New(codes.PermissionDenied, se.Error()).WithDetails(&errdetails.ErrorInfo{
			Reason: "PERMISSION_DENIED", Domain: ErrorDomain, Metadata: map[string]string{"scope": se.Scope}})
		if derr != nil {
			return status.Error(codes.PermissionDenied, se.Error())
		}
		return st.Err()
	}
	for _, e := range errorTable {
		if errors.Is(err, e.target) {
			return newStatus(e.code, e.reason, err.Error())
		}
	}
	if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
		// Already a status (a failed stream send or receive, a peer's
		// answer): keep it, with exactly one ErrorInfo.
		for _, d := range st.Details() {
			if _, ok := d.(*errdetails.ErrorInfo); ok {
				return err
			}
		}
		return newStatus(st.Code(), strings.ToUpper(strcase(st.Code().String())), st.Message())
	}
	return newStatus(codes.Internal, "INTERNAL", err.Error())
}

// strcase turns a gRPC code name ("DeadlineExceeded") into snake case
// ("Deadline_Exceeded").
func strcase(s string) string {
	var b strings.Builder
	for i, r := range s {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// unauthenticated is a missing or malformed bearer token.
func unauthenticated(err error) error {
	return fmt.Errorf("%w: %v: send \"authorization: Bearer <token>\"", app.ErrUnauthenticated, err)
}

// fieldStatus is an error with its reason and one field violation.
func fieldStatus(code codes.Code, reason, field, desc string) error {
	if field == "" {
		return newStatus(code, reason, fmt.Sprintf("%s: %s", reason, desc))
	}
	return newStatus(code, reason, fmt.Sprintf("%s: %s: %s", reason, field, desc),
		&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: field, Description: desc}}})
}

// Refusal is an error with its code and its ErrorInfo reason, as this
// layer refuses: for the HTTP front doors' own refusals.
func Refusal(code codes.Code, reason, msg string) error { return newStatus(code, reason, msg) }

func newStatus(code codes.Code, reason, msg string, details ...protoadapt.MessageV1) error {
	st := status.New(code, msg)
	all := append([]protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain}}, details...)
	withDetails, err := st.WithDetails(all...)
	if err != nil {
		return st.Err()
	}
	return withDetails.Err()
}

// maxViolations caps the field violations of one refusal, so a huge plan
// that is wrong everywhere still gets an answer that fits in a message.
const maxViolations = 100

func planRefusal(e *plan.Error) error {
	br := &errdetails.BadRequest{}
	violations := e.Violations
	if len(violations) > maxViolations {
		violations = violations[:maxViolations]
		br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{
			Field: "operations", Description: fmt.Sprintf("%d violations, the first %d listed", len(e.Violations), maxViolations)})
	}
	for _, v := range violations {
		br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: v.Field, Description: v.Description})
	}
	repair := &cpv1.RepairPlan{}
	for _, s := range e.Repair[:min(len(e.Repair), maxViolations)] {
		repair.Steps = append(repair.Steps, &cpv1.RepairStep{OperationId: s.OperationID, Action: repairAction(s.Action)})
	}
	code := codes.InvalidArgument
	switch e.Reason {
	case plan.ReasonContractViolation, plan.ReasonPolicyRefused, plan.ReasonCapabilityMissing, plan.ReasonNondeterministic:
		code = codes.FailedPrecondition // a valid plan the session's contract does not allow
	}
	if e.Precondition {
		code = codes.FailedPrecondition
	}
	return newStatus(code, e.Reason, fmt.Sprintf("%s: %s", e.Reason, e.Message), br, protoadapt.MessageV1Of(repair))
}

// contractRefusal is seed 003's refusal: CONTRACT_VIOLATION with structured
// details naming the field and the value that cannot be agreed on.
func contractRefusal(v *contract.Violation) error {
	st := status.New(codes.FailedPrecondition, v.Error())
	withDetails, err := st.WithDetails(
		&errdetails.ErrorInfo{Reason: "CONTRACT_VIOLATION", Domain: ErrorDomain,
			Metadata: map[string]string{"field": v.Field, "value": v.Value}},
		&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: v.Field, Description: v.Message}}},
	)
	if err != nil {
		return st.Err()
	}
	return withDetails.Err()
}

func repairAction(a string) cpv1.RepairStep_Action {
	switch a {
	case "retry":
		return cpv1.RepairStep_ACTION_RETRY
	case "replace_args":
		return cpv1.RepairStep_ACTION_REPLACE_ARGS
	case "drop":
		return cpv1.RepairStep_ACTION_DROP
	case "insert_precondition":
		return cpv1.RepairStep_ACTION_INSERT_PRECONDITION
	}
	return cpv1.RepairStep_ACTION_UNSPECIFIED
}
