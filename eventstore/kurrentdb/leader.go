package kurrentdb

import (
	"context"

	"google.golang.org/grpc/metadata"
)

// Reads that must be fresh
//
// A KurrentDB node serves reads from its own copy of the log; a follower may
// be slightly behind, and after a fail-over the client may stay on a node
// that is no longer the leader until an error makes it look again. The
// server sends a request to the leader (or answers "not leader" with the
// leader's address, and the client reconnects there) when the request
// carries the header requires-leader: true. The client (v4.2.0) means to
// send it whenever its node preference is the leader, but puts it into the
// call's incoming metadata, which gRPC never sends; so the store puts it in
// the outgoing metadata itself.

// requiresLeader is the header the server reads (Constants.Headers.RequiresLeader).
const requiresLeader = "requires-leader"

// leader returns ctx with the requires-leader header set for the calls made
// with it.
func leader(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, requiresLeader, "true")
}

// forRead returns the context for a read the caller asked for: leader(ctx)
// unless the store allows follower reads.
func (s *Store) forRead(ctx context.Context) context.Context {
	if s.anyNode {
		return ctx
	}
	return leader(ctx)
}
