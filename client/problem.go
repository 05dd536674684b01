package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Problem is an answer of the server other than 2xx: the API's problem
// document (RFC 9457). Type tells problems apart without parsing Detail;
// the Problem* constants name the types the server sends. An answer that
// is not a problem document (from a proxy, say) is a Problem too, of type
// "about:blank", whose Detail is the first line of its body.
type Problem struct {
	Status int    // the HTTP status, e.g. 404
	Type   string // a URI, e.g. ProblemNotFound
	Title  string // the status's text
	Detail string // what went wrong, for a person
	// RetryAfter is the server's Retry-After (a 429 of the rate limit, a
	// 503), zero when it sent none.
	RetryAfter time.Duration
}

// Error returns "STATUS TITLE: DETAIL".
func (p *Problem) Error() string {
	return fmt.Sprintf("%d %s: %s", p.Status, p.Title, p.Detail)
}

// The problem types the server sends.
const (
	ProblemInvalidJSON  = "https://turnstile.dev/problems/invalid-json"
	ProblemUnknownField = "https://turnstile.dev/problems/unknown-field"
	ProblemTooLarge     = "https://turnstile.dev/problems/body-too-large"
	ProblemNotFound     = "https://turnstile.dev/problems/not-found"
	ProblemConflict     = "https://turnstile.dev/problems/conflict"
	ProblemAlreadyEnded = "https://turnstile.dev/problems/already-ended"
	ProblemIdempotency  = "https://turnstile.dev/problems/idempotency-key-reused"
	ProblemInvalid      = "https://turnstile.dev/problems/invalid-request"
	ProblemUnauthorized = "https://turnstile.dev/problems/unauthorized"
	ProblemForbidden    = "https://turnstile.dev/problems/forbidden"
	ProblemUnavailable  = "https://turnstile.dev/problems/unavailable"
	ProblemInternal     = "https://turnstile.dev/problems/internal"
	ProblemQueueFull    = "https://turnstile.dev/problems/queue-full"
	ProblemNoSlot       = "https://turnstile.dev/problems/no-free-slot"
	ProblemRateLimited  = "https://turnstile.dev/problems/rate-limited"
	// ProblemResultTooLarge refuses a worker's report whose result is
	// larger than the server's --max-result-bytes (413).
	ProblemResultTooLarge = "https://turnstile.dev/problems/result-too-large"
)

// problemOf reads a non-2xx answer.
func problemOf(resp *http.Response, body []byte) *Problem {
	p := &Problem{}
	if json.Unmarshal(body, p) != nil || (p.Detail == "" && p.Title == "") {
		detail, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
		p = &Problem{Type: "about:blank", Detail: detail}
	}
	p.Status = resp.StatusCode // the status line wins over the body's
	if p.Title == "" {
		p.Title = http.StatusText(resp.StatusCode)
	}
	if p.Detail == "" {
		p.Detail = p.Title
	}
	if p.Type == "" {
		p.Type = "about:blank"
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		p.RetryAfter = time.Duration(s) * time.Second
	}
	return p
}

// AsProblem returns the *Problem in err's chain, or nil.
func AsProblem(err error) *Problem {
	var p *Problem
	if errors.As(err, &p) {
		return p
	}
	return nil
}

func hasStatus(err error, status int) bool {
	p := AsProblem(err)
	return p != nil && p.Status == status
}

// IsNotFound reports whether err is a 404: no such action, execution,
// stream or route (or an execution that did not exist as of a point).
func IsNotFound(err error) bool { return hasStatus(err, http.StatusNotFound) }

// IsConflict reports whether err is a 409: an action defined with another
// policy, an execution that has already ended, an idempotency key reused
// with another body.
func IsConflict(err error) bool { return hasStatus(err, http.StatusConflict) }

// IsInvalid reports whether err is a 400 or 413: a request the server
// refused as malformed; sending it again will not help.
func IsInvalid(err error) bool {
	return hasStatus(err, http.StatusBadRequest) || hasStatus(err, http.StatusRequestEntityTooLarge)
}

// IsRateLimited reports whether err is a 429: the action's queue is full,
// its rate limit refused the request, or no slot was free for an action
// that rejects on its limit. Problem.RetryAfter says when to try again,
// when the server said.
func IsRateLimited(err error) bool { return hasStatus(err, http.StatusTooManyRequests) }

// IsUnauthorized reports whether err is a 401: no token, or a token the
// server does not know.
func IsUnauthorized(err error) bool { return hasStatus(err, http.StatusUnauthorized) }

// IsForbidden reports whether err is a 403: the token's role does not
// allow the request.
func IsForbidden(err error) bool { return hasStatus(err, http.StatusForbidden) }

// IsUnavailable reports whether err is a 503: the server cannot read or
// write the log now; trying later may succeed.
func IsUnavailable(err error) bool { return hasStatus(err, http.StatusServiceUnavailable) }
