package kurrentdb

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/turnstile/turnstile/domain"
)

// The header as AppendRecords carries it
//
// KurrentDB's multi-stream append with consistency checks
// (StreamsService/AppendRecords, 26.0.3 and 26.1+) takes a record's metadata
// only as a JSON object of strings, which the client turns into protobuf
// Values; read back through the v1 API, the record's user metadata is a JSON
// object the server makes from those properties: the same keys with string
// values, plus keys of its own ("$schema.name", "$schema.format"). So a
// header meant for that path has every value a string, and says so with
// "turnstile":"2":
//
//	{"turnstile":"2", "schemaVersion":"7", "owner":"worker", "writer":"worker-42",
//	 "$correlationId":"…", "$causationId":"…", "metadata":"{…}"}
//
// Metadata is carried as the string of its bytes when they are valid UTF-8
// (a JSON string holds any such text exactly, whatever it is), and base64 in
// "metadataBase64" otherwise. Keys the header does not name are ignored on
// reading, so the server's own keys do no harm.

// stringFormat is the value of the "turnstile" key in a string-only header.
const stringFormat = "2"

// stringHeader is the header in its string-only form.
type stringHeader struct {
	Turnstile      string `json:"turnstile"`
	SchemaVersion  string `json:"schemaVersion"`
	Owner          string `json:"owner"`
	Writer         string `json:"writer,omitempty"`
	CorrelationID  string `json:"$correlationId,omitempty"`
	CausationID    string `json:"$causationId,omitempty"`
	Metadata       string `json:"metadata,omitempty"`
	MetadataBase64 string `json:"metadataBase64,omitempty"`
}

// encodeStringHeader returns the user metadata of e as AppendRecords takes
// it: a JSON object whose values are all strings.
func encodeStringHeader(e *domain.Envelope) []byte {
	h := stringHeader{
		Turnstile:     stringFormat,
		SchemaVersion: strconv.Itoa(e.SchemaVersion),
		Owner:         string(e.Owner),
		Writer:        e.Writer,
		CorrelationID: e.CorrelationID,
		CausationID:   e.CausationID,
	}
	switch {
	case len(e.Metadata) == 0:
	case utf8.Valid(e.Metadata):
		h.Metadata = string(e.Metadata)
	default:
		h.MetadataBase64 = base64.StdEncoding.EncodeToString(e.Metadata)
	}
	b, err := json.Marshal(&h)
	if err != nil {
		panic(fmt.Sprintf("kurrentdb: encoding an event header cannot fail: %v", err))
	}
	return b
}

// decodeStringHeader fills e's header fields from user metadata in the
// string-only form. It reports false if meta is not in that form (not a JSON
// object of strings with "turnstile":"2"), and an error if it is but a value
// cannot be read.
func decodeStringHeader(meta []byte, e *domain.Envelope) (bool, error) {
	var h stringHeader
	if json.Unmarshal(meta, &h) != nil || h.Turnstile != stringFormat {
		return false, nil
	}
	v, err := strconv.Atoi(h.SchemaVersion)
	if err != nil {
		return true, fmt.Errorf("schemaVersion %q: %w", h.SchemaVersion, err)
	}
	e.SchemaVersion = v
	e.Owner = domain.Owner(h.Owner)
	e.Writer = h.Writer
	e.CorrelationID = h.CorrelationID
	e.CausationID = h.CausationID
	switch {
	case h.Metadata != "":
		e.Metadata = json.RawMessage(h.Metadata)
	case h.MetadataBase64 != "":
		md, err := base64.StdEncoding.DecodeString(h.MetadataBase64)
		if err != nil {
			return true, fmt.Errorf("metadataBase64: %w", err)
		}
		e.Metadata = md
	}
	return true, nil
}

// stringHeaderFields is encodeStringHeader as a map, the properties of an
// AppendRecords record.
func stringHeaderFields(e *domain.Envelope) map[string]string {
	var m map[string]string
	if err := json.Unmarshal(encodeStringHeader(e), &m); err != nil {
		panic(fmt.Sprintf("kurrentdb: a string-only header is a JSON object of strings: %v", err))
	}
	return m
}
