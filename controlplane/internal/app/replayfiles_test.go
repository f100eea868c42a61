package app

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/blendplane/blendplane/controlplane/internal/blob"
	"github.com/blendplane/blendplane/controlplane/internal/store"
	agentv1 "github.com/blendplane/blendplane/gen/blendplane/agent/v1"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// refusingAgent takes files into a sandbox but those it refuses as an
// agent does: by name, or all of them for its disk (floor).
type refusingAgent struct {
	agentv1.UnimplementedAgentServiceServer
	refuse map[string]error
	floor  bool
	mu     sync.Mutex
	took   []string
}

func (r *refusingAgent) PutFile(s grpc.ClientStreamingServer[agentv1.PutFileRequest, agentv1.PutFileResponse]) error {
	first, err := s.Recv()
	if err != nil {
		return err
	}
	name := first.GetHeader().GetName()
	for {
		if _, err := s.Recv(); err == io.EOF {
			break
		} else if err != nil {
			return err
		}
	}
	if r.floor {
		st, _ := status.New(codes.ResourceExhausted, name+" would leave the agent's disk short").WithDetails(
			&errdetails.ErrorInfo{Reason: agentv1.FileRefusal_FILE_REFUSAL_DISK_FLOOR.String(), Domain: "agent.blendplane"})
		return st.Err()
	}
	if err := r.refuse[name]; err != nil {
		return err
	}
	r.mu.Lock()
	r.took = append(r.took, name)
	r.mu.Unlock()
	return s.SendAndClose(&agentv1.PutFileResponse{})
}

// TestSettleRefusals: a rebuilt session's new sandbox that refuses a file
// for itself (the session's ceiling, a directory of that name, a name it
// does not take) goes on without that file, logged; one whose agent's disk
// is short fails the rebuild, which is tried again elsewhere or later.
func TestSettleRefusals(t *testing.T) {
	a := newTestApp(t)
	blobs, err := blob.Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	a.blobs = blobs
	agent := &refusingAgent{refuse: map[string]error{
		"ceiling.obj": status.Error(codes.ResourceExhausted, "over its temp_storage_mib"),
		"dir.obj":     status.Error(codes.FailedPrecondition, "a directory has the name"),
		"name.obj":    status.Error(codes.InvalidArgument, "not a plain file name"),
	}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	agentv1.RegisterAgentServiceServer(srv, agent)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	if err := a.fleet.Register(&cpv1.RegisterAgentRequest{AgentId: "a1", Address: lis.Addr().String(), Runtimes: []*cpv1.Runtime{{RuntimeId: "rt"}}}, "agent"); err != nil {
		t.Fatal(err)
	}
	err = a.store.PutSession(store.Session{Owner: "alice", Info: &cpv1.Session{SessionId: "s", State: cpv1.Session_STATE_OPEN, AgentId: "a1",
		Contract: &cpv1.SessionContract{SessionId: "s", ToolRegistryRef: &cpv1.ToolRegistryRef{Fingerprint: "f"}}}},
		&cpv1.ToolRegistry{Fingerprint: "f"})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ceiling.obj", "dir.obj", "name.obj", "ok.obj"} {
		sum, size, err := blobs.CopyFrom(strings.NewReader("# "+name), 1<<10)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.store.PutArtifact(&cpv1.Artifact{SessionId: "s", Name: name, Sha256: sum, SizeBytes: size}); err != nil {
			t.Fatal(err)
		}
	}
	f, err := a.newReplayFiles("s", "a1", "s")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.settle(context.Background(), true); err != nil || !slices.Equal(agent.took, []string{"ok.obj"}) {
		t.Fatalf("settle: %v; the sandbox took %v, want ok.obj and no error", err, agent.took)
	}
	agent.floor = true
	f, err = a.newReplayFiles("s", "a1", "s")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.settle(context.Background(), true); !errors.Is(err, errAgentDiskShort) {
		t.Fatalf("settle on an agent short of disk: %v, want the rebuild to fail", err)
	}
}
