package archive

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
)

var lineSamples = []string{
	`{"a":1}`, `{ "spaced" : [1, 2 ,3] }`, `{"html":"<b>&amp;</b>","q":"a\"b\\c}","n":[{"x":"]"}]}`,
	"{\n  \"pretty\": true\n}", ` {"leading":"space"}`, `"just a string"`, `"with , comma"`, `null`,
	`12.50e3`, `-1`, `true`, "not json", "\xff\xfe", `{"unicode":"é ✓ \ud83d\ude00"}`, "",
}

func sampleEnvelopes() []domain.Envelope {
	var out []domain.Envelope
	for i, d := range lineSamples {
		for j, m := range lineSamples {
			e := domain.Envelope{Stream: fmt.Sprintf("s-%d", i), Version: uint64(j), Position: uint64(i*100 + j),
				ID: uuid.New(), Type: "t.x", SchemaVersion: j - 3, Time: time.Date(2026, 1, 2, 3, 4, 5, i*1000+j, time.UTC),
				Owner: domain.OwnerWorker, Data: []byte(d), Metadata: []byte(m)}
			if j%2 == 0 {
				e.CorrelationID, e.CausationID, e.Writer = "c<&>", `q"uote`, "w\\1"
			}
			if j%5 == 1 { // not UTF-8: kept as their bytes
				e.CorrelationID, e.Writer, e.Type = "c\xff", "\xfe", "t\xc3"
			}
			e.Hash[i] = byte(j + 1)
			out = append(out, e)
		}
	}
	return out
}

// The fast decoder decodes what appendLine writes, and agrees with
// encoding/json wherever it answers.
func TestDecodeFastAgreesWithJSON(t *testing.T) {
	fast := 0
	for _, e := range sampleEnvelopes() {
		line := bytes.TrimSuffix(appendLine(nil, &e), []byte("\n"))
		ref, err := decodeJSON(line)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		got, ok := decodeFast(line)
		if ok {
			fast++
			if d := diff(got, ref); d != "" {
				t.Fatalf("%s:\n%s", line, d)
			}
		} else if keepsBytes(e.Data) && keepsBytes(e.Metadata) && e.CorrelationID == "" && e.Type == "t.x" {
			t.Fatalf("the fast decoder passed over a plain line: %s", line)
		}
		full, err := decodeLine(line)
		if err != nil || diff(full, ref) != "" {
			t.Fatalf("decodeLine: %v %s", err, diff(full, ref))
		}
		e.Hash = ref.Hash
		if d := diff(ref, e); d != "" {
			t.Fatalf("the line does not give the event back: %s\n%s", line, d)
		}
	}
	if fast < 30 {
		t.Fatalf("the fast decoder decoded only %d lines", fast)
	}
}

func diff(a, b domain.Envelope) string {
	if !a.Time.Equal(b.Time) || !bytes.Equal(a.Data, b.Data) || !bytes.Equal(a.Metadata, b.Metadata) {
		return fmt.Sprintf("time %v / %v, data %q / %q, metadata %q / %q", a.Time, b.Time, a.Data, b.Data, a.Metadata, b.Metadata)
	}
	a.Time, b.Time, a.Data, b.Data, a.Metadata, b.Metadata = time.Time{}, time.Time{}, nil, nil, nil, nil
	if fmt.Sprint(a) != fmt.Sprint(b) {
		return fmt.Sprintf("%+v\n%+v", a, b)
	}
	return ""
}

// FuzzDecodeLine: whatever the bytes, the fast decoder either passes or
// answers what encoding/json answers.
func FuzzDecodeLine(f *testing.F) {
	for _, e := range sampleEnvelopes()[:40] {
		f.Add(bytes.TrimSuffix(appendLine(nil, &e), []byte("\n")))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := decodeFast(b)
		if !ok {
			return
		}
		ref, err := decodeJSON(b)
		if err != nil {
			t.Fatalf("fast decoded %q, encoding/json refuses it: %v", b, err)
		}
		if d := diff(got, ref); d != "" {
			t.Fatalf("%q:\n%s", b, d)
		}
	})
}
