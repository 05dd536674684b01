package kurrentdb

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	api "github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// fakeServer is an in-process stand-in for the Streams gRPC service of a
// single KurrentDB node, so that the real client, and this package through
// it, run end to end without a server. It follows this package's reading of
// the server, not the server itself; every behaviour the backend relies on is
// listed here so a run against a real server (TURNSTILE_KURRENTDB_URL) can
// prove or disprove it:
//
//   - $all positions are byte offsets; each appended event is one record
//     whose commit and prepare positions are equal; records are sized by
//     their content, so positions are sparse and irregular.
//   - Reads of $all forwards from a position are inclusive; backwards they
//     are exclusive (the backend copes with either). A position that is not a
//     record boundary fails the read or subscription, and so (here; servers
//     may differ) does one past the end of the log.
//   - Subscriptions to $all from a position are exclusive of it; the server
//     filters by stream or event-type prefixes or regex; it sends checkpoints
//     (with prepare position 0, as servers do) and a caught-up notice.
//   - Stream reads carry no commit position (math.MaxUint64), only the
//     prepare position, as servers before 22.6 do; set streamCommit for newer.
//   - Appends: the expected-version check and idempotency of the server's
//     CheckCommit (IndexWriter.cs), which compares event ids only, never
//     content: with an exact or no-stream expectation behind the stream, a
//     batch whose ids are those of the events after it is acknowledged
//     without writing; with Any or StreamExists, a batch whose first id is in
//     the node's recent-events cache for this stream is acknowledged with the
//     revision of its last id if all its ids are there (in any order, at any
//     revision), and is a wrong expected version if only some are; a first id
//     not in the cache is written again. The cache is bounded (the server's
//     holds 8 MiB of entries, oldest out first; here cacheLimit entries) and
//     in memory: a restart (stop, start) empties it. A write acknowledges with
//     the last event's revision and commit position.
//   - A node shutting down (shutdown) ends live subscriptions with CANCELLED
//     before it closes its connections.
//   - Events of legacy transactions (written with the TCP API) have a commit
//     position above their prepare position (writeTransaction).
//   - Every call's request headers are kept (headers), so tests can see what
//     the client sends (requires-leader).
type fakeServer struct {
	api.UnimplementedStreamsServer

	addr string
	srv  *grpc.Server

	// Tests set these before use.
	streamCommit bool                                           // stream reads carry the commit position (servers 22.6+)
	hook         func(ctx context.Context, method string) error // called first by every call ("append", "read"), and by appends once the request is read ("append:end"); an error fails the call

	cacheLimit int // entries of the recent-events cache; 0: defaultCacheLimit

	version string // the server's version for ServerFeatures; "": no ServerFeatures (fakev2_test.go)

	sent atomic.Int64 // events sent by reads and subscriptions

	mu      sync.Mutex
	cache   map[uuid.UUID]fakeCached // the recent-events cache: id -> where
	cacheQ  []uuid.UUID              // cache entries, oldest first
	headers []fakeCall               // every call's method and request headers, in order
	subs    int                      // subscriptions confirmed so far
	log     []fakeRecord
	streams map[string][]int // stream -> indexes in log, by revision
	next    uint64           // position of the next record
	wake    chan struct{}    // closed and replaced at every write
	kill    chan codes.Code  // drops live subscriptions
}

// defaultCacheLimit is the fake's recent-events cache size.
const defaultCacheLimit = 1000

type fakeCall struct {
	method string
	md     metadata.MD
}

type fakeCached struct {
	stream string
	rev    uint64
}

type fakeRecord struct {
	stream      string
	rev         uint64
	pos         uint64 // commit position
	prepare     uint64 // prepare position: pos, except in legacy transactions
	id          uuid.UUID
	typ         string
	contentType string
	created     int64 // .NET ticks since the Unix epoch
	data, meta  []byte
}

