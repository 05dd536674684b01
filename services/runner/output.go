package runner

import (
	"sync"
	"unicode/utf8"
)

// boundedBuffer is an io.Writer that keeps the first limit bytes written to it
// and counts, then discards, the rest. Write never fails and never blocks, so a
// process writing a lot of output is not stalled or broken by the bound.
type boundedBuffer struct {
	mu        sync.Mutex
	limit     int
	buf       []byte
	truncated bool
}

func newBoundedBuffer(limit int) *boundedBuffer {
	return &boundedBuffer{limit: limit}
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	room := b.limit - len(b.buf)
	if room >= len(p) {
		b.buf = append(b.buf, p...)
	} else {
		if room > 0 {
			b.buf = append(b.buf, p[:room]...)
		}
		b.truncated = true
	}
	return len(p), nil
}

// text returns what was kept, as a string, and whether anything was dropped.
func (b *boundedBuffer) text() (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return boundedText(b.buf, b.truncated), b.truncated
}

// boundedText returns b as a string. When b was cut (truncated), an incomplete
// UTF-8 sequence at its end is dropped rather than left to become U+FFFD.
// Other invalid UTF-8 is kept; encoding/json replaces it with U+FFFD.
func boundedText(b []byte, truncated bool) string {
	if truncated {
		// Look back at most utf8.UTFMax-1 bytes for the start of the last rune.
		for i := 1; i < utf8.UTFMax && i <= len(b); i++ {
			if utf8.RuneStart(b[len(b)-i]) {
				if !utf8.FullRune(b[len(b)-i:]) {
					b = b[:len(b)-i]
				}
				break
			}
		}
	}
	return string(b)
}
