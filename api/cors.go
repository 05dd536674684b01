// CORS: which other origins' browser pages may call the API and open its
// feeds (--cors-origin). Tokens travel in the Authorization header (or a
// feed ticket in the URL), never in cookies, so no credentials mode is
// needed.
package api

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// ValidateCORSOrigin checks one --cors-origin value: "*" or an origin
// (scheme://host[:port], no path).
func ValidateCORSOrigin(o string) error {
	if o == "*" {
		return nil
	}
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.RawQuery != "" || u.User != nil || u.Fragment != "" {
		return fmt.Errorf("CORS origin %q: want \"*\" or scheme://host[:port] (http or https, no path)", o)
	}
	return nil
}

// cors adds CORS headers for an allowed Origin and answers preflights
// (OPTIONS with Access-Control-Request-Method) with 204; a request from any
// other origin passes on unchanged (the browser then refuses the answer).
func (s *Server) cors(next http.Handler) http.Handler {
	if len(s.cfg.CORSOrigins) == 0 {
		return next
	}
	all := slices.Contains(s.cfg.CORSOrigins, "*")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin == "" || !(all || slices.Contains(s.cfg.CORSOrigins, origin)) {
			next.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", origin)
		h.Add("Vary", "Origin")
		h.Set("Access-Control-Expose-Headers", "Location, Retry-After, Idempotent-Replayed")
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, DELETE")
			h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Idempotency-Key, Last-Event-ID")
			h.Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// dropTicket removes ?ticket= from r's URL once it has been checked, so
// that the handlers (which refuse unknown query parameters) never see it.
func dropTicket(r *http.Request) {
	if !strings.Contains(r.URL.RawQuery, "ticket") {
		return
	}
	q := r.URL.Query()
	q.Del("ticket")
	r.URL.RawQuery = q.Encode()
}
