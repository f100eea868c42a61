package service

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"

	"buf.build/go/protovalidate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// Validation runs protovalidate on every request before a handler sees it
// and refuses invalid ones with INVALID_ARGUMENT, ErrorInfo SCHEMA_INVALID
// and one BadRequest field violation per broken rule. It is a thin copy of
// go-grpc-middleware's protovalidate interceptor that adds the ErrorInfo the
// API promises.
//
// It also reports the requests that codec could not decode (see Codec).
type Validation struct {
	v     protovalidate.Validator
	codec *Codec
}

// NewValidation builds the validator once for the process; codec may be nil.
func NewValidation(codec *Codec) (*Validation, error) {
	v, err := protovalidate.New()
	if err != nil {
		return nil, fmt.Errorf("protovalidate: %w", err)
	}
	return &Validation{v: v, codec: codec}, nil
}

// Unary is the unary server interceptor.
func (val *Validation) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := val.check(req); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// Stream is the stream server interceptor; it checks every received message.
func (val *Validation) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, &validatingStream{ServerStream: ss, val: val})
	}
}

type validatingStream struct {
	grpc.ServerStream
	val *Validation
}

func (s *validatingStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.val.check(m)
}

func (val *Validation) check(req any) error {
	if err := val.codec.failure(req); err != nil {
		return err
	}
	msg, ok := req.(proto.Message)
	if !ok {
		return newStatus(codes.Internal, "INTERNAL", fmt.Sprintf("unsupported message type %T", req))
	}
	err := val.v.Validate(msg)
	if err == nil {
		return nil
	}
	var verr *protovalidate.ValidationError
	if !errors.As(err, &verr) {
		return newStatus(codes.Internal, "INTERNAL", err.Error())
	}
	return schemaRefusal(msg, verr)
}

var operationIndex = regexp.MustCompile(`^operations\[(\d+)\]`)

// schemaRefusal names the operation (by id) of every violation inside a
// plan, and proposes replacing its args.
func schemaRefusal(msg proto.Message, verr *protovalidate.ValidationError) error {
	plan, _ := msg.(*cpv1.SubmitPlanRequest)
	br := &errdetails.BadRequest{}
	repair := &cpv1.RepairPlan{}
	seen := map[string]bool{}
	for _, v := range verr.Violations {
		field := protovalidate.FieldPathString(v.Proto.GetField())
		desc := v.Proto.GetMessage()
		if m := operationIndex.FindStringSubmatch(field); m != nil && plan != nil {
			if i, err := strconv.Atoi(m[1]); err == nil && i < len(plan.GetOperations()) {
				id := plan.GetOperations()[i].GetOperationId()
				desc = fmt.Sprintf("operation %q: %s", id, desc)
				if !seen[id] {
					seen[id] = true
					repair.Steps = append(repair.Steps, &cpv1.RepairStep{OperationId: id, Action: cpv1.RepairStep_ACTION_REPLACE_ARGS})
				}
			}
		}
		br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: field, Description: desc})
	}
	msgText := "SCHEMA_INVALID: request does not match the API schema"
	if len(br.FieldViolations) > 0 {
		first := br.FieldViolations[0]
		msgText = fmt.Sprintf("SCHEMA_INVALID: %s: %s", first.Field, first.Description)
		if n := len(br.FieldViolations); n > 1 {
			msgText += fmt.Sprintf(" (and %d more)", n-1)
		}
	}
	details := []protoadapt.MessageV1{br}
	if len(repair.Steps) > 0 {
		details = append(details, protoadapt.MessageV1Of(repair))
	}
	return newStatus(codes.InvalidArgument, "SCHEMA_INVALID", msgText, details...)
}
