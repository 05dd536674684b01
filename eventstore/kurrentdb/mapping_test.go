package kurrentdb

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// Tests of the mappings between turnstile's vocabulary and the client's, with
// no server: expected versions, positions, filters, URLs, events.

func TestExpectedVersionMapping(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		ours   eventstore.ExpectedVersion
		client esdb.ExpectedRevision
	}{
		{eventstore.Any, esdb.Any{}},
		{eventstore.NoStream, esdb.NoStream{}},
		{eventstore.StreamExists, esdb.StreamExists{}},
		{eventstore.Exact(0), esdb.Revision(0)}, // both 0-based: the first event
		{eventstore.Exact(7), esdb.Revision(7)},
		{eventstore.Exact(math.MaxInt64), esdb.Revision(math.MaxInt64)},
	} {
		t.Run(c.ours.String(), func(t *testing.T) {
			t.Parallel()
			if got := toRevision(c.ours); got != c.client {
				t.Errorf("toRevision(%s) = %#v, want %#v", c.ours, got, c.client)
			}
			back, err := fromRevision(c.client)
			if err != nil || back != c.ours {
				t.Errorf("fromRevision(%#v) = %s, %v; want %s", c.client, back, err, c.ours)
			}
		})
	}
	if _, err := fromRevision(nil); err == nil {
		t.Error("fromRevision(nil) succeeded")
	}
}

func TestParseWrongVersion(t *testing.T) {
	t.Parallel()
	const prefix = "[ErrorCodeWrongExpectedVersion] an append request failed the optimistic concurrency on the server: wrong expected version: "
	for _, c := range []struct {
		msg      string
		ok       bool
		expected eventstore.ExpectedVersion
		exists   bool
		actual   uint64
	}{
		{prefix + "expecting '1' but got '2'", true, eventstore.Exact(1), true, 2},
		{prefix + "expecting '0' but got 'no_stream'", true, eventstore.Exact(0), false, 0},
		{prefix + "expecting 'no_stream' but got '0'", true, eventstore.NoStream, true, 0},
		{prefix + "expecting 'any' but got 'no_stream'", true, eventstore.Any, false, 0},
		{prefix + "expecting 'stream_exists' but got 'no_stream'", true, eventstore.StreamExists, false, 0},
		{"kurrentdb: append: " + prefix + "expecting '1099511627776' but got '41'", true, eventstore.Exact(1 << 40), true, 41},
		// What the client prints for revisions past MaxInt64 (it converts to int).
		{prefix + "expecting '-1' but got '3'", false, eventstore.Any, false, 0},
		{prefix + "expecting '1' but got '-5'", false, eventstore.Any, false, 0},
		{"wrong expected version", false, eventstore.Any, false, 0},
		{"", false, eventstore.Any, false, 0},
	} {
		expected, exists, actual, ok := parseWrongVersion(c.msg)
		if ok != c.ok {
			t.Errorf("parseWrongVersion(%q): ok = %v, want %v", c.msg, ok, c.ok)
			continue
		}
		if ok && (expected != c.expected || exists != c.exists || actual != c.actual) {
			t.Errorf("parseWrongVersion(%q) = %s, exists %v, actual %d; want %s, %v, %d", c.msg, expected, exists, actual, c.expected, c.exists, c.actual)
		}
	}
}

func TestPositionOf(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		in   esdb.Position
		want uint64
		err  error // nil: ok; errTransaction: that one; other: any error
	}{
		{"start of the log", esdb.Position{Commit: 0, Prepare: 0}, 0, nil},
		{"$all read", esdb.Position{Commit: 1788, Prepare: 1788}, 3576, nil},
		{"stream read without commit position", esdb.Position{Commit: math.MaxUint64, Prepare: 11607557}, 23215114, nil},
		{"explicit transaction", esdb.Position{Commit: 5000, Prepare: 4800}, 0, errTransaction},
		{"out of range", esdb.Position{Commit: 1 << 63, Prepare: 1 << 63}, 0, errors.New("out of range")},
	} {
		got, err := positionOf(c.in)
		switch {
		case c.err == nil && (err != nil || got != c.want):
			t.Errorf("%s: positionOf(%+v) = %d, %v; want %d", c.name, c.in, got, err, c.want)
		case c.err != nil && err == nil:
			t.Errorf("%s: positionOf(%+v) = %d, want an error", c.name, c.in, got)
		case errors.Is(c.err, errTransaction) && !errors.Is(err, errTransaction):
			t.Errorf("%s: positionOf(%+v): %v, want errTransaction", c.name, c.in, err)
		}
	}
}

