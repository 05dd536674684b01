package embedded

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/diskfs"
)

// TestLoadSealedSurvivesMutations: 2,000 copies of a real sealed file with
// one to four random bytes changed and the checksum made right again, so
// that the structure checks must catch them: each load fails or gives a
// sealed part whose look-ups answer (see exerciseSealed).
func TestLoadSealedSurvivesMutations(t *testing.T) {
	t.Parallel()
	real := sealedFileForTest(t)
	r := rand.New(rand.NewPCG(1, 2))
	refused := 0
	for range 2000 {
		b := append([]byte(nil), real...)
		for range 1 + r.IntN(4) {
			b[r.IntN(len(b))] = byte(r.IntN(256))
		}
		if !exerciseSealed(t, b) {
			refused++
		}
	}
	// Most changed bytes break the structure (counts, offsets, order):
	// the checks behind the checksum must refuse them.
	if refused < 1000 {
		t.Fatalf("only %d of 2,000 damaged sealed files were refused", refused)
	}
}

// sealedFileForTest returns the sealed file of a small log (40 events on 7
// streams).
func sealedFileForTest(t testing.TB) []byte {
	dir := t.TempDir()
	s, err := Open(dir, Options{NoSync: true, HotEvents: -1}) // one level file
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		if _, err := s.Append(context.Background(), fmt.Sprintf("execution-%d", i%7), eventstore.Any, ev("test.e", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(onlyLevel(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// exerciseSealed writes b as a sealed file with a correct checksum, loads
// it, and, if it loads, looks things up in it: nothing may panic. It
// reports whether the file loaded.
func exerciseSealed(t *testing.T, b []byte) bool {
	if len(b) >= sealedTrailer {
		b = append([]byte(nil), b...)
		binary.LittleEndian.PutUint32(b[len(b)-sealedTrailer:], crc32.Checksum(b[:len(b)-sealedTrailer], castagnoli))
	}
	path := filepath.Join(t.TempDir(), sealedName)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	sl, err := loadSealed(diskfs.OS{}, path, 1<<40)
	if err != nil || sl == nil {
		return false
	}
	defer sl.f.Close()
	for i := range 8 {
		_, _, _ = sl.findStream(fmt.Sprintf("execution-%d", i))
		_, _, _ = sl.findID(uuid.New())
	}
	if st, ok, err := sl.findStream("execution-0"); ok && err == nil {
		_, _, _ = sl.versionOf(st, 0)
	}
	out := make([]int64, min(sl.n, 8)+1)
	_ = sl.offsets(0, out, make([]byte, 8*len(out)))
	return true
}

// FuzzLoadSealed: whatever the sealed file holds, loadSealed returns an
// error or a sealed part whose look-ups answer without panicking. The
// fuzzer's bytes get a correct checksum before the load, so that the
// structure checks behind it are what is fuzzed, not only the checksum.
func FuzzLoadSealed(f *testing.F) {
	real := sealedFileForTest(f)
	f.Add(real)
	f.Add(real[:len(real)/2])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) { exerciseSealed(t, b) })
}
