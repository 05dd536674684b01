package wire

import "time"

// FeedTicket is the answer of POST /api/v1/feeds/ticket: a short-lived,
// read-only credential for the feeds (?ticket=), for a browser's
// EventSource, which cannot send an Authorization header.
type FeedTicket struct {
	Ticket    string    `json:"ticket"`
	ExpiresAt time.Time `json:"expires_at"`
}