// newFakeServer starts a fake on a loopback port, seeded with system events
// and returns it with a client connected to it.
func newFakeServer(t *testing.T) (*fakeServer, *esdb.Client) {
	t.Helper()
	return newFakeServerOf(t, "")
}

// newFakeServerOf is newFakeServer for a server of the given version
// ("25.1.0", "26.1.0"; see fakeMethods), which lists its methods in
// ServerFeatures and, from 26.0.3 and 26.1, speaks AppendRecords; "" is a
// fake without ServerFeatures, as before.
func newFakeServerOf(t *testing.T, version string) (*fakeServer, *esdb.Client) {
	t.Helper()
	f := &fakeServer{version: version, streams: map[string][]int{}, cache: map[uuid.UUID]fakeCached{}, next: 0, wake: make(chan struct{}), kill: make(chan codes.Code)}
	// What a fresh server holds before anyone writes: system streams, a
	// metadata stream and a link.
	f.write("$settings", "$settings", []byte(`{}`), nil)
	f.write("$stats-127.0.0.1:2113", "$statsCollected", []byte(`{"proc":1}`), nil)
	f.write("$$execution-1", "$metadata", []byte(`{"$maxAge":1}`), nil)
	f.write("$et-x", "$>", []byte("0@x"), nil)
	f.addr = "127.0.0.1:0"
	f.start(t)
	t.Cleanup(f.stop)
	return f, f.newClient(t, "")
}

// start serves the fake on f.addr (a free port the first time).
func (f *fakeServer) start(t *testing.T) {
	t.Helper()
	lis, err := net.Listen("tcp", f.addr)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	f.addr = lis.Addr().String()
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		f.keepHeaders(ctx, info.FullMethod)
		return h(ctx, req)
	}), grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		f.keepHeaders(ss.Context(), info.FullMethod)
		return h(srv, ss)
	}))
	api.RegisterStreamsServer(srv, f)
	f.registerV2(srv)
	f.mu.Lock()
	f.srv = srv
	f.mu.Unlock()
	go func() { _ = srv.Serve(lis) }()
}

// keepHeaders records the request headers of a call.
func (f *fakeServer) keepHeaders(ctx context.Context, method string) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.headers = append(f.headers, fakeCall{method, md.Copy()})
}

// calls returns the calls received so far, and forgets them.
func (f *fakeServer) calls() []fakeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.headers
	f.headers = nil
	return c
}

// shutdown is stop as a node shutting down does it: live subscriptions end
// with CANCELLED first.
func (f *fakeServer) shutdown() {
	f.dropSubscriptions(codes.Canceled)
	f.stop()
}

// stop stops serving, as a server that goes away does: connections close,
// and the recent-events cache is lost. start serves again.
func (f *fakeServer) stop() {
	f.mu.Lock()
	srv := f.srv
	f.cache, f.cacheQ = map[uuid.UUID]fakeCached{}, nil
	f.mu.Unlock()
	srv.Stop()
}

// subscriptions returns how many subscriptions the fake has confirmed.
func (f *fakeServer) subscriptions() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.subs
}

