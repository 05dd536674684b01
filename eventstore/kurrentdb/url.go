package kurrentdb

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
)

// URL schemes OpenURL accepts, and the client scheme each becomes.
var schemes = map[string]string{
	"kurrentdb":          "esdb",
	"kurrent":            "esdb",
	"kdb":                "esdb",
	"esdb":               "esdb",
	"kurrentdb+discover": "esdb+discover",
	"kurrent+discover":   "esdb+discover",
	"kdb+discover":       "esdb+discover",
	"esdb+discover":      "esdb+discover",
}

// ConnectionString translates a turnstile store URL into the client's
// connection string and the Options the URL names.
//
// The URL is a KurrentDB connection string whose scheme may also be
// kurrentdb:// (or kurrent://, kdb://, and their +discover forms for cluster
// discovery): kurrentdb://localhost:2113?tls=false becomes
// esdb://localhost:2113?tls=false. User, password, hosts (several, comma
// separated, for gossip seeds) and the client's settings (tls,
// tlsVerifyCert, nodePreference, defaultDeadline, …) pass through unchanged;
// the one turnstile setting, namespace=<prefix>, is taken out and returned in
// Options.Namespace. User name and password may hold any character but '/'
// and '?' as they are (',' , ':' and '@' included), and any at all
// percent-encoded; they reach the client percent-encoded. TLS is on unless the URL says tls=false, as with every
// KurrentDB client.
func ConnectionString(rawURL string) (string, Options, error) {
	var opts Options
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return "", opts, fmt.Errorf("kurrentdb: store URL %q has no scheme (want kurrentdb://host:2113?tls=false)", rawURL)
	}
	clientScheme, ok := schemes[strings.ToLower(scheme)]
	if !ok {
		return "", opts, fmt.Errorf("kurrentdb: store URL %q: scheme %q is not kurrentdb, kdb or esdb", rawURL, scheme)
	}
	// Hosts may be a comma-separated list, which net/url refuses: split the
	// query off by hand.
	authority, rawQuery, _ := strings.Cut(rest, "?")
	// Credentials may hold what the client's parser splits on (a ',' in a
	// password is taken for a host separator when there are several hosts):
	// pass them percent-encoded, which the client decodes.
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		user, password, hasPassword := strings.Cut(authority[:i], ":")
		userinfo := escapeUserinfo(user)
		if hasPassword {
			userinfo += ":" + escapeUserinfo(password)
		}
		authority = userinfo + authority[i:]
	}
	if authority == "" || strings.HasPrefix(authority, "/") {
		return "", opts, fmt.Errorf("kurrentdb: store URL %q names no host", redact(rawURL))
	}
	query, err := url.ParseQuery(rawQuery)
	if err != nil {
		return "", opts, fmt.Errorf("kurrentdb: store URL %q: query: %w", redact(rawURL), err)
	}
	for key, values := range query {
		if strings.EqualFold(key, "namespace") {
			if len(values) != 1 {
				return "", opts, fmt.Errorf("kurrentdb: store URL %q names %d namespaces", redact(rawURL), len(values))
			}
			opts.Namespace = values[0]
			delete(query, key)
		}
	}
	if err := opts.Validate(); err != nil {
		return "", opts, err
	}
	conn := clientScheme + "://" + authority
	if len(query) > 0 {
		conn += "?" + query.Encode()
	}
	// Let the client check the rest now rather than at first use.
	if _, err := esdb.ParseConnectionString(conn); err != nil {
		return "", opts, fmt.Errorf("kurrentdb: store URL %q: %w", redact(rawURL), err)
	}
	return conn, opts, nil
}

// escapeUserinfo percent-encodes a user name or password for a connection
// string: every byte but the URL's unreserved ones. Escapes already there
// are kept (decoded first, then encoded again); a '%' that starts none is a
// '%'.
func escapeUserinfo(s string) string {
	if u, err := url.PathUnescape(s); err == nil {
		s = u
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// OpenURL connects to the server a store URL names (see ConnectionString),
// checks that it answers, and returns a Store that owns the connection: Close
// closes it. The store logs to slog.Default(). For a single node it also
// opens the connection of the multi-stream path (Options.MultiStreamConn),
// which the store uses if the server offers AppendRecords; a cluster's
// connection string (several hosts, or DNS discovery) keeps the
// single-stream path.
func OpenURL(ctx context.Context, rawURL string) (*Store, error) {
	conn, opts, err := ConnectionString(rawURL)
	if err != nil {
		return nil, err
	}
	opts.setDefaults()
	cfg, err := esdb.ParseConnectionString(conn)
	if err != nil {
		return nil, fmt.Errorf("kurrentdb: %w", err)
	}
	opts.FollowerReads = cfg.NodePreference != esdb.NodePreferenceLeader
	cfg.Logger = clientLogger(opts.Logger)
	client, err := esdb.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("kurrentdb: %w", err)
	}
	// The client connects lazily and, if its first discovery fails, stays
	// closed for good: find out now, with a clear message.
	if _, err := LogEnd(ctx, client); err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("kurrentdb: cannot reach the server of %s: %w", redact(rawURL), err)
	}
	mc, err := dialMulti(cfg)
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("kurrentdb: %w", err)
	}
	if mc != nil {
		opts.MultiStreamConn = mc
	}
	s, err := open(ctx, client, opts)
	if err != nil {
		_ = client.Close()
		if mc != nil {
			_ = mc.Close()
		}
		return nil, err
	}
	s.cfg = cfg
	s.multiConn = mc
	return s, nil
}

// redact hides a password in a store URL.
func redact(rawURL string) string {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return rawURL
	}
	end := strings.IndexAny(rest, "/?")
	if end < 0 {
		end = len(rest)
	}
	if userinfo, host, ok := strings.Cut(rest[:end], "@"); ok {
		if user, _, hasPassword := strings.Cut(userinfo, ":"); hasPassword {
			return scheme + "://" + user + ":***@" + host + rest[end:]
		}
	}
	return rawURL
}

// clientLogger routes the client library's log to l at debug level: the
// client logs every failed call as an error, and the store returns those.
func clientLogger(l *slog.Logger) esdb.LoggingFunc {
	return func(level esdb.LogLevel, format string, args ...any) {
		l.Debug(fmt.Sprintf(format, args...), "component", "kurrentdb-client", "client_level", level)
	}
}
