package kurrentdb

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"

	"github.com/turnstile/turnstile/domain"
)

// What an event looks like on the server
//
// The event id and type are KurrentDB's own. Data is stored as given, byte for
// byte, with content type application/json when it is valid JSON in UTF-8
// (binary otherwise). The rest of the envelope goes in the event's user metadata, a
// JSON object:
//
//	{"turnstile":1, "schemaVersion":7, "owner":"worker", "writer":"worker-42",
//	 "$correlationId":"…", "$causationId":"…", "metadata":{…}}
//
// "$correlationId" and "$causationId" are the keys KurrentDB's own projections
// ($by_correlation_id) read. The envelope's Metadata is embedded as is when it
// is JSON that survives being embedded byte for byte, and carried base64 in
// "metadataBase64" otherwise. The time is the server's created time. Events
// without the "turnstile" key (written by something else) are read with what
// can be recovered: their type and data, their whole user metadata as
// Metadata, schema version 0 and no owner. Events written by the
// multi-stream path carry the header in a string-only form (header2.go),
// which fromRecorded reads too.

// formatVersion is the value of the "turnstile" key.
const formatVersion = 1

type header struct {
	Turnstile      int             `json:"turnstile"`
	SchemaVersion  int             `json:"schemaVersion"`
	Owner          domain.Owner    `json:"owner"`
	Writer         string          `json:"writer,omitempty"`
	CorrelationID  string          `json:"$correlationId,omitempty"`
	CausationID    string          `json:"$causationId,omitempty"`
	MetadataBase64 []byte          `json:"metadataBase64,omitempty"`
	Metadata       json.RawMessage `json:"metadata,omitempty"` // read only: written by encodeHeader
}

// toEventData returns the event as the client appends it.
func toEventData(e *domain.Envelope) esdb.EventData {
	ct := esdb.ContentTypeBinary
	if utf8.Valid(e.Data) && json.Valid(e.Data) {
		ct = esdb.ContentTypeJson
	}
	return esdb.EventData{
		EventID:     e.ID,
		EventType:   e.Type,
		ContentType: ct,
		Data:        e.Data,
		Metadata:    encodeHeader(e),
	}
}

// encodeHeader returns the user metadata of e.
func encodeHeader(e *domain.Envelope) []byte {
	h := header{
		Turnstile:     formatVersion,
		SchemaVersion: e.SchemaVersion,
		Owner:         e.Owner,
		Writer:        e.Writer,
		CorrelationID: e.CorrelationID,
		CausationID:   e.CausationID,
	}
	embed := embeddable(e.Metadata)
	if len(e.Metadata) > 0 && !embed {
		h.MetadataBase64 = e.Metadata
	}
	b, err := json.Marshal(&h)
	if err != nil {
		panic(fmt.Sprintf("kurrentdb: encoding an event header cannot fail: %v", err))
	}
	if embed {
		// json.Marshal would compact a RawMessage; splice it in verbatim.
		b = append(b[:len(b)-1], `,"metadata":`...)
		b = append(b, e.Metadata...)
		b = append(b, '}')
	}
	return b
}

// embeddable reports whether md can sit in the header as a JSON value and be
// read back byte for byte: valid JSON, valid UTF-8 (which json.Valid does not
// check, and other readers of the header need), without surrounding white
// space (the decoder keeps a value's inner bytes but not the space around it).
func embeddable(md []byte) bool {
	if len(md) == 0 || !utf8.Valid(md) || !json.Valid(md) {
		return false
	}
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
	return !isSpace(md[0]) && !isSpace(md[len(md)-1])
}

// fromRecorded returns the envelope of an event read from the server, in a
// store whose stream names carry the prefix ns. Data and Metadata are the
// client's own fresh buffers.
func fromRecorded(rec *esdb.RecordedEvent, ns string) (domain.Envelope, error) {
	pos, err := positionOf(rec.Position)
	if err != nil {
		return domain.Envelope{}, fmt.Errorf("event %s of %q: %w", rec.EventID, rec.StreamID, err)
	}
	e := domain.Envelope{
		Stream:   strings.TrimPrefix(rec.StreamID, ns),
		Version:  rec.EventNumber,
		Position: pos,
		ID:       rec.EventID,
		Type:     rec.EventType,
		Time:     rec.CreatedDate.UTC(),
		Data:     json.RawMessage(rec.Data),
	}
	if ok, err := decodeStringHeader(rec.UserMetadata, &e); ok {
		// Written by AppendRecords (header2.go).
		if err != nil {
			return domain.Envelope{}, fmt.Errorf("event %s of %q: header: %w", rec.EventID, rec.StreamID, err)
		}
		return e, nil
	}
	var h header
	if len(rec.UserMetadata) == 0 || json.Unmarshal(rec.UserMetadata, &h) != nil || h.Turnstile == 0 {
		// Not written by turnstile.
		if len(rec.UserMetadata) > 0 {
			e.Metadata = json.RawMessage(rec.UserMetadata)
		}
		return e, nil
	}
	e.SchemaVersion = h.SchemaVersion
	e.Owner = h.Owner
	e.Writer = h.Writer
	e.CorrelationID = h.CorrelationID
	e.CausationID = h.CausationID
	switch {
	case len(h.Metadata) > 0:
		e.Metadata = h.Metadata
	case len(h.MetadataBase64) > 0:
		e.Metadata = json.RawMessage(h.MetadataBase64)
	}
	return e, nil
}
