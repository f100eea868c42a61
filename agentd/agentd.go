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
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"buf.build/go/protovalidate"
	protovalidate_mw "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/protovalidate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/blendplane/blendplane/agentd/internal/blender"
	"github.com/blendplane/blendplane/agentd/internal/journal"
	"github.com/blendplane/blendplane/agentd/internal/metrics"
	"github.com/blendplane/blendplane/agentd/internal/service"
	"github.com/blendplane/blendplane/agentd/internal/sessions"
	agentv1 "github.com/blendplane/blendplane/gen/blendplane/agent/v1"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/internal/diskfree"
	"github.com/blendplane/blendplane/internal/panicguard"
	"github.com/blendplane/blendplane/internal/rpclog"
	"github.com/blendplane/blendplane/internal/transport"
)

// Config configures agentd. Defaults() gives every field a value.
type Config struct {
	// Listen is the AgentService listen address. Loopback by default.
	Listen string
	// Labels are matched by sessions' agent selectors (--label key=value).
	Labels map[string]string
	// MetricsListen serves Prometheus metrics at /metrics (empty: not at
	// all); loopback only: nothing of the agent is served beyond it but to
	// the control plane.
	MetricsListen string
	// Advertise is the address the control plane dials; empty means the
	// bound listen address.
	Advertise string
	// ControlPlane is the control plane's address.
	ControlPlane string
	// TokenFile holds the agent's bearer token (a token with the agent
	// scope), sent at every registration.
	TokenFile string
	// CAFile is the control plane's CA certificate, to trust a control plane
	// that is not on loopback (whose listener is then TLS).
	CAFile string
	// AllowInsecureLocal turns authentication and TLS off (development on
	// one machine): refused unless both addresses are on loopback, and the
	// control plane must run with it too.
	AllowInsecureLocal bool
	// DataDir holds agentd.db (identity, journal) and sessions/<id>/ (each
	// session's work files and its output sandbox).
	DataDir string
	// Blender lists Blender runtimes: blender binaries or Pythons that can
	// import bpy. Empty: the repo's .blender/venv, then blender on PATH.
	Blender []string
	// MaxMessageBytes caps one gRPC message.
	MaxMessageBytes int
	// SessionStorageMiB is the most disk one session's files (uploads,
	// renders, exports) may take, offered to the control plane as the
	// ceiling of every session placed here (temp_storage_mib) and enforced
	// on each; less when the disk has less free. 0: the free disk.
	SessionStorageMiB int64
	// MinFreeDiskMiB is the disk agentd keeps free under DataDir for its
	// journal and checkpoints: session files (uploads, renders, exports)
	// that would leave less are refused, and it is not offered to sessions.
	MinFreeDiskMiB int64
	// MaxSessions bounds how many Blender processes run at once, one per
	// session with work; idle sessions beyond it are parked (checkpointed,
	// Blender stopped) and restored on their next plan. 0: from the
	// machine's memory (DefaultMaxSessions).
	MaxSessions int
	// SpareBlenders keeps a Blender started ahead, in a free slot, for the
	// next session start of each runtime in use (sessions/spares.go).
	SpareBlenders bool
	// Checkpoint policy (see sessions.Config): a session's scene is saved
	// after CheckpointEvery scene changes, after CheckpointInterval if
	// anything changed, or after CheckpointIdle without operations.
	CheckpointEvery    int
	CheckpointInterval time.Duration
	CheckpointIdle     time.Duration
	// RefreshAfter: once its Blender changed this many of the scene's
	// records (datablocks) since it loaded its scene, a session gets a
	// fresh Blender from its next checkpoint (sessions.Config.RefreshAfter;
	// 0: never).
	RefreshAfter int
}

// Defaults returns the default configuration.
func Defaults() Config {
	return Config{
		Listen:             "127.0.0.1:7401",
		ControlPlane:       "127.0.0.1:7400",
		DataDir:            "./data/agentd",
		MaxMessageBytes:    64 << 20,
		SessionStorageMiB:  10 << 10,
		MinFreeDiskMiB:     512,
		SpareBlenders:      true,
		CheckpointEvery:    500,
		CheckpointInterval: time.Minute,
		CheckpointIdle:     5 * time.Second,
		RefreshAfter:       3000, // about 1,000 creates
	}
}

