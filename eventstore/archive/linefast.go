package archive

import (
	"encoding/hex"
	"encoding/json"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
)

// decodeFast decodes a line exactly as appendLine writes it, field by field
// in that order, without reflection. It reports false for anything else (a
// field it does not expect, an escaped string, a base64 field, odd white
// space): decodeLine then decodes the line with encoding/json, which is the
// reference (TestDecodeFastAgreesWithJSON, FuzzDecodeLine).
func decodeFast(b []byte) (e domain.Envelope, ok bool) {
	p := parser{b: b}
	if !p.lit(`{"position":`) {
		return e, false
	}
	e.Position, ok = p.uint()
	if !ok || !p.lit(`,"stream":`) {
		return e, false
	}
	if e.Stream, ok = p.str(); !ok || !p.lit(`,"version":`) {
		return e, false
	}
	if e.Version, ok = p.uint(); !ok || !p.lit(`,"id":"`) || len(p.b) < 37 || p.b[36] != '"' {
		return e, false
	}
	id, err := uuid.ParseBytes(p.b[:36])
	if err != nil {
		return e, false
	}
	e.ID, p.b = id, p.b[37:]
	if !p.lit(`,"type":`) {
		return e, false
	}
	if e.Type, ok = p.str(); !ok || !p.lit(`,"schema_version":`) {
		return e, false
	}
	neg := p.lit("-")
	v, ok := p.uint()
	if !ok || v > 1<<31 {
		return e, false
	}
	e.SchemaVersion = int(v)
	if neg {
		e.SchemaVersion = -e.SchemaVersion
	}
	if !p.lit(`,"time":`) {
		return e, false
	}
	ts, ok := p.str()
	if !ok {
		return e, false
	}
	if e.Time, err = time.Parse(time.RFC3339Nano, ts); err != nil {
		return e, false
	}
	e.Time = e.Time.UTC()
	if !p.lit(`,"owner":`) {
		return e, false
	}
	owner, ok := p.str()
	if !ok {
		return e, false
	}
	e.Owner = domain.Owner(owner)
	for _, f := range []struct {
		key string
		dst *string
	}{{`,"correlation_id":`, &e.CorrelationID}, {`,"causation_id":`, &e.CausationID}, {`,"writer":`, &e.Writer}} {
		if p.lit(f.key) {
			if *f.dst, ok = p.str(); !ok || *f.dst == "" {
				return e, false
			}
		}
	}
	if p.lit(`,"data":`) {
		if e.Data, ok = p.value(); !ok || !json.Valid(e.Data) {
			return e, false
		}
	}
	if p.lit(`,"metadata":`) {
		if e.Metadata, ok = p.value(); !ok || !json.Valid(e.Metadata) {
			return e, false
		}
	}
	if !p.lit(`,"hash":"`) || len(p.b) != 66 || p.b[64] != '"' || p.b[65] != '}' {
		return e, false
	}
	if _, err := hex.Decode(e.Hash[:], p.b[:64]); err != nil {
		return e, false
	}
	return e, true
}

type parser struct{ b []byte }

// lit consumes s if the input starts with it.
func (p *parser) lit(s string) bool {
	if len(p.b) < len(s) || string(p.b[:len(s)]) != s {
		return false
	}
	p.b = p.b[len(s):]
	return true
}

// uint consumes a decimal number without sign, leading zeros or overflow.
func (p *parser) uint() (uint64, bool) {
	var n uint64
	i := 0
	for ; i < len(p.b) && p.b[i] >= '0' && p.b[i] <= '9'; i++ {
		d := uint64(p.b[i] - '0')
		if n > (1<<64-1-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	if i == 0 || (i > 1 && p.b[0] == '0') {
		return 0, false
	}
	p.b = p.b[i:]
	return n, true
}

// str consumes a JSON string without escapes or control characters.
func (p *parser) str() (string, bool) {
	if len(p.b) == 0 || p.b[0] != '"' {
		return "", false
	}
	for i := 1; i < len(p.b); i++ {
		switch c := p.b[i]; {
		case c == '"':
			if !utf8.Valid(p.b[1:i]) {
				return "", false
			}
			s := string(p.b[1:i])
			p.b = p.b[i+1:]
			return s, true
		case c == '\\' || c < 0x20:
			return "", false
		}
	}
	return "", false
}

// value consumes one JSON object, array, string or literal and returns its
// bytes (copied). It finds the value's end by its brackets and strings;
// the caller checks that the bytes are JSON.
func (p *parser) value() ([]byte, bool) {
	depth, inStr := 0, false
	for i := 0; i < len(p.b); i++ {
		c := p.b[i]
		switch {
		case inStr:
			if c == '\\' {
				i++
			} else if c == '"' {
				inStr = false
				if depth == 0 {
					return p.take(i + 1), true
				}
			}
		case c == '"':
			inStr = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
			if depth == 0 {
				return p.take(i + 1), true
			}
			if depth < 0 {
				return nil, false
			}
		case c == ',' && depth == 0:
			if i == 0 {
				return nil, false
			}
			return p.take(i), true
		case c == '\n':
			return nil, false
		}
	}
	return nil, false
}

func (p *parser) take(n int) []byte {
	v := append([]byte(nil), p.b[:n]...)
	p.b = p.b[n:]
	return v
}
