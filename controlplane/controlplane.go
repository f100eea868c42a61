// Package controlplane wires the control-plane daemon: its configuration, its
// bbolt store and blob directory, the agent fleet, the application layer
// (which drives the plan executor) and the gRPC server with reflection and
// health.
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/blendplane/blendplane/controlplane/internal/app"
	"github.com/blendplane/blendplane/controlplane/internal/blob"
	"github.com/blendplane/blendplane/controlplane/internal/executor"
	"github.com/blendplane/blendplane/controlplane/internal/fleet"
	"github.com/blendplane/blendplane/controlplane/internal/service"
	"github.com/blendplane/blendplane/controlplane/internal/store"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// Config configures the control plane. Defaults() gives every field a value.
type Config struct {
	// Listen is the gRPC listen address. Loopback by default.
	Listen string
	// DataDir holds controlplane.db (sessions, plans, receipts, audit) and
	// blobs/ (artifact content).
	DataDir string
	// MaxMessageBytes caps one gRPC request. 64 MiB admits a plan of 100,000
	// operations (about 12 MiB on the wire) with room to spare. Requests
	// over it are refused with RESOURCE_EXHAUSTED / PAYLOAD_TOO_LARGE.
	MaxMessageBytes int
	// MaxArtifactBytes caps one uploaded artifact (streamed in chunks, never
	// whole in memory).
	MaxArtifactBytes int64
	// SessionIdleTimeout parks a session (checkpoint, stop its Blender)
	// after this long without plans; the next plan restores it. 0: never.
	SessionIdleTimeout time.Duration
	// MaxOperationsPerPlan caps a plan's size.
	MaxOperationsPerPlan int
	// Heartbeat is the interval agents are asked to register at; an agent
	// silent for three intervals is listed as unreachable.
	Heartbeat time.Duration
	// OperationTimeout cancels a call to an agent that has been silent (no
	// receipt, no progress) this long; the largest tool time budget a
	// session contract may ask for is two minutes less.
	OperationTimeout time.Duration
	// ToolTimeBudget is a tool call's time budget when the contract does not
	// ask for one; over it, the call fails with TIMEOUT and has no effect.
	ToolTimeBudget time.Duration
	// AgentRetryWindow is how long an unreachable agent is retried before
	// its operation fails with AGENT_UNAVAILABLE.
	AgentRetryWindow time.Duration
	// OpenSessionTimeout bounds opening a session on an agent.
	OpenSessionTimeout time.Duration
}

// Defaults returns the default configuration.
func Defaults() Config {
	return Config{
		Listen:               "127.0.0.1:7400",
		DataDir:              "./data/controlplane",
		MaxMessageBytes:      64 << 20,
		MaxArtifactBytes:     4 << 30,
		SessionIdleTimeout:   10 * time.Minute,
		MaxOperationsPerPlan: 100_000,
		Heartbeat:            2 * time.Second,
		OperationTimeout:     10 * time.Minute,
		ToolTimeBudget:       5 * time.Minute,
		AgentRetryWindow:     2 * time.Minute,
		OpenSessionTimeout:   30 * time.Second,
	}
}

// Run serves until ctx is cancelled, then shuts down gracefully. ready, if
// not nil, receives the bound address once the server accepts connections.
func Run(ctx context.Context, cfg Config, log *slog.Logger, ready func(addr string)) error {
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	st, err := store.Open(filepath.Join(cfg.DataDir, "controlplane.db"))
	if err != nil {
		return err
	}
	defer st.Close()
	blobs, err := blob.Open(filepath.Join(cfg.DataDir, "blobs"))
	if err != nil {
		return err
	}

	fl := fleet.New(cfg.Heartbeat, grpc.WithDefaultCallOptions(
		grpc.MaxCallRecvMsgSize(cfg.MaxMessageBytes), grpc.MaxCallSendMsgSize(cfg.MaxMessageBytes)))
	defer fl.Close()
	a := app.New(app.Config{
		MaxOperationsPerPlan:  cfg.MaxOperationsPerPlan,
		MaxPayloadBytes:       int64(cfg.MaxMessageBytes),
		MaxArtifactBytes:      cfg.MaxArtifactBytes,
		OpenSessionTimeout:    cfg.OpenSessionTimeout,
		DefaultToolTimeBudget: cfg.ToolTimeBudget,
		MinToolTimeBudget:     minToolTimeBudget,
		// Leave the agent time to rebuild a session after a call that ran over
		// its budget, before the executor's watchdog gives up on it.
		MaxToolTimeBudget:  max(cfg.OperationTimeout-recoveryMargin, cfg.OperationTimeout/2),
		SessionIdleTimeout: cfg.SessionIdleTimeout,
	}, st, blobs, fl, executor.Config{OperationTimeout: cfg.OperationTimeout, AgentRetryWindow: cfg.AgentRetryWindow},
		log.With("component", "app"))
	defer a.Stop()

	codec := service.NewCodec(cfg.MaxMessageBytes)
	val, err := service.NewValidation(codec)
	if err != nil {
		return err
	}
	rpcLog := logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		log.Log(ctx, slog.Level(lvl), msg, fields...)
	})
	logOpts := []logging.Option{logging.WithLogOnEvents(logging.FinishCall), logging.WithLevels(rpcLevel)}
	srv := grpc.NewServer(
		grpc.ForceServerCodecV2(codec),
		// Above the codec's limit, so that a request somewhat over it gets a
		// structured refusal rather than the transport's bare one.
		grpc.MaxRecvMsgSize(2*cfg.MaxMessageBytes),
		grpc.MaxSendMsgSize(cfg.MaxMessageBytes),
		grpc.ChainUnaryInterceptor(logging.UnaryServerInterceptor(rpcLog, logOpts...), val.Unary()),
		grpc.ChainStreamInterceptor(logging.StreamServerInterceptor(rpcLog, logOpts...), val.Stream()),
	)
	cpv1.RegisterControlPlaneServiceServer(srv, service.New(a))
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	reflection.Register(srv)

	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if err := a.Start(); err != nil {
		return err
	}
	log.Info("control plane serving", "addr", lis.Addr().String(), "data_dir", cfg.DataDir)
	if ready != nil {
		ready(lis.Addr().String())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("control plane stopping")
	hs.Shutdown()
	a.Stop()
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(2 * time.Second):
		srv.Stop() // streams of running plans do not end on their own
	}
	if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// recoveryMargin is kept between the largest tool time budget and the
// executor's silence watchdog (OperationTimeout).
const recoveryMargin = 2 * time.Minute

// minToolTimeBudget is the smallest tool time budget a contract may ask
// for: every call over its budget stops and rebuilds the session's Blender,
// which alone takes about a second.
const minToolTimeBudget = time.Second

// rpcLevel logs successful calls at debug level, failures at warn.
func rpcLevel(code codes.Code) logging.Level {
	if code == codes.OK {
		return logging.LevelDebug
	}
	return logging.LevelWarn
}