// newClient returns a client of the fake, with extra connection-string
// settings (like "&defaultDeadline=50"), closed at the end of the test.
func (f *fakeServer) newClient(t *testing.T, settings string) *esdb.Client {
	t.Helper()
	cfg, err := esdb.ParseConnectionString("esdb://" + f.addr + "?tls=false&maxDiscoverAttempts=1" + settings)
	if err != nil {
		t.Fatalf("connection string: %v", err)
	}
	cfg.Logger = esdb.NoopLogging()
	client, err := esdb.NewClient(cfg)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// write appends one record; f.mu must be held or the fake not yet serving.
func (f *fakeServer) write(stream, typ string, data, meta []byte) *fakeRecord {
	revs := f.streams[stream]
	r := fakeRecord{
		stream: stream, rev: uint64(len(revs)), pos: f.next, prepare: f.next, id: uuid.New(), typ: typ,
		contentType: "application/json", created: time.Now().UnixNano() / 100, data: data, meta: meta,
	}
	f.next += 64 + uint64(len(stream)+len(typ)+len(data)+len(meta)) + uint64(len(f.log)%7)
	f.streams[stream] = append(revs, len(f.log))
	f.log = append(f.log, r)
	return &f.log[len(f.log)-1]
}

// writeTransaction appends one event as a legacy (TCP API) transaction
// writes it: its prepare record first, its commit record after it, and the
// event at the commit position with the prepare position of its own. f.mu
// must be held.
func (f *fakeServer) writeTransaction(stream, typ string, data []byte) *fakeRecord {
	prepare := f.next
	f.next += 96
	r := f.write(stream, typ, data, nil)
	r.prepare = prepare
	return r
}

// remember puts an appended event in the recent-events cache, dropping the
// oldest entries beyond the limit; f.mu must be held.
func (f *fakeServer) remember(r *fakeRecord) {
	limit := f.cacheLimit
	if limit == 0 {
		limit = defaultCacheLimit
	}
	f.cache[r.id] = fakeCached{r.stream, r.rev}
	f.cacheQ = append(f.cacheQ, r.id)
	for len(f.cacheQ) > limit {
		delete(f.cache, f.cacheQ[0])
		f.cacheQ = f.cacheQ[1:]
	}
}

// dropSubscriptions ends every live subscription with code.
func (f *fakeServer) dropSubscriptions(code codes.Code) {
	for {
		select {
		case f.kill <- code:
		case <-time.After(50 * time.Millisecond):
			return
		}
	}
}

func (f *fakeServer) hookErr(ctx context.Context, method string) error {
	if f.hook == nil {
		return nil
	}
	return f.hook(ctx, method)
}

// Append implements the Streams service.
func (f *fakeServer) Append(stream api.Streams_AppendServer) error {
	if err := f.hookErr(stream.Context(), "append"); err != nil {
		return err
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	opts := first.GetOptions()
	if opts == nil {
		return status.Error(codes.InvalidArgument, "append without options")
	}
	name := string(opts.GetStreamIdentifier().GetStreamName())
	type proposed struct {
		id         uuid.UUID
		typ, ct    string
		data, meta []byte
	}
	var batch []proposed
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		m := req.GetProposedMessage()
		s := m.GetId().GetStructured()
		var id uuid.UUID
		binary.BigEndian.PutUint64(id[:8], uint64(s.GetMostSignificantBits()))
		binary.BigEndian.PutUint64(id[8:], uint64(s.GetLeastSignificantBits()))
		batch = append(batch, proposed{id, m.GetMetadata()["type"], m.GetMetadata()["content-type"], m.GetData(), m.GetCustomMetadata()})
	}
	// Checks a server makes on the whole request (its size) fail here: the
	// client sees them in the answer, not as a broken stream while sending.
	if err := f.hookErr(stream.Context(), "append:end"); err != nil {
		return err
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	revs := f.streams[name]
	cur := int64(len(revs)) - 1 // -1: no stream
	wrong := func() error {
		w := &api.AppendResp_WrongExpectedVersion{}
		if cur < 0 {
			w.CurrentRevisionOption = &api.AppendResp_WrongExpectedVersion_CurrentNoStream{CurrentNoStream: &shared.Empty{}}
		} else {
			w.CurrentRevisionOption = &api.AppendResp_WrongExpectedVersion_CurrentRevision{CurrentRevision: uint64(cur)}
		}
		switch e := opts.GetExpectedStreamRevision().(type) {
		case *api.AppendReq_Options_Any:
			w.ExpectedRevisionOption = &api.AppendResp_WrongExpectedVersion_ExpectedAny{ExpectedAny: &shared.Empty{}}
		case *api.AppendReq_Options_NoStream:
			w.ExpectedRevisionOption = &api.AppendResp_WrongExpectedVersion_ExpectedNoStream{ExpectedNoStream: &shared.Empty{}}
		case *api.AppendReq_Options_StreamExists:
			w.ExpectedRevisionOption = &api.AppendResp_WrongExpectedVersion_ExpectedStreamExists{ExpectedStreamExists: &shared.Empty{}}
		case *api.AppendReq_Options_Revision:
			w.ExpectedRevisionOption = &api.AppendResp_WrongExpectedVersion_ExpectedRevision{ExpectedRevision: e.Revision}
		}
		return stream.SendAndClose(&api.AppendResp{Result: &api.AppendResp_WrongExpectedVersion_{WrongExpectedVersion: w}})
	}
	success := func(last *fakeRecord) error {
		return stream.SendAndClose(&api.AppendResp{Result: &api.AppendResp_Success_{Success: &api.AppendResp_Success{
			CurrentRevisionOption: &api.AppendResp_Success_CurrentRevision{CurrentRevision: last.rev},
			PositionOption: &api.AppendResp_Success_Position{Position: &api.AppendResp_Position{
				CommitPosition: last.pos, PreparePosition: last.pos,
			}},
		}}})
	}
	// The recent-events cache: id -> record, for this stream.
	cached := func(id uuid.UUID) *fakeRecord {
		c, ok := f.cache[id]
		if !ok || c.stream != name {
			return nil
		}
		return &f.log[revs[c.rev]]
	}
	expected := int64(-2) // Any
	switch e := opts.GetExpectedStreamRevision().(type) {
	case *api.AppendReq_Options_NoStream:
		expected = -1
	case *api.AppendReq_Options_StreamExists:
		if cur < 0 {
			return wrong()
		}
	case *api.AppendReq_Options_Revision:
		expected = int64(e.Revision)
	}
	switch {
	case expected == -2: // Any, StreamExists
		var last *fakeRecord
		for i, p := range batch {
			r := cached(p.id)
			if r == nil {
				if i == 0 {
					goto write
				}
				return wrong() // corrupted idempotency
			}
			last = r
		}
		if last != nil {
			return success(last)
		}
	case expected < cur:
		for i, p := range batch {
			at := expected + 1 + int64(i)
			if at > cur || f.log[revs[at]].id != p.id {
				return wrong() // first event: wrong version; later: corrupted idempotency
			}
		}
		return success(&f.log[revs[expected+int64(len(batch))]])
	case expected > cur:
		return wrong()
	}
write:
	var last *fakeRecord
	for _, p := range batch {
		last = f.write(name, p.typ, p.data, p.meta)
		last.id, last.contentType = p.id, p.ct
		f.remember(last)
	}
	close(f.wake)
	f.wake = make(chan struct{})
	if last == nil {
		return status.Error(codes.InvalidArgument, "empty append")
	}
	return success(last)
}

// Read implements the Streams service: stream reads, $all reads and $all
// subscriptions.
func (f *fakeServer) Read(req *api.ReadReq, stream api.Streams_ReadServer) error {
	if err := f.hookErr(stream.Context(), "read"); err != nil {
		return err
	}
	o := req.GetOptions()
	backwards := o.GetReadDirection() == api.ReadReq_Options_Backwards
	if o.GetSubscription() != nil {
		if o.GetAll() == nil {
			return status.Error(codes.Unimplemented, "the fake subscribes to $all only")
		}
		return f.subscribe(o, stream)
	}
	count := o.GetCount()
	if s := o.GetStream(); s != nil {
		return f.readStream(s, backwards, count, stream)
	}
	return f.readAll(o.GetAll(), backwards, count, stream)
}

func (f *fakeServer) readStream(o *api.ReadReq_Options_StreamOptions, backwards bool, count uint64, out api.Streams_ReadServer) error {
	name := string(o.GetStreamIdentifier().GetStreamName())
	f.mu.Lock()
	revs := slices.Clone(f.streams[name])
	var recs []fakeRecord
	if len(revs) > 0 {
		last := uint64(len(revs) - 1)
		from := uint64(0)
		switch {
		case o.GetEnd() != nil:
			from = last
			if !backwards {
				from = last + 1
			}
		case o.GetStart() != nil:
		default:
			from = o.GetRevision()
		}
		if backwards {
			start := min(from, last)
			for n := uint64(0); n < count && n <= start; n++ {
				recs = append(recs, f.log[revs[start-n]])
			}
		} else {
			for r := from; r <= last && r-from < count; r++ {
				recs = append(recs, f.log[revs[r]])
			}
		}
	}
	f.mu.Unlock()
	if len(revs) == 0 {
		return out.Send(&api.ReadResp{Content: &api.ReadResp_StreamNotFound_{StreamNotFound: &api.ReadResp_StreamNotFound{
			StreamIdentifier: &shared.StreamIdentifier{StreamName: []byte(name)},
		}}})
	}
	for i := range recs {
		commit := uint64(math.MaxUint64)
		if f.streamCommit {
			commit = recs[i].pos
		}
		f.sent.Add(1)
		if err := out.Send(readEvent(&recs[i], commit, false)); err != nil {
			return err
		}
	}
	return nil
}

// boundary reports whether a record is at commit position pos with prepare
// position prepare; f.mu must be held. The fake refuses positions past the
// end too: what a server does with them is not documented, and the backend
// must not depend on it.
func (f *fakeServer) boundary(pos, prepare uint64) bool {
	i, ok := slices.BinarySearchFunc(f.log, pos, func(r fakeRecord, p uint64) int { return cmpUint(r.pos, p) })
	return ok && f.log[i].prepare == prepare
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (f *fakeServer) readAll(o *api.ReadReq_Options_AllOptions, backwards bool, count uint64, out api.Streams_ReadServer) error {
	f.mu.Lock()
	var recs []fakeRecord
	var from uint64
	switch {
	case o.GetStart() != nil:
		from = 0
	case o.GetEnd() != nil:
		from = f.next
	default:
		p := o.GetPosition()
		if !f.boundary(p.GetCommitPosition(), p.GetPreparePosition()) {
			f.mu.Unlock()
			return status.Errorf(codes.Internal, "log record at position %d is not a record boundary", p.GetCommitPosition())
		}
		from = p.GetCommitPosition()
	}
	i, _ := slices.BinarySearchFunc(f.log, from, func(r fakeRecord, p uint64) int { return cmpUint(r.pos, p) })
	if backwards {
		for j := i - 1; j >= 0 && uint64(len(recs)) < count; j-- { // exclusive of from
			recs = append(recs, f.log[j])
		}
	} else {
		for j := i; j < len(f.log) && uint64(len(recs)) < count; j++ {
			recs = append(recs, f.log[j])
		}
	}
	f.mu.Unlock()
	for i := range recs {
		f.sent.Add(1)
		if err := out.Send(readEvent(&recs[i], recs[i].pos, true)); err != nil {
			return err
		}
	}
	return nil
}

// subscribe serves a subscription to $all: catch-up, a caught-up notice,
// then live events, until the client goes or a drop is injected.
func (f *fakeServer) subscribe(o *api.ReadReq_Options, out api.Streams_ReadServer) error {
	match, err := fakeFilter(o.GetFilter())
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	a := o.GetAll()
	f.mu.Lock()
	var next int // index in log of the next record to consider
	switch {
	case a.GetStart() != nil:
	case a.GetEnd() != nil:
		next = len(f.log)
	default:
		p := a.GetPosition().GetCommitPosition()
		if !f.boundary(p, a.GetPosition().GetPreparePosition()) {
			f.mu.Unlock()
			return status.Errorf(codes.Internal, "log record at position %d is not a record boundary", p)
		}
		next, _ = slices.BinarySearchFunc(f.log, p+1, func(r fakeRecord, p uint64) int { return cmpUint(r.pos, p) }) // exclusive
	}
	f.subs++
	f.mu.Unlock()
	if err := out.Send(&api.ReadResp{Content: &api.ReadResp_Confirmation{Confirmation: &api.ReadResp_SubscriptionConfirmation{SubscriptionId: uuid.NewString()}}}); err != nil {
		return err
	}
	caughtUp := false
	considered := 0
	for {
		f.mu.Lock()
		batch := slices.Clone(f.log[next:])
		wake := f.wake
		f.mu.Unlock()
		for i := range batch {
			next++
			considered++
			if match(&batch[i]) {
				f.sent.Add(1)
				if err := out.Send(readEvent(&batch[i], batch[i].pos, true)); err != nil {
					return err
				}
			}
			if considered%32 == 0 {
				cp := &api.ReadResp_Checkpoint{CommitPosition: batch[i].pos, PreparePosition: 0}
				if err := out.Send(&api.ReadResp{Content: &api.ReadResp_Checkpoint_{Checkpoint: cp}}); err != nil {
					return err
				}
			}
		}
		if !caughtUp {
			caughtUp = true
			if err := out.Send(&api.ReadResp{Content: &api.ReadResp_CaughtUp_{CaughtUp: &api.ReadResp_CaughtUp{}}}); err != nil {
				return err
			}
		}
		select {
		case <-wake:
		case code := <-f.kill:
			return status.Error(code, "subscription dropped by the test")
		case <-out.Context().Done():
			return out.Context().Err()
		}
	}
}

// fakeFilter returns the server-side filter of a subscription.
func fakeFilter(o *api.ReadReq_Options_FilterOptions) (func(*fakeRecord) bool, error) {
	if o == nil {
		return func(*fakeRecord) bool { return true }, nil
	}
	var expr *api.ReadReq_Options_FilterOptions_Expression
	onStream := false
	switch {
	case o.GetStreamIdentifier() != nil:
		expr, onStream = o.GetStreamIdentifier(), true
	case o.GetEventType() != nil:
		expr = o.GetEventType()
	default:
		return nil, errors.New("filter on neither stream nor event type")
	}
	var re *regexp.Regexp
	if expr.GetRegex() != "" {
		var err error
		if re, err = regexp.Compile(expr.GetRegex()); err != nil {
			return nil, err
		}
	}
	prefixes := expr.GetPrefix()
	return func(r *fakeRecord) bool {
		s := r.typ
		if onStream {
			s = r.stream
		}
		if re != nil {
			return re.MatchString(s)
		}
		for _, p := range prefixes {
			if strings.HasPrefix(s, p) {
				return true
			}
		}
		return false
	}, nil
}

// readEvent is the message that carries r to the client.
func readEvent(r *fakeRecord, commit uint64, all bool) *api.ReadResp {
	most, least := esdb.UUIDAsInt64(r.id)
	ev := &api.ReadResp_ReadEvent{
		Event: &api.ReadResp_ReadEvent_RecordedEvent{
			Id:               &shared.UUID{Value: &shared.UUID_Structured_{Structured: &shared.UUID_Structured{MostSignificantBits: most, LeastSignificantBits: least}}},
			StreamIdentifier: &shared.StreamIdentifier{StreamName: []byte(r.stream)},
			StreamRevision:   r.rev,
			PreparePosition:  r.prepare,
			CommitPosition:   commit,
			Metadata: map[string]string{
				"type": r.typ, "content-type": r.contentType, "created": strconv.FormatInt(r.created, 10),
			},
			CustomMetadata: r.meta,
			Data:           r.data,
		},
	}
	if all {
		ev.Position = &api.ReadResp_ReadEvent_CommitPosition{CommitPosition: commit}
	} else {
		ev.Position = &api.ReadResp_ReadEvent_NoPosition{NoPosition: &shared.Empty{}}
	}
	return &api.ReadResp{Content: &api.ReadResp_Event{Event: ev}}
}
