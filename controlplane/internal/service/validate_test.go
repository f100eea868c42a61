package service

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/blendplane/blendplane/controlplane/internal/plan"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// TestArgsRequired: protovalidate skips Operation.args (see the proto); the
// interceptor still refuses an operation without args, beside protovalidate's
// own violations, and names the operation. A plan with args passes.
func TestArgsRequired(t *testing.T) {
	val, err := NewValidation(nil)
	if err != nil {
		t.Fatal(err)
	}
	empty := &structpb.Struct{}
	req := &cpv1.SubmitPlanRequest{SessionId: "s-1", RequestId: "r", Operations: []*cpv1.Operation{
		{OperationId: "a", ToolName: "scene.get_summary", Args: empty, SafetyLevel: cpv1.SafetyLevel_SAFETY_LEVEL_READ_ONLY},
		{OperationId: "b", ToolName: "scene.get_summary", SafetyLevel: cpv1.SafetyLevel_SAFETY_LEVEL_READ_ONLY},
		{OperationId: "bad id", ToolName: "scene.get_summary", Args: empty, SafetyLevel: cpv1.SafetyLevel_SAFETY_LEVEL_READ_ONLY},
		{OperationId: "c", ToolName: "scene.get_summary", Args: empty},
	}}
	st := status.Convert(val.check(req))
	if st.Code() != codes.InvalidArgument {
		t.Fatalf("a plan without args: %v", st)
	}
	var fields []string
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				fields = append(fields, v.GetField()+": "+v.GetDescription())
			}
		}
	}
	want := []string{`operations[1].args: operation "b": value is required`, // in plan order
		`operations[2].operation_id: operation "bad id": does not match regex pattern ` + "`^[a-zA-Z0-9_.:-]{1,128}$`",
		// An enum left unset says what to send ("must not be in list [0]" did not).
		`operations[3].safety_level: operation "c": is required: one of SAFETY_LEVEL_READ_ONLY, SAFETY_LEVEL_SAFE_WRITE, SAFETY_LEVEL_DESTRUCTIVE`}
	if !slices.Equal(fields, want) {
		t.Fatalf("violations %q, want %q", fields, want)
	}
	req.Operations = req.Operations[:1]
	if err := val.check(req); err != nil {
		t.Fatalf("a valid plan: %v", err)
	}
}

// TestParallelValidationSameAsWhole: a plan whose operations are validated
// apart from the request (in parallel shares when large) gets exactly the
// violations protovalidate gives over the whole request, in the same order,
// and is left as it was.
func TestParallelValidationSameAsWhole(t *testing.T) {
	val, err := NewValidation(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{5, 3*plan.MinOperationShare + 11} {
		req := &cpv1.SubmitPlanRequest{SessionId: "bad session", RequestId: "r"}
		bad := map[int]bool{0: true, n / 3: true, 2*n/3 + 1: true, n - 1: true}
		for i := range n {
			op := &cpv1.Operation{OperationId: fmt.Sprintf("op%06d", i), ToolName: "scene.get_summary", Args: &structpb.Struct{},
				SafetyLevel: cpv1.SafetyLevel_SAFETY_LEVEL_READ_ONLY}
			if bad[i] {
				op.OperationId = "bad id"
				op.DependsOn = []string{"x", "x"}
				op.SafetyLevel = 0
			}
			req.Operations = append(req.Operations, op)
		}
		whole, err := val.validate(req, "")
		if err != nil {
			t.Fatal(err)
		}
		apart, err := val.violations(req)
		if err != nil {
			t.Fatal(err)
		}
		if len(whole) < 1+3*len(bad) || fmt.Sprint(apart) != fmt.Sprint(whole) {
			t.Fatalf("%d operations, apart:\n%v\nwhole:\n%v", n, apart, whole)
		}
		if len(req.GetOperations()) != n {
			t.Fatalf("the request lost operations: %d", len(req.GetOperations()))
		}
	}
}

// TestNoRuleAcrossOperations: the parallel validation checks the request
// with its first operation only, which is right as long as no rule of
// SubmitPlanRequest looks at its operations together. A new one (a
// max_items, a message-level CEL rule) must come with a change there.
func TestNoRuleAcrossOperations(t *testing.T) {
	md := (&cpv1.SubmitPlanRequest{}).ProtoReflect().Descriptor()
	if rules := proto.GetExtension(md.Options(), validate.E_Message).(*validate.MessageRules); len(rules.GetCel()) > 0 || len(rules.GetOneof()) > 0 {
		t.Fatalf("SubmitPlanRequest has message rules now: %v", rules)
	}
	ops := md.Fields().ByName("operations")
	got := proto.GetExtension(ops.Options(), validate.E_Field).(*validate.FieldRules)
	want := &validate.FieldRules{Type: &validate.FieldRules_Repeated{Repeated: &validate.RepeatedRules{MinItems: proto.Uint64(1)}}}
	if !proto.Equal(got, want) {
		t.Fatalf("SubmitPlanRequest.operations has rules %v; the parallel validation (Validation.violations) assumes only min_items 1", got)
	}
}

// TestViolationOfOne: a bound of one reads "at least 1 character", not
// protovalidate's "at least 1 characters"; other counts stay plural.
func TestViolationOfOne(t *testing.T) {
	val, err := NewValidation(nil)
	if err != nil {
		t.Fatal(err)
	}
	msg := status.Convert(val.check(&cpv1.UploadArtifactRequest{Part: &cpv1.UploadArtifactRequest_Header{
		Header: &cpv1.ArtifactUpload{SessionId: "s-1"}}})).Message()
	if want := "header.name: must be at least 1 character"; !strings.Contains(msg, want) || strings.Contains(msg, "characters") {
		t.Errorf("%q does not say %q", msg, want)
	}
	long := strings.Repeat("n", 161)
	msg = status.Convert(val.check(&cpv1.UploadArtifactRequest{Part: &cpv1.UploadArtifactRequest_Header{
		Header: &cpv1.ArtifactUpload{SessionId: "s-1", Name: long}}})).Message()
	if want := "at most 160 characters"; !strings.Contains(msg, want) {
		t.Errorf("%q does not say %q", msg, want)
	}
}
