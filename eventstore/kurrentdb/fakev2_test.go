package kurrentdb

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/EventStore/EventStore-Client-Go/v4/protos/serverfeatures"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	"github.com/google/uuid"
	v2errors "github.com/kurrent-io/KurrentDB-Client-Go/protos/kurrentdb/protocols/v2/streams/errors"
	v2 "github.com/kurrent-io/KurrentDB-Client-Go/protos/kurrentdb/protocols/v2/streams/streams"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// The fake's newer services, as this package reads KurrentDB's source:
//
//   - ServerFeatures/GetSupportedMethods lists the node's methods in lower
//     case with their service names, and its version. Servers from 25.1
//     list AppendSession on kurrentdb.protocol.v2.streams.streamsservice;
//     26.0.3 and 26.1+ list AppendRecords too.
//   - StreamsService/AppendRecords writes records for several streams in the
//     order given, at consecutive positions, all or nothing, once every
//     ConsistencyCheck holds (on any stream, written or not); every failed
//     check comes back in one FAILED_PRECONDITION with
//     AppendConsistencyViolationErrorDetails (actual state -1 for no
//     stream). A written stream's expected state is its check's, or Any.
//     Idempotency is the v1 append's CheckCommit per written stream (ids
//     only; Any by the recent-events cache): if every written stream is a
//     retry, the call succeeds without writing and without re-checking
//     checks on unwritten streams; a mix of retried and new streams is a
//     consistency violation. Record metadata comes as properties, which
//     must be strings here (the client refuses anything else); read back
//     through the v1 API, the user metadata is a JSON object of them plus
//     "$schema.name" and "$schema.format".

// fakeMethods is what GetSupportedMethods lists for a fake of version v.
func fakeMethods(v string) []*serverfeatures.SupportedMethod {
	const v2svc = "kurrentdb.protocol.v2.streams.streamsservice"
	m := []*serverfeatures.SupportedMethod{
		{ServiceName: "event_store.client.streams.streams", MethodName: "read"},
		{ServiceName: "event_store.client.streams.streams", MethodName: "append"},
		{ServiceName: v2svc, MethodName: "appendsession"},
	}
	if fakeHasAppendRecords(v) {
		m = append(m, &serverfeatures.SupportedMethod{ServiceName: v2svc, MethodName: "appendrecords"})
	}
	return m
}

// fakeHasAppendRecords reports whether a server of version v has
// AppendRecords (26.0.3, 26.1 and later).
func fakeHasAppendRecords(v string) bool {
	var major, minor, patch int
	if _, err := fmt.Sscanf(v, "%d.%d.%d", &major, &minor, &patch); err != nil {
		return false
	}
	return major > 26 || (major == 26 && (minor >= 1 || patch >= 3))
}

type fakeFeatures struct {
	serverfeatures.UnimplementedServerFeaturesServer
	f *fakeServer
}

func (x fakeFeatures) GetSupportedMethods(context.Context, *shared.Empty) (*serverfeatures.SupportedMethods, error) {
	return &serverfeatures.SupportedMethods{Methods: fakeMethods(x.f.version), EventStoreServerVersion: x.f.version}, nil
}

type fakeV2 struct {
	v2.UnimplementedStreamsServiceServer
	f *fakeServer
}

// registerV2 registers the fake's newer services on srv, as its version has
// them.
func (f *fakeServer) registerV2(srv *grpc.Server) {
	if f.version == "" {
		return
	}
	serverfeatures.RegisterServerFeaturesServer(srv, fakeFeatures{f: f})
	v2.RegisterStreamsServiceServer(srv, fakeV2{f: f})
}

