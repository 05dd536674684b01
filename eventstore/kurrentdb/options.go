package kurrentdb

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"google.golang.org/grpc"
)

// Options configures a Store. The zero value is ready to use: no namespace,
// the whole of $all, the default idempotency window and slog.Default().
type Options struct {
	// Namespace is prepended to every stream name on the server, so that
	// several turnstile installations (or test runs) can share one server:
	// stream "queue-x" is "<Namespace>queue-x" there, and reads and
	// subscriptions see only the namespace's streams. Printable ASCII without
	// spaces, at most MaxNamespaceLen bytes, not starting with "$". Empty
	// means none: every non-system stream of the server belongs to the store.
	Namespace string

	// Origin is a turnstile position (as LogEnd returns) before which $all
	// holds nothing of this store. Reads, Head and subscriptions skip what is
	// below it instead of scanning it: set it when a namespace is created on
	// a server that already holds other data. Zero means the start of $all.
	Origin uint64

	// IdempotencyWindow is how many of a stream's latest events an append
	// searches for event ids it is retrying, when the server reports a wrong
	// expected version or the stream's tail already holds some of them. Zero
	// means DefaultIdempotencyWindow.
	IdempotencyWindow int

	// FollowerReads lets ReadStream, ReadAll, Head and Subscribe be served
	// by whichever node the client is connected to, which may be a follower
	// (or a read-only replica) slightly behind the leader. By default every
	// call asks for the leader (the requires-leader header), so that a node
	// that lost its leadership redirects the client to the new leader
	// instead of serving stale reads. The reads an append makes (the
	// stream's tail, the search for a retried batch) always ask for the
	// leader. OpenURL sets it when the connection string's nodePreference is
	// not leader.
	FollowerReads bool

	// MultiStreamConn, if set, is a gRPC connection to the same server (to
	// its leader), on which the store appends to several streams atomically
	// if the server offers StreamsService/AppendRecords (KurrentDB 26.0.3,
	// 26.1 and later): Open asks the server (GetSupportedMethods) and
	// AtomicMultiStream reports the answer. Without it, or on an older
	// server, AppendMulti takes one stream only. The caller keeps the
	// connection. OpenURL makes one for a single-node connection string.
	MultiStreamConn grpc.ClientConnInterface

	// Logger receives what the store cannot return: retries of subscriptions
	// after the server became unavailable, and the client library's own log
	// (at debug level). Nil means slog.Default().
	Logger *slog.Logger
}

// Limits and defaults of Options.
const (
	MaxNamespaceLen          = 64
	DefaultIdempotencyWindow = 10_000
	maxIdempotencyWindow     = 10_000_000
)

// Validate reports the first invalid field.
func (o Options) Validate() error {
	if len(o.Namespace) > MaxNamespaceLen {
		return fmt.Errorf("kurrentdb: namespace %q is longer than %d bytes", o.Namespace, MaxNamespaceLen)
	}
	if strings.HasPrefix(o.Namespace, "$") {
		return fmt.Errorf("kurrentdb: namespace %q starts with '$', which KurrentDB reserves for system streams", o.Namespace)
	}
	for i := 0; i < len(o.Namespace); i++ {
		if c := o.Namespace[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("kurrentdb: namespace %q has byte 0x%02x at %d (printable ASCII without spaces only)", o.Namespace, c, i)
		}
	}
	if o.IdempotencyWindow < 0 || o.IdempotencyWindow > maxIdempotencyWindow {
		return fmt.Errorf("kurrentdb: IdempotencyWindow %d out of range 0..%d", o.IdempotencyWindow, maxIdempotencyWindow)
	}
	return nil
}

func (o *Options) setDefaults() {
	if o.IdempotencyWindow == 0 {
		o.IdempotencyWindow = DefaultIdempotencyWindow
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

var errNoClient = errors.New("kurrentdb: Open needs a client")
