// Package httpd is the control plane's HTTP listener (--http-listen): the
// front doors that are not gRPC, each a client of the public API through an
// in-process gRPC connection, so that the gRPC layer authenticates,
// authorizes and checks what they do exactly as any client's calls. This
// layer only routes and, where a front door's protocol wants the refusal at
// the HTTP level (MCP: 401 with WWW-Authenticate), authenticates first.
package httpd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/blendplane/blendplane/console"
	"github.com/blendplane/blendplane/controlplane/internal/app"
	"github.com/blendplane/blendplane/controlplane/internal/auth"
	"github.com/blendplane/blendplane/controlplane/internal/service"
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
			return lesson.Caller{Name: who.Name, Admin: who.Admin()}, err
		}
	}
	lesson.NewServer(cfg.API, lessons).Register(mux)
	planner.NewHTTP(cfg.API).Register(mux)
	mux.Handle("/mcp", cfg.bearer(auth.ScopePlans, cfg.MCP))
	rest := runtime.NewServeMux(runtime.WithErrorHandler(restError), runtime.WithRoutingErrorHandler(routingError))
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
		w.Write(openapi.Document)
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

// restGate is what /v1 checks before the gateway reads a request: the
// caller (through GetCaller, so the gRPC layer decides; one without a
// valid token is refused before its body is read) and the body's size.
func (cfg Config) restGate(rest *runtime.ServeMux) http.Handler {
	api := cpv1.NewControlPlaneServiceClient(cfg.API)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !cfg.AuthOff {
			ctx := r.Context()
			for _, v := range r.Header.Values("Authorization") {
				ctx = metadata.AppendToOutgoingContext(ctx, "authorization", v)
			}
			if _, err := api.GetCaller(ctx, &cpv1.GetCallerRequest{}); err != nil {
				runtime.HTTPError(r.Context(), rest, outbound(rest, r), w, r, err)
				return
			}
		}
		// An upload is a stream of messages (JSON values), each within the
		// limit; any other body is one message.
		body := &limitedBody{ReadCloser: r.Body, limit: cfg.MaxBodyBytes, perValue: r.URL.Path == uploadPath}
		if r.ContentLength > cfg.MaxBodyBytes && !body.perValue && r.Method != http.MethodGet && r.Method != http.MethodHead {
			runtime.HTTPError(r.Context(), rest, outbound(rest, r), w, r, body.tooLarge())
			return
		}
		r.Body = body
		rest.ServeHTTP(w, r)
	})
}

// uploadPath is UploadArtifact's route (client streaming: NDJSON).
const uploadPath = "/v1/artifacts:upload"

func outbound(mux *runtime.ServeMux, r *http.Request) runtime.Marshaler {
	_, m := runtime.MarshalerForRequest(mux, r)
	return m
}

// limitedBody fails a request body, or with perValue each top-level JSON
// value in it, that is longer than limit, and remembers it did. Values, not
// lines: the gateway's decoder holds a whole value, newlines and all.
type limitedBody struct {
	io.ReadCloser
	limit    int64
	perValue bool
	n        int64 // bytes read since the start (or the end of the last value)
	over     bool

	depth              int // of the value being read
	inString, escaping bool
}

var errBodyTooLarge = errors.New("request body too large")

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.over {
		return 0, errBodyTooLarge
	}
	n, err := b.ReadCloser.Read(p)
	if b.perValue {
		b.count(p[:n])
	} else {
		b.n += int64(n)
	}
	if b.n > b.limit {
		b.over = true
		return 0, errBodyTooLarge
	}
	return n, err
}

// count follows the JSON in p, counting the bytes of the value being read
// (and the space before it), until one is over the limit.
func (b *limitedBody) count(p []byte) {
	for _, c := range p {
		if b.n++; b.n > b.limit {
			return
		}
		switch {
		case b.escaping:
			b.escaping = false
		case b.inString && c == '\\':
			b.escaping = true
		case b.inString && c == '"':
			b.inString = false
		case b.inString:
		case c == '"':
			b.inString = true
		case c == '{' || c == '[':
			b.depth++
		case (c == '}' || c == ']') && b.depth > 0:
			if b.depth--; b.depth == 0 {
				b.n = 0 // a value ended
			}
		}
	}
}

func (b *limitedBody) tooLarge() error {
	what := "the request body"
	if b.perValue {
		what = "a message of the request body"
	}
	return refusal(codes.ResourceExhausted, "PAYLOAD_TOO_LARGE",
		fmt.Sprintf("PAYLOAD_TOO_LARGE: %s is over %d bytes, the most this control plane accepts: split it", what, b.limit))
}

// restError is the gateway's error answer, with what its default lacks: a
// body over the limit is PAYLOAD_TOO_LARGE (413: retrying cannot help, where
// the 429 of its code says it may), every error has its ErrorInfo (the
// gateway's own, such as a body that is not JSON, have none), and a 401
// challenges for a bearer token.
func restError(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	if b, ok := r.Body.(*limitedBody); ok && b.over {
		err = b.tooLarge()
	}
	st := status.Convert(err)
	reason := errorReason(st)
	if reason == "" {
		reason = map[codes.Code]string{codes.InvalidArgument: "SCHEMA_INVALID", codes.NotFound: "NOT_FOUND"}[st.Code()]
		if reason == "" {
			reason = st.Code().String()
		}
		err = refusal(st.Code(), reason, st.Message())
	}
	if reason == "PAYLOAD_TOO_LARGE" {
		w = forceStatus{w, http.StatusRequestEntityTooLarge}
	}
	runtime.DefaultHTTPErrorHandler(ctx, mux, m, challenge{w}, r, err)
}

// routingError answers a request no route takes: 404, or 405 for a known
// path with another method (the gateway's default says 501).
func routingError(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, httpStatus int) {
	switch httpStatus {
	case http.StatusMethodNotAllowed:
		restError(ctx, mux, m, forceStatus{w, httpStatus}, r, refusal(codes.Unimplemented, "METHOD_NOT_ALLOWED",
			fmt.Sprintf("METHOD_NOT_ALLOWED: %s is not a method of %s", r.Method, r.URL.Path)))
	default:
		runtime.DefaultRoutingErrorHandler(ctx, mux, m, w, r, httpStatus)
	}
}

// errorReason is the reason of st's ErrorInfo ("": none).
func errorReason(st *status.Status) string {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}

// refusal is a status with its ErrorInfo, as the gRPC layer's refusals.
func refusal(code codes.Code, reason, msg string) error {
	st, err := status.New(code, msg).WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: service.ErrorDomain})
	if err != nil {
		return status.Error(code, msg)
	}
	return st.Err()
}

// challenge sends a 401 with the bearer challenge (the gateway's default
// puts the error's message there).
type challenge struct{ http.ResponseWriter }

func (w challenge) WriteHeader(code int) {
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="blendplane"`)
	}
	w.ResponseWriter.WriteHeader(code)
}

// forceStatus answers with its own status, whatever the handler says.
type forceStatus struct {
	http.ResponseWriter
	status int
}

func (w forceStatus) WriteHeader(int) { w.ResponseWriter.WriteHeader(w.status) }

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
