package app

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/blendplane/blendplane/controlplane/internal/blob"
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
	name, got := first.GetHeader().GetName(), int64(0)
	for {
		req, err := s.Recv()
		if err == io.EOF {
			break
		} else if err != nil {
			return err
		}
		got += int64(len(req.GetChunk()))
	}
	if got != first.GetHeader().GetSizeBytes() { // as agentd's ErrFileMismatch
		return status.Errorf(codes.InvalidArgument, "%s: %d bytes, the header says %d", name, got, first.GetHeader().GetSizeBytes())
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
// is short fails the rebuild, which is tried again; so does a copy the
// control plane cannot read (whose truncated content the agent refuses as
// not matching its header: the fault is not the sandbox's).
func TestSettleRefusals(t *testing.T) {
	a := newTestApp(t)
	blobDir := t.TempDir()
	blobs, err := blob.Open(blobDir, 0)
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
	registerAgent(t, a, "a1", lis.Addr().String())
	openSession(t, a, "s", "alice", "a1")
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

	agent.floor = false
	sum, size, err := blobs.CopyFrom(strings.NewReader("# a copy that cannot be read"), 1<<10)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.store.PutArtifact(&cpv1.Artifact{SessionId: "s", Name: "unread.obj", Sha256: sum, SizeBytes: size}); err != nil {
		t.Fatal(err)
	}
	copyPath := filepath.Join(blobDir, "sha256", sum[:2], sum) // blob's layout
	if err := os.Remove(copyPath); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(copyPath, 0o700); err != nil { // opens, and fails to read
		t.Fatal(err)
	}
	if f, err = a.newReplayFiles("s", "a1", "s"); err != nil {
		t.Fatal(err)
	}
	if err := f.settle(context.Background(), true); !errors.Is(err, errReadLocal) {
		t.Fatalf("settle with a copy the control plane cannot read: %v, want the rebuild to fail", err)
	}
}
