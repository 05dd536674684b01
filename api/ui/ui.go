// Package ui is the dashboard: plain HTML, CSS and JavaScript embedded in
// the binary and served under /ui/ by `turnstile serve`. Nothing is built,
// fetched or installed at run time; the pages read the same /api/v1 routes
// and SSE feeds every client reads, with the same tokens, so the server
// enforces every role whatever the page shows.
package ui

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed static
var files embed.FS

// Prefix is the path the dashboard is served under.
const Prefix = "/ui/"

// Handler serves the embedded files under Prefix (GET and HEAD only): /ui/
// is the single page, the rest its script and style sheet. Every answer
// carries a Content-Security-Policy that allows only the page's own files
// and its own origin, and no caching of the page (a new binary serves a new
// page at once).
func Handler() http.Handler {
	sub, err := fs.Sub(files, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.StripPrefix(strings.TrimSuffix(Prefix, "/"), http.FileServer(http.FS(sub)))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}

// Redirect sends / (and /ui) to the dashboard.
func Redirect() http.Handler { return http.RedirectHandler(Prefix, http.StatusFound) }
