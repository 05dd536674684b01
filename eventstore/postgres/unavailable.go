// Telling an outage from a refusal: errors that mean the server could not
// be reached, or went away, are marked eventstore.ErrUnavailable so that
// callers answer "try again later" (the API's 503) and retry with backoff.

package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/turnstile/turnstile/eventstore"
)

// markUnavailable wraps *err with eventstore.ErrUnavailable when it is an
// outage: a connection that could not be made or was lost, or a server
// that is starting, shutting down or out of resources. A refusal (a wrong
// version, a bad event), a closed store and a caller's own cancellation
// are left as they are.
func markUnavailable(err *error) {
	e := *err
	if e == nil || errors.Is(e, eventstore.ErrUnavailable) || errors.Is(e, eventstore.ErrClosed) ||
		errors.Is(e, context.Canceled) || errors.Is(e, context.DeadlineExceeded) {
		return
	}
	if outage(e) {
		*err = fmt.Errorf("%w: %w", eventstore.ErrUnavailable, e)
	}
}

// outage reports whether err says the server could not be reached or serve.
func outage(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case len(pgErr.Code) == 5 && pgErr.Code[:2] == "08": // connection exception
			return true
		case len(pgErr.Code) == 5 && pgErr.Code[:2] == "53": // insufficient resources (disk full, too many connections)
			return true
		case pgErr.Code == "57P01", pgErr.Code == "57P02", pgErr.Code == "57P03": // admin or crash shutdown, cannot connect now
			return true
		}
		return false
	}
	var connErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connErr) || errors.As(err, &netErr) || pgconn.SafeToRetry(err) || pgconn.Timeout(err) ||
		errors.Is(err, net.ErrClosed) || isClosedConn(err)
}

// isClosedConn reports pgx's errors for a connection that died under a call.
func isClosedConn(err error) bool {
	msg := err.Error()
	for _, s := range []string{"conn closed", "unexpected EOF", "connection reset", "broken pipe", "failed to deallocate", "conn busy"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
