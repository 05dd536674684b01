package embedded

import (
	"bufio"
	"encoding/binary"
	"hash/crc32"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/eventstore/diskfs"
)

// levelWriter is the one writer of the level file format (see sealed.go;
// sealedload.go reads it): a seal, a merge and a trim each create one and
// feed it the new level's sections in order. It writes the header, counts
// the bytes and keeps their CRC-32C, builds the level's in-memory state
// (section offsets, fences, filters) as the sections pass, and ends the
// file with its footer and CRC.
type levelWriter struct {
	f   diskfs.File
	w   *bufio.Writer
	crc uint32
	n   int64   // bytes written
	ns  *sealed // the new level (without its file)
	ids uint64  // ids written
}

// createLevel creates the level file path for ns, whose first, firstOff, n,
// end and filters (sized for its ids and streams) the caller has set, and
// writes its header. Any file at path is removed first: the level is a new
// file, never one a reader may still have open (see Trim). After an error
// from a later method, the caller calls close.
func createLevel(fsys diskfs.FS, path string, ns *sealed) (*levelWriter, error) {
	_ = fsys.Remove(path)
	f, err := fsys.Create(path)
	if err != nil {
		return nil, err
	}
	lw := &levelWriter{f: f, w: bufio.NewWriterSize(f, 1<<20), ns: ns}
	hdr := make([]byte, 0, sealedHeaderSize)
	hdr = append(hdr, sealedMagic...)
	hdr = binary.LittleEndian.AppendUint32(hdr, sealedFormat)
	hdr = binary.LittleEndian.AppendUint32(hdr, 0)
	if _, err := lw.Write(hdr); err != nil {
		_ = f.Close() // the write error is the one to report
		return nil, err
	}
	return lw, nil
}

// Write writes b into the current section.
func (lw *levelWriter) Write(b []byte) (int, error) {
	lw.crc = crc32.Update(lw.crc, castagnoli, b)
	lw.n += int64(len(b))
	return lw.w.Write(b)
}

// beginIDs starts the sorted ids section (after the record offsets).
func (lw *levelWriter) beginIDs() { lw.ns.idsOff = lw.n }

// addID enters the id of the next sorted id entry, which the caller
// writes, into the level's fences and filter.
func (lw *levelWriter) addID(id *uuid.UUID) {
	if lw.ids%fenceEvery == 0 {
		lw.ns.idFence = append(lw.ns.idFence, idPrefix(id))
	}
	lw.ns.ids.add(hashID(*id))
	lw.ids++
}

// beginStreams starts the stream entries section.
func (lw *levelWriter) beginStreams() { lw.ns.streamsOff = lw.n }

// addStream enters the name of the next stream entry, which the caller
// writes after pending bytes it has not yet passed to Write, into the
// level's fences and filter.
func (lw *levelWriter) addStream(name []byte, pending int) {
	ns := lw.ns
	if ns.m%nameFenceEvery == 0 {
		ns.nameFence = append(ns.nameFence, string(name))
		ns.nameOff = append(ns.nameOff, lw.n+int64(pending))
	}
	ns.names.add(hashNameB(name))
	ns.m++
}

// beginLists starts the positions lists section.
func (lw *levelWriter) beginLists() { lw.ns.listsOff = lw.n }

// finish ends the file: its footer, the CRC-32C of everything before, the
// buffer flushed, with doSync the file synced, and the file closed. It
// returns the new level's in-memory state (without its file).
func (lw *levelWriter) finish(doSync bool) (*sealed, error) {
	ns := lw.ns
	ft := sealedFooter{first: ns.first, firstOff: ns.firstOff, n: ns.n, end: ns.end, m: ns.m, idsOff: ns.idsOff, streamsOff: ns.streamsOff, listsOff: ns.listsOff}
	if _, err := lw.Write(ft.append(make([]byte, 0, 64))); err != nil {
		return nil, err
	}
	if _, err := lw.w.Write(binary.LittleEndian.AppendUint32(nil, lw.crc)); err != nil {
		return nil, err
	}
	if err := lw.w.Flush(); err != nil {
		return nil, err
	}
	if doSync {
		if err := lw.f.Sync(); err != nil {
			return nil, err
		}
	}
	ns.size = lw.n + sealedTrailer
	return ns, lw.f.Close()
}

// close closes the file after a failed write (the write error is the one
// to report).
func (lw *levelWriter) close() { _ = lw.f.Close() }
