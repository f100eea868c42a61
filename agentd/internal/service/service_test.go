package service

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	agentv1 "github.com/blendplane/blendplane/gen/blendplane/agent/v1"
)

// TestArgsRequired: protovalidate leaves an operation's args alone (it
// would walk every value), so agentd refuses an operation without them
// itself, before anything runs.
func TestArgsRequired(t *testing.T) {
	s := &Server{}
	ops := []*agentv1.OperationCall{{OperationId: "a", ToolName: "object.create", Args: &structpb.Struct{}},
		{OperationId: "b", ToolName: "object.create"}}
	_, err := s.Preview(context.Background(), &agentv1.PreviewRequest{SessionId: "s", Operations: ops})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "operations[1].args: value is required") {
		t.Fatalf("Preview without args: %v", err)
	}
	if err := s.Execute(&agentv1.ExecuteRequest{SessionId: "s", RequestId: "r", Operations: ops}, nil); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Execute without args: %v", err)
	}
}
