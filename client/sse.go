package client

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"
)

// sseMessage is one Server-Sent Events message as read off the wire.
type sseMessage struct {
	id, event string
	data      []byte
}

// errDropped is how readSSE reports the end of a feed's connection.
var errDropped = errors.New("the feed's connection ended")

// maxSSELine bounds one line of a feed (a message's data is one line).
const maxSSELine = 16 << 20

// readSSE reads messages from r (the text/event-stream format) and hands
// each to fn until fn fails (its error is returned) or the stream ends
// (errDropped, wrapping the read error if any). A message without an id
// keeps the last one; a retry field sets *retry.
func readSSE(r io.Reader, retry *time.Duration, fn func(sseMessage) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var msg sseMessage
	var data bytes.Buffer
	hasData := false
	for {
		line, err := readLine(br)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return errDropped
			}
			return fmt.Errorf("%w: %w", errDropped, err)
		}
		if len(line) == 0 { // the end of a message
			if hasData {
				msg.data = bytes.Clone(data.Bytes())
				if err := fn(msg); err != nil {
					return err
				}
			}
			msg, hasData = sseMessage{id: msg.id}, false
			data.Reset()
			continue
		}
		if line[0] == ':' {
			continue // a comment: the heartbeat
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "id":
			msg.id = string(value)
		case "event":
			msg.event = string(value)
		case "data":
			if hasData {
				data.WriteByte('\n')
			}
			data.Write(value)
			hasData = true
		case "retry":
			if ms, err := strconv.Atoi(string(value)); err == nil && ms >= 0 {
				*retry = time.Duration(ms) * time.Millisecond
			}
		}
	}
}

// readLine reads one line without its end (\n, \r\n), at most maxSSELine
// bytes.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxSSELine {
			return nil, fmt.Errorf("a line of the feed is longer than %d bytes", maxSSELine)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return bytes.TrimRight(line, "\r\n"), nil
	}
}
