// Package controlplane wires the control-plane daemon: its configuration, its
// bbolt store and blob directory, the agent fleet, the application layer
// (which drives the plan executor) and the gRPC server with reflection and
// health.
package controlplane

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/grpc/test/bufconn"

	"github.com/blendplane/blendplane/controlplane/internal/app"
	"github.com/blendplane/blendplane/controlplane/internal/auth"
	"github.com/blendplane/blendplane/controlplane/internal/blob"
	"github.com/blendplane/blendplane/controlplane/internal/executor"
	"github.com/blendplane/blendplane/controlplane/internal/fleet"
	"github.com/blendplane/blendplane/controlplane/internal/httpd"
	"github.com/blendplane/blendplane/controlplane/internal/metrics"
	"github.com/blendplane/blendplane/controlplane/internal/policy"
	"github.com/blendplane/blendplane/controlplane/internal/service"
	"github.com/blendplane/blendplane/controlplane/internal/store"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	plannerv1 "github.com/blendplane/blendplane/gen/blendplane/planner/v1"
	"github.com/blendplane/blendplane/internal/diskfree"
	"github.com/blendplane/blendplane/internal/panicguard"
	"github.com/blendplane/blendplane/internal/receiptwire"
	"github.com/blendplane/blendplane/internal/rpclog"
	"github.com/blendplane/blendplane/internal/transport"
	"github.com/blendplane/blendplane/lesson"
	"github.com/blendplane/blendplane/mcp"
	"github.com/blendplane/blendplane/planner"
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
	// MinFreeDiskMiB is the disk the control plane keeps free under DataDir
	// for its database: artifact content (uploads, files of receipts,
	// checkpoints) that would leave less is not kept (0: no floor).
	MinFreeDiskMiB int64
	// MaxArtifactBytes caps one uploaded artifact (streamed in chunks, never
	// whole in memory).
	MaxArtifactBytes int64
	// ArtifactQuotaMiB bounds the artifacts one principal's sessions keep
	// (every version of every upload and receipt's file, until
	// ArtifactRetention forgets them); 0: no bound.
	ArtifactQuotaMiB int64
	// MaxSessionsPerPrincipal bounds the sessions one principal holds
	// open; 0: no bound.
	MaxSessionsPerPrincipal int
	// MaxAgentsPerPrincipal bounds the agents one agent token (principal)
	// has in the fleet, until they are forgotten; 0: no bound.
	MaxAgentsPerPrincipal int
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
	// AgentLostAfter marks an agent silent this long LOST (0: never).
	AgentLostAfter time.Duration
	// ArtifactRetention forgets the artifacts of a session this long after
	// it closed, and removes their content once no other artifact names it
	// (0: kept for good).
	ArtifactRetention time.Duration
	// AgentForgetAfter drops an agent silent this long from the fleet,
	// unless it holds sessions.
	AgentForgetAfter time.Duration
	// PolicyFile is the policy (YAML or JSON, package policy); empty: the
	// defaults (destructive and unsafe_ops operations need approval).
	PolicyFile string
	// AllowInsecureLocal turns authentication and TLS off, for development
	// on one machine: refused unless the listener is on loopback.
	AllowInsecureLocal bool
	// TLSHosts are further names and addresses clients reach the control
	// plane by, put into its TLS certificate beside its host name and the
	// listen address (every interface's, for a wildcard one).
	TLSHosts []string
	// HTTPListen is the address of the HTTP front doors (/mcp, /v1, the
	// lesson API); empty: none. Beyond loopback it is HTTPS with a
	// certificate of the CA.
	HTTPListen string
	// LessonPublicKeys are PEM Ed25519 public keys signed lessons verify
	// against; RequireSignedLessons refuses unsigned ones; LessonMaxAge is
	// how far a lesson's issued_at may lie from now.
	LessonPublicKeys     []string
	RequireSignedLessons bool
	LessonMaxAge         time.Duration
	// LessonCustomCommands lets lessons' X_CUSTOM.<name> commands run the
	// registry's macro.<name>.
	LessonCustomCommands bool
	// Planner is the planner runtime's provider: "gemini", "openai" (any
	// OpenAI-compatible chat completions endpoint) or empty (its routes
	// answer 503 saying how to configure one). PlannerModel names the
	// model, PlannerBaseURL the endpoint (empty: the provider's own);
	// PlannerAPIKey comes from GEMINI_API_KEY or OPENAI_API_KEY.
	Planner, PlannerModel, PlannerBaseURL, PlannerAPIKey string
	// PlannerMaxTurns bounds a run's model turns (1 to 3).
	PlannerMaxTurns int
}

