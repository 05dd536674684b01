package archive

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
)

// One event is one line of a segment: a JSON object whose fields are the
// envelope's, position first. Data and metadata come back byte for byte: they are written as they
// are when their bytes are a JSON value that a decoder hands back unchanged
// (valid JSON and UTF-8, no line break, no surrounding white space);
// otherwise as "data_base64" / "metadata_base64" (the exact bytes), beside a
// compacted "data" / "metadata" for jq when the bytes are JSON at all. Empty
// data or metadata is left out.

var errNotUTF8 = errors.New("is not valid UTF-8, which a JSON line cannot hold byte for byte")

// appendLine appends e's line (with its trailing newline) to b.
func appendLine(b []byte, e *domain.Envelope) ([]byte, error) {
	b = append(b, `{"position":`...)
	b = strconv.AppendUint(b, e.Position, 10)
	var err error
	str := func(name, s string, omitEmpty bool) {
		if err != nil || (omitEmpty && s == "") {
			return
		}
		if !utf8.ValidString(s) {
			err = fmt.Errorf("event at position %d: %s %w", e.Position, name, errNotUTF8)
			return
		}
		b = append(b, `,"`...)
		b = append(b, name...)
		b = append(b, `":`...)
		b = appendString(b, s)
	}
	str("stream", e.Stream, false)
	b = append(b, `,"version":`...)
	b = strconv.AppendUint(b, e.Version, 10)
	b = append(b, `,"id":"`...)
	b = append(b, e.ID.String()...)
	b = append(b, '"')
	str("type", e.Type, false)
	b = append(b, `,"schema_version":`...)
	b = strconv.AppendInt(b, int64(e.SchemaVersion), 10)
	b = append(b, `,"time":"`...)
	b = e.Time.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	str("owner", string(e.Owner), false)
	str("correlation_id", e.CorrelationID, true)
	str("causation_id", e.CausationID, true)
	str("writer", e.Writer, true)
	if err != nil {
		return b, err
	}
	b = appendRaw(b, "data", e.Data)
	b = appendRaw(b, "metadata", e.Metadata)
	b = append(b, `,"hash":"`...)
	b = hex.AppendEncode(b, e.Hash[:])
	b = append(b, "\"}\n"...)
	return b, nil
}

// appendRaw appends ,"name":raw, or its exact-bytes form (see above).
func appendRaw(b []byte, name string, raw []byte) []byte {
	if len(raw) == 0 {
		return b
	}
	if keepsBytes(raw) {
		b = append(b, `,"`...)
		b = append(b, name...)
		b = append(b, `":`...)
		return append(b, raw...)
	}
	if json.Valid(raw) {
		var c bytes.Buffer
		if json.Compact(&c, raw) == nil && keepsBytes(c.Bytes()) {
			b = append(b, `,"`...)
			b = append(b, name...)
			b = append(b, `":`...)
			b = append(b, c.Bytes()...)
		}
	}
	b = append(b, `,"`...)
	b = append(b, name...)
	b = append(b, `_base64":"`...)
	b = base64.StdEncoding.AppendEncode(b, raw)
	return append(b, '"')
}

// keepsBytes reports whether raw, written as a JSON value in a line, is read
// back as exactly raw.
func keepsBytes(raw []byte) bool {
	if len(raw) == 0 || isSpace(raw[0]) || isSpace(raw[len(raw)-1]) {
		return false
	}
	if bytes.IndexByte(raw, '\n') >= 0 || bytes.IndexByte(raw, '\r') >= 0 {
		return false
	}
	return utf8.Valid(raw) && json.Valid(raw)
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// appendString appends s as a JSON string, escaping only what JSON requires
// (so <, > and & stay readable).
func appendString(b []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// line is a segment line as decoded.
type line struct {
	Position       uint64          `json:"position"`
	Stream         string          `json:"stream"`
	Version        uint64          `json:"version"`
	ID             uuid.UUID       `json:"id"`
	Type           string          `json:"type"`
	SchemaVersion  int             `json:"schema_version"`
	Time           time.Time       `json:"time"`
	Owner          domain.Owner    `json:"owner"`
	CorrelationID  string          `json:"correlation_id"`
	CausationID    string          `json:"causation_id"`
	Writer         string          `json:"writer"`
	Data           json.RawMessage `json:"data"`
	DataBase64     []byte          `json:"data_base64"`
	Metadata       json.RawMessage `json:"metadata"`
	MetadataBase64 []byte          `json:"metadata_base64"`
	Hash           domain.Hash     `json:"hash"`
}

// decodeLine decodes one line (without its newline) into an envelope.
func decodeLine(b []byte) (domain.Envelope, error) {
	var l line
	if err := json.Unmarshal(b, &l); err != nil {
		return domain.Envelope{}, err
	}
	e := domain.Envelope{
		Stream: l.Stream, Version: l.Version, Position: l.Position, ID: l.ID, Type: l.Type,
		SchemaVersion: l.SchemaVersion, Time: l.Time.UTC(), Owner: l.Owner, CorrelationID: l.CorrelationID,
		CausationID: l.CausationID, Writer: l.Writer, Data: l.Data, Metadata: l.Metadata, Hash: l.Hash,
	}
	if l.DataBase64 != nil {
		e.Data = l.DataBase64
	}
	if l.MetadataBase64 != nil {
		e.Metadata = l.MetadataBase64
	}
	if len(e.Data) == 0 {
		e.Data = nil
	}
	if len(e.Metadata) == 0 {
		e.Metadata = nil
	}
	return e, nil
}
