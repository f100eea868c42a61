// Package httpd is the control plane's HTTP listener (--http-listen): the
// front doors that are not gRPC, each a client of the public API. This
// layer routes and, where a front door's protocol wants the refusal at the
// HTTP level (MCP: 401 with WWW-Authenticate), authenticates first; the
// calls the front doors make are authenticated and authorized again by the
// gRPC layer, like any client's.
package httpd

import (
	"context"
	"fmt"
	"net/http"
	"slices"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/blendplane/blendplane/controlplane/internal/app"
	"github.com/blendplane/blendplane/controlplane/internal/auth"
)

// Config is what the routes need.
type Config struct {
	App *app.App
	// AuthOff: --allow-insecure-local (loopback only), no tokens.
	AuthOff bool
	// MCP serves /mcp (streamable HTTP).
	MCP http.Handler
}

// Handler routes the HTTP front doors.
func Handler(cfg Config) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/mcp", cfg.bearer(auth.ScopePlans, cfg.MCP))
	return mux
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
		var scopes []string
		for _, s := range auth.Scopes {
			if who.Has(s) {
				scopes = append(scopes, s)
			}
		}
		return &sdkauth.TokenInfo{Scopes: slices.Clip(scopes), UserID: who.Name}, nil
	}
	return sdkauth.RequireBearerToken(verify, &sdkauth.RequireBearerTokenOptions{Scopes: []string{scope}, AllowMissingExpiration: true})(next)
}