func TestReadFrom(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		from    uint64
		want    esdb.AllPosition
		atEvent bool
	}{
		{0, esdb.Start{}, false},
		{1, esdb.Start{}, false}, // after the event at commit 0: read from the start, drop it
		{2, esdb.Position{Commit: 1, Prepare: 1}, true},
		{3576, esdb.Position{Commit: 1788, Prepare: 1788}, true},  // the event at 1788, inclusive
		{3577, esdb.Position{Commit: 1788, Prepare: 1788}, false}, // after it: the read drops it
		{1 << 50, esdb.Position{Commit: 1 << 49, Prepare: 1 << 49}, true},
	} {
		if got := readFrom(c.from); got != c.want {
			t.Errorf("readFrom(%d) = %#v, want %#v", c.from, got, c.want)
		}
		if got := atEvent(c.from); got != c.atEvent {
			t.Errorf("atEvent(%d) = %v, want %v", c.from, got, c.atEvent)
		}
	}
	// Events, the positions just after them, and the next events are in
	// strictly increasing order, and after() is idempotent.
	commits := []uint64{0, 1, 157, 158, 11607400, 11607557, maxCommit}
	var prev uint64
	for i, c := range commits {
		p, err := positionOf(esdb.Position{Commit: c, Prepare: c})
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 && p <= prev {
			t.Errorf("commit %d: position %d not after the previous %d", c, p, prev)
		}
		if a := after(p); a != p+1 || after(a) != a || commitOf(a) != c || commitOf(p) != c {
			t.Errorf("commit %d: after(%d) = %d, commitOf = %d, %d", c, p, a, commitOf(p), commitOf(a))
		}
		prev = after(p)
	}
}

func TestVisible(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		ns, stream, typ string
		want            bool
	}{
		{"", "execution-1", "execution.requested", true},
		{"", "$stats-127.0.0.1:2113", "$statsCollected", false},
		{"", "$$execution-1", "$metadata", false},
		{"", "$et-execution.requested", "$>", false},
		{"", "execution-1", "$>", false}, // a link in a user stream
		{"", "other-app", "OrderPlaced", true},
		{"prod-", "prod-execution-1", "execution.requested", true},
		{"prod-", "execution-1", "execution.requested", false},
		{"prod-", "production-1", "x", false},
		{"prod-", "prod-", "x", false}, // the namespace alone names no stream
		{"prod-", "$$prod-execution-1", "$metadata", false},
	} {
		if got := visible(c.ns, c.stream, c.typ); got != c.want {
			t.Errorf("visible(%q, %q, %q) = %v, want %v", c.ns, c.stream, c.typ, got, c.want)
		}
	}
}

