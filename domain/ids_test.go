package domain

import (
	"bytes"
	"testing"

	"github.com/google/uuid"
)

func TestLocalEventID(t *testing.T) {
	id := uuid.MustParse("0f248a98-9eb9-5b0d-a824-3dba1953c756")
	v7 := uuid.Must(uuid.NewV7())
	got := LocalEventID(id, ExecutionStream(v7.String()))
	if !bytes.Equal(got[:6], v7[:6]) {
		t.Errorf("prefix %x, want the execution's timestamp %x", got[:6], v7[:6])
	}
	if got.Version() != 8 || got.Variant() != uuid.RFC4122 {
		t.Errorf("version %d variant %v, want 8 and RFC 4122", got.Version(), got.Variant())
	}
	if got[6]&0x0f != id[6]&0x0f || !bytes.Equal(got[7:], id[7:]) {
		t.Errorf("%s lost bits of %s", got, id)
	}
	if again := LocalEventID(id, ExecutionStream(v7.String())); again != got {
		t.Errorf("not deterministic: %s then %s", got, again)
	}
	upper := LocalEventID(id, ExecutionStream("019AA3F2-7C10-7D2E-9C4B-5B1E2F3A4D5C"))
	if upper.String()[:13] != "019aa3f2-7c10" {
		t.Errorf("upper-case id: %s", upper)
	}
	for _, stream := range []string{
		ExecutionStream(uuid.NewString()),                      // v4
		ExecutionStream(uuid.NewSHA1(childNS, nil).String()),   // v5 (children, idempotency keys)
		ExecutionStream("x"),                                   // tests' short ids
		ExecutionStream("019aa3f2-7c10-7d2e-9c4b-5b1e2f3a4d5"), // one short
		ExecutionStream("019aa3f2x7c10-7d2e-9c4b-5b1e2f3a4d5c"),
		ExecutionStream("019aa3g2-7c10-7d2e-9c4b-5b1e2f3a4d5c"),
		QueueStream(v7.String()),
		WorkerStream(v7.String()),
		"",
	} {
		if got := LocalEventID(id, stream); got != id {
			t.Errorf("LocalEventID(%s, %q) = %s, want it unchanged", id, stream, got)
		}
	}
}

func TestDeriveIDIsNewSHA1(t *testing.T) {
	space := uuid.New()
	for n := range 400 {
		name := bytes.Repeat([]byte{byte(n)}, n)
		if got, want := DeriveID(space, name), uuid.NewSHA1(space, name); got != want {
			t.Fatalf("DeriveID of %d bytes = %s, want %s", n, got, want)
		}
	}
}

func BenchmarkDeriveID(b *testing.B) {
	name := []byte("local-1/execution-019aa3f2-7c10-7d2e-9c4b-5b1e2f3a4d5c/3/execution.succeeded")
	b.ReportAllocs()
	for b.Loop() {
		DeriveID(namespaceForBench, name)
	}
}

var namespaceForBench = uuid.MustParse("6a0b5a8e-2f4e-4b7e-9a53-3c1f3f1f7a11")
