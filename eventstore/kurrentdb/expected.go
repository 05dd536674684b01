package kurrentdb

import (
	"fmt"
	"regexp"
	"strconv"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"

	"github.com/turnstile/turnstile/eventstore"
)

// Expected versions map one to one: turnstile versions are 0-based like
// KurrentDB stream revisions, so Exact(v) is Revision(v), "the stream's last
// event is at revision v".

// toRevision returns the client's expected revision for e.
func toRevision(e eventstore.ExpectedVersion) esdb.ExpectedRevision {
	switch {
	case e.IsNoStream():
		return esdb.NoStream{}
	case e.IsStreamExists():
		return esdb.StreamExists{}
	}
	if v, ok := e.Exact(); ok {
		return esdb.Revision(v)
	}
	return esdb.Any{}
}

// fromRevision is the inverse of toRevision.
func fromRevision(r esdb.ExpectedRevision) (eventstore.ExpectedVersion, error) {
	switch r := r.(type) {
	case esdb.Any:
		return eventstore.Any, nil
	case esdb.NoStream:
		return eventstore.NoStream, nil
	case esdb.StreamExists:
		return eventstore.StreamExists, nil
	case esdb.StreamRevision:
		return eventstore.Exact(r.Value), nil
	}
	return eventstore.Any, fmt.Errorf("kurrentdb: unknown expected revision %T", r)
}

// wrongVersionText matches the text the client (v4.2.0) gives its
// wrong-expected-version error: the server's answer carries the stream's
// current revision, but the client keeps it only in this message.
var wrongVersionText = regexp.MustCompile(`expecting '([^']*)' but got '([^']*)'`)

// parseWrongVersion reads the expected and current state out of the client's
// wrong-expected-version message. ok is false if the text is not recognised
// (another client version), and the caller must then ask the server.
func parseWrongVersion(msg string) (expected eventstore.ExpectedVersion, exists bool, actual uint64, ok bool) {
	m := wrongVersionText.FindStringSubmatch(msg)
	if m == nil {
		return eventstore.Any, false, 0, false
	}
	switch m[1] {
	case "any":
		expected = eventstore.Any
	case "no_stream":
		expected = eventstore.NoStream
	case "stream_exists":
		expected = eventstore.StreamExists
	default:
		v, err := strconv.ParseUint(m[1], 10, 64)
		if err != nil {
			return eventstore.Any, false, 0, false
		}
		expected = eventstore.Exact(v)
	}
	if m[2] == "no_stream" {
		return expected, false, 0, true
	}
	v, err := strconv.ParseUint(m[2], 10, 64)
	if err != nil {
		return eventstore.Any, false, 0, false
	}
	return expected, true, v, true
}