// passes applies a server filter the way the server does (prefixes, or a
// regular expression; the server's are .NET ones, which these coincide with).
func passes(t *testing.T, f *esdb.SubscriptionFilter, stream, typ string) bool {
	t.Helper()
	s := typ
	if f.Type == esdb.StreamFilterType {
		s = stream
	}
	if f.Regex != "" {
		return regexp.MustCompile(f.Regex).MatchString(s)
	}
	for _, p := range f.Prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

func TestServerFilter(t *testing.T) {
	t.Parallel()
	type event struct {
		stream, typ string
		server      bool // the server sends it
		delivered   bool // the store delivers it; server && !delivered: dropped client-side
	}
	for _, c := range []struct {
		name   string
		ns     string
		filter eventstore.Filter
		want   *esdb.SubscriptionFilter
		events []event
	}{
		{
			name: "nothing: the server drops system events", filter: eventstore.Filter{},
			want: esdb.ExcludeSystemEventsFilter(),
			events: []event{
				{"execution-1", "execution.requested", true, true},
				{"$stats-x", "$statsCollected", false, false},
				{"$$execution-1", "$metadata", false, false},
			},
		},
		{
			name: "stream prefixes, server-side", filter: eventstore.Filter{StreamPrefixes: []string{"worker-", "execution-", "worker-"}},
			want: &esdb.SubscriptionFilter{Type: esdb.StreamFilterType, Prefixes: []string{"execution-", "worker-"}},
			events: []event{
				{"execution-1", "a", true, true},
				{"worker-1", "a", true, true},
				{"queue-1", "a", false, false},
				{"executionX", "a", false, false},
			},
		},
		{
			name: "stream prefixes behind the namespace", ns: "ns-", filter: eventstore.Filter{StreamPrefixes: []string{"execution-"}, Types: []string{"keep"}},
			want: &esdb.SubscriptionFilter{Type: esdb.StreamFilterType, Prefixes: []string{"ns-execution-"}},
			events: []event{
				{"ns-execution-1", "keep", true, true},
				{"ns-execution-1", "drop", true, false}, // the type, client-side
				{"execution-1", "keep", false, false},
				{"ns-queue-1", "keep", false, false},
			},
		},
		{
			name: "namespace only", ns: "ns-", filter: eventstore.Filter{},
			want: &esdb.SubscriptionFilter{Type: esdb.StreamFilterType, Prefixes: []string{"ns-"}},
			events: []event{
				{"ns-queue-1", "a", true, true},
				{"other-1", "a", false, false},
			},
		},
		{
			name: "types in a namespace: client-side", ns: "ns-", filter: eventstore.Filter{Types: []string{"keep"}},
			want: &esdb.SubscriptionFilter{Type: esdb.StreamFilterType, Prefixes: []string{"ns-"}},
			events: []event{
				{"ns-queue-1", "keep", true, true},
				{"ns-queue-1", "drop", true, false},
			},
		},
		{
			name: "types: server-side prefixes, exact match client-side", filter: eventstore.Filter{Types: []string{"test.keep", "test.also", "test.keep"}},
			want: &esdb.SubscriptionFilter{Type: esdb.EventFilterType, Prefixes: []string{"test.also", "test.keep"}},
			events: []event{
				{"execution-1", "test.keep", true, true},
				{"execution-1", "test.keeper", true, false},
				{"execution-1", "test.drop", false, false},
			},
		},
		{
			name: "an empty stream prefix matches every stream", filter: eventstore.Filter{StreamPrefixes: []string{"", "x-"}, Types: []string{"a"}},
			want: &esdb.SubscriptionFilter{Type: esdb.EventFilterType, Prefixes: []string{"a"}},
			events: []event{
				{"queue-1", "a", true, true},
				{"x-1", "b", false, false},
			},
		},
		{
			name: "an empty type matches nothing but is no server filter", filter: eventstore.Filter{Types: []string{""}},
			want: esdb.ExcludeSystemEventsFilter(),
			events: []event{
				{"queue-1", "a", true, false},
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := serverFilter(c.ns, c.filter)
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("serverFilter(%q, %+v) = %+v, want %+v", c.ns, c.filter, got, c.want)
			}
			for _, e := range c.events {
				server := passes(t, got, e.stream, e.typ)
				env := domain.Envelope{Stream: strings.TrimPrefix(e.stream, c.ns), Type: e.typ}
				delivered := server && visible(c.ns, e.stream, e.typ) && c.filter.Match(&env)
				if server != e.server || delivered != e.delivered {
					t.Errorf("event %q/%q: server sends %v, store delivers %v; want %v, %v", e.stream, e.typ, server, delivered, e.server, e.delivered)
				}
				// Whatever the store should deliver, the server sends.
				if visible(c.ns, e.stream, e.typ) && c.filter.Match(&env) && !server {
					t.Errorf("event %q/%q passes the filter but the server filter drops it", e.stream, e.typ)
				}
			}
		})
	}
}

