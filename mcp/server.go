// Package mcp is Blendplane's MCP server: one MCP tool per tool of the
// session's registry (and per macro), plan.submit for whole plans, built on
// the official Go SDK. It is a client of ControlPlaneService and nothing
// else: every call is negotiated, checked, put through the policy, journaled,
// receipted and audited exactly as a gRPC plan is, and its receipts carry
// the MCP call's id.
//
// One MCP session is one Blendplane session, negotiated on its first
// tools/list or tools/call from the client's name and version, and closed
// when the MCP session ends (Close).
package mcp

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/internal/panicguard"
	"github.com/blendplane/blendplane/planjson"
)

// Version is this server's version, as MCP clients see it.
const Version = "0.9.0"

// Options configure the sessions a Backend opens.
type Options struct {
	// FeatureFlags are asked for at negotiation (unsafe_ops,
	// nondeterministic_tools, progress_events, ...).
	FeatureFlags []string
	// Logger receives the server's events; nil: slog.Default().
	Logger *slog.Logger
}

// Backend makes MCP servers, one per MCP session, that call a control
// plane.
type Backend struct {
	cc     grpc.ClientConnInterface
	opts   Options
	log    *slog.Logger
	sdkLog *slog.Logger // handed to the SDK (NewBackend)
}

// NewBackend returns a Backend calling the control plane over cc.
func NewBackend(cc grpc.ClientConnInterface, opts Options) *Backend {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	flags := append([]string{"progress_events"}, opts.FeatureFlags...)
	opts.FeatureFlags = dedupe(flags)
	log = log.With("component", "mcp")
	// The SDK's attributes in a group of their own: its "level" (a client's
	// log level) would repeat the record's own key.
	return &Backend{cc: cc, opts: opts, log: log, sdkLog: log.WithGroup("sdk")}
}

// Session is the server of one MCP session and its Blendplane session.
type Session struct {
	b      *Backend
	cp     cpv1.ControlPlaneServiceClient // with the session's token
	server *sdk.Server

	mu        sync.Mutex
	sessionID string // the Blendplane session, once negotiated
	contract  *cpv1.SessionContract
	tools     map[string]*cpv1.ToolDefinition
	calls     atomic.Uint64 // request ids of this session's plans
	closeOnce sync.Once
	// ephemeral: the MCP session lives only in this process's memory (over
	// HTTP), so its Blendplane session is negotiated as one that ends with
	// the process.
	ephemeral bool
}

// capabilityEphemeral is the host capability that says so
// (HostProfile.capabilities): a control plane that starts closes the
// ephemeral sessions its previous run left open.
const capabilityEphemeral = "ephemeral"

// NewSession returns the MCP server of one MCP session. Its calls carry
// token as their bearer token (empty: the connection's own credentials).
func (b *Backend) NewSession(token string) *Session {
	return b.newSession(token, false)
}

func (b *Backend) newSession(token string, ephemeral bool) *Session {
	cc := b.cc
	if token != "" {
		cc = bearerConn{cc, "Bearer " + token}
	}
	s := &Session{b: b, cp: cpv1.NewControlPlaneServiceClient(cc), tools: map[string]*cpv1.ToolDefinition{}, ephemeral: ephemeral}
	s.server = sdk.NewServer(&sdk.Implementation{Name: "blendplane", Title: "Blendplane", Version: Version}, &sdk.ServerOptions{
		Instructions: instructions,
		Logger:       b.sdkLog,
		HasTools:     true,
		HasResources: true,
		HasPrompts:   true,
		// Every list and read is of the caller's own session: no client or
		// intermediary but the caller's may keep it (the SDK says public).
		SetCacheable: func(_ context.Context, _ sdk.Request, c *sdk.Cacheable) { c.CacheScope = "private" },
		// The Blendplane session ends with the MCP session.
		InitializedHandler: func(_ context.Context, req *sdk.InitializedRequest) {
			go func() {
				req.Session.Wait()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				s.Close(ctx)
			}()
		},
	})
	s.server.AddReceivingMiddleware(guarded(b.log), s.negotiateFirst)
	addPrompts(s.server)
	s.addResources()
	return s
}

// Server is the SDK server to run on a transport.
func (s *Session) Server() *sdk.Server { return s.server }

const instructions = `Blendplane changes a headless Blender scene safely: every tool call runs as a checked, journaled operation with a receipt (scene hashes before and after, a mutation id). Call scene.get_summary first to see the scene. Prefer plan.submit for several steps: it checks the whole plan before anything runs. A failed call returns the failure contract (error_code, recoverable, retry_hint, minimal_repair_plan): repair the call as it says and try again. Some operations wait for a person's approval: the call asks the user, or returns status AWAITING_APPROVAL with its request_id; plan.wait then returns the receipts once a person decides.`

