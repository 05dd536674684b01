package jsontext

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestUnescapeHTML(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{`{"a":"x"}`, `{"a":"x"}`},
		{`{"a":"\u003cb\u003e \u0026 \u003E"}`, `{"a":"<b> & >"}`},
		{`{"a":"\\u003c"}`, `{"a":"\\u003c"}`},              // a backslash, then the text u003c
		{`{"a":"\\\u003c"}`, `{"a":"\\<"}`},                 // a backslash, then <
		{`{"a":"\"\u0026\n\u2028"}`, `{"a":"\"&\n\u2028"}`}, // other escapes are kept
		{`["\u0041\u003c"]`, `["\u0041<"]`},
	} {
		got := string(UnescapeHTML([]byte(tc.in)))
		if got != tc.want {
			t.Errorf("UnescapeHTML(%s) = %s, want %s", tc.in, got, tc.want)
		}
		var a, b any
		if json.Unmarshal([]byte(tc.in), &a) != nil || json.Unmarshal([]byte(got), &b) != nil || !reflect.DeepEqual(a, b) {
			t.Errorf("UnescapeHTML(%s) = %s decodes to %v, want %v", tc.in, got, b, a)
		}
	}
}

// FuzzUnescapeHTML: for any valid JSON, the result is valid JSON of the
// same value, and holds no HTML escape that json.Marshal would write.
func FuzzUnescapeHTML(f *testing.F) {
	for _, s := range []string{`"<a href=\"x\">&amp;</a>"`, `{"k":["\\u003c","<>&",1,null]}`, `"\\\\\u003c"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var v any
		if json.Unmarshal([]byte(s), &v) != nil {
			return
		}
		marshalled, err := json.Marshal(v) // escapes <, > and &
		if err != nil {
			return
		}
		for _, in := range [][]byte{[]byte(s), marshalled} {
			out := UnescapeHTML(in)
			var w any
			if err := json.Unmarshal(out, &w); err != nil || !reflect.DeepEqual(v, w) {
				t.Fatalf("UnescapeHTML(%s) = %s: decodes to %v (%v), want %v", in, out, w, err, v)
			}
		}
		if out := UnescapeHTML(marshalled); json.Valid(out) {
			for _, esc := range []string{`\u003c`, `\u003e`, `\u0026`} {
				if containsEscape(out, esc) {
					t.Fatalf("UnescapeHTML(%s) = %s still holds %s", marshalled, out, esc)
				}
			}
		}
	})
}

// containsEscape reports whether out holds esc as an escape (not preceded
// by an escaping backslash).
func containsEscape(out []byte, esc string) bool {
	for i := 0; i+len(esc) <= len(out); i++ {
		if out[i] == '\\' {
			if string(out[i:i+len(esc)]) == esc {
				return true
			}
			i++ // skip the escaped character
		}
	}
	return false
}

// BenchmarkUnescapeHTML: a 1 KiB answer with nothing to undo (the common
// case: one scan, no copy), and one with escapes.
func BenchmarkUnescapeHTML(b *testing.B) {
	plain := []byte(`{"id":"01a21679-9c21-7237-b9a8-5b61715a3892","action":"demo.echo","status":"completed","input":{"text":"` +
		strings.Repeat("hello world ", 80) + `"}}`)
	escaped := []byte(strings.ReplaceAll(string(plain), "hello", `a\u003cb\u0026`))
	for name, in := range map[string][]byte{"plain": plain, "escaped": escaped} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				_ = UnescapeHTML(in)
			}
		})
	}
}