func TestConnectionString(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		url, conn, ns string
		tlsOff        bool
		err           string // substring of the error; "" for success
	}{
		{url: "kurrentdb://localhost:2113?tls=false", conn: "esdb://localhost:2113?tls=false", tlsOff: true},
		{url: "kurrentdb://kurrentdb:2113?tls=false", conn: "esdb://kurrentdb:2113?tls=false", tlsOff: true},
		{url: "esdb://localhost:2113?tls=false", conn: "esdb://localhost:2113?tls=false", tlsOff: true},
		{url: "KurrentDB://localhost:2113?tls=false", conn: "esdb://localhost:2113?tls=false", tlsOff: true},
		{url: "kdb://localhost", conn: "esdb://localhost"},
		{url: "kurrent://localhost:2113", conn: "esdb://localhost:2113"},
		{url: "kurrentdb+discover://a:2113,b:2113?tls=false&nodePreference=leader", conn: "esdb+discover://a:2113,b:2113?nodePreference=leader&tls=false", tlsOff: true},
		{url: "esdb+discover://cluster.example:2113", conn: "esdb+discover://cluster.example:2113"},
		{url: "kurrentdb://admin:changeit@host:2113?tls=true&namespace=prod-", conn: "esdb://admin:changeit@host:2113?tls=true", ns: "prod-"},
		{url: "kurrentdb://host:2113?Namespace=a.b-&tls=false", conn: "esdb://host:2113?tls=false", ns: "a.b-", tlsOff: true},
		{url: "kurrentdb://admin:pa,ss@h1:2113,h2?tls=false", conn: "esdb://admin:pa%2Css@h1:2113,h2?tls=false", tlsOff: true},
		{url: "kurrentdb://admin:pa,ss@host:2113", conn: "esdb://admin:pa%2Css@host:2113"},
		{url: "kurrentdb://ad,min:p:a@s%2Fs@h1,h2:2113", conn: "esdb://ad%2Cmin:p%3Aa%40s%2Fs@h1,h2:2113"},
		{url: "kurrentdb://admin:100%@host", conn: "esdb://admin:100%25@host"},
		{url: "localhost:2113", err: "no scheme"},
		{url: "postgres://localhost/db", err: "scheme"},
		{url: "kurrentdb://", err: "no host"},
		{url: "kurrentdb://?tls=false", err: "no host"},
		{url: "kurrentdb:///path", err: "no host"},
		{url: "kurrentdb://host?namespace=$sys", err: "reserves"},
		{url: "kurrentdb://host?namespace=a%20b", err: "printable"},
		{url: "kurrentdb://host?namespace=a&namespace=b", err: "namespaces"},
		{url: "kurrentdb://host/path", err: "path"},
		{url: "kurrentdb://host:port", err: "port"},
		{url: "kurrentdb://host?tls=maybe", err: "tls"},
		{url: "kurrentdb://host?a=%zz", err: "query"},
	} {
		conn, opts, err := ConnectionString(c.url)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ConnectionString(%q) = %q, %v; want an error mentioning %q", c.url, conn, err, c.err)
			}
			continue
		}
		if err != nil || conn != c.conn || opts.Namespace != c.ns {
			t.Errorf("ConnectionString(%q) = %q, namespace %q, %v; want %q, %q", c.url, conn, opts.Namespace, err, c.conn, c.ns)
			continue
		}
		cfg, err := esdb.ParseConnectionString(conn)
		if err != nil {
			t.Errorf("the client refuses %q: %v", conn, err)
			continue
		}
		if cfg.DisableTLS != c.tlsOff {
			t.Errorf("%q: DisableTLS = %v, want %v", c.url, cfg.DisableTLS, c.tlsOff)
		}
	}
}

