// Feed tickets: a browser's EventSource cannot send an Authorization
// header, so a token holder trades its token for a short-lived, read-only
// ticket (POST /api/v1/feeds/ticket) and opens a feed with ?ticket=.
package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/turnstile/turnstile/client/wire"
)

// TicketTTL is how long a feed ticket may be used to open a feed. A feed
// opened in time runs on; a reconnection needs a new ticket.
const TicketTTL = 60 * time.Second

// ticketKey derives the key that signs tickets from every token's hash, so
// that every server configured with the same tokens accepts the tickets of
// the others, and nobody without all of the secrets can forge one.
func ticketKey(byHash map[[32]byte]*Principal) []byte {
	hashes := make([][32]byte, 0, len(byHash))
	for h := range byHash {
		hashes = append(hashes, h)
	}
	sort.Slice(hashes, func(i, j int) bool { return string(hashes[i][:]) < string(hashes[j][:]) })
	m := hmac.New(sha256.New, []byte("turnstile feed tickets v1"))
	for _, h := range hashes {
		m.Write(h[:])
	}
	return m.Sum(nil)
}

// issueTicket returns a ticket for p that expires at exp:
// base64url(name) "." unix seconds "." base64url(HMAC).
func (t *Tokens) issueTicket(p *Principal, exp time.Time) string {
	body := base64.RawURLEncoding.EncodeToString([]byte(p.Name)) + "." + strconv.FormatInt(exp.Unix(), 10)
	return body + "." + base64.RawURLEncoding.EncodeToString(t.sign(body))
}

func (t *Tokens) sign(body string) []byte {
	m := hmac.New(sha256.New, t.ticketKey)
	m.Write([]byte(body))
	return m.Sum(nil)
}

// redeemTicket returns the principal a valid, unexpired ticket speaks for.
func (t *Tokens) redeemTicket(ticket string) (*Principal, *Problem) {
	bad := typed(typeUnauthorized, http.StatusUnauthorized, "the feed ticket is not valid; get a new one with POST /api/v1/feeds/ticket")
	i := strings.LastIndexByte(ticket, '.')
	if i < 0 || len(ticket) > 512 {
		return nil, bad
	}
	body, sig := ticket[:i], ticket[i+1:]
	mac, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(mac, t.sign(body)) {
		return nil, bad
	}
	rawName, expText, ok := strings.Cut(body, ".")
	name, err1 := base64.RawURLEncoding.DecodeString(rawName)
	exp, err2 := strconv.ParseInt(expText, 10, 64)
	p := t.byName[string(name)]
	if !ok || err1 != nil || err2 != nil || p == nil {
		return nil, bad
	}
	if time.Now().Unix() >= exp {
		return nil, typed(typeUnauthorized, http.StatusUnauthorized, "the feed ticket expired at %s; get a new one with POST /api/v1/feeds/ticket", time.Unix(exp, 0).UTC().Format(time.RFC3339))
	}
	return p, nil
}

// feedTicket issues a ticket for the caller's principal: it opens the feeds
// (GET /api/v1/feeds/…?ticket=) with the caller's role and scope until it
// expires, and nothing else. Without tokens there is nothing to trade: 404
// would mislead, so it answers 409.
func (s *Server) feedTicket(w http.ResponseWriter, r *http.Request) {
	if p := queryOnly(r); p != nil {
		writeProblem(w, p)
		return
	}
	var none struct{}
	if p := decodeJSON(w, r, s.cfg.MaxBodyBytes, &none, true); p != nil {
		writeProblem(w, p)
		return
	}
	p := principalOf(r)
	if p == nil {
		writeProblem(w, typed(typeConflict, http.StatusConflict, "no tokens are configured: feeds need no ticket"))
		return
	}
	exp := time.Now().Add(TicketTTL).Truncate(time.Second)
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, wire.FeedTicket{Ticket: s.cfg.Tokens.issueTicket(p, exp), ExpiresAt: exp.UTC()})
}
