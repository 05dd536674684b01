package embedded

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"path/filepath"
	"slices"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/eventstore/diskfs"
)

// A trim rewrites the level that holds the new start without the positions
// below it.

// writeTrimmedLevel writes the level l without its positions below first
// (whose record is at logical offset firstOff), as the level file of
// [first, l.n), opened for reading.
func (s *Store) writeTrimmedLevel(l *sealed, first uint64, firstOff int64) (*sealed, error) {
	name := levelName(first, l.n)
	path := filepath.Join(s.dir, name)
	nl, err := writeTrimmedSealed(s.fs, path+tmpSuffix, l, first, firstOff, !s.opts.NoSync)
	if err == nil {
		err = s.fs.Rename(path+tmpSuffix, path)
	}
	if err == nil {
		err = s.syncDir()
	}
	if err == nil {
		nl.f, err = s.fs.Open(path)
		nl.reads, nl.name = &s.lookups, name
	}
	if err != nil {
		return nil, fmt.Errorf("embedded: trim: writing %s: %w", name, err)
	}
	s.sealBytes.Add(uint64(nl.size))
	return nl, nil
}

// writeTrimmedSealed writes to path the level file of old's positions from
// first on (first inside old): their record offsets, ids, and the streams
// with events among them. It returns its in-memory state (without its
// file).
func writeTrimmedSealed(fsys diskfs.FS, path string, old *sealed, first uint64, firstOff int64, doSync bool) (_ *sealed, err error) {
	le := binary.LittleEndian
	section := func(off, n int64) *bufio.Reader {
		return bufio.NewReaderSize(io.NewSectionReader(old.f, off, n), 256<<10)
	}
	n := old.n - first
	if first <= old.first || n == 0 {
		return nil, fmt.Errorf("trimming level %s at %d: not inside it", old.name, first) // never happens
	}
	// Pass 1: each stream's events below first.
	below := make([]uint64, old.m)
	{
		streams := section(old.streamsOff, old.listsOff-old.streamsOff)
		lists := section(old.listsOff, 8*int64(old.events()))
		eb := make([]byte, 256+streamFixed)
		var e streamEntry
		var b [8]byte
		for i := range old.m {
			if err := readStreamEntry(streams, &e, eb); err != nil {
				return nil, err
			}
			for range e.count {
				if _, err := io.ReadFull(lists, b[:]); err != nil {
					return nil, err
				}
				if le.Uint64(b[:]) < first {
					below[i]++
				}
			}
		}
	}

	// Pass 2: the file.
	_ = fsys.Remove(path) // a new file, never one a reader may still have open
	f, err := fsys.Create(path)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = f.Close() // the write error is the one to report
		}
	}()
	ns := &sealed{first: first, firstOff: firstOff, n: old.n, end: old.end, ids: newBloom(int(n), idBloomBits)}
	w := &crcWriter{w: bufio.NewWriterSize(f, 1<<20)}
	var b []byte
	b = append(b, sealedMagic...)
	b = le.AppendUint32(b, sealedFormat)
	b = le.AppendUint32(b, 0)
	if _, err := w.Write(b); err != nil {
		return nil, err
	}
	if _, err := io.Copy(w, section(sealedHeaderSize+8*int64(first-old.first), 8*int64(n))); err != nil {
		return nil, err
	}
	// Ids of the positions left, still sorted.
	ns.idsOff = w.n
	ids := section(old.idsOff, idEntrySize*int64(old.events()))
	var ent [idEntrySize]byte
	k := uint64(0)
	for range old.events() {
		if _, err := io.ReadFull(ids, ent[:]); err != nil {
			return nil, err
		}
		if le.Uint64(ent[16:]) < first {
			continue
		}
		id := uuid.UUID(ent[:16])
		if k%fenceEvery == 0 {
			ns.idFence = append(ns.idFence, idPrefix(&id))
		}
		ns.ids.add(hashID(id))
		k++
		if _, err := w.Write(ent[:]); err != nil {
			return nil, err
		}
	}
	if k != n {
		return nil, fmt.Errorf("%w: %d ids at or after position %d, want %d", errBadSealed, k, first, n)
	}
	// Streams with events left, and their lists.
	ns.streamsOff = w.n
	streams := section(old.streamsOff, old.listsOff-old.streamsOff)
	eb := make([]byte, 256+streamFixed)
	var e streamEntry
	var names [][]byte
	idx := uint64(0)
	for i := range old.m {
		if err := readStreamEntry(streams, &e, eb); err != nil {
			return nil, err
		}
		c := e.count - below[i]
		if c == 0 {
			continue
		}
		if ns.m%nameFenceEvery == 0 {
			ns.nameFence = append(ns.nameFence, string(e.name))
			ns.nameOff = append(ns.nameOff, w.n)
		}
		names = append(names, slices.Clone(e.name))
		ns.m++
		if _, err := w.Write(appendStreamEntry(b[:0], e.name, c, idx, e.base+below[i])); err != nil {
			return nil, err
		}
		idx += c
	}
	ns.names = newBloom(len(names), nameBloomBits)
	for _, name := range names {
		ns.names.add(hashNameB(name))
	}
	ns.listsOff = w.n
	lists := section(old.listsOff, 8*int64(old.events()))
	streams = section(old.streamsOff, old.listsOff-old.streamsOff)
	var p [8]byte
	for range old.m {
		if err := readStreamEntry(streams, &e, eb); err != nil {
			return nil, err
		}
		for range e.count {
			if _, err := io.ReadFull(lists, p[:]); err != nil {
				return nil, err
			}
			if le.Uint64(p[:]) >= first {
				if _, err := w.Write(p[:]); err != nil {
					return nil, err
				}
			}
		}
	}
	ft := sealedFooter{first: first, firstOff: firstOff, n: old.n, end: old.end, m: ns.m, idsOff: ns.idsOff, streamsOff: ns.streamsOff, listsOff: ns.listsOff}
	if ns.size, err = w.finish(f, ft, b, doSync); err != nil {
		return nil, err
	}
	return ns, f.Close()
}
