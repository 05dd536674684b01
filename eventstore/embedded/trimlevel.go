package embedded

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"path/filepath"

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
	// Pass 1: each stream's events below first, and how many streams keep
	// events.
	below := make([]uint64, old.m)
	kept := 0
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
			if below[i] < e.count {
				kept++
			}
		}
	}

	// Pass 2: the file.
	ns := &sealed{first: first, firstOff: firstOff, n: old.n, end: old.end, ids: newBloom(int(n), idBloomBits), names: newBloom(kept, nameBloomBits)}
	w, err := createLevel(fsys, path, ns)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			w.close()
		}
	}()
	var b []byte
	if _, err := io.Copy(w, section(sealedHeaderSize+8*int64(first-old.first), 8*int64(n))); err != nil {
		return nil, err
	}
	// Ids of the positions left, still sorted.
	w.beginIDs()
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
		w.addID(&id)
		k++
		if _, err := w.Write(ent[:]); err != nil {
			return nil, err
		}
	}
	if k != n {
		return nil, fmt.Errorf("%w: %d ids at or after position %d, want %d", errBadSealed, k, first, n)
	}
	// Streams with events left, and their lists.
	w.beginStreams()
	streams := section(old.streamsOff, old.listsOff-old.streamsOff)
	eb := make([]byte, 256+streamFixed)
	var e streamEntry
	idx := uint64(0)
	for i := range old.m {
		if err := readStreamEntry(streams, &e, eb); err != nil {
			return nil, err
		}
		c := e.count - below[i]
		if c == 0 {
			continue
		}
		w.addStream(e.name, 0)
		if _, err := w.Write(appendStreamEntry(b[:0], e.name, c, idx, e.base+below[i])); err != nil {
			return nil, err
		}
		idx += c
	}
	w.beginLists()
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
	return w.finish(doSync)
}
