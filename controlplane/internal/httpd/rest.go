package httpd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/blendplane/blendplane/controlplane/internal/service"
	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

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
	return service.Refusal(codes.ResourceExhausted, "PAYLOAD_TOO_LARGE",
		fmt.Sprintf("PAYLOAD_TOO_LARGE: %s is over %d bytes, the most this control plane accepts: split it", what, b.limit))
}

// restJSON is the gateway's JSON, but for a body's unknown field or enum
// name: the gateway's default drops them, so a misspelt "validate_only" or
// "depends_on" ran a plan other than the one sent. They are refused
// (SCHEMA_INVALID, naming the field), as gRPC's binary cannot carry them.
// Answers hold every field but an unset message (EmitDefaultValues): the
// OpenAPI document types no message as nullable, and the null of
// EmitUnpopulated broke clients generated from it.
var restJSON = ndjson{&runtime.HTTPBodyMarshaler{Marshaler: &runtime.JSONPb{
	MarshalOptions: protojson.MarshalOptions{EmitDefaultValues: true},
}}}

// ndjson says what a stream's answer is: a JSON object per line, not one
// JSON document (as the OpenAPI document says too).
type ndjson struct{ *runtime.HTTPBodyMarshaler }

func (ndjson) StreamContentType(any) string { return "application/x-ndjson" }

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
		err = service.Refusal(st.Code(), reason, st.Message())
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
		restError(ctx, mux, m, forceStatus{w, httpStatus}, r, service.Refusal(codes.Unimplemented, "METHOD_NOT_ALLOWED",
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