// TestCredentialsInURL: what the client reads as user and password, with
// the characters its parser splits on.
func TestCredentialsInURL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ url, user, password string }{
		{"kurrentdb://admin:pa,ss@h1:2113,h2?tls=false", "admin", "pa,ss"},
		{"kurrentdb://admin:pa,ss@h1,h2:2113,h3?tls=false", "admin", "pa,ss"},
		{"kurrentdb://admin:pa,ss@host:2113", "admin", "pa,ss"},
		{"kurrentdb://admin:p:a@s,s@h1,h2", "admin", "p:a@s,s"},
		{"kurrentdb://admin:p%2Fa%3Fs@host", "admin", "p/a?s"},
		{"kurrentdb://admin:50%25@host", "admin", "50%"},
		{"kurrentdb://admin:50%@host", "admin", "50%"},
		{"kurrentdb://admin@host", "admin", ""},
	} {
		conn, _, err := ConnectionString(c.url)
		if err != nil {
			t.Errorf("ConnectionString(%q): %v", c.url, err)
			continue
		}
		cfg, err := esdb.ParseConnectionString(conn)
		if err != nil || cfg.Username != c.user || cfg.Password != c.password {
			t.Errorf("%q: the client reads user %q, password %q (%v); want %q, %q", c.url, cfg.Username, cfg.Password, err, c.user, c.password)
		}
	}
	if _, _, err := ConnectionString("kurrentdb://admin:secret@host?tls=maybe"); err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("an error about a URL with a password: %v; want one without the password", err)
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"kurrentdb://admin:changeit@host:2113?tls=true": "kurrentdb://admin:***@host:2113?tls=true",
		"kurrentdb://admin@host:2113":                   "kurrentdb://admin@host:2113",
		"kurrentdb://host:2113?tlsCaFile=/a@b:c":        "kurrentdb://host:2113?tlsCaFile=/a@b:c",
		"no scheme":                                     "no scheme",
	} {
		if got := redact(in); got != want {
			t.Errorf("redact(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		opts Options
		ok   bool
	}{
		{"zero", Options{}, true},
		{"namespace", Options{Namespace: "tenant-a/"}, true},
		{"longest namespace", Options{Namespace: strings.Repeat("n", MaxNamespaceLen)}, true},
		{"namespace too long", Options{Namespace: strings.Repeat("n", MaxNamespaceLen+1)}, false},
		{"system namespace", Options{Namespace: "$ns"}, false},
		{"space in namespace", Options{Namespace: "a b"}, false},
		{"non-ASCII namespace", Options{Namespace: "é"}, false},
		{"window", Options{IdempotencyWindow: 5}, true},
		{"negative window", Options{IdempotencyWindow: -1}, false},
		{"huge window", Options{IdempotencyWindow: maxIdempotencyWindow + 1}, false},
	} {
		if err := c.opts.Validate(); (err == nil) != c.ok {
			t.Errorf("%s: Validate() = %v, want ok=%v", c.name, err, c.ok)
		}
	}
}

// recorded builds the event the client would hand back for d once the server
// stored it: what the client sends comes back as is, plus the server's
// fields. contentType is the string the client puts on the wire.
func recorded(d esdb.EventData, stream string, rev, commit uint64, created time.Time) *esdb.RecordedEvent {
	ct := "application/octet-stream"
	if d.ContentType == esdb.ContentTypeJson {
		ct = "application/json"
	}
	return &esdb.RecordedEvent{
		EventID:        d.EventID,
		EventType:      d.EventType,
		ContentType:    ct,
		StreamID:       stream,
		EventNumber:    rev,
		Position:       esdb.Position{Commit: commit, Prepare: commit},
		CreatedDate:    created,
		Data:           bytes.Clone(d.Data),
		SystemMetadata: map[string]string{"type": d.EventType, "content-type": ct},
		UserMetadata:   bytes.Clone(d.Metadata),
	}
}

func TestEnvelopeRoundTrip(t *testing.T) {
	t.Parallel()
	created := time.Date(2026, 3, 4, 5, 6, 7, 800, time.FixedZone("CET", 3600))
	full := domain.Envelope{
		ID: uuid.New(), Type: "execution.scheduled", SchemaVersion: 7, Owner: domain.OwnerWorker,
		CorrelationID: "corr-Ünïcødé-1", CausationID: "cause-2", Writer: "worker-42",
		Data:     json.RawMessage(`{"z": 1,  "a":[1, 2.50, 1e3], "s":"\u00e9\n\"q\"", "big": 12345678901234567890}`),
		Metadata: json.RawMessage(`{ "trace" : "t-1", "html": "<&>" }`),
	}
	for _, c := range []struct {
		name        string
		mutate      func(e *domain.Envelope)
		contentType esdb.ContentType
		embedded    bool // Metadata sits in the header as JSON, not base64
	}{
		{"every field", func(*domain.Envelope) {}, esdb.ContentTypeJson, true},
		{"minimal", func(e *domain.Envelope) {
			*e = domain.Envelope{ID: e.ID, Type: "t", Owner: domain.OwnerAPI, Data: json.RawMessage(`{}`)}
		}, esdb.ContentTypeJson, false},
		{"no data", func(e *domain.Envelope) { e.Data = nil }, esdb.ContentTypeBinary, true},
		{"data not JSON", func(e *domain.Envelope) { e.Data = []byte{0xff, 0, 'x'} }, esdb.ContentTypeBinary, true},
		{"metadata with space around", func(e *domain.Envelope) { e.Metadata = json.RawMessage(" {\"a\":1}\n") }, esdb.ContentTypeJson, false},
		{"metadata not JSON", func(e *domain.Envelope) { e.Metadata = json.RawMessage(`{"a":`) }, esdb.ContentTypeJson, false},
		{"metadata not UTF-8", func(e *domain.Envelope) { e.Metadata = []byte{'"', 0xc3, 0x28, '"'} }, esdb.ContentTypeJson, false},
		{"metadata null", func(e *domain.Envelope) { e.Metadata = json.RawMessage(`null`) }, esdb.ContentTypeJson, true},
		{"metadata a string", func(e *domain.Envelope) { e.Metadata = json.RawMessage(`"x\u0041"`) }, esdb.ContentTypeJson, true},
		{"negative schema version", func(e *domain.Envelope) { e.SchemaVersion = -3 }, esdb.ContentTypeJson, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			in := full
			in.Data = bytes.Clone(full.Data)
			in.Metadata = bytes.Clone(full.Metadata)
			c.mutate(&in)
			// Fields the store owns, set wrong on purpose.
			in.Stream, in.Version, in.Position, in.Time = "bogus", 99, 12345, time.Unix(1, 0)

			d := toEventData(&in)
			if d.EventID != in.ID || d.EventType != in.Type || !bytes.Equal(d.Data, in.Data) || d.ContentType != c.contentType {
				t.Fatalf("toEventData = id %s type %q content type %v data %q; want %s %q %v %q", d.EventID, d.EventType, d.ContentType, d.Data, in.ID, in.Type, c.contentType, in.Data)
			}
			var header map[string]json.RawMessage
			if err := json.Unmarshal(d.Metadata, &header); err != nil {
				t.Fatalf("user metadata %q is not a JSON object: %v", d.Metadata, err)
			}
			_, embedded := header["metadata"]
			_, base64 := header["metadataBase64"]
			if len(in.Metadata) > 0 && (embedded != c.embedded || base64 == c.embedded) {
				t.Errorf("metadata embedded %v, base64 %v; want embedded %v (header %s)", embedded, base64, c.embedded, d.Metadata)
			}
			if in.CorrelationID != "" && string(header["$correlationId"]) != `"`+in.CorrelationID+`"` {
				t.Errorf("header $correlationId = %s, want %q", header["$correlationId"], in.CorrelationID)
			}

			rec := recorded(d, "ns-execution-1", 4, 1788, created)
			got, err := fromRecorded(rec, "ns-")
			if err != nil {
				t.Fatalf("fromRecorded: %v", err)
			}
			want := in
			want.Stream, want.Version, want.Position, want.Time = "execution-1", 4, 3576, created.UTC()
			if err := sameEnvelope(&want, &got); err != nil {
				t.Fatal(err)
			}
			if got.Time.Location() != time.UTC {
				t.Errorf("Time is in %v, want UTC", got.Time.Location())
			}
			if !eventstore.SameContent(&in, &got) {
				t.Error("sameContent says the round trip changed the event")
			}
		})
	}
}

