package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/turnstile/turnstile/api"
	"github.com/turnstile/turnstile/client/wire"
	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/chaincheck"
	"github.com/turnstile/turnstile/eventstore/embedded"
	"github.com/turnstile/turnstile/eventstore/storetest"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/command"
)

// logServer serves the API over store, with archive as its ArchiveStatus.
func logServer(t *testing.T, store eventstore.Store, archive api.ArchiveStatus) string {
	t.Helper()
	srv := api.New(api.Config{
		Commands: &command.Service{Store: store, Writer: "test"},
		Queries:  projections.NewQueries(projections.NewViews(), store),
		Archive:  archive, Tokens: allTokens(t),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return ts.URL
}

// getLog calls GET /api/v1/log with token and decodes a 200 answer.
func getLog(t *testing.T, base, token string) (int, wire.LogStatus, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/api/v1/log", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var st wire.LogStatus
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
	}
	return resp.StatusCode, st, string(b)
}

func appendN(t *testing.T, s eventstore.Store, n int) {
	t.Helper()
	for i := range n {
		if _, err := s.Append(context.Background(), "test-log", eventstore.Any, storetest.NewEvent("test.event", map[string]int{"i": i})); err != nil {
			t.Fatal(err)
		}
	}
}

// GET /api/v1/log publishes the digest of the last event; a digest taken
// from it checks with chaincheck (turnstile verify) today and after more
// appends, and a changed one does not. An empty log has no digest.
func TestLogPublishesTheDigest(t *testing.T) {
	t.Parallel()
	store, err := embedded.Open(t.TempDir(), embedded.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	base := logServer(t, store, nil)
	reader := secrets[api.RoleReader]
	code, st, body := getLog(t, base, reader)
	if code != 200 || st.Head != 0 || st.Digest != nil || !strings.Contains(body, `"digest":null`) {
		t.Fatalf("empty log: %d %s", code, body)
	}
	appendN(t, store, 25)
	code, st, body = getLog(t, base, reader)
	if code != 200 || st.Head != 25 || st.FirstLivePosition != 0 || st.ArchivedSegments != 0 || st.Digest == nil || st.Digest.Position != 24 {
		t.Fatalf("25 events: %d %s", code, body)
	}
	last, err := store.ReadAll(context.Background(), 24, 1)
	if err != nil || len(last) != 1 || last[0].Hash.String() != st.Digest.Hash {
		t.Fatalf("the digest %s is not the last event's hash (%v, %v)", st.Digest.Hash, last, err)
	}
	h, err := domain.ParseHash(st.Digest.Hash)
	if err != nil {
		t.Fatal(err)
	}
	d := chaincheck.Digest{Position: st.Digest.Position, Hash: h}
	appendN(t, store, 10)
	check := func(d chaincheck.Digest) error {
		_, err := chaincheck.Check(context.Background(), store, chaincheck.Options{Stored: true, Dense: true, Digests: []chaincheck.Digest{d}}, nil)
		return err
	}
	if err := check(d); err != nil {
		t.Fatalf("the published digest after 10 more events: %v", err)
	}
	d.Hash[31] ^= 1
	var m *chaincheck.Mismatch
	if err := check(d); !errors.As(err, &m) || m.Position != 24 {
		t.Fatalf("a changed digest: %v", err)
	}
	// Roles: any reader; a worker token is refused, and so is none.
	if code, _, body := getLog(t, base, secrets[api.RoleWorker]); code != http.StatusForbidden {
		t.Fatalf("worker token: %d %s", code, body)
	}
	if code, _, body := getLog(t, base, ""); code != http.StatusUnauthorized {
		t.Fatalf("no token: %d %s", code, body)
	}
}

// noChain is a store that keeps no chain (as KurrentDB).
type noChain struct{ eventstore.Store }

func (n noChain) AtomicMultiStream() bool { return eventstore.AtomicMultiStream(n.Store) }

// trimmed pretends the live log starts at first, after the hash prev.
type trimmed struct {
	eventstore.Store
	first uint64
	prev  domain.Hash
}

func (t trimmed) KeepsChain() bool        { return true }
func (t trimmed) AtomicMultiStream() bool { return eventstore.AtomicMultiStream(t.Store) }
func (t trimmed) Trim(context.Context, uint64, []string) error {
	return errors.New("not in this test")
}
func (t trimmed) Start(context.Context) (uint64, domain.Hash, error) { return t.first, t.prev, nil }

type segments struct {
	n   int
	err error
}

func (s segments) ArchivedSegments(context.Context) (int, error) { return s.n, s.err }

// A store that keeps no chain publishes no digest; a trimmed live log says
// where it starts, and with no live event left its digest is the hash
// before its start; the archive's segments are counted, and a failure to
// count them is a 500 problem.
func TestLogOtherStores(t *testing.T) {
	t.Parallel()
	store, err := embedded.Open(t.TempDir(), embedded.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	appendN(t, store, 5)
	reader := secrets[api.RoleReader]
	if code, st, body := getLog(t, logServer(t, noChain{store}, nil), reader); code != 200 || st.Head != 5 || st.Digest != nil {
		t.Fatalf("no chain: %d %s", code, body)
	}
	prev := domain.Hash{7, 31: 7}
	code, st, body := getLog(t, logServer(t, trimmed{store, 5, prev}, segments{n: 3}), reader)
	if code != 200 || st.Head != 5 || st.FirstLivePosition != 5 || st.ArchivedSegments != 3 || st.Digest == nil ||
		st.Digest.Position != 4 || st.Digest.Hash != prev.String() {
		t.Fatalf("trimmed to the head: %d %s", code, body)
	}
	if code, st, body := getLog(t, logServer(t, trimmed{store, 2, prev}, nil), reader); code != 200 || st.FirstLivePosition != 2 || st.Digest.Position != 4 {
		t.Fatalf("trimmed: %d %s", code, body)
	}
	if code, _, body := getLog(t, logServer(t, store, segments{err: errors.New("disk gone")}), reader); code != 500 || !strings.Contains(body, "problem") && !strings.Contains(body, "internal") {
		t.Fatalf("archive failing: %d %s", code, body)
	}
}
