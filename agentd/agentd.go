// Package agentd wires the per-machine agent daemon: configuration, journal,
// Blender runtimes, AgentService with reflection and health, and the
// registration heartbeat to the control plane.
package agentd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"buf.build/go/protovalidate"
	protovalidate_mw "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/protovalidate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/blendplane/blendplane/agentd/internal/blender"
	"github.com/blendplane/blendplane/agentd/internal/journal"
	"github.com/blendplane/blendplane/agentd/internal/service"
	"github.com/blendplane/blendplane/agentd/internal/sessions"
	agentv1 "github.com/blendplane/blendplane/gen/blendplane/agent/v1"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// Config configures agentd. Defaults() gives every field a value.
type Config struct {
	// Listen is the AgentService listen address. Loopback by default.
	Listen string
	// Advertise is the address the control plane dials; empty means the
	// bound listen address.
	Advertise string
	// ControlPlane is the control plane's address.
	ControlPlane string
	// DataDir holds agentd.db (identity, journal) and sessions/<id>/ (each
	// session's work files and its output sandbox).
	DataDir string
	// Blender lists Blender runtimes: blender binaries or Pythons that can
	// import bpy. Empty: the repo's .blender/venv, then blender on PATH.
	Blender []string
	// MaxMessageBytes caps one gRPC message.
	MaxMessageBytes int
	// MaxSessions bounds how many Blender processes run at once, one per
	// session with work; idle sessions beyond it are parked (checkpointed,
	// Blender stopped) and restored on their next plan. 0: from the
	// machine's memory (DefaultMaxSessions).
	MaxSessions int
	// Checkpoint policy (see sessions.Config): a session's scene is saved
	// after CheckpointEvery scene changes, after CheckpointInterval if
	// anything changed, or after CheckpointIdle without operations.
	CheckpointEvery    int
	CheckpointInterval time.Duration
	CheckpointIdle     time.Duration
}

// Defaults returns the default configuration.
func Defaults() Config {
	return Config{
		Listen:             "127.0.0.1:7401",
		ControlPlane:       "127.0.0.1:7400",
		DataDir:            "./data/agentd",
		MaxMessageBytes:    64 << 20,
		CheckpointEvery:    500,
		CheckpointInterval: time.Minute,
		CheckpointIdle:     5 * time.Second,
	}
}

// Run serves until ctx is cancelled, then stops every Blender and exits.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	j, err := journal.Open(filepath.Join(cfg.DataDir, "agentd.db"))
	if err != nil {
		return err
	}
	defer j.Close()
	agentID, err := j.AgentID()
	if err != nil {
		return err
	}
	log = log.With("agent_id", agentID)

	rts, err := blender.Discover(cfg.Blender, searchDirs())
	if err != nil {
		return err
	}
	runtimes, err := sessions.Probe(ctx, rts, cfg.DataDir, log)
	if err != nil {
		return err
	}
	maxSessions := cfg.MaxSessions
	if maxSessions <= 0 {
		maxSessions = DefaultMaxSessions(resources(cfg.DataDir).GetMemoryMib())
	}
	mgr, err := sessions.NewManager(sessions.Config{
		DataDir:            cfg.DataDir,
		MaxLive:            maxSessions,
		CheckpointEvery:    cfg.CheckpointEvery,
		CheckpointInterval: cfg.CheckpointInterval,
		CheckpointIdle:     cfg.CheckpointIdle,
		Faults:             testFaults(),
	}, runtimes, j, log)
	if err != nil {
		return err
	}
	defer mgr.Shutdown()

	val, err := protovalidate.New()
	if err != nil {
		return err
	}
	srv := grpc.NewServer(
		grpc.MaxRecvMsgSize(cfg.MaxMessageBytes), grpc.MaxSendMsgSize(cfg.MaxMessageBytes),
		grpc.ChainUnaryInterceptor(protovalidate_mw.UnaryServerInterceptor(val)),
		grpc.ChainStreamInterceptor(protovalidate_mw.StreamServerInterceptor(val)),
	)
	hostname, _ := os.Hostname()
	agentv1.RegisterAgentServiceServer(srv, service.New(agentID, hostname, mgr, func() *cpv1.Resources { return resources(cfg.DataDir) }))
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	reflection.Register(srv)

	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	advertise := cfg.Advertise
	if advertise == "" {
		advertise = lis.Addr().String()
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	log.Info("agentd serving", "addr", lis.Addr().String(), "control_plane", cfg.ControlPlane, "data_dir", cfg.DataDir,
		"max_sessions", maxSessions)

	regCtx, stopReg := context.WithCancel(ctx)
	defer stopReg()
	go register(regCtx, cfg.ControlPlane, &cpv1.RegisterAgentRequest{
		AgentId: agentID, Address: advertise, Hostname: hostname, Runtimes: mgr.Runtimes(),
	}, mgr, cfg.DataDir, log)

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("agentd stopping")
	hs.Shutdown()
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		srv.Stop()
	}
	if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// register announces the agent to the control plane and repeats it at the