// mcpSessionTimeout closes an MCP session (and its Blendplane session)
// after this long without requests.
const mcpSessionTimeout = 30 * time.Minute

// Defaults returns the default configuration.
func Defaults() Config {
	return Config{
		Listen:                  "127.0.0.1:7400",
		HTTPListen:              "127.0.0.1:7480",
		DataDir:                 "./data/controlplane",
		MaxMessageBytes:         64 << 20,
		MaxArtifactBytes:        4 << 30,
		MinFreeDiskMiB:          512,
		MaxSessionsPerPrincipal: 1000,
		MaxAgentsPerPrincipal:   256,
		SessionIdleTimeout:      10 * time.Minute,
		MaxOperationsPerPlan:    100_000,
		Heartbeat:               2 * time.Second,
		OperationTimeout:        10 * time.Minute,
		ToolTimeBudget:          5 * time.Minute,
		AgentRetryWindow:        5 * time.Minute,
		OpenSessionTimeout:      30 * time.Second,
		AgentLostAfter:          2 * time.Minute,
		AgentForgetAfter:        10 * time.Minute,
		LessonMaxAge:            10 * time.Minute,
		PlannerMaxTurns:         3,
	}
}

// Files the first start writes into the data dir.
const (
	// AdminTokenFile holds the admin token's secret (mode 0600).
	AdminTokenFile = "admin.token"
	// CAFile is the CA certificate clients and agents trust (ca-key.pem
	// beside it is the CA's key, mode 0600).
	CAFile = "ca.pem"
)

// minMessageBytes is the least --max-message-bytes: room for an artifact's
// chunk (512 KiB, app and agentd) and the message around it.
const minMessageBytes = 1 << 20

