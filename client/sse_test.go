package client

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestReadSSE(t *testing.T) {
	t.Parallel()
	stream := ": hello\nretry: 1500\n\nid: 7\nevent: e\ndata: {\"a\":1}\n\n" +
		"data: first\r\ndata: second\r\n\r\n" + // no id: keeps the last one
		"id: 9\ndata\n\n" + // a field without a colon: empty data
		"id: 10\nevent: ignored\n\n" + // no data: not dispatched
		"id: 11\ndata:x\n" // cut before the end of the message
	retry := time.Duration(0)
	var got []string
	err := readSSE(strings.NewReader(stream), &retry, func(m sseMessage) error {
		got = append(got, m.id+"|"+m.event+"|"+string(m.data))
		return nil
	})
	want := []string{`7|e|{"a":1}`, "7||first\nsecond", "9||"}
	if !errors.Is(err, errDropped) || strings.Join(got, ";") != strings.Join(want, ";") || retry != 1500*time.Millisecond {
		t.Errorf("readSSE: err %v retry %s messages %q; want %q", err, retry, got, want)
	}
	// A line longer than the reader's buffer is read whole.
	long := strings.Repeat("x", 200<<10)
	got = nil
	_ = readSSE(strings.NewReader("id: 1\ndata: "+long+"\n\n"), &retry, func(m sseMessage) error {
		got = append(got, string(m.data))
		return nil
	})
	if len(got) != 1 || got[0] != long {
		t.Errorf("a long line: %d messages", len(got))
	}
}
