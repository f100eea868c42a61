// Package httpd is the control plane's HTTP listener (--http-listen): the
// front doors that are not gRPC, each a client of the public API through an
// in-process gRPC connection, so that the gRPC layer authenticates,
// authorizes and checks what they do exactly as any client's calls. This
// layer only routes and, where a front door's protocol wants the refusal at
// the HTTP level (MCP: 401 with WWW-Authenticate), authenticates first.
package httpd

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	"google.golang.org/grpc"

	"github.com/blendplane/blendplane/console"
	"github.com/blendplane/blendplane/controlplane/internal/app"
	"github.com/blendplane/blendplane/controlplane/internal/auth"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
	"github.com/blendplane/blendplane/gen/openapi"
	"github.com/blendplane/blendplane/lesson"
	"github.com/blendplane/blendplane/planner"
)

// Config is what the routes need.
type Config struct {
	App *app.App
	// AuthOff: --allow-insecure-local (loopback only), no tokens.
	AuthOff bool
	// MCP serves /mcp (streamable HTTP).
	MCP http.Handler
	// API is a connection to the gRPC API (in process) that the REST/JSON
	// routes call, passing the request's bearer token on.
	API grpc.ClientConnInterface
	// Lesson configures the lesson API (its Authenticate is set here).
	Lesson lesson.Options
	// Metrics serves /metrics (Prometheus; admin scope); nil: none.
	Metrics http.Handler
	// MaxBodyBytes caps a /v1 request's body: the API's message limit
	// (--max-message-bytes), as no larger request could be passed on.
	MaxBodyBytes int64
}

// Handler routes the HTTP front doors:
//
//	/mcp           MCP, streamable HTTP (package mcp)
//	/v1/...        the whole ControlPlaneService as REST/JSON (grpc-gateway,
//	               routes from the protos' google.api.http options)
//	/openapi.json  the OpenAPI document of /v1
//	/health, /lesson, /run_operator, /scene_summary, /audit
//	               the lesson API of seed 004 (package lesson)
//	/api/agent/... the planner runtime of seed 002 (package planner)
//	/metrics       Prometheus metrics (package metrics), admin scope
//	/console/      the web console (package console): static files that call
//	               /v1 with the signed-in principal's token; / redirects there
func Handler(ctx context.Context, cfg Config) (http.Handler, error) {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = math.MaxInt64
	}
	mux := http.NewServeMux()
	lessons := cfg.Lesson
	if !cfg.AuthOff {
		lessons.Authenticate = func(ctx context.Context, token string) (lesson.Caller, error) {
			who, err := cfg.App.Authenticate(ctx, token)
			return lesson.Caller{Name: who.Name, Admin: who.Admin(), Plans: who.Has(auth.ScopePlans)}, err
		}
	}
	lesson.NewServer(cfg.API, lessons).Register(mux)
	planner.NewHTTP(cfg.API).Register(mux)
	mux.Handle("/mcp", cfg.bearer(auth.ScopePlans, cfg.MCP))
	rest := runtime.NewServeMux(runtime.WithErrorHandler(restError), runtime.WithRoutingErrorHandler(routingError),
		runtime.WithMarshalerOption(runtime.MIMEWildcard, restJSON))
	if err := cpv1.RegisterControlPlaneServiceHandlerClient(ctx, rest, cpv1.NewControlPlaneServiceClient(cfg.API)); err != nil {
		return nil, err
	}
	mux.Handle("/v1/", cfg.restGate(rest))
	if cfg.Metrics != nil {
		mux.Handle("GET /metrics", cfg.bearer(auth.ScopeAdmin, cfg.Metrics))
	}
	mux.Handle("GET "+console.Prefix, console.Handler())
	mux.Handle("GET /{$}", http.RedirectHandler(console.Prefix, http.StatusFound))
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(openapi.Document())
	})
	if cfg.AuthOff {
		return localOnly(mux), nil
	}
	return mux, nil
}

// localOnly serves only what a browser could not have been made to send:
// with --allow-insecure-local every request acts as an admin, so a web page
// must not reach the listener, neither through a DNS name rebound to
// loopback (its Host is then not a loopback name) nor with a cross-site
// request (http.CrossOriginProtection refuses those that are not GET, HEAD
// or OPTIONS).
func localOnly(next http.Handler) http.Handler {
	sameOrigin := http.NewCrossOriginProtection().Handler(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); !(host == "localhost" || err == nil && ip.IsLoopback()) {
			http.Error(w, "this control plane runs with --allow-insecure-local: it answers only requests to a loopback address", http.StatusForbidden)
			return
		}
		sameOrigin.ServeHTTP(w, r)
	})
}

// bearer refuses a request without a valid bearer token holding scope:
// 401 (with WWW-Authenticate) or 403. The principal's name binds an MCP
// session to its principal: another principal cannot use its session id.
func (cfg Config) bearer(scope string, next http.Handler) http.Handler {
	if cfg.AuthOff {
		return next
	}
	verify := func(ctx context.Context, token string, _ *http.Request) (*sdkauth.TokenInfo, error) {
		who, err := cfg.App.Authenticate(ctx, token)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", sdkauth.ErrInvalidToken, err)
		}
		return &sdkauth.TokenInfo{Scopes: who.HeldScopes(), UserID: who.Name}, nil
	}
	return sdkauth.RequireBearerToken(verify, &sdkauth.RequireBearerTokenOptions{Scopes: []string{scope}, AllowMissingExpiration: true})(next)
}