// Run serves until ctx is cancelled, then stops every Blender and exits.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	for flag, mib := range map[string]int64{"--session-storage-mib": cfg.SessionStorageMiB, "--min-free-disk-mib": cfg.MinFreeDiskMiB} {
		if mib < 0 || mib > diskfree.MaxMiB {
			return fmt.Errorf("%s %d: from 0 to %d", flag, mib, diskfree.MaxMiB)
		}
	}
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
	offer := func() *cpv1.Resources { return resources(cfg.DataDir, cfg.SessionStorageMiB, cfg.MinFreeDiskMiB) }
	memMiB := offer().GetMemoryMib()
	maxSessions := cfg.MaxSessions
	if maxSessions <= 0 {
		maxSessions = DefaultMaxSessions(memMiB)
	}
	mgr, err := sessions.NewManager(sessions.Config{
		DataDir:            cfg.DataDir,
		MaxLive:            maxSessions,
		CheckpointEvery:    cfg.CheckpointEvery,
		CheckpointInterval: cfg.CheckpointInterval,
		CheckpointIdle:     cfg.CheckpointIdle,
		RefreshAfter:       cfg.RefreshAfter,
		MinFreeDiskMiB:     cfg.MinFreeDiskMiB,
		Faults:             testFaults(),
		NoSpares:           !cfg.SpareBlenders,
		SpareMemoryMiB:     memMiB,
	}, runtimes, j, log)
	if err != nil {
		return err
	}
	defer mgr.Shutdown()

	var id *identity
	var token string
	serverCreds := insecure.NewCredentials()
	if cfg.AllowInsecureLocal {
		for _, addr := range []string{cfg.Listen, cfg.ControlPlane} {
			if !transport.Loopback(addr) {
				return fmt.Errorf("--allow-insecure-local: %s is not on loopback; run with --token-file instead", addr)
			}
		}
		log.Warn("authentication and TLS are off (--allow-insecure-local): anyone on this machine can drive this agent")
	} else {
		if cfg.TokenFile == "" {
			return errors.New("agentd needs --token-file, a token with the agent scope (blendctl token create --scope agent), or --allow-insecure-local for development on one machine")
		}
		raw, err := os.ReadFile(cfg.TokenFile)
		if err != nil {
			return fmt.Errorf("token file: %w", err)
		}
		token = strings.TrimSpace(string(raw))
		if id, err = loadIdentity(cfg.DataDir, agentID); err != nil {
			return err
		}
		serverCreds = credentials.NewTLS(id.serverTLS())
	}
	cpCreds, err := controlPlaneCreds(cfg)
	if err != nil {
		return err
	}

	pv, err := protovalidate.New()
	if err != nil {
		return err
	}
	codec := service.NewCodec()
	val := service.Validator{Validator: pv, Codec: codec}
	guardUnary, guardStream := panicguard.GRPC(log)
	logUnary, logStream := rpclog.Interceptors(log)
	srv := grpc.NewServer(
		grpc.Creds(serverCreds),
		grpc.MaxRecvMsgSize(cfg.MaxMessageBytes), grpc.MaxSendMsgSize(cfg.MaxMessageBytes),
		grpc.ForceServerCodecV2(codec),
		// Streams served by goroutines that keep their grown stacks: a new
		// goroutine per stream spent a tenth of agentd's CPU growing its stack.
		grpc.NumStreamWorkers(uint32(runtime.NumCPU())),
		grpc.ChainUnaryInterceptor(logUnary, guardUnary, protovalidate_mw.UnaryServerInterceptor(val)),
		grpc.ChainStreamInterceptor(logStream, guardStream, protovalidate_mw.StreamServerInterceptor(val)),
	)
	hostname, _ := os.Hostname()
	mx := metrics.New(metricsSource{j, mgr})
	agentv1.RegisterAgentServiceServer(srv, service.New(agentID, hostname, mgr, offer, mx))
	if cfg.MetricsListen != "" {
		stop, err := serveMetrics(cfg.MetricsListen, mx.Handler(), log)
		if err != nil {
			return err
		}
		defer stop()
	}
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
	go register(regCtx, registration{addr: cfg.ControlPlane, creds: cpCreds, token: token, id: id, resources: offer,
		req: &cpv1.RegisterAgentRequest{AgentId: agentID, Address: advertise, Hostname: hostname, Runtimes: mgr.Runtimes(), Labels: cfg.Labels}}, mgr, log)

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

