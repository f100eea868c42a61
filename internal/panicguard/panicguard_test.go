package panicguard

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/blendplane/blendplane/internal/grpctest"
	"github.com/blendplane/blendplane/internal/logbuf"
)

// buggy is a health service with a bug: asked about "bug", it panics.
type buggy struct {
	healthpb.UnimplementedHealthServer
}

func (buggy) Check(_ context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if req.GetService() == "bug" {
		var m map[string]int
		m["x"]++ // a nil map: the kind of bug a handler has
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func (buggy) Watch(req *healthpb.HealthCheckRequest, _ healthpb.Health_WatchServer) error {
	panic("a stream's bug: " + req.GetService())
}

// A handler's panic, unary or streaming, is answered Internal without its
// detail, logged with its stack, and the server goes on serving.
func TestGRPC(t *testing.T) {
	var logged logbuf.Buffer
	unary, stream := GRPC(slog.New(slog.NewTextHandler(&logged, nil)))
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(unary), grpc.ChainStreamInterceptor(stream))
	healthpb.RegisterHealthServer(srv, buggy{})
	client := healthpb.NewHealthClient(grpctest.Dial(t, srv))

	_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "bug"})
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "a bug, logged by the server") || strings.Contains(err.Error(), "nil map") {
		t.Fatalf("a unary handler's panic: %v", err)
	}
	watch, err := client.Watch(context.Background(), &healthpb.HealthCheckRequest{Service: "svc"})
	if err == nil {
		_, err = watch.Recv()
	}
	if status.Code(err) != codes.Internal || strings.Contains(err.Error(), "a stream's bug") {
		t.Fatalf("a stream handler's panic: %v", err)
	}
	if resp, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("after the panics: %v %v", resp, err)
	}
	log := logged.String()
	for _, want := range []string{Msg, "call=/grpc.health.v1.Health/Check", "assignment to entry in nil map", "panicguard.buggy.Check",
		"call=/grpc.health.v1.Health/Watch", "a stream's bug: svc", "panicguard.buggy.Watch"} {
		if !strings.Contains(log, want) {
			t.Errorf("the log lacks %q:\n%s", want, log)
		}
	}
}

// Catch turns the panic of the function that deferred it into its error,
// logged by the default logger: for a codec or a worker goroutine.
func TestCatch(t *testing.T) {
	var logged logbuf.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logged, nil)))
	defer slog.SetDefault(prev)
	decode := func() (err error) {
		defer Catch("decoding a thing", &err)
		var b []byte
		_ = b[3]
		return nil
	}
	done := make(chan error)
	go func() { done <- decode() }() // on a goroutine of its own, as a worker
	if err := <-done; err == nil || !strings.Contains(err.Error(), "internal error serving decoding a thing") {
		t.Fatalf("Catch: %v", err)
	}
	if log := logged.String(); !strings.Contains(log, Msg) || !strings.Contains(log, "index out of range") || !strings.Contains(log, "TestCatch") {
		t.Fatalf("the log: %s", log)
	}
	if err := func() (err error) { defer Catch("nothing", &err); return errors.New("its own") }(); err == nil || err.Error() != "its own" {
		t.Fatalf("without a panic: %v", err)
	}
}
