package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/turnstile/turnstile/client/wire"
	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/internal/jsontext"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/command"
)

// Problem is an RFC 9457 problem document: every error the API returns.
type Problem = wire.Problem

// problemf returns a problem with the status's standard title.
func problemf(status int, format string, args ...any) *Problem {
	return &Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: fmt.Sprintf(format, args...)}
}

// typed problem types, so clients can tell errors apart without parsing text.
const (
	typeInvalidJSON  = "https://turnstile.dev/problems/invalid-json"
	typeUnknownField = "https://turnstile.dev/problems/unknown-field"
	typeTooLarge     = "https://turnstile.dev/problems/body-too-large"
	typeNotFound     = "https://turnstile.dev/problems/not-found"
	typeConflict     = "https://turnstile.dev/problems/conflict"
	typeAlreadyEnded = "https://turnstile.dev/problems/already-ended"
	typeIdempotency  = "https://turnstile.dev/problems/idempotency-key-reused"
	typeInvalid      = "https://turnstile.dev/problems/invalid-request"
	typeUnauthorized = "https://turnstile.dev/problems/unauthorized"
	typeForbidden    = "https://turnstile.dev/problems/forbidden"
	typeUnavailable  = "https://turnstile.dev/problems/unavailable"
	typeArchived     = "https://turnstile.dev/problems/archived"
	typeCorrupt      = "https://turnstile.dev/problems/log-corrupt"
	typeInternal     = "https://turnstile.dev/problems/internal"
	typeQueueFull    = "https://turnstile.dev/problems/queue-full"
	typeNoSlot       = "https://turnstile.dev/problems/no-free-slot"
	typeRateLimited  = "https://turnstile.dev/problems/rate-limited"
	typeResultTooBig = "https://turnstile.dev/problems/result-too-large"
	// typeUnsupportedMedia: a body not declared JSON (415).
	typeUnsupportedMedia = "https://turnstile.dev/problems/unsupported-media-type"
	// typeMisdirected: a server without tokens addressed by a name other than localhost (421).
	typeMisdirected = "https://turnstile.dev/problems/misdirected-request"
)

func typed(typ string, status int, format string, args ...any) *Problem {
	p := problemf(status, format, args...)
	p.Type = typ
	return p
}

// asProblem maps an error from the command or query side to a problem.
// Unknown errors become a 500 whose detail hides the cause (it is logged).
func asProblem(err error) *Problem {
	var p *Problem
	var rule *domain.RuleError
	var refused *command.RefusedError
	switch {
	case errors.As(err, &p):
		return p
	case errors.As(err, &refused):
		typ := typeQueueFull
		switch refused.Code {
		case domain.RejectNoSlot:
			typ = typeNoSlot
		case domain.RejectRateLimited:
			typ = typeRateLimited
		}
		return typed(typ, http.StatusTooManyRequests, "%v", err)
	case errors.Is(err, command.ErrNotYours):
		return typed(typeForbidden, http.StatusForbidden, "%v", err)
	case errors.Is(err, command.ErrIdempotencyMismatch):
		return typed(typeIdempotency, http.StatusConflict, "%v", err)
	case errors.Is(err, domain.ErrAlreadyTerminal):
		return typed(typeAlreadyEnded, http.StatusConflict, "%v", err)
	case errors.Is(err, domain.ErrResultTooLarge):
		return typed(typeResultTooBig, http.StatusRequestEntityTooLarge, "%v", err)
	case errors.As(err, &rule):
		return typed(typeConflict, http.StatusConflict, "%v", err)
	case errors.Is(err, domain.ErrConflict):
		return typed(typeConflict, http.StatusConflict, "%v", err)
	case errors.Is(err, projections.ErrArchived):
		return typed(typeArchived, http.StatusGone, "%v (a server started with --archive DIR reads the archive)", err)
	case errors.Is(err, projections.ErrCorrupt):
		return typed(typeCorrupt, http.StatusInternalServerError, "%v (the operator's turnstile verify --archive names the damage)", err)
	case errors.Is(err, domain.ErrNotFound), errors.Is(err, projections.ErrUnknownStream):
		return typed(typeNotFound, http.StatusNotFound, "%v", err)
	case errors.Is(err, domain.ErrInvalidPolicy), errors.Is(err, domain.ErrInvalidRequest),
		errors.Is(err, projections.ErrInvalidQuery), errors.Is(err, projections.ErrUnknownCursor):
		return typed(typeInvalid, http.StatusBadRequest, "%v", err)
	case errors.Is(err, projections.ErrUnavailable), errors.Is(err, command.ErrUnavailable),
		errors.Is(err, context.DeadlineExceeded):
		return typed(typeUnavailable, http.StatusServiceUnavailable, "the log is not available now: %v", err)
	default:
		return nil
	}
}

// retryAfterSeconds is the Retry-After every 503 carries: the log is
// unavailable (an outage, a full disk) or the server is stopping, and a
// client should try again, here or on another server, after that long.
const retryAfterSeconds = "2"

// writeProblem sends p as application/problem+json; a 503 carries
// Retry-After.
func writeProblem(w http.ResponseWriter, p *Problem) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if p.Status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", retryAfterSeconds)
	}
	w.WriteHeader(p.Status)
	_, _ = w.Write(marshal(p))
}

// writeJSON sends v as JSON with the given status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(marshal(v))
}

// marshal returns v as one line of JSON (ending with a newline) as it was
// written: <, > and & are not escaped as \u003c, \u003e, \u0026, neither
// by the encoder nor in the raw JSON the log keeps (json.Marshal escaped
// it there), since no answer is HTML. An execution's input and result read
// as their client wrote them.
func marshal(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return []byte(`{"type":"` + typeInternal + `","title":"Internal Server Error","status":500,"detail":"the answer could not be encoded"}` + "\n")
	}
	return jsontext.UnescapeHTML(buf.Bytes())
}
