package kurrentdb

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/serverfeatures"
	sharedpb "github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	v2errors "github.com/kurrent-io/KurrentDB-Client-Go/protos/kurrentdb/protocols/v2/streams/errors"
	v2 "github.com/kurrent-io/KurrentDB-Client-Go/protos/kurrentdb/protocols/v2/streams/streams"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// The fenced multi-stream path
//
// KurrentDB 26.1 (and 26.0.3, backported) offers
// kurrentdb.protocol.v2.streams.StreamsService/AppendRecords: records for
// several streams in one atomic write, plus consistency checks
// (StreamStateCheck) on any stream, written or not, all evaluated before
// anything is written. That is exactly AppendMulti with conditions. Older
// servers (EventStoreDB 24.10, KurrentDB 25.0, 25.1, 26.0.0–26.0.2) do not
// have it: 25.1's AppendSession cannot check a stream it does not write.
//
// The store speaks AppendRecords on a gRPC connection of its own
// (Options.MultiStreamConn), with the generated code of
// github.com/kurrent-io/KurrentDB-Client-Go's v2 protos only: that client's
// package cannot be linked next to EventStore-Client-Go/v4 (both register
// the v1 protos under the same names, and the protobuf runtime panics at
// start), while its v2 protos register names of their own.
//
// Detection: Open asks the server's ServerFeatures/GetSupportedMethods on
// that connection and turns the path on only if "appendrecords" is listed;
// AtomicMultiStream reports it, so the executor takes its fenced path there
// and its single-stream path everywhere else. The answer is fixed for the
// store's life: if the connection later reaches a server without the method
// (a fail-over to an older node), AppendMulti of several streams fails
// (Unimplemented, as the server says) rather than falling back to a
// non-atomic write.

// methodAppendRecords is how GetSupportedMethods names AppendRecords
// (method names are listed in lower case).
const methodAppendRecords = "appendrecords"

// detectTimeout bounds the GetSupportedMethods call of Open.
const detectTimeout = 10 * time.Second