// registration is what register needs.
type registration struct {
	addr      string
	creds     credentials.TransportCredentials
	token     string    // empty: no authentication
	id        *identity // nil: no TLS
	resources func() *cpv1.Resources
	req       *cpv1.RegisterAgentRequest
}

// register announces the agent to the control plane and repeats it at the
// interval the control plane asks for, as a heartbeat. It asks for a
// certificate when the agent has none or its certificate is getting old.
func register(ctx context.Context, r registration, mgr *sessions.Manager, log *slog.Logger) {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(r.creds)}
	if r.token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(transport.Bearer(r.token)))
	}
	conn, err := grpc.NewClient(r.addr, opts...)
	if err != nil {
		log.Error("control plane address", "addr", r.addr, "err", err)
		return
	}
	defer conn.Close()
	cp := cpv1.NewControlPlaneServiceClient(conn)
	req := r.req
	full, byFingerprint := r.req.GetRuntimes(), registriesByFingerprint(r.req.GetRuntimes())
	interval, failing, registered, warnedNoCert, held := 2*time.Second, false, false, false, false
	for {
		// Once the control plane holds the registries, heartbeats name them
		// by fingerprint instead of sending every tool's schema each time.
		req.Runtimes, req.RegistriesByFingerprint = full, held
		if held {
			req.Runtimes = byFingerprint
		}
		st := mgr.Status()
		req.SessionCount, req.MaxSessions = int32(st.Sessions), int32(st.MaxLive)
		req.LiveSessions, req.BusySessions = st.Live, int32(st.Busy)
		req.Resources = r.resources()
		req.HeldSessions = mgr.Held()
		req.CertificateRequest = nil
		if r.id != nil {
			if req.CertificateRequest, err = r.id.request(); err != nil {
				log.Error("certificate request", "err", err)
			}
		}
		again := false
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := cp.RegisterAgent(rctx, req)
		cancel()
		switch {
		case err != nil && !failing:
			failing = true
			log.Warn("cannot register with control plane; retrying", "control_plane", r.addr, "err", err)
		case err == nil:
			if failing || !registered {
				log.Info("registered with control plane", "control_plane", r.addr)
			}
			failing, registered = false, true
			switch {
			case held && !resp.GetRegistriesHeld() && len(resp.GetCertificate()) == 0: // a certificate's answer registers nothing
				log.Info("the control plane does not hold this agent's tool registries (it restarted?): registering them in full")
				again = true
			case !held && resp.GetRegistriesHeld():
				log.Info("the control plane holds this agent's tool registries: heartbeats name them by fingerprint")
			}
			held = resp.GetRegistriesHeld()
			if s := resp.GetHeartbeatIntervalSeconds(); s > 0 {
				interval = time.Duration(s) * time.Second
			}
			mgr.SetIdleTimeout(time.Duration(resp.GetSessionIdleTimeoutMs()) * time.Millisecond)
			for _, id := range resp.GetMovedSessions() {
				// Placed elsewhere while this agent was out of reach (or
				// closed): its copy here is stale and must not run.
				log.Warn("session moved to another agent, or closed, while this agent was out of reach; stopping its Blender and dropping the stale copy", "session_id", id)
				go func() {
					if err := mgr.Drop(id); err != nil && !errors.Is(err, sessions.ErrNotFound) {
						log.Warn("dropping a moved session", "session_id", id, "err", err)
					}
				}()
			}
			switch {
			case len(resp.GetCertificate()) > 0 && r.id != nil: // none with --allow-insecure-local
				if err := r.id.install(resp.GetCertificate(), resp.GetCaCertificate()); err != nil {
					log.Error("the control plane's certificate for this agent is unusable", "err", err)
				} else {
					log.Info("certificate installed: AgentService serves the control plane over mutual TLS")
					// The control plane places sessions on this agent from its
					// first registration without a certificate request: at once.
					again = true
				}
			case len(req.CertificateRequest) > 0 && !warnedNoCert:
				warnedNoCert = true
				log.Error("the control plane issued no certificate: it runs with --allow-insecure-local, so run agentd with it too")
			}
		}
		wait := interval
		switch {
		case failing:
			wait = 500 * time.Millisecond
		case again:
			wait = 0
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// registriesByFingerprint is runtimes with each registry reduced to its
// version and fingerprint.
func registriesByFingerprint(runtimes []*cpv1.Runtime) []*cpv1.Runtime {
	out := make([]*cpv1.Runtime, len(runtimes))
	for i, rt := range runtimes {
		out[i] = &cpv1.Runtime{RuntimeId: rt.GetRuntimeId(), BlenderProfile: rt.GetBlenderProfile(), BaselineSceneHash: rt.GetBaselineSceneHash(),
			Registry: &cpv1.ToolRegistry{Version: rt.GetRegistry().GetVersion(), Fingerprint: rt.GetRegistry().GetFingerprint()}}
	}
	return out
}

// controlPlaneCreds are the transport credentials to reach the control
// plane.
func controlPlaneCreds(cfg Config) (credentials.TransportCredentials, error) {
	if cfg.AllowInsecureLocal && !transport.Loopback(cfg.ControlPlane) {
		return nil, fmt.Errorf("--allow-insecure-local: control plane %s is not on loopback", cfg.ControlPlane)
	}
	return transport.ClientCreds(cfg.ControlPlane, cfg.CAFile)
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

// resources reports the machine's memory and what a session's files may
// take on disk (the free disk under the data directory less the
// minFreeMiB agentd keeps, at most sessionStorageMiB when that is not 0),
// which the control plane checks session constraints against and makes
// their defaults.
func resources(dataDir string, sessionStorageMiB, minFreeMiB int64) *cpv1.Resources {
	r := &cpv1.Resources{}
	if raw, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(raw), "\n") {
			var kb int64
			if n, _ := fmt.Sscanf(line, "MemTotal: %d kB", &kb); n == 1 {
				r.MemoryMib = kb / 1024
			}
		}
	}
	if free, err := diskfree.Bytes(dataDir); err == nil {
		r.TempStorageMib = max(free>>20-minFreeMiB, 1)
	}
	if sessionStorageMiB > 0 && (r.TempStorageMib == 0 || sessionStorageMiB < r.TempStorageMib) {
		r.TempStorageMib = sessionStorageMiB
	}
	return r
}

// metricsSource is what agentd's metrics read.
type metricsSource struct {
	j *journal.Journal
	m *sessions.Manager
}

func (s metricsSource) JournalCommits() uint64            { return s.j.Commits() }
func (s metricsSource) Blenders() []int                   { return s.m.Blenders() }
func (s metricsSource) SessionCounts() (live, parked int) { return s.m.SessionCounts() }
func (s metricsSource) Spares() int                       { return s.m.Spares() }
func (s metricsSource) Adopted() uint64                   { return s.m.Adopted() }
func (s metricsSource) Refreshed() uint64                 { return s.m.Refreshed() }

// serveMetrics serves /metrics on a loopback address; a node's Prometheus
// (or its agent) scrapes it there.
func serveMetrics(addr string, h http.Handler, log *slog.Logger) (stop func(), err error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("--metrics-listen %q: metrics are served on loopback only (scrape them from the node, or through a local Prometheus agent)", addr)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(lis)
	log.Info("metrics serving", "addr", lis.Addr().String())
	return func() { srv.Close() }, nil
}