// sameEnvelope reports the first field in which got differs from want.
func sameEnvelope(want, got *domain.Envelope) error {
	switch {
	case got.Stream != want.Stream || got.Version != want.Version || got.Position != want.Position:
		return fmt.Errorf("placed at %q v%d p%d, want %q v%d p%d", got.Stream, got.Version, got.Position, want.Stream, want.Version, want.Position)
	case got.ID != want.ID || got.Type != want.Type || got.SchemaVersion != want.SchemaVersion || got.Owner != want.Owner:
		return fmt.Errorf("id %s type %q schema %d owner %q, want %s %q %d %q", got.ID, got.Type, got.SchemaVersion, got.Owner, want.ID, want.Type, want.SchemaVersion, want.Owner)
	case got.CorrelationID != want.CorrelationID || got.CausationID != want.CausationID || got.Writer != want.Writer:
		return fmt.Errorf("correlation %q causation %q writer %q, want %q %q %q", got.CorrelationID, got.CausationID, got.Writer, want.CorrelationID, want.CausationID, want.Writer)
	case !bytes.Equal(got.Data, want.Data):
		return fmt.Errorf("Data = %q, want %q", got.Data, want.Data)
	case !bytes.Equal(got.Metadata, want.Metadata):
		return fmt.Errorf("Metadata = %q, want %q", got.Metadata, want.Metadata)
	case !got.Time.Equal(want.Time):
		return fmt.Errorf("Time = %v, want %v", got.Time, want.Time)
	}
	return nil
}