// supportsAppendRecords asks the server on cc whether it offers
// AppendRecords. A server without ServerFeatures (Unimplemented, NotFound)
// does not.
func supportsAppendRecords(ctx context.Context, cc grpc.ClientConnInterface) (bool, error) {
	m, err := serverfeatures.NewServerFeaturesClient(cc).GetSupportedMethods(ctx, &sharedpb.Empty{})
	if c := status.Code(err); c == codes.Unimplemented || c == codes.NotFound {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, x := range m.GetMethods() {
		if strings.EqualFold(x.GetMethodName(), methodAppendRecords) && !strings.HasPrefix(strings.ToLower(x.GetServiceName()), "event_store.client.") {
			return true, nil
		}
	}
	return false, nil
}

// AtomicMultiStream implements eventstore.MultiStreamReporter: true when the
// server offers AppendRecords (detected by Open on Options.MultiStreamConn),
// false otherwise; turnstile's executor then takes its single-stream path
// (services/executor).
func (s *Store) AtomicMultiStream() bool { return s.multi != nil }

// appendRecords is AppendMulti of several streams on a server with
// AppendRecords. appends are valid (validate).
//
// Idempotency, as Append's: before writing it reads each written stream's
// tail and, if some of the batch's ids are there, answers from what is
// stored (the original result if every written part is stored whole, in
// order, with the same content; ErrIdempotencyConflict otherwise), without
// writing and without re-checking the conditions, as the server does for a
// recognised retry. When a check fails, it looks for the batch the same way
// before reporting the *eventstore.WrongVersionError of the first failed
// check.
func (s *Store) appendRecords(ctx context.Context, appends []eventstore.StreamAppend) (eventstore.AppendResult, error) {
	var none eventstore.AppendResult
	ctx = leader(ctx)
	held := false
	tops := map[string]uint64{} // written stream -> its last version before the call, if it exists
	for i := range appends {
		a := &appends[i]
		if len(a.Events) == 0 {
			continue
		}
		tail, err := s.readStream(ctx, s.ns+a.Stream, esdb.Backwards, esdb.End{}, uint64(min(len(a.Events), pageSize)))
		if err != nil && !errors.Is(err, eventstore.ErrStreamNotFound) {
			return none, err
		}
		if len(tail) > 0 {
			tops[a.Stream] = tail[0].Version
		}
		if holdsAny(tail, a.Events) {
			held = true
			break
		}
	}
	if held {
		if res, found, err := s.storedMulti(ctx, appends); err != nil || found {
			return res, err
		}
	}

	req := &v2.AppendRecordsRequest{}
	for i := range appends {
		a := &appends[i]
		name := s.ns + a.Stream
		for j := range a.Events {
			r, err := toAppendRecord(&a.Events[j], name)
			if err != nil {
				return none, err
			}
			req.Records = append(req.Records, r)
		}
		if a.Expected.IsAny() {
			continue
		}
		req.Checks = append(req.Checks, &v2.ConsistencyCheck{Type: &v2.ConsistencyCheck_StreamState{
			StreamState: &v2.ConsistencyCheck_StreamStateCheck{Stream: name, ExpectedState: expectedState(a.Expected)},
		}})
	}
	var resp *v2.AppendRecordsResponse
	err := s.callMulti(ctx, func(ctx context.Context) error {
		var err error
		resp, err = s.multi.AppendRecords(ctx, req)
		return err
	})
	if err != nil {
		op := fmt.Sprintf("append to %d streams", len(appends))
		violation, ok := firstViolation(err)
		switch {
		case s.closed():
			return none, fmt.Errorf("kurrentdb: %s: %w", op, eventstore.ErrClosed)
		case status.Code(err) == codes.Unimplemented && ctx.Err() == nil:
			// The connection reaches a server without AppendRecords now
			// (a fail-over to an older node): refuse, never fall back.
			return none, fmt.Errorf("kurrentdb: %s: the server no longer offers AppendRecords: %w (%w)", op, ErrMultiStream, err)
		case !ok:
			return none, translate(ctx, op, err)
		}
		// A retry whose expectations no longer hold? (The server recognises
		// one by its ids only if every written stream is a retry.)
		if res, found, serr := s.storedMulti(ctx, appends); serr != nil || found {
			return res, serr
		}
		return none, s.violation(appends, violation, err)
	}
	// The position is the last record's commit position.
	if resp.GetPosition() < 0 || uint64(resp.GetPosition()) > maxCommit {
		return none, fmt.Errorf("kurrentdb: append to %d streams: the server answered commit position %d", len(appends), resp.GetPosition())
	}
	// A written stream whose revision is no later than its tail was is one
	// the server took for a retry, by ids alone (for Any, from its cache,
	// wherever those ids are): check every part is stored as it is now.
	for _, r := range resp.GetRevisions() {
		top, existed := tops[strings.TrimPrefix(r.GetStream(), s.ns)]
		if existed && r.GetRevision() >= 0 && uint64(r.GetRevision()) <= top {
			res, found, err := s.storedMulti(ctx, appends)
			switch {
			case err != nil:
				return none, err
			case !found:
				return none, fmt.Errorf("kurrentdb: append to %d streams: %w: the server took the batch for a retry, but it is not stored", len(appends), eventstore.ErrIdempotencyConflict)
			}
			return res, nil
		}
	}
	last := lastWritten(appends)
	for _, r := range resp.GetRevisions() {
		if r.GetStream() == s.ns+last.Stream {
			return eventstore.AppendResult{Version: uint64(r.GetRevision()), Position: uint64(resp.GetPosition()) << 1}, nil
		}
	}
	return none, fmt.Errorf("kurrentdb: append to %d streams: the answer has no revision for %q", len(appends), last.Stream)
}

// lastWritten is the last part of appends with events.
func lastWritten(appends []eventstore.StreamAppend) *eventstore.StreamAppend {
	for i := len(appends) - 1; i >= 0; i-- {
		if len(appends[i].Events) > 0 {
			return &appends[i]
		}
	}
	return &appends[len(appends)-1] // validate refuses appends without events
}

// storedMulti looks for each written part of appends as Append does for a
// retry (Store.stored): found if every part is stored whole, with the result
// of the last one; ErrIdempotencyConflict if only some are.
func (s *Store) storedMulti(ctx context.Context, appends []eventstore.StreamAppend) (eventstore.AppendResult, bool, error) {
	var res eventstore.AppendResult
	var have, missing []string
	for i := range appends {
		a := &appends[i]
		if len(a.Events) == 0 {
			continue
		}
		r, found, err := s.stored(ctx, a.Stream, a.Events, esdb.End{}, 0)
		if err != nil {
			return eventstore.AppendResult{}, false, err
		}
		if found {
			res = r
			have = append(have, a.Stream)
		} else {
			missing = append(missing, a.Stream)
		}
	}
	switch {
	case len(have) == 0:
		return eventstore.AppendResult{}, false, nil
	case len(missing) > 0:
		return eventstore.AppendResult{}, false, fmt.Errorf("kurrentdb: append to %d streams: %w: the parts for %q are stored, those for %q are not", len(appends), eventstore.ErrIdempotencyConflict, have, missing)
	}
	return res, true, nil
}

// expectedState is e as a StreamStateCheck's expected state. Not for Any.
func expectedState(e eventstore.ExpectedVersion) int64 {
	switch {
	case e.IsNoStream():
		return int64(v2.ExpectedRevisionConstants_EXPECTED_REVISION_CONSTANTS_NO_STREAM)
	case e.IsStreamExists():
		return int64(v2.ExpectedRevisionConstants_EXPECTED_REVISION_CONSTANTS_EXISTS)
	}
	v, _ := e.Exact()
	return int64(v)
}

// toAppendRecord returns e as AppendRecords takes it, for the server stream
// name: the header in its string-only form (header2.go) as properties.
func toAppendRecord(e *domain.Envelope, name string) (*v2.AppendRecord, error) {
	d := toEventData(e)
	format := v2.SchemaFormat_SCHEMA_FORMAT_BYTES
	if d.ContentType == esdb.ContentTypeJson {
		format = v2.SchemaFormat_SCHEMA_FORMAT_JSON
	}
	props := map[string]*structpb.Value{}
	for k, v := range stringHeaderFields(e) {
		props[k] = structpb.NewStringValue(v)
	}
	id := e.ID.String()
	return &v2.AppendRecord{
		RecordId:   &id,
		Stream:     name,
		Properties: props,
		Schema:     &v2.SchemaInfo{Format: format, Name: e.Type},
		Data:       e.Data,
	}, nil
}

// firstViolation returns the first failed check of an AppendRecords error
// that reports failed consistency checks.
func firstViolation(err error) (*v2errors.ConsistencyViolation_StreamStateViolation, bool) {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.FailedPrecondition {
		return nil, false
	}
	for _, d := range st.Details() {
		if v, ok := d.(*v2errors.AppendConsistencyViolationErrorDetails); ok {
			for _, x := range v.GetViolations() {
				if ss := x.GetStreamState(); ss != nil {
					return ss, true
				}
			}
		}
	}
	return nil, false
}

// violation is the *eventstore.WrongVersionError of a failed check.
func (s *Store) violation(appends []eventstore.StreamAppend, v *v2errors.ConsistencyViolation_StreamStateViolation, err error) error {
	stream := strings.TrimPrefix(v.GetStream(), s.ns)
	wv := &eventstore.WrongVersionError{Stream: stream}
	for i := range appends {
		if appends[i].Stream == stream {
			wv.Expected = appends[i].Expected
			break
		}
	}
	if a := v.GetActualState(); a >= 0 {
		wv.Exists, wv.Actual = true, uint64(a)
	}
	return fmt.Errorf("kurrentdb: %w (%w)", wv, err)
}

// callMulti runs fn, a call on the multi-stream connection, with ctx ended
// early if the store is closed meanwhile.
func (s *Store) callMulti(ctx context.Context, fn func(context.Context) error) error {
	if s.closed() {
		return eventstore.ErrClosed
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return fn(ctx)
}
