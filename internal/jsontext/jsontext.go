// Package jsontext undoes encoding/json's HTML escaping: json.Marshal
// writes <, > and & inside strings as \u003c, \u003e and \u0026 (and so
// does every JSON the log stores), which is right for JSON embedded in
// HTML and wrong for an API and a command line, whose readers expect the
// text as it was written.
package jsontext

import "bytes"

// UnescapeHTML returns the JSON text b with every \u003c, \u003e and
// \u0026 escape inside its strings written as the character it stands for.
// The result decodes to the same value as b; b must be valid JSON (outside
// strings valid JSON holds no backslash). b itself is returned when it has
// nothing to undo, so the common case allocates nothing.
func UnescapeHTML(b []byte) []byte {
	i := bytes.IndexByte(b, '\\')
	if i < 0 || !hasHTMLEscape(b[i:]) {
		return b
	}
	out := make([]byte, 0, len(b))
	out = append(out, b[:i]...)
	for i < len(b) {
		j := bytes.IndexByte(b[i:], '\\')
		if j < 0 {
			return append(out, b[i:]...)
		}
		out = append(out, b[i:i+j]...)
		if i += j; i+1 >= len(b) {
			return append(out, b[i:]...)
		}
		if r, ok := htmlEscape(b[i:]); ok {
			out = append(out, r)
			i += 6
			continue
		}
		out = append(out, '\\', b[i+1]) // another escape, \\ included: kept whole
		i += 2
	}
	return out
}

// hasHTMLEscape reports whether b may hold an escape UnescapeHTML undoes.
func hasHTMLEscape(b []byte) bool {
	return bytes.Contains(b, []byte(`\u00`))
}

// htmlEscape reads an escape \u003c, \u003e or \u0026 (either case of hex
// digit) at the start of b.
func htmlEscape(b []byte) (byte, bool) {
	if len(b) < 6 || b[1] != 'u' || b[2] != '0' || b[3] != '0' {
		return 0, false
	}
	lo := b[5] | 0x20 // the last hex digit in lower case (digits are unchanged)
	switch {
	case b[4] == '3' && lo == 'c':
		return '<', true
	case b[4] == '3' && lo == 'e':
		return '>', true
	case b[4] == '2' && b[5] == '6':
		return '&', true
	}
	return 0, false
}
