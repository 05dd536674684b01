package embedded

import (
	"bufio"
	"bytes"
	"io"
	"slices"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/eventstore/diskfs"
)

// mergeLevels writes to path the level that indexes what the levels ls
// (contiguous, oldest first) do, reading each one's sections sequentially
// once per pass (k-way merges of their sorted ids and stream names). It
// returns the new level's in-memory state (without its file).
func mergeLevels(fsys diskfs.FS, path string, ls []*sealed, doSync bool) (_ *sealed, err error) {
	first, last := ls[0], ls[len(ls)-1]
	n := last.n - first.first
	streams := uint64(0)
	for _, l := range ls {
		streams += l.m
	}
	ns := &sealed{first: first.first, firstOff: first.firstOff, n: last.n, end: last.end,
		ids: newBloom(int(n), idBloomBits), names: newBloom(int(streams), nameBloomBits)}
	w, err := createLevel(fsys, path, ns)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			w.close()
		}
	}()
	section := func(l *sealed, off, n int64) *bufio.Reader {
		return bufio.NewReaderSize(io.NewSectionReader(l.f, off, n), 128<<10)
	}
	b := make([]byte, 0, 64)
	// Record offsets: one level after the other.
	for _, l := range ls {
		if _, err := io.Copy(w, section(l, sealedHeaderSize, 8*int64(l.events()))); err != nil {
			return nil, err
		}
	}
	// Ids: a k-way merge.
	w.beginIDs()
	type idHead struct {
		r    *bufio.Reader
		left uint64
		cur  [idEntrySize]byte
	}
	heads := make([]*idHead, 0, len(ls))
	advance := func(h *idHead) (bool, error) {
		if h.left == 0 {
			return false, nil
		}
		h.left--
		_, err := io.ReadFull(h.r, h.cur[:])
		return err == nil, err
	}
	for _, l := range ls {
		h := &idHead{r: section(l, l.idsOff, idEntrySize*int64(l.events())), left: l.events()}
		if ok, err := advance(h); err != nil {
			return nil, err
		} else if ok {
			heads = append(heads, h)
		}
	}
	for len(heads) > 0 {
		m := 0
		for j := 1; j < len(heads); j++ {
			if bytes.Compare(heads[j].cur[:16], heads[m].cur[:16]) < 0 {
				m = j
			}
		}
		h := heads[m]
		id := uuid.UUID(h.cur[:16])
		w.addID(&id)
		if _, err := w.Write(h.cur[:]); err != nil {
			return nil, err
		}
		if ok, err := advance(h); err != nil {
			return nil, err
		} else if !ok {
			heads = slices.Delete(heads, m, m+1)
		}
	}
	// Streams, then their positions lists (each stream's lists of the
	// levels one after the other: older levels hold lower positions).
	w.beginStreams()
	idx := uint64(0)
	err = mergeNames(ls, func(name []byte, counts, bases []uint64) error {
		c, base := uint64(0), uint64(0)
		for i, k := range counts {
			if c == 0 && k > 0 {
				base = bases[i] // the oldest level's: the stream's first version here
			}
			c += k
		}
		w.addStream(name, 0)
		_, err := w.Write(appendStreamEntry(b[:0], name, c, idx, base))
		idx += c
		return err
	})
	if err != nil {
		return nil, err
	}
	w.beginLists()
	lists := make([]*bufio.Reader, len(ls))
	for i, l := range ls {
		lists[i] = section(l, l.listsOff, 8*int64(l.events()))
	}
	err = mergeNames(ls, func(_ []byte, counts, _ []uint64) error {
		for i, k := range counts {
			if k > 0 {
				if _, err := io.CopyN(w, lists[i], 8*int64(k)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return w.finish(doSync)
}

// mergeNames calls emit for every stream name of the levels ls, in name
// order, with its count and base version in each level (0 where it has
// none), reading each level's streams section sequentially.
func mergeNames(ls []*sealed, emit func(name []byte, counts, bases []uint64) error) error {
	type nameHead struct {
		r    *bufio.Reader
		left uint64
		e    streamEntry
		buf  []byte
		name []byte
	}
	heads := make([]*nameHead, len(ls))
	next := func(h *nameHead) error {
		if h.left == 0 {
			h.name = nil
			return nil
		}
		h.left--
		if err := readStreamEntry(h.r, &h.e, h.buf); err != nil {
			return err
		}
		h.name = h.e.name
		return nil
	}
	for i, l := range ls {
		heads[i] = &nameHead{r: bufio.NewReaderSize(io.NewSectionReader(l.f, l.streamsOff, l.listsOff-l.streamsOff), 64<<10),
			left: l.m, buf: make([]byte, 256+streamFixed)}
		if err := next(heads[i]); err != nil {
			return err
		}
	}
	counts, bases := make([]uint64, len(ls)), make([]uint64, len(ls))
	var name []byte
	for {
		name = name[:0]
		found := false
		for _, h := range heads {
			if h.name != nil && (!found || bytes.Compare(h.name, name) < 0) {
				name = append(name[:0], h.name...)
				found = true
			}
		}
		if !found {
			return nil
		}
		for i, h := range heads {
			counts[i], bases[i] = 0, 0
			if h.name != nil && bytes.Equal(h.name, name) {
				counts[i], bases[i] = h.e.count, h.e.base
				if err := next(h); err != nil {
					return err
				}
			}
		}
		if err := emit(name, counts, bases); err != nil {
			return err
		}
	}
}
