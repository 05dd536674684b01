package kurrentdb

import (
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/google/uuid"
	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Calls that entered a client while its node discovery failed stay
		// stuck in it for good (see client.go); TestClientReplaced makes some.
		goleak.IgnoreTopFunction("github.com/EventStore/EventStore-Client-Go/v4/esdb.(*grpcClient).getConnectionHandle"),
		goleak.IgnoreTopFunction("github.com/EventStore/EventStore-Client-Go/v4/esdb.(*grpcClient).handleError"),
		// A client that runs a new node discovery replaces its gRPC
		// connection without closing the old one; TestClientReplaced makes
		// it do so.
		goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
	)
}

// urlVar names the environment variable that points the conformance suite at
// a real server.
const urlVar = "TURNSTILE_KURRENTDB_URL"

// noServer is why TestConformance skips.
const noServer = "no KurrentDB server runs on this machine; to run the conformance suite against one:\n" +
	"  docker run -d --name turnstile-kurrentdb -p 2113:2113 -e KURRENTDB_INSECURE=true -e KURRENTDB_MAX_APPEND_SIZE=20971520 docker.io/kurrentplatform/kurrentdb:25.0\n" +
	"  " + urlVar + "='kurrentdb://localhost:2113?tls=false' go test ./eventstore/kurrentdb/..."

// knownGaps are the suite's checks this backend cannot pass, with the reason.
// They are skipped, not weakened; the package documentation lists them.
var knownGaps = map[string]string{
	"Idempotency/SameIDOtherStream": "KurrentDB has no index of event ids across streams: an append of an id stored in another stream is written again",
}

// TestConformance runs the conformance suite against the server named by
// TURNSTILE_KURRENTDB_URL, each subtest in a namespace of its own.
func TestConformance(t *testing.T) {
	raw := os.Getenv(urlVar)
	if raw == "" {
		t.Skip(noServer)
	}
	if raw == "fake" { // a dry run of realserver.sh: one fake shared by every subtest, as a server is
		_, client := newFakeServer(t)
		storetest.Run(t, namespaced(client), storetest.Capabilities{SkipSlow: raceEnabled})
		return
	}
	conn, _, err := ConnectionString(raw)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := esdb.ParseConnectionString(conn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = esdb.NoopLogging()
	client, err := esdb.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	if _, err := LogEnd(t.Context(), client); err != nil {
		t.Fatalf("%s=%s: the server does not answer: %v", urlVar, raw, err)
	}
	// The multi-stream path, as OpenURL takes it: on a single node that
	// offers AppendRecords (26.0.3, 26.1+), AppendMulti/* run too.
	mc, err := dialMulti(cfg)
	if err != nil {
		t.Fatal(err)
	}
	multi := false
	var mconn grpc.ClientConnInterface
	if mc != nil {
		t.Cleanup(func() { _ = mc.Close() })
		if multi, err = supportsAppendRecords(t.Context(), mc); err != nil {
			t.Fatalf("GetSupportedMethods: %v", err)
		}
		mconn = mc
	}
	t.Logf("the server offers AppendRecords: %v (AtomicMultiStream)", multi)
	storetest.Run(t, namespacedConn(client, mconn), storetest.Capabilities{AtomicMultiStream: multi})
}

// TestConformanceFake runs the conformance suite against the fake server:
// it proves the backend against this package's reading of the server (see
// fakeServer), not against the server. Under the race detector the slow
// checks (thousands of appends through gRPC) are skipped: they run without
// it, and against a real server.
//
// Each subtest has a fake of its own, so that subtests do not slow each other
// down; the store is still in a namespace, with an origin, as against a real
// server.
func TestConformanceFake(t *testing.T) {
	storetest.Run(t, func(t *testing.T) eventstore.Store {
		t.Helper()
		_, client := newFakeServer(t)
		return namespaced(client)(t)
	}, storetest.Capabilities{SkipSlow: raceEnabled})
}

// TestConformanceFakeVersions runs the suite against fakes of a server
// without AppendRecords (25.1: the single-stream path) and of one with it
// (26.1: the multi-stream path, AtomicMultiStream true, so AppendMulti/* and
// Idempotency/Multi/* run), each store given a connection of its own for
// the multi-stream path, as OpenURL gives it.
func TestConformanceFakeVersions(t *testing.T) {
	for _, c := range []struct {
		version string
		multi   bool
	}{{"25.1.0", false}, {"26.1.0", true}} {
		t.Run(c.version, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) eventstore.Store {
				t.Helper()
				f, client := newFakeServerOf(t, c.version)
				return namespacedConn(client, f.dial(t))(t)
			}, storetest.Capabilities{SkipSlow: raceEnabled, AtomicMultiStream: c.multi})
		})
	}
}

// namespaced returns a newStore for the suite: a store on client in a fresh
// namespace starting at the current end of $all, so that subtests sharing one
// server each see an empty log and do not scan each other's events (those
// written before they start).
func namespaced(client *esdb.Client) func(t *testing.T) eventstore.Store {
	return namespacedConn(client, nil)
}

// namespacedConn is namespaced with Options.MultiStreamConn conn.
func namespacedConn(client *esdb.Client, conn grpc.ClientConnInterface) func(t *testing.T) eventstore.Store {
	return func(t *testing.T) eventstore.Store {
		t.Helper()
		for suffix, reason := range knownGaps {
			if strings.HasSuffix(t.Name(), "/"+suffix) {
				t.Skip("kurrentdb: " + reason)
			}
		}
		origin, err := LogEnd(t.Context(), client)
		if err != nil {
			t.Fatalf("LogEnd: %v", err)
		}
		s, err := Open(client, Options{
			Namespace:       "t" + strings.ReplaceAll(uuid.NewString(), "-", "")[:12] + "-",
			Origin:          origin,
			Logger:          discard,
			MultiStreamConn: conn,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
}

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))
