package service

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/blendplane/blendplane/controlplane/internal/app"
	"github.com/blendplane/blendplane/controlplane/internal/contract"
	"github.com/blendplane/blendplane/controlplane/internal/fleet"
	"github.com/blendplane/blendplane/controlplane/internal/plan"
	"github.com/blendplane/blendplane/controlplane/internal/store"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

func TestToStatus(t *testing.T) {
	cases := []struct {
		err    error
		code   codes.Code
		reason string
	}{
		{fmt.Errorf("load: %w", store.ErrSessionNotFound), codes.NotFound, "SESSION_NOT_FOUND"},
		{fmt.Errorf("load: %w", store.ErrPlanNotFound), codes.NotFound, "PLAN_NOT_FOUND"},
		{fmt.Errorf("%w: x", app.ErrIdempotencyConflict), codes.FailedPrecondition, "IDEMPOTENCY_CONFLICT"},
		{fmt.Errorf("x: %w", store.ErrSessionClosed), codes.FailedPrecondition, "SESSION_CLOSED"},
		{fmt.Errorf("x: %w", store.ErrArtifactNotFound), codes.NotFound, "ARTIFACT_NOT_FOUND"},
		{fmt.Errorf("%w: x", app.ErrCapacityExhausted), codes.ResourceExhausted, "CAPACITY_EXHAUSTED"},
		{fmt.Errorf("%w: x", app.ErrRegistryInvalid), codes.FailedPrecondition, "REGISTRY_INVALID"},
		{fmt.Errorf("%w: x", app.ErrChecksumMismatch), codes.InvalidArgument, "CHECKSUM_MISMATCH"},
		{fmt.Errorf("%w: x", app.ErrArtifactUnavailable), codes.NotFound, "ARTIFACT_UNAVAILABLE"},
		{fmt.Errorf("%w: x", app.ErrArtifactConflict), codes.FailedPrecondition, "ARTIFACT_CONFLICT"},
		{fmt.Errorf("x: %w", app.ErrRuntimeNotFound), codes.NotFound, "RUNTIME_NOT_FOUND"},
		{status.Error(codes.Unavailable, "peer gone"), codes.Unavailable, "UNAVAILABLE"},
		{status.Error(codes.DeadlineExceeded, "slow"), codes.DeadlineExceeded, "DEADLINE_EXCEEDED"},
		{&contract.Violation{Field: "contract_version", Value: "2.0.0", Message: "no"}, codes.FailedPrecondition, "CONTRACT_VIOLATION"},
		{fmt.Errorf("%w: x", fleet.ErrNoAgent), codes.Unavailable, "NO_AGENT_AVAILABLE"},
		{fmt.Errorf("%w: x", app.ErrAgentUnavailable), codes.Unavailable, "AGENT_UNAVAILABLE"},
		{fmt.Errorf("%w: open: %w", app.ErrAgentUnavailable, status.Error(codes.ResourceExhausted, "full")), codes.Unavailable, "AGENT_UNAVAILABLE"},
		{context.DeadlineExceeded, codes.DeadlineExceeded, "DEADLINE_EXCEEDED"},
		{errors.New("disk on fire"), codes.Internal, "INTERNAL"},
		{&plan.Error{Reason: plan.ReasonGraphCycle, Message: "a → b → a",
			Violations: []plan.Violation{{Field: "operations[0].depends_on[0]", Description: "x"}},
			Repair:     []plan.RepairStep{{OperationID: "a", Action: plan.ActionDrop}}}, codes.InvalidArgument, "GRAPH_CYCLE"},
	}
	for _, tc := range cases {
		st := status.Convert(toStatus(tc.err))
		if st.Code() != tc.code {
			t.Errorf("%v: code %v, want %v", tc.err, st.Code(), tc.code)
		}
		var infos []*errdetails.ErrorInfo
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok {
				infos = append(infos, info)
			}
		}
		if len(infos) != 1 || infos[0].GetReason() != tc.reason || infos[0].GetDomain() != ErrorDomain {
			t.Errorf("%v: ErrorInfo %v, want exactly one with reason %s", tc.err, infos, tc.reason)
		}
	}
	if toStatus(nil) != nil {
		t.Error("nil error mapped to a status")
	}
}

func TestPlanRefusalDetails(t *testing.T) {
	var violations []plan.Violation
	for i := 0; i < 3*maxViolations; i++ {
		violations = append(violations, plan.Violation{Field: fmt.Sprintf("operations[%d].args", i), Description: "bad"})
	}
	st := status.Convert(toStatus(&plan.Error{Reason: plan.ReasonSchemaInvalid, Message: "m", Violations: violations,
		Repair: []plan.RepairStep{{OperationID: "a", Action: plan.ActionReplaceArgs}}}))
	var br *errdetails.BadRequest
	var repair *cpv1.RepairPlan
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.BadRequest:
			br = d
		case *cpv1.RepairPlan:
			repair = d
		}
	}
	if br == nil || len(br.GetFieldViolations()) != maxViolations+1 {
		t.Fatalf("field violations not capped: %d", len(br.GetFieldViolations()))
	}
	if repair == nil || repair.GetSteps()[0].GetAction() != cpv1.RepairStep_ACTION_REPLACE_ARGS {
		t.Fatalf("repair plan %v", repair)
	}
}