// Run serves until ctx is cancelled, then shuts down gracefully. ready, if
// not nil, receives the bound address once the server accepts connections.
func Run(ctx context.Context, cfg Config, log *slog.Logger, ready func(addr string)) error {
	if cfg.Heartbeat <= 0 {
		return fmt.Errorf("--heartbeat %s: more than 0", cfg.Heartbeat)
	}
	for _, f := range []struct {
		flag  string
		n, hi int64
	}{
		{"--min-free-disk-mib", cfg.MinFreeDiskMiB, diskfree.MaxMiB},
		{"--artifact-quota-mib", cfg.ArtifactQuotaMiB, diskfree.MaxMiB},
		{"--max-sessions-per-principal", int64(cfg.MaxSessionsPerPrincipal), math.MaxInt64},
		{"--max-agents-per-principal", int64(cfg.MaxAgentsPerPrincipal), math.MaxInt64},
	} {
		if f.n < 0 || f.n > f.hi {
			return fmt.Errorf("%s %d: from 0 (none) to %d", f.flag, f.n, f.hi)
		}
	}
	if cfg.MaxMessageBytes < minMessageBytes {
		return fmt.Errorf("--max-message-bytes %d: at least %d (artifacts travel in 512 KiB chunks)", cfg.MaxMessageBytes, minMessageBytes)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	for _, addr := range []string{cfg.Listen, cfg.HTTPListen} {
		if cfg.AllowInsecureLocal && addr != "" && !transport.Loopback(addr) {
			return fmt.Errorf("--allow-insecure-local: %s is not on loopback; every listener beyond loopback is authenticated and TLS", addr)
		}
	}
	st, err := store.Open(filepath.Join(cfg.DataDir, "controlplane.db"))
	if err != nil {
		return err
	}
	defer st.Close()
	var ca *auth.CA
	var agentCreds func(string) credentials.TransportCredentials
	serverCreds := insecure.NewCredentials()
	if cfg.AllowInsecureLocal {
		log.Warn("authentication and TLS are off (--allow-insecure-local): anyone on this machine can do anything")
	} else {
		var created bool
		if ca, created, err = auth.LoadOrCreateCA(cfg.DataDir); err != nil {
			return err
		}
		if created {
			log.Info("certificate authority created", "ca", filepath.Join(cfg.DataDir, CAFile))
		}
		client, err := ca.ClientCert(auth.ControlPlaneName, certValidity)
		if err != nil {
			return err
		}
		agentCreds = func(agentID string) credentials.TransportCredentials {
			return credentials.NewTLS(&tls.Config{
				MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{client}, RootCAs: ca.Pool(), ServerName: auth.AgentServerName(agentID),
				VerifyConnection: func(cs tls.ConnectionState) error { return auth.VerifyAgent(cs, agentID) },
			})
		}
		if !transport.Loopback(cfg.Listen) {
			cert, err := ca.ServerCert(serverNames(cfg.Listen, cfg.TLSHosts), certValidity)
			if err != nil {
				return err
			}
			serverCreds = credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}})
		}
	}
	var pol *policy.Policy
	if cfg.PolicyFile != "" {
		if pol, err = policy.Load(cfg.PolicyFile); err != nil {
			return err
		}
		log.Info("policy loaded", "file", cfg.PolicyFile)
	}
	blobs, err := blob.Open(filepath.Join(cfg.DataDir, "blobs"), cfg.MinFreeDiskMiB<<20)
	if err != nil {
		return err
	}

	if cfg.AgentLostAfter > 0 && cfg.AgentRetryWindow <= cfg.AgentLostAfter {
		log.Warn("--agent-retry-window is not above --agent-lost-after: a lost agent's plans fail (AGENT_UNAVAILABLE) before its sessions move to another agent",
			"agent_retry_window", cfg.AgentRetryWindow, "agent_lost_after", cfg.AgentLostAfter)
	}
	m := metrics.New()
	st.Observe = m.Committed
	m.CountCommits(st.Commits)
	// Receipts' results pass through undecoded: the control plane stores
	// and streams them, it never reads them.
	fl := fleet.New(cfg.Heartbeat, cfg.AgentLostAfter, agentCreds, grpc.WithDefaultCallOptions(
		grpc.MaxCallRecvMsgSize(cfg.MaxMessageBytes), grpc.MaxCallSendMsgSize(cfg.MaxMessageBytes), grpc.ForceCodecV2(receiptwire.Codec{})))
	defer fl.Close()
	a := app.New(app.Config{
		MaxOperationsPerPlan:    cfg.MaxOperationsPerPlan,
		MaxPayloadBytes:         int64(cfg.MaxMessageBytes),
		MaxArtifactBytes:        cfg.MaxArtifactBytes,
		MaxSessionsPerPrincipal: cfg.MaxSessionsPerPrincipal,
		MaxAgentsPerPrincipal:   cfg.MaxAgentsPerPrincipal,
		OpenSessionTimeout:      cfg.OpenSessionTimeout,
		DefaultToolTimeBudget:   cfg.ToolTimeBudget,
		MinToolTimeBudget:       minToolTimeBudget,
		// Leave the agent time to rebuild a session after a call that ran over
		// its budget, before the executor's watchdog gives up on it.
		MaxToolTimeBudget:  max(cfg.OperationTimeout-recoveryMargin, cfg.OperationTimeout/2),
		SessionIdleTimeout: cfg.SessionIdleTimeout,
		AgentForgetAfter:   cfg.AgentForgetAfter,
		ArtifactRetention:  cfg.ArtifactRetention,
		ArtifactQuotaMiB:   cfg.ArtifactQuotaMiB,
		Policy:             pol,
		Metrics:            m,
	}, st, blobs, fl, ca, executor.Config{OperationTimeout: cfg.OperationTimeout, AgentRetryWindow: cfg.AgentRetryWindow}, log)
	defer a.Stop()
	authn := &service.Authentication{App: a, Off: cfg.AllowInsecureLocal}

	codec := service.NewCodec(cfg.MaxMessageBytes)
	val, err := service.NewValidation(codec)
	if err != nil {
		return err
	}
	guardUnary, guardStream := panicguard.GRPC(log)
	logUnary, logStream := rpclog.Interceptors(log)
	api := service.New(a, cfg.AllowInsecureLocal)
	newServer := func(creds credentials.TransportCredentials, authn *service.Authentication, more ...grpc.ServerOption) *grpc.Server {
		return grpc.NewServer(append(more,
			grpc.Creds(creds),
			grpc.ForceServerCodecV2(codec),
			// Above the codec's limit, so that a request somewhat over it gets a
			// structured refusal rather than the transport's bare one.
			grpc.MaxRecvMsgSize(2*cfg.MaxMessageBytes),
			grpc.MaxSendMsgSize(cfg.MaxMessageBytes),
			// Streams served by goroutines that keep their grown stacks, rather
			// than a new goroutine per stream that grows a fresh one.
			grpc.NumStreamWorkers(uint32(runtime.NumCPU())),
			// Who calls, before the request is even read (the interceptors
			// do not see a call refused here, so it is logged here).
			grpc.InTapHandle(func(ctx context.Context, info *tap.Info) (context.Context, error) {
				ctx, err := authn.Tap(ctx, info)
				if err != nil {
					log.Info("refused call", "grpc.method", info.FullMethodName, "grpc.code", status.Code(err).String(), "err", err)
				}
				return ctx, err
			}),
			// The log sees the code a recovered panic answers with.
			grpc.ChainUnaryInterceptor(logUnary, guardUnary, authn.Unary(), val.Unary()),
			grpc.ChainStreamInterceptor(logStream, guardStream, authn.Stream(), val.Stream()),
		)...)
	}
	inProcess := func(srv *grpc.Server) (*grpc.ClientConn, error) {
		pipe := bufconn.Listen(1 << 20)
		go srv.Serve(pipe)
		return grpc.NewClient("passthrough:///controlplane", grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return pipe.DialContext(ctx)
		}), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(cfg.MaxMessageBytes), grpc.MaxCallSendMsgSize(cfg.MaxMessageBytes)))
	}

	// The planner acts for the principals whose runs it drives: its calls
	// name the principal instead of carrying a token, on a server of its
	// own that nothing else can reach.
	delegated := newServer(insecure.NewCredentials(), &service.Authentication{App: a, Off: cfg.AllowInsecureLocal, OnBehalfOf: planner.PrincipalMetadata})
	cpv1.RegisterControlPlaneServiceServer(delegated, api)
	defer delegated.Stop()
	plannerConn, err := inProcess(delegated)
	if err != nil {
		return err
	}
	defer plannerConn.Close()
	provider, err := newProvider(ctx, cfg)
	if err != nil {
		return err
	}
	rt, err := planner.New(filepath.Join(cfg.DataDir, "planner.db"), plannerConn, planner.Options{Provider: provider,
		MaxTurns: cfg.PlannerMaxTurns, Caller: service.CallerName, Logger: log})
	if err != nil {
		return err
	}
	defer rt.Close()
	plan := planner.NewService(rt)

	srv := newServer(serverCreds, authn,
		// Bounds for connections from anywhere (the in-process ones carry
		// the front doors' calls, already bounded there): a connection's
		// streams at once, above any client of ours (a benchmark follows
		// 500 plans on one); an idle connection is closed after a while.
		grpc.MaxConcurrentStreams(1024),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: 15 * time.Minute}))
	cpv1.RegisterControlPlaneServiceServer(srv, api)
	plannerv1.RegisterPlannerServiceServer(srv, plan)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	reflection.Register(srv)

	// The HTTP front doors are clients of the same API, through an
	// in-process connection to a server with the same interceptors: every
	// call they make is authenticated, checked and logged as any client's.
	inproc := newServer(insecure.NewCredentials(), authn)
	cpv1.RegisterControlPlaneServiceServer(inproc, api)
	plannerv1.RegisterPlannerServiceServer(inproc, plan)
	defer inproc.Stop()
	self, err := inProcess(inproc)
	if err != nil {
		return err
	}
	defer self.Close()
	lessonOpts := lesson.Options{RequireSigned: cfg.RequireSignedLessons, MaxAge: cfg.LessonMaxAge,
		CustomCommands: cfg.LessonCustomCommands, Logger: log}
	for _, f := range cfg.LessonPublicKeys {
		k, err := lesson.LoadPublicKey(f)
		if err != nil {
			return fmt.Errorf("--lesson-public-key: %w", err)
		}
		lessonOpts.PublicKeys = append(lessonOpts.PublicKeys, k)
	}
	m.Watch(a)
	web, err := httpd.Handler(ctx, httpd.Config{App: a, AuthOff: cfg.AllowInsecureLocal, API: self, Lesson: lessonOpts,
		MCP: mcp.NewBackend(self, mcp.Options{Logger: log}).Handler(mcpSessionTimeout), Metrics: m.Handler(),
		MaxBodyBytes: int64(cfg.MaxMessageBytes)})
	if err != nil {
		return err
	}

	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if err := a.Start(); err != nil {
		return err
	}
	if err := rt.Start(); err != nil {
		return err
	}
	// Written once the port is bound, so that whoever waits for the file
	// (make demo, a first-time operator) can use it at once.
	if ca != nil {
		path := filepath.Join(cfg.DataDir, AdminTokenFile)
		created, err := a.EnsureAdminToken(path)
		if err != nil {
			return fmt.Errorf("admin token: %w", err)
		}
		if created {
			log.Info("admin token written", "path", path)
		}
	}
	var httpSrv *http.Server
	if cfg.HTTPListen != "" {
		hl, err := net.Listen("tcp", cfg.HTTPListen)
		if err != nil {
			return fmt.Errorf("http listen: %w", err)
		}
		// An idle keep-alive connection is closed (else each held a file
		// descriptor for good), headers are bounded.
		httpSrv = &http.Server{Handler: web, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 1 << 20}
		if ca != nil && !transport.Loopback(cfg.HTTPListen) {
			cert, err := ca.ServerCert(serverNames(cfg.HTTPListen, cfg.TLSHosts), certValidity)
			if err != nil {
				return err
			}
			httpSrv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
			hl = tls.NewListener(hl, httpSrv.TLSConfig)
		}
		log.Info("http front doors serving", "addr", hl.Addr().String(), "routes", "/console/ /mcp /v1/ /openapi.json /metrics /api/agent/ /lesson /run_operator /scene_summary /audit /health", "tls", httpSrv.TLSConfig != nil)
		go httpSrv.Serve(hl) // after the log reads TLSConfig: Serve writes to it
		defer httpSrv.Close()
	}
	log.Info("control plane serving", "addr", lis.Addr().String(), "data_dir", cfg.DataDir, "planner", rt.Model())
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
	if httpSrv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		httpSrv.Shutdown(sctx) // MCP streams of running calls do not end on their own
		cancel()
	}
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