// guarded answers a method whose handling panicked with an error, the
// panic logged (panicguard): the SDK recovers nothing, and a panic in a
// request's goroutine would end the daemon and every session it serves.
func guarded(log *slog.Logger) sdk.Middleware {
	return func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (res sdk.Result, err error) {
			defer func() {
				if p := recover(); p != nil {
					res, err = nil, panicguard.Recovered(log, "mcp "+method, p)
				}
			}()
			return next(ctx, method, req)
		}
	}
}

// negotiateFirst opens the Blendplane session before the first request that
// needs it, and registers the session's tools.
func (s *Session) negotiateFirst(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		if strings.HasPrefix(method, "tools/") || strings.HasPrefix(method, "resources/") {
			ss, _ := req.GetSession().(*sdk.ServerSession)
			if err := s.ensure(ctx, ss); err != nil {
				return nil, err
			}
		}
		return next(ctx, method, req)
	}
}

// ensure negotiates the session once, from the client's info.
func (s *Session) ensure(ctx context.Context, ss *sdk.ServerSession) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sessionID != "" {
		return nil
	}
	hp := &cpv1.HostProfile{ClientName: "mcp-client", FeatureFlags: s.b.opts.FeatureFlags, Capabilities: []string{"mcp"}}
	if s.ephemeral {
		hp.Capabilities = append(hp.Capabilities, capabilityEphemeral)
	}
	if ss != nil {
		if p := ss.InitializeParams(); p != nil && p.ClientInfo != nil {
			if p.ClientInfo.Name != "" {
				hp.ClientName = "mcp:" + clip(p.ClientInfo.Name, 120)
			}
			hp.ClientVersion = clip(p.ClientInfo.Version, 64)
			if p.Capabilities != nil && p.Capabilities.Elicitation != nil {
				hp.Capabilities = append(hp.Capabilities, "elicitation")
			}
		}
	}
	resp, err := s.cp.Negotiate(ctx, &cpv1.NegotiateRequest{ContractVersion: "1.0.0", HostProfile: hp})
	if err != nil {
		return fmt.Errorf("negotiating a Blendplane session: %s", planjson.Describe(err))
	}
	c := resp.GetContract()
	tools, err := s.cp.ListTools(ctx, &cpv1.ListToolsRequest{SessionId: c.GetSessionId()})
	if err != nil {
		return fmt.Errorf("listing the session's tools: %s", planjson.Describe(err))
	}
	s.sessionID, s.contract = c.GetSessionId(), c
	s.b.log.Info("session negotiated", "session_id", s.sessionID, "client", hp.GetClientName(), "client_version", hp.GetClientVersion())
	callable := map[string]bool{}
	for _, t := range c.GetCapabilities().GetTools() {
		callable[t] = true
	}
	for _, t := range tools.GetTools() {
		if !callable[t.GetName()] {
			continue // the contract forbids it: not listed
		}
		s.tools[t.GetName()] = t
		s.server.AddTool(toolFor(t), s.callTool(t))
	}
	s.server.AddTool(planTool(), s.submitPlan)
	s.server.AddTool(waitTool(), s.waitPlan)
	if c.GetCapabilities().GetMacros() {
		// The session is negotiated: without its macros it still serves
		// every other tool.
		macros, err := s.cp.ListMacros(ctx, &cpv1.ListMacrosRequest{})
		if err != nil {
			s.b.log.Warn("listing macros: the session has none", "session_id", s.sessionID, "err", planjson.Describe(err))
		}
		for _, m := range macros.GetMacros() {
			level := s.macroSafety(m)
			s.server.AddTool(macroTool(m, level), s.callMacro(m, level))
		}
	}
	return nil
}

// Close closes the Blendplane session of an MCP session that ended. It acts
// once; a second caller waits for the first to finish.
func (s *Session) Close(ctx context.Context) {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		id := s.sessionID
		s.mu.Unlock()
		if id == "" {
			return
		}
		if _, err := s.cp.CloseSession(ctx, &cpv1.CloseSessionRequest{SessionId: id}); err != nil {
			s.b.log.Warn("closing the session of an MCP session", "session_id", id, "err", planjson.Describe(err))
			return
		}
		s.b.log.Info("session closed", "session_id", id)
	})
}

// bearerConn adds a bearer token to every call on a connection.
type bearerConn struct {
	grpc.ClientConnInterface
	authorization string
}

func (c bearerConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return c.ClientConnInterface.Invoke(metadata.AppendToOutgoingContext(ctx, "authorization", c.authorization), method, args, reply, opts...)
}

func (c bearerConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return c.ClientConnInterface.NewStream(metadata.AppendToOutgoingContext(ctx, "authorization", c.authorization), desc, method, opts...)
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
