// Package kurrentdb is an eventstore.Store on a KurrentDB (formerly
// EventStoreDB) server, through the official gRPC client
// github.com/EventStore/EventStore-Client-Go/v4. Open it with OpenURL
// ("kurrentdb://host:2113?tls=false", or esdb://…) or with Open on a client
// you made.
//
// # What it promises
//
//   - Streams map one to one to KurrentDB streams (behind Options.Namespace,
//     if set). Versions are KurrentDB revisions: both are 0-based.
//   - Append is atomic per stream with optimistic concurrency: the expected
//     version becomes the client's Any, NoStream, StreamExists or Revision(v),
//     checked by the server; a failed check is an *eventstore.WrongVersionError
//     naming the stream's real state.
//   - Event ids are the server's event ids, so a retried append is
//     recognised: by the server, which compares ids only (after an expected
//     version the append itself overtook; for Any and StreamExists through
//     each node's bounded cache of recent ids, which a restart empties), and
//     then checked by the store over the whole batch, order and content; by
//     a read of the stream's tail before every append; and, when the server
//     reports a wrong expected version, by a search from a batch's length
//     before the expected version (within Options.IdempotencyWindow). A
//     recognised retry returns the original result and writes nothing; ids
//     stored but not as the same batch, or with other content, are
//     ErrIdempotencyConflict.
//   - Every envelope field round-trips: type and id natively, data byte for
//     byte, the rest in the event's user metadata (see convert.go); the time is
//     the server's created time (100ns precision, UTC).
//   - Positions come from the $all commit position: a turnstile position is
//     twice it (see position.go), strictly increasing in commit order, never
//     dense. Head is just after the store's last event, and every event below
//     it is readable.
//   - ReadAll and Subscribe see the store's streams only: system events
//     (streams or types starting with "$") and other namespaces' events are
//     left out. Subscribe is a catch-up subscription to $all, filtered on the
//     server as far as the server's one filter allows and entirely on the
//     client, delivering in $all order without gap or duplicate, in batches,
//     and resubscribing from its last event when the server becomes
//     unavailable.
//   - Errors: wrong version and stream-not-found become the eventstore
//     sentinels; deadlines match context.DeadlineExceeded; an unreachable or
//     not-ready server, a lost leader or an aborted call match ErrUnavailable;
//     refused credentials ErrAccessDenied; a CANCELLED status the server
//     sends (a node shutting down) is ErrUnavailable, and only the caller's
//     own context ending gives context.Canceled; the client's *esdb.Error
//     stays in the chain for errors.As.
//   - Every call asks for the leader (the requires-leader header, which
//     the client itself fails to send), so a node that lost its leadership
//     redirects the client; Options.FollowerReads (set by OpenURL from a
//     nodePreference other than leader) lets reads go to any node, but an
//     append's own reads always ask for the leader.
//   - Every call returns when its context ends, even while the client is
//     stuck looking for the server (it ignores contexts there). An append
//     gets the caller's deadline, not the client's default of 10s (which
//     still applies to a context without a deadline).
//   - Outages: after the server has been unreachable through a whole node
//     discovery the client closes itself for good; a store made by OpenURL
//     replaces it and carries on (subscriptions resubscribe), a store on a
//     caller's client reports ErrUnavailable until the caller replaces it.
//
// # What it does not do (the gaps)
//
//   - AppendMulti of more than one stream, except on a server that offers
//     AppendRecords (KurrentDB 26.0.3, 26.1+) reached through
//     Options.MultiStreamConn (OpenURL makes it for a single node; see
//     multi.go): elsewhere the v1 API appends to one stream per call, so
//     all-or-nothing across streams is impossible. It returns ErrMultiStream
//     (eventstore.ErrMultiStream, errors.ErrUnsupported) and writes nothing;
//     one stream works as Append. The Store says so (AtomicMultiStream
//     reports false), and turnstile's
//     executor and commands then fence on one stream and append the rest
//     after it, repairing a cut sequence from the log (services/executor).
//   - Event ids are not unique across streams: KurrentDB keeps no id index,
//     so an id already stored in another stream is written again; so is a
//     batch deeper in its stream than the tail the store reads, retried with
//     an expected version that still holds (the current Exact, or Any once
//     the server's cache has lost the ids: after a restart, a fail-over, or
//     8 MiB of later appends).
//   - Positions are not dense, and only positions the store handed out, one
//     past them, Head, 0, or values past the end of the log are valid places
//     to start reading: another even number inside the log is not a record
//     boundary, and the server fails the read.
//   - ReadAll and Head filter on the client (the client's ReadAll has no
//     server-side filter): their cost grows with the system events and other
//     namespaces' events they pass over. Options.Origin bounds the scan for a
//     namespace created on a server that holds older data.
//   - Stream names and event types starting with "$" are refused
//     (ErrInvalidStream, ErrInvalidEvent): KurrentDB reserves them.
//   - Durability and visibility are the server's: an append is acknowledged
//     once the server has written it (to a quorum in a cluster). With
//     FollowerReads, reads may come from a follower, slightly behind.
//   - The client itself (v4.2.0) leaves a goroutine stuck for good for each
//     call that entered it while a discovery failed, and leaks the gRPC
//     connection it replaces at each new discovery; only a server outage
//     makes either happen.
//   - Events written by something else in the store's streams are read with
//     what can be recovered (schema version 0, no owner, their user metadata
//     as Metadata); events of explicit (legacy TCP) transactions, whose commit
//     and prepare positions differ, have no turnstile position and fail the
//     read when they are in the store's streams (Head, ReadAll and Subscribe
//     pass over those in other streams).
package kurrentdb
