// Browser guards: what keeps a web page that a user of the server's host
// visits from driving the server. A browser reaches loopback too, sends
// "simple" cross-site POSTs (text/plain, form types, or no body) without a
// CORS preflight, and after a DNS rebinding sends requests whose Host is
// the attacker's name. Bearer tokens protect a server that has them (a page
// cannot read or send them); these guards protect the one that has none.
package api

import (
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// guard refuses, before any route runs (so nothing is written):
//   - on a server without tokens, a Host other than localhost or a loopback
//     IP literal (any port): 421, which stops DNS rebinding;
//   - an Origin other than the server's own (its Host, any scheme) and the
//     --cors-origin ones: 403, on every method (a page's reads and feeds
//     too, so it cannot hold the feed slots or run audits);
//   - a POST, PUT, PATCH or DELETE whose Content-Type is not JSON
//     (application/json, or any type ending in +json, parameters allowed),
//     or that has a body and no Content-Type: 415. A request with neither a
//     body nor a Content-Type passes (curl -X POST …/pause); a browser that
//     sends one cross-site also sends its Origin, refused above.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := s.refusedFromBrowser(r); p != nil {
			writeProblem(w, p)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) refusedFromBrowser(r *http.Request) *Problem {
	if s.cfg.Tokens.Empty() && !loopbackHost(r.Host) {
		return typed(typeMisdirected, http.StatusMisdirectedRequest,
			"this server has no tokens, so it answers only requests addressed to localhost or a loopback address, not to %q (a web page could reach it through DNS rebinding)", clip(r.Host))
	}
	if origin := r.Header.Get("Origin"); origin != "" && !s.originAllowed(origin, r.Host) {
		return typed(typeForbidden, http.StatusForbidden,
			"requests from pages of %q are refused: only this server's own pages and the origins of --cors-origin may call it", clip(origin))
	}
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return jsonContent(r)
	}
	return nil
}

// loopbackHost reports whether a Host header names this machine by a name
// no DNS answer can change: localhost, or a loopback IP literal (127.0.0.0/8,
// [::1]), with or without a port. A page can send such a Host only when it
// was itself loaded from that address.
func loopbackHost(host string) bool {
	h := host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		h = hh
	} else if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// originAllowed reports whether a page of origin may call the server
// reached at host: the origin is named by --cors-origin (or "*" is), or it
// is the server's own (its host and port are the request's Host; the
// scheme is not compared, since a proxy may terminate TLS before us).
func (s *Server) originAllowed(origin, host string) bool {
	if slices.Contains(s.cfg.CORSOrigins, "*") || slices.Contains(s.cfg.CORSOrigins, origin) {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return false // "null" (a sandboxed frame, a file), or no origin at all
	}
	return strings.EqualFold(withoutDefaultPort(u.Host, u.Scheme), withoutDefaultPort(host, u.Scheme))
}

func withoutDefaultPort(host, scheme string) string {
	if scheme == "http" {
		return strings.TrimSuffix(host, ":80")
	}
	return strings.TrimSuffix(host, ":443")
}

// jsonContent is nil when r's body is declared JSON, or when r has neither
// a body nor a Content-Type; else a 415 problem.
func jsonContent(r *http.Request) *Problem {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		if r.ContentLength == 0 {
			return nil
		}
		return typed(typeUnsupportedMedia, http.StatusUnsupportedMediaType, "a request with a body must say Content-Type: application/json")
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json")) {
		return nil
	}
	return typed(typeUnsupportedMedia, http.StatusUnsupportedMediaType, "Content-Type %q is not JSON: send application/json", clip(ct))
}
