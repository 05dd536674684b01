package embedded

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"path/filepath"

	"github.com/google/uuid"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/diskfs"
)

// Loading a level file: its checks, and the fences and filters kept in memory.

// loadSealed opens the sealed file in dir and checks it against a log of
// logSize bytes: its checksum, that its sections add up, and that its ids and
// names are sorted. It builds the fences and filters from one sequential
// read. It does not look at the log. (nil, nil) means there is no file.
func loadSealed(fsys diskfs.FS, path string, logSize int64) (_ *sealed, err error) {
	f, err := fsys.Open(path)
	if err != nil {
		if diskfs.IsNotExist(err) {
			return nil, nil
		}
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = f.Close() // read-only; the load error is the one to report
		}
	}()
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{errBadSealed}, args...)...)
	}
	size, err := f.Size()
	if err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	hdr := make([]byte, 64)
	if size < sealedHeaderSize {
		return nil, bad("%d bytes", size)
	}
	if _, err := f.ReadAt(hdr[:sealedHeaderSize], 0); err != nil {
		return nil, err
	}
	if string(hdr[:8]) != sealedMagic || le.Uint32(hdr[8:]) != sealedFormat {
		return nil, bad("bad header (format 1, of earlier versions, is not read: the log is scanned once)")
	}
	tail := sealedFooterSize + sealedTrailer
	if size < sealedHeaderSize+int64(tail) {
		return nil, bad("%d bytes", size)
	}
	fb := make([]byte, tail)
	if _, err := f.ReadAt(fb, size-int64(tail)); err != nil {
		return nil, err
	}
	ft := sealedFooter{first: le.Uint64(fb), firstOff: int64(le.Uint64(fb[8:]))}
	fb = fb[16:]
	ft.n, ft.end, ft.m = le.Uint64(fb), int64(le.Uint64(fb[8:])), le.Uint64(fb[16:])
	ft.idsOff, ft.streamsOff, ft.listsOff = int64(le.Uint64(fb[24:])), int64(le.Uint64(fb[32:])), int64(le.Uint64(fb[40:]))
	if string(fb[48:56]) != sealedMagic {
		return nil, bad("no footer")
	}
	n := ft.n - ft.first // events covered
	if ft.first >= ft.n || n > uint64(size)/40 || ft.m == 0 || ft.m > n ||
		ft.idsOff != sealedHeaderSize+8*int64(n) || ft.streamsOff != ft.idsOff+idEntrySize*int64(n) ||
		ft.listsOff < ft.streamsOff+int64(ft.m)*(streamFixed+1) || ft.listsOff+8*int64(n)+int64(tail) != size {
		return nil, bad("sections do not add up (%d events, %d streams, %d bytes)", n, ft.m, size)
	}
	if ft.firstOff < headerSize || ft.end < ft.firstOff+int64(n)*minRecord || ft.end > logSize {
		return nil, bad("covers %d bytes of a log of %d", ft.end, logSize)
	}
	s := &sealed{f: f, name: filepath.Base(path), size: size, first: ft.first, n: ft.n, firstOff: ft.firstOff, end: ft.end, m: ft.m, idsOff: ft.idsOff, streamsOff: ft.streamsOff, listsOff: ft.listsOff,
		ids: newBloom(int(n), idBloomBits), names: newBloom(int(ft.m), nameBloomBits)}
	// The checksum is taken of what the buffered reader reads from the file,
	// in big chunks; everything up to the trailer is read before it is
	// compared.
	sum := &crcReader{r: io.NewSectionReader(f, 0, size-sealedTrailer)}
	cr := bufio.NewReaderSize(sum, 1<<20)
	eb := make([]byte, 256+streamFixed)
	if _, err := io.ReadFull(cr, hdr[:sealedHeaderSize]); err != nil {
		return nil, err
	}
	// Record offsets: increasing, each record at least minRecord long.
	prev := ft.firstOff - minRecord
	for i := range n {
		if _, err := io.ReadFull(cr, hdr[:8]); err != nil {
			return nil, err
		}
		off := int64(le.Uint64(hdr))
		if off < prev+minRecord || off > ft.end-minRecord || i == 0 && off != ft.firstOff {
			return nil, bad("record offset %d of position %d", off, ft.first+i)
		}
		prev = off
	}
	// Sorted ids.
	var last uuid.UUID
	for i := range n {
		if _, err := io.ReadFull(cr, hdr[:idEntrySize]); err != nil {
			return nil, err
		}
		id := uuid.UUID(hdr[:16])
		if pos := le.Uint64(hdr[16:]); pos < ft.first || pos >= ft.n || i > 0 && compareIDs(&last, &id) >= 0 {
			return nil, bad("id entry %d", i)
		}
		if i%fenceEvery == 0 {
			s.idFence = append(s.idFence, idPrefix(&id))
		}
		s.ids.add(hashID(id))
		last = id
	}
	// Streams.
	var e streamEntry
	var prevName []byte
	total := uint64(0)
	off := ft.streamsOff
	for i := range ft.m {
		if err := readStreamEntry(cr, &e, eb); err != nil {
			return nil, err
		}
		if eventstore.ValidateStream(string(e.name)) != nil || i > 0 && bytes.Compare(prevName, e.name) >= 0 ||
			e.count == 0 || e.first != total || e.count > n-total {
			return nil, bad("stream entry %d (%q)", i, e.name)
		}
		if i%nameFenceEvery == 0 {
			s.nameFence = append(s.nameFence, string(e.name))
			s.nameOff = append(s.nameOff, off)
		}
		s.names.add(hashNameB(e.name))
		prevName = append(prevName[:0], e.name...)
		total += e.count
		off += int64(streamFixed + len(e.name))
	}
	if total != n || off != ft.listsOff {
		return nil, bad("streams count %d events in %d bytes", total, off-ft.streamsOff)
	}
	// Positions lists and the footer: only the checksum.
	if _, err := io.Copy(io.Discard, cr); err != nil {
		return nil, err
	}
	if sum.n != size-sealedTrailer {
		return nil, bad("read %d of %d bytes", sum.n, size-sealedTrailer)
	}
	crc := sum.crc
	if _, err := f.ReadAt(fb[:4], size-sealedTrailer); err != nil {
		return nil, err
	}
	if crc != le.Uint32(fb) {
		return nil, bad("checksum mismatch")
	}
	return s, nil
}

// crcReader reads from r and keeps a count and a CRC-32C of what passed.
type crcReader struct {
	r   io.Reader
	crc uint32
	n   int64
}

func (c *crcReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.crc = crc32.Update(c.crc, castagnoli, b[:n])
	c.n += int64(n)
	return n, err
}
