package agentd

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/blendplane/blendplane/agentd/internal/journal"
	"github.com/blendplane/blendplane/agentd/internal/sessions"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// certifyingControlPlane answers every registration with a certificate,
// as a control plane with a CA answers an agent that asked for one.
type certifyingControlPlane struct {
	cpv1.UnimplementedControlPlaneServiceServer
	calls atomic.Int32
}

func (c *certifyingControlPlane) RegisterAgent(context.Context, *cpv1.RegisterAgentRequest) (*cpv1.RegisterAgentResponse, error) {
	c.calls.Add(1)
	return &cpv1.RegisterAgentResponse{HeartbeatIntervalSeconds: 1, Certificate: []byte("a certificate"), CaCertificate: []byte("a CA")}, nil
}

// TestRegisterWithoutIdentity: an agent without an identity of its own
// (--allow-insecure-local: no TLS) that a control plane answers with a
// certificate keeps heartbeating; it has nowhere to install one (it
// crashed on a nil identity).
func TestRegisterWithoutIdentity(t *testing.T) {
	cp := &certifyingControlPlane{}
	srv := grpc.NewServer()
	cpv1.RegisterControlPlaneServiceServer(srv, cp)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)

	dir := t.TempDir()
	j, err := journal.Open(filepath.Join(dir, "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	mgr, err := sessions.NewManager(sessions.Config{DataDir: dir}, nil, j, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mgr.Shutdown)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		register(ctx, registration{addr: lis.Addr().String(), creds: insecure.NewCredentials(),
			resources: func() *cpv1.Resources { return &cpv1.Resources{} },
			req:       &cpv1.RegisterAgentRequest{AgentId: "agent-1", Address: "127.0.0.1:9"}}, mgr, log)
	}()
	for deadline := time.Now().Add(30 * time.Second); cp.calls.Load() < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d registrations in 30 s", cp.calls.Load())
		}
	}
	cancel()
	<-done
}