// certValidity is how long the control plane's own certificates are valid;
// they are made anew at every start.
const certValidity = 365 * 24 * time.Hour

// serverNames are the names the control plane's certificate is valid for:
// the listen host (for a wildcard, every interface address), the host name
// and any extra names.
func serverNames(listen string, extra []string) []string {
	host, _, _ := net.SplitHostPort(listen)
	names := append([]string{}, extra...)
	if hostname, err := os.Hostname(); err == nil {
		names = append(names, hostname)
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return append(names, host)
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			names = append(names, n.IP.String())
		}
	}
	return names
}

// DefaultGeminiModel is the model --planner gemini uses without
// --planner-model.
const DefaultGeminiModel = "gemini-2.5-flash"

// newProvider is the planner's model, as configured (nil: none).
func newProvider(ctx context.Context, cfg Config) (planner.Provider, error) {
	if cfg.PlannerMaxTurns < 1 || cfg.PlannerMaxTurns > 3 {
		return nil, fmt.Errorf("--planner-max-turns %d: 1 to 3", cfg.PlannerMaxTurns)
	}
	pc := planner.ProviderConfig{Model: cfg.PlannerModel, BaseURL: cfg.PlannerBaseURL, APIKey: cfg.PlannerAPIKey}
	switch cfg.Planner {
	case "":
		return nil, nil
	case "gemini":
		if pc.APIKey == "" {
			return nil, errors.New("--planner gemini: set GEMINI_API_KEY (docs/PLANNER.md)")
		}
		if pc.Model == "" {
			pc.Model = DefaultGeminiModel
		}
		return planner.NewGemini(ctx, pc)
	case "openai":
		if pc.Model == "" {
			return nil, errors.New("--planner openai: name the model with --planner-model (e.g. qwen3:8b on Ollama)")
		}
		return planner.NewOpenAI(pc)
	}
	return nil, fmt.Errorf("--planner %q: gemini or openai", cfg.Planner)
}
