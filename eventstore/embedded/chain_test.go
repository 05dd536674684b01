package embedded

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// requireChain fails unless every event of evs carries the hash that
// eventstore.NextHash gives from the zero hash before position 0.
func requireChain(t testing.TB, what string, evs []domain.Envelope) {
	t.Helper()
	var prev domain.Hash
	for i := range evs {
		want := eventstore.NextHash(prev, &evs[i])
		if evs[i].Hash != want {
			t.Fatalf("%s: position %d carries hash %s, the chain gives %s", what, evs[i].Position, evs[i].Hash, want)
		}
		prev = want
	}
}

// Every event read back, from the file or from the subscription's memory,
// before and after a reopen (sealed and scanned), carries its chain hash,
// and appends after a reopen continue the chain.
func TestEventsCarryTheChain(t *testing.T) {
	t.Parallel()
	for _, reopen := range []string{"close", "crash"} {
		t.Run(reopen, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			s := openT(t, dir, Options{NoSync: true})
			if !eventstore.KeepsChain(s) {
				t.Fatal("KeepsChain = false")
			}
			evs := writeMixed(t, s, 50)
			requireChain(t, "ReadAll", evs)
			var sub []domain.Envelope
			ctx := ctxT(t)
			err := s.Subscribe(ctx, 0, eventstore.Filter{}, func(b []domain.Envelope) error {
				sub = append(sub, b...)
				if len(sub) == len(evs) {
					return errDone
				}
				return nil
			})
			if !errors.Is(err, errDone) {
				t.Fatal(err)
			}
			requireEvents(t, "Subscribe", evs, sub)
			if reopen == "close" {
				requireClose(t, s)
			} else {
				crash(s)
			}
			s = openT(t, dir, Options{NoSync: true})
			requireEvents(t, "after reopen", evs, readAllT(t, s))
			mustAppend(t, s, "execution-1", eventstore.Any, richEvent(1000))
			all := readAllT(t, s)
			requireChain(t, "after an append past the reopen", all)
			one, err := s.ReadStream(ctx, "execution-1", 0, 1000)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range one {
				if e.Hash != all[e.Position].Hash {
					t.Fatalf("ReadStream: position %d carries %s, ReadAll %s", e.Position, e.Hash, all[e.Position].Hash)
				}
			}
		})
	}
}

var errDone = errors.New("done")

// fixCRC recomputes the checksum of the record at off in b.
func fixCRC(b []byte, off int64) {
	n := int64(binary.LittleEndian.Uint32(b[off:]))
	binary.LittleEndian.PutUint32(b[off+4:], recordCRC(b[off:off+4], b[off+prefixSize:off+prefixSize+n]))
}

// A record changed with its checksum made to match again (so only the chain
// can tell) makes Open fail with ErrCorrupt naming its position and offset,
// whether recovery scans the record or checks it against the sealed file,
// and whether the record is in the middle of the log or is the last one (a
// sound record is no torn write: it is never cut). Nothing changes on disk.
func TestOpenChecksTheChain(t *testing.T) {
	t.Parallel()
	tl := buildLog(t, 20)
	last := len(tl.events) - 1
	for _, p := range []int{0, 10, last} {
		for _, part := range []string{"data", "hash", "time"} {
			for _, mode := range []string{"scan", "sealed"} {
				t.Run(fmt.Sprintf("position %d/%s/%s", p, part, mode), func(t *testing.T) {
					t.Parallel()
					dir := copyDir(t, tl.dir)
					if mode == "scan" {
						if err := os.Remove(filepath.Join(dir, sealedName)); err != nil {
							t.Fatal(err)
						}
					}
					off := tl.offsets[p]
					b := append([]byte(nil), tl.log...)
					switch part {
					case "data": // the last byte of the record is data or metadata
						b[tl.offsets[p+1]-2] ^= 0x01
					case "hash":
						b[off+prefixSize+offHash+5] ^= 0x01
					case "time":
						b[off+prefixSize+offTime] ^= 0x01
					}
					fixCRC(b, off)
					if err := os.WriteFile(filepath.Join(dir, logName), b, 0o644); err != nil {
						t.Fatal(err)
					}
					before := dirState(t, dir)
					s, err := Open(dir, Options{})
					if err == nil {
						_ = s.Close()
					}
					for _, want := range []string{fmt.Sprintf("offset %d", off), fmt.Sprintf("position %d", p), "chain hash"} {
						if !errors.Is(err, eventstore.ErrCorrupt) || !strings.Contains(err.Error(), want) {
							t.Fatalf("Open = %v, want ErrCorrupt naming %q", err, want)
						}
					}
					after := dirState(t, dir)
					delete(after, lockName) // Open takes the lock before it looks at the log
					delete(before, lockName)
					if fmt.Sprint(after) != fmt.Sprint(before) {
						t.Fatal("a failed Open changed the directory")
					}
				})
			}
		}
	}
}