// AppendRecords implements StreamsService (see above).
func (x fakeV2) AppendRecords(ctx context.Context, req *v2.AppendRecordsRequest) (*v2.AppendRecordsResponse, error) {
	f := x.f
	if !fakeHasAppendRecords(f.version) {
		return nil, status.Error(codes.Unimplemented, "method AppendRecords not implemented")
	}
	if err := f.hookErr(ctx, "append"); err != nil {
		return nil, err
	}
	if len(req.GetRecords()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "no records")
	}
	type proposed struct {
		stream     string
		id         uuid.UUID
		typ, ct    string
		data, meta []byte
	}
	var batch []proposed
	var written []string // streams in order of first record
	for _, r := range req.GetRecords() {
		id, err := uuid.Parse(r.GetRecordId())
		if err != nil || r.GetStream() == "" {
			return nil, status.Errorf(codes.InvalidArgument, "record %q of %q: bad id or stream", r.GetRecordId(), r.GetStream())
		}
		props := map[string]string{}
		for k, v := range r.GetProperties() {
			sv, ok := v.GetKind().(*structpb.Value_StringValue)
			if !ok {
				return nil, status.Errorf(codes.InvalidArgument, "property %q is not a string", k)
			}
			props[k] = sv.StringValue
		}
		ct, format := "application/octet-stream", "Bytes"
		if r.GetSchema().GetFormat() == v2.SchemaFormat_SCHEMA_FORMAT_JSON {
			ct, format = "application/json", "Json"
		}
		props["$schema.name"], props["$schema.format"] = r.GetSchema().GetName(), format
		meta, _ := json.Marshal(props)
		batch = append(batch, proposed{r.GetStream(), id, r.GetSchema().GetName(), ct, r.GetData(), meta})
		if !slices.Contains(written, r.GetStream()) {
			written = append(written, r.GetStream())
		}
	}
	if err := f.hookErr(ctx, "append:end"); err != nil {
		return nil, err
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	current := func(stream string) int64 { return int64(len(f.streams[stream])) - 1 }
	expected := map[string]int64{} // written stream -> its check's state
	for _, c := range req.GetChecks() {
		if ss := c.GetStreamState(); ss != nil {
			expected[ss.GetStream()] = ss.GetExpectedState()
		}
	}
	// CheckCommit per written stream: the record of a retry's last event,
	// or nil for a write; wrong marks a stream that is neither.
	retried := map[string]*fakeRecord{}
	wrong := map[string]bool{}
	for _, name := range written {
		var ids []uuid.UUID
		for _, p := range batch {
			if p.stream == name {
				ids = append(ids, p.id)
			}
		}
		revs, cur := f.streams[name], current(name)
		exp, ok := expected[name]
		if !ok {
			exp = -2
		}
		switch {
		case exp == -4 && cur < 0:
			wrong[name] = true
		case exp == -2 || exp == -4:
			c, ok := f.cache[ids[0]]
			if !ok || c.stream != name {
				break // a write
			}
			for _, id := range ids {
				c, ok := f.cache[id]
				if !ok || c.stream != name {
					wrong[name] = true
					break
				}
				retried[name] = &f.log[revs[c.rev]]
			}
			if wrong[name] {
				delete(retried, name)
			}
		case exp < cur:
			for i, id := range ids {
				at := exp + 1 + int64(i)
				if at > cur || f.log[revs[at]].id != id {
					wrong[name] = true
					break
				}
			}
			if !wrong[name] {
				retried[name] = &f.log[revs[exp+int64(len(ids))]]
			}
		case exp > cur:
			wrong[name] = true
		}
	}
	if len(retried) == len(written) {
		resp := &v2.AppendRecordsResponse{}
		for _, name := range written {
			r := retried[name]
			resp.Revisions = append(resp.Revisions, &v2.StreamRevision{Stream: name, Revision: int64(r.rev)})
			resp.Position = max(resp.Position, int64(r.pos))
		}
		return resp, nil
	}
	var violations []*v2errors.ConsistencyViolation
	violate := func(i int, stream string, exp int64) {
		violations = append(violations, &v2errors.ConsistencyViolation{CheckIndex: int32(i), Type: &v2errors.ConsistencyViolation_StreamState{
			StreamState: &v2errors.ConsistencyViolation_StreamStateViolation{Stream: stream, ExpectedState: exp, ActualState: current(stream)},
		}})
	}
	for i, c := range req.GetChecks() {
		ss := c.GetStreamState()
		name, exp, cur := ss.GetStream(), ss.GetExpectedState(), current(ss.GetStream())
		holds := exp == -2 || (exp == -1 && cur < 0) || (exp == -4 && cur >= 0) || (exp >= 0 && exp == cur)
		if !holds || wrong[name] || retried[name] != nil {
			violate(i, name, exp)
		}
	}
	for _, name := range written {
		if _, checked := expected[name]; !checked && (wrong[name] || retried[name] != nil) {
			violate(-1, name, -2)
		}
	}
	if len(violations) > 0 {
		st, err := status.New(codes.FailedPrecondition, "append consistency violation").WithDetails(&v2errors.AppendConsistencyViolationErrorDetails{Violations: violations})
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		return nil, st.Err()
	}
	last := map[string]*fakeRecord{}
	var end *fakeRecord
	for _, p := range batch {
		r := f.write(p.stream, p.typ, p.data, p.meta)
		r.id, r.contentType = p.id, p.ct
		f.remember(r)
		last[p.stream], end = r, r
	}
	close(f.wake)
	f.wake = make(chan struct{})
	resp := &v2.AppendRecordsResponse{Position: int64(end.pos)}
	for _, name := range written {
		resp.Revisions = append(resp.Revisions, &v2.StreamRevision{Stream: name, Revision: int64(last[name].rev)})
	}
	return resp, nil
}

// dial returns a gRPC connection to the fake, closed at the end of the test.
func (f *fakeServer) dial(t *testing.T) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(f.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}