func TestForeignEvents(t *testing.T) {
	t.Parallel()
	created := time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)
	id := uuid.New()
	for _, c := range []struct {
		name     string
		userMeta []byte
		want     json.RawMessage
	}{
		{"no metadata", nil, nil},
		{"someone else's JSON", []byte(`{"$correlationId":"c","tenant":"x"}`), json.RawMessage(`{"$correlationId":"c","tenant":"x"}`)},
		{"not JSON", []byte("\x00\x01"), json.RawMessage("\x00\x01")},
		{"a turnstile key of zero", []byte(`{"turnstile":0,"owner":"api"}`), json.RawMessage(`{"turnstile":0,"owner":"api"}`)},
	} {
		rec := &esdb.RecordedEvent{
			EventID: id, EventType: "OrderPlaced", StreamID: "orders-1", EventNumber: 3,
			Position: esdb.Position{Commit: 100, Prepare: 100}, CreatedDate: created,
			Data: []byte(`{"order":1}`), UserMetadata: c.userMeta,
		}
		got, err := fromRecorded(rec, "")
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		want := domain.Envelope{Stream: "orders-1", Version: 3, Position: 200, ID: id, Type: "OrderPlaced", Time: created, Data: json.RawMessage(`{"order":1}`), Metadata: c.want}
		if err := sameEnvelope(&want, &got); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	// An event of an explicit transaction has no turnstile position.
	rec := &esdb.RecordedEvent{EventID: id, EventType: "x", StreamID: "s", Position: esdb.Position{Commit: 500, Prepare: 400}}
	if _, err := fromRecorded(rec, ""); !errors.Is(err, errTransaction) {
		t.Errorf("fromRecorded of a transaction's event: %v, want errTransaction", err)
	}
}