// interval the control plane asks for, as a heartbeat.
func register(ctx context.Context, addr string, req *cpv1.RegisterAgentRequest, mgr *sessions.Manager, dataDir string, log *slog.Logger) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Error("control plane address", "addr", addr, "err", err)
		return
	}
	defer conn.Close()
	cp := cpv1.NewControlPlaneServiceClient(conn)
	interval, failing, registered := 2*time.Second, false, false
	for {
		st := mgr.Status()
		req.SessionCount, req.MaxSessions = int32(st.Sessions), int32(st.MaxLive)
		req.LiveSessions, req.BusySessions = st.Live, int32(st.Busy)
		req.Resources = resources(dataDir)
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := cp.RegisterAgent(rctx, req)
		cancel()
		switch {
		case err != nil && !failing:
			failing = true
			log.Warn("cannot register with control plane; retrying", "control_plane", addr, "err", err)
		case err == nil:
			if failing || !registered {
				log.Info("registered with control plane", "control_plane", addr)
			}
			failing, registered = false, true
			if s := resp.GetHeartbeatIntervalSeconds(); s > 0 {
				interval = time.Duration(s) * time.Second
			}
			mgr.SetIdleTimeout(time.Duration(resp.GetSessionIdleTimeoutMs()) * time.Millisecond)
		}
		wait := interval
		if failing {
			wait = 500 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// Memory a session's Blender is budgeted (a bpy 4.5 session idles at about
// 250 MiB; renders and large scenes take more), and what the machine keeps
// for everything else.
const (
	sessionMemoryMiB  = 1024
	reservedMemoryMiB = 2048
)

// DefaultMaxSessions is how many Blenders a machine with memMiB of memory
// runs at once by default: one per GiB beyond 2 GiB, between 1 and 64.
func DefaultMaxSessions(memMiB int64) int {
	return int(min(max((memMiB-reservedMemoryMiB)/sessionMemoryMiB, 1), 64))
}

// searchDirs are where the repo's .blender/venv may be: the working
// directory and the directory above the binary (bin/..).
func searchDirs() []string {
	var dirs []string
	if wd, err := os.Getwd(); err == nil {
		dirs = append(dirs, wd)
	}
	if exe, err := os.Executable(); err == nil {
		dirs = append(dirs, filepath.Dir(filepath.Dir(exe)))
	}
	return dirs
}

// testFaults reads BLENDPLANE_TEST_FAULTS (comma separated, e.g. "undo"):
// fault injection on the real code path, for tests only.
func testFaults() []string {
	v := os.Getenv("BLENDPLANE_TEST_FAULTS")
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// resources reports the machine's memory and the free disk under the data
// directory, which the control plane checks session constraints against.
func resources(dataDir string) *cpv1.Resources {
	r := &cpv1.Resources{}
	if raw, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(raw), "\n") {
			var kb int64
			if n, _ := fmt.Sscanf(line, "MemTotal: %d kB", &kb); n == 1 {
				r.MemoryMib = kb / 1024
			}
		}
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dataDir, &st); err == nil {
		r.TempStorageMib = int64(st.Bavail) * st.Bsize / (1 << 20)
	}
	return r
}
