// Package controlplane wires the control-plane daemon: its configuration, its
// bbolt store, the agent fleet, the plan executor and the gRPC server with
// reflection and health.
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
	// DataDir holds controlplane.db (sessions, plans, receipts).
	DataDir string
	// MaxMessageBytes caps one gRPC message. 64 MiB admits a plan of 100,000
	// operations (about 12 MiB on the wire) with room to spare.
	MaxMessageBytes int
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
	// OpenSessionTimeout bounds starting a session's Blender.
	OpenSessionTimeout time.Duration
}

// Defaults returns the default configuration.
func Defaults() Config {
	return Config{
		Listen:               "127.0.0.1:7400",
		DataDir:              "./data/controlplane",
		MaxMessageBytes:      64 << 20,
		MaxOperationsPerPlan: 100_000,
		Heartbeat:            2 * time.Second,
		OperationTimeout:     10 * time.Minute,
		ToolTimeBudget:       5 * time.Minute,
		AgentRetryWindow:     2 * time.Minute,
		OpenSessionTimeout:   2 * time.Minute,
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

	fl := fleet.New(cfg.Heartbeat, grpc.WithDefaultCallOptions(
		grpc.MaxCallRecvMsgSize(cfg.MaxMessageBytes), grpc.MaxCallSendMsgSize(cfg.MaxMessageBytes)))
	defer fl.Close()
	ex := executor.New(executor.Config{OperationTimeout: cfg.OperationTimeout, AgentRetryWindow: cfg.AgentRetryWindow},
		st, fl, log.With("component", "executor"))
	defer ex.Stop()

	val, err := service.NewValidation()
	if err != nil {
		return err
	}
	rpcLog := logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		log.Log(ctx, slog.Level(lvl), msg, fields...)
	})
	logOpts := []logging.Option{logging.WithLogOnEvents(logging.FinishCall), logging.WithLevels(rpcLevel)}
	srv := grpc.NewServer(
		grpc.MaxRecvMsgSize(cfg.MaxMessageBytes),
		grpc.MaxSendMsgSize(cfg.MaxMessageBytes),
		grpc.ChainUnaryInterceptor(logging.UnaryServerInterceptor(rpcLog, logOpts...), val.Unary()),
		grpc.ChainStreamInterceptor(logging.StreamServerInterceptor(rpcLog, logOpts...), val.Stream()),
	)
	cpv1.RegisterControlPlaneServiceServer(srv, service.New(service.Limits{
		MaxOperationsPerPlan:  cfg.MaxOperationsPerPlan,
		MaxPayloadBytes:       int64(cfg.MaxMessageBytes),
		OpenSessionTimeout:    cfg.OpenSessionTimeout,
		DefaultToolTimeBudget: cfg.ToolTimeBudget,
		// Leave the agent time to rebuild a session after a call that ran over
		// its budget, before the executor's watchdog gives up on it.
		MaxToolTimeBudget: max(cfg.OperationTimeout-recoveryMargin, cfg.OperationTimeout/2),
	}, st, fl, ex, log.With("component", "service")))
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	reflection.Register(srv)

	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if err := ex.Resume(); err != nil {
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
	ex.Stop()
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

// rpcLevel logs successful calls at debug level, failures at warn.
func rpcLevel(code codes.Code) logging.Level {
	if code == codes.OK {
		return logging.LevelDebug
	}
	return logging.LevelWarn
}
