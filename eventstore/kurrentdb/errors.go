package kurrentdb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/turnstile/turnstile/eventstore"
)

// Errors of this backend, beside the eventstore sentinels. Every error a Store
// returns keeps the client's error in its chain, so errors.As with an
// *esdb.Error still works.
var (
	// ErrMultiStream is returned by AppendMulti for more than one stream on
	// a store without the multi-stream path (AtomicMultiStream false: no
	// Options.MultiStreamConn, or a server without AppendRecords), and by one
	// with it when the server no longer offers AppendRecords. It matches
	// eventstore.ErrMultiStream and errors.ErrUnsupported too.
	ErrMultiStream = fmt.Errorf("kurrentdb: %w", eventstore.ErrMultiStream)

	// ErrUnavailable means the server could not be reached or could not serve
	// the request now (no connection, node not ready, not the leader, request
	// aborted). The request may or may not have been applied: retrying an
	// append with the same event ids is safe. It matches
	// eventstore.ErrUnavailable (the API answers 503).
	ErrUnavailable = fmt.Errorf("kurrentdb: server unavailable (%w)", eventstore.ErrUnavailable)

	// ErrAccessDenied means the server refused the credentials or their rights.
	ErrAccessDenied = errors.New("kurrentdb: access denied")

	// ErrStreamDeleted means the stream was deleted or tombstoned on the server
	// (turnstile never does that). It also matches eventstore.ErrStreamNotFound.
	ErrStreamDeleted = errors.New("kurrentdb: stream deleted")

	// errTransaction marks an event whose commit and prepare positions differ:
	// one written inside an explicit (legacy TCP API) transaction, which has no
	// position of its own in turnstile's numbering.
	errTransaction = errors.New("kurrentdb: event written in an explicit transaction (commit position differs from prepare position)")
)

// translate turns an error of the client (an *esdb.Error, possibly wrapped, or
// a bare gRPC status error as subscriptions report them) into this package's
// vocabulary, keeping the original in the chain. The caller's context wins:
// if ctx has ended, the result matches ctx.Err(), and only then does it
// match context.Canceled: a CANCELLED status the server sends while ctx is
// alive is ErrUnavailable. It does not handle the
// wrong-expected-version case of appends, which needs the append's details.
func translate(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("kurrentdb: %s: %w", op, cerr)
	}
	if kind := classify(err); kind != nil {
		return fmt.Errorf("kurrentdb: %s: %w: %w", op, kind, err)
	}
	return fmt.Errorf("kurrentdb: %s: %w", op, err)
}

// classify returns the sentinel an error of the client maps to, or nil.
//
// The client's own esdb.FromError is not used: it type-asserts instead of
// unwrapping, so the errors the client returns wrapped ("could not construct
// append operation. Reason: %w") come out as ErrorCodeUnknown, and its bool
// is true only for a nil error.
func classify(err error) error {
	var ee *esdb.Error
	if errors.As(err, &ee) {
		switch ee.Code() {
		case esdb.ErrorCodeWrongExpectedVersion:
			return eventstore.ErrWrongExpectedVersion
		case esdb.ErrorCodeResourceNotFound:
			return eventstore.ErrStreamNotFound
		case esdb.ErrorCodeStreamDeleted:
			return errors.Join(ErrStreamDeleted, eventstore.ErrStreamNotFound)
		case esdb.ErrorCodeDeadlineExceeded:
			return context.DeadlineExceeded
		case esdb.ErrorUnavailable, esdb.ErrorCodeNotLeader, esdb.ErrorAborted, esdb.ErrorCodeConnectionClosed:
			// ConnectionClosed: the client was closed by its owner, or its
			// node discovery failed, after which it stays closed for good.
			return ErrUnavailable
		case esdb.ErrorCodeUnauthenticated, esdb.ErrorCodeAccessDenied:
			return ErrAccessDenied
		}
		// Unknown codes may still carry a gRPC status: fall through.
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return ErrUnavailable // the server ended the stream early
	}
	if st, ok := status.FromError(err); ok {
		if st.Code() == codes.InvalidArgument && strings.Contains(st.Message(), "Maximum Append Size") {
			// The server's --max-append-size is below MaxAppendBytes.
			return eventstore.ErrEventTooLarge
		}
		switch st.Code() {
		case codes.Unavailable, codes.Aborted, codes.Canceled:
			// Canceled: translate has found the caller's context alive, so
			// the server (or the connection under the call) cancelled it, as
			// a node shutting down or losing its leadership does. It is not
			// the caller's context.Canceled: the call may succeed elsewhere
			// or later.
			return ErrUnavailable
		case codes.DeadlineExceeded:
			return context.DeadlineExceeded
		case codes.Unauthenticated, codes.PermissionDenied:
			return ErrAccessDenied
		}
	}
	return nil
}
