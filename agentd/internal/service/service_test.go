package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/blendplane/blendplane/agentd/internal/blender"
	"github.com/blendplane/blendplane/agentd/internal/sessions"
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

// TestStatusOfAMemoryCeiling: a session's Blender that its memory ceiling
// stopped (a ceiling too low to start it, say) is a resource exhausted,
// not an internal error; what only a bug explains stays Internal.
func TestStatusOfAMemoryCeiling(t *testing.T) {
	for _, c := range []struct {
		err  error
		want codes.Code
	}{
		{fmt.Errorf("start the preview's blender: %w", fmt.Errorf("blender: hello: a memory limit of 5 MiB is too small to start Blender: %w",
			fmt.Errorf("blender process exited: %w", blender.ErrMemoryExceeded))), codes.ResourceExhausted},
		{fmt.Errorf("wrapped: %w", sessions.ErrCapacity), codes.ResourceExhausted},
		{errors.New("the fork hashes to x, the journal head says y"), codes.Internal},
	} {
		if got := status.Code(toStatus(c.err)); got != c.want {
			t.Errorf("%v: %s, want %s", c.err, got, c.want)
		}
	}
}

// TestStatusOfAFullDisk: a file refused for the agent's free disk says so
// in its status (ErrorInfo reason FILE_REFUSAL_DISK_FLOOR), so the control
// plane can tell the host's shortage from the session's ceiling, whose
// refusal carries no reason.
func TestStatusOfAFullDisk(t *testing.T) {
	reason := func(err error) string {
		for _, d := range status.Convert(err).Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok {
				return info.GetReason()
			}
		}
		return ""
	}
	floor := toStatus(fmt.Errorf("%w: a.png (5 bytes) would leave the agent's disk 1.0 MiB free", sessions.ErrDiskFloor))
	if status.Code(floor) != codes.ResourceExhausted || reason(floor) != agentv1.FileRefusal_FILE_REFUSAL_DISK_FLOOR.String() {
		t.Errorf("the disk floor: %v, reason %q", floor, reason(floor))
	}
	ceiling := toStatus(fmt.Errorf("%w: a.png over its temp_storage_mib", sessions.ErrQuotaExceeded))
	if status.Code(ceiling) != codes.ResourceExhausted || reason(ceiling) != "" {
		t.Errorf("the session's ceiling: %v, reason %q", ceiling, reason(ceiling))
	}
}
