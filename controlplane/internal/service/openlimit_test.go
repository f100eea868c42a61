package service

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/blendplane/blendplane/internal/grpctest"
)

// TestOpenCallsBounded: calls without a token (health, reflection) are
// openAtOnce at most in flight, the next refused RESOURCE_EXHAUSTED before
// its message is read, and a slot comes back when its call ends. Before, a
// caller without a token held 100,000 Watch streams.
func TestOpenCallsBounded(t *testing.T) {
	au := &Authentication{}
	srv := grpc.NewServer(grpc.InTapHandle(au.Tap), grpc.ChainUnaryInterceptor(au.Unary()), grpc.ChainStreamInterceptor(au.Stream()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	client := healthpb.NewHealthClient(grpctest.Dial(t, srv))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	watches := make([]context.CancelFunc, openAtOnce)
	for i := range watches {
		wctx, stop := context.WithCancel(ctx)
		watches[i] = stop
		w, err := client.Watch(wctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Recv(); err != nil { // the first status: the stream holds its slot
			t.Fatalf("watch %d: %v", i, err)
		}
	}
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a check with every slot held: %v", err)
	}
	watches[0]()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no slot came back after a watch ended: %v", err)
		}
	}
	for _, stop := range watches[1:] {
		stop()
	}
	// Every slot comes back: as many checks as slots, one after another.
	for deadline := time.Now().Add(10 * time.Second); len(au.open) > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d slots still held with no call in flight", len(au.open))
		}
	}
}
