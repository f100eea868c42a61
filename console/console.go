// Package console is the web console (served at /console/ on the control
// plane's --http-listen): a page and a script that call the public
// REST/JSON API (/v1, grpc-gateway) with the signed-in principal's bearer
// token, exactly like any other client. Nothing is fetched from elsewhere:
// the files are embedded in the control-plane binary and the page's
// Content-Security-Policy allows this origin only.
package console

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// Prefix is where the console is served.
const Prefix = "/console/"

// csp keeps the page to its own origin: no CDN, no inline script, images
// only from itself or from the blobs it downloaded through the API.
const csp = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; connect-src 'self'; " +
	"frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

// Handler serves the console's files under Prefix.
func Handler() http.Handler {
	files, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	serve := http.StripPrefix(Prefix, http.FileServerFS(files))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		serve.ServeHTTP(w, r)
	})
}
