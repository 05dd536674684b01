package embedded

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"io"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/eventstore/diskfs"
)

// Writing a level file from the hot part (a seal).

// hotPart is the committed hot positions [base, base+len(offsets)) a seal
// merges into the sealed file.
type hotPart struct {
	offsets []int64
	ids     []uuid.UUID
	streams []*stream
}

// idPos is an id (as two big-endian halves, which sort as the bytes do) and
// its position.
type idPos struct {
	hi, lo, pos uint64
}

func (a idPos) id() uuid.UUID {
	var id uuid.UUID
	binary.BigEndian.PutUint64(id[:8], a.hi)
	binary.BigEndian.PutUint64(id[8:], a.lo)
	return id
}

// hotStream is one stream's events in the hot part.
type hotStream struct {
	name      string
	positions []uint64
	base      uint64 // the version of its first event in the hot part
}

// sorted returns the hot part's ids and streams sorted (bounded by the hot
// part's size).
func (h *hotPart) sorted(base uint64) ([]idPos, []hotStream) {
	ids := make([]idPos, len(h.ids))
	for i, id := range h.ids {
		ids[i] = idPos{binary.BigEndian.Uint64(id[:8]), binary.BigEndian.Uint64(id[8:]), base + uint64(i)}
	}
	slices.SortFunc(ids, func(a, b idPos) int {
		if c := cmp.Compare(a.hi, b.hi); c != 0 {
			return c
		}
		return cmp.Compare(a.lo, b.lo)
	})
	index := make(map[*stream]int, len(h.streams)/4)
	var counts []int
	for _, st := range h.streams {
		j, ok := index[st]
		if !ok {
			j = len(counts)
			index[st] = j
			counts = append(counts, 0)
		}
		counts[j]++
	}
	backing := make([]uint64, len(h.streams))
	streams := make([]hotStream, len(counts))
	// A stream's versions below the hot part (sealed) change only when a
	// seal is installed, and seals (this one included) hold ckptMu.
	for st, j := range index {
		streams[j].name, streams[j].base = st.name, st.sealed
		streams[j].positions, backing = backing[:0:counts[j]], backing[counts[j]:]
	}
	for i, st := range h.streams {
		j := index[st]
		streams[j].positions = append(streams[j].positions, base+uint64(i))
	}
	slices.SortFunc(streams, func(a, b hotStream) int { return strings.Compare(a.name, b.name) })
	return ids, streams
}

// lessID reports whether the id in b sorts before a's.
func lessID(b []byte, a *idPos) bool {
	hi := binary.BigEndian.Uint64(b)
	return hi < a.hi || hi == a.hi && binary.BigEndian.Uint64(b[8:]) < a.lo
}

// writeSealedFile writes to path the sealed file of positions [0,
// base+len(hot)): old's sections merged with the hot part, read and written
// sequentially. It returns the new sealed part's in-memory state (without
// its file).
func writeSealedFile(fsys diskfs.FS, path string, old *sealed, base uint64, hot *hotPart, end int64, doSync bool) (_ *sealed, err error) {
	hotIDs, hotStreams := hot.sorted(base)
	n := base + uint64(len(hot.offsets))
	ns := &sealed{first: old.first, firstOff: old.firstOff, n: n, end: end, ids: newBloom(int(n-old.first), idBloomBits), names: newBloom(int(old.m)+len(hotStreams), nameBloomBits)}
	w, err := createLevel(fsys, path, ns)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			w.close()
		}
	}()
	le := binary.LittleEndian
	b := make([]byte, 0, 64<<10)
	flush := func(room int) error {
		if cap(b)-len(b) >= room {
			return nil
		}
		_, err := w.Write(b)
		b = b[:0]
		return err
	}
	section := func(off, n int64) *bufio.Reader {
		return bufio.NewReaderSize(io.NewSectionReader(old.f, off, n), 256<<10)
	}

	// Record offsets.
	if old.events() > 0 {
		if err := flush(cap(b)); err != nil {
			return nil, err
		}
		if _, err := io.Copy(w, section(sealedHeaderSize, 8*int64(old.events()))); err != nil {
			return nil, err
		}
	}
	for _, off := range hot.offsets {
		if err := flush(8); err != nil {
			return nil, err
		}
		b = le.AppendUint64(b, uint64(off))
	}
	// Sorted ids: the old ones merged with the hot ones.
	if err := flush(cap(b)); err != nil {
		return nil, err
	}
	w.beginIDs()
	var oldIDs *bufio.Reader
	if old.events() > 0 {
		oldIDs = section(old.idsOff, idEntrySize*int64(old.events()))
	}
	var cur [idEntrySize]byte
	haveOld, oldLeft := false, old.events()
	nextOld := func() error {
		if oldLeft == 0 {
			haveOld = false
			return nil
		}
		oldLeft--
		haveOld = true
		_, err := io.ReadFull(oldIDs, cur[:])
		return err
	}
	if err := nextOld(); err != nil {
		return nil, err
	}
	for range n - old.first {
		var id uuid.UUID
		var pos uint64
		if haveOld && (len(hotIDs) == 0 || lessID(cur[:16], &hotIDs[0])) {
			id, pos = uuid.UUID(cur[:16]), le.Uint64(cur[16:])
			if err := nextOld(); err != nil {
				return nil, err
			}
		} else {
			id, pos = hotIDs[0].id(), hotIDs[0].pos
			hotIDs = hotIDs[1:]
		}
		w.addID(&id)
		if err := flush(idEntrySize); err != nil {
			return nil, err
		}
		b = append(b, id[:]...)
		b = le.AppendUint64(b, pos)
	}
	// Streams, then their positions lists, in name order.
	if err := flush(cap(b)); err != nil {
		return nil, err
	}
	w.beginStreams()
	first := uint64(0)
	err = mergeStreams(old, hotStreams, func(name []byte, oldCount uint64, hotPos []uint64, base uint64) error {
		w.addStream(name, len(b))
		count := oldCount + uint64(len(hotPos))
		if err := flush(streamFixed + len(name)); err != nil {
			return err
		}
		b = appendStreamEntry(b, name, count, first, base)
		first += count
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := flush(cap(b)); err != nil {
		return nil, err
	}
	w.beginLists()
	var oldLists *bufio.Reader
	if old.events() > 0 {
		oldLists = section(old.listsOff, 8*int64(old.events()))
	}
	err = mergeStreams(old, hotStreams, func(name []byte, oldCount uint64, hotPos []uint64, _ uint64) error {
		// The old list, through b in pieces of at most its capacity (no
		// buffer allocated per stream).
		for left := 8 * int(oldCount); left > 0; {
			k := min(left, cap(b))
			if err := flush(k); err != nil {
				return err
			}
			n := len(b)
			b = b[:n+k]
			if _, err := io.ReadFull(oldLists, b[n:]); err != nil {
				return err
			}
			left -= k
		}
		for _, p := range hotPos {
			if err := flush(8); err != nil {
				return err
			}
			b = le.AppendUint64(b, p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := flush(cap(b)); err != nil {
		return nil, err
	}
	return w.finish(doSync)
}

// mergeStreams calls emit for every stream of old and of hot, in name
// order, with its old count and its hot positions. It reads old's streams
// section sequentially.
func mergeStreams(old *sealed, hot []hotStream, emit func(name []byte, oldCount uint64, hotPos []uint64, base uint64) error) error {
	var r *bufio.Reader
	if old.m > 0 {
		r = bufio.NewReaderSize(io.NewSectionReader(old.f, old.streamsOff, old.listsOff-old.streamsOff), 256<<10)
	}
	buf := make([]byte, 256+streamFixed)
	var e streamEntry
	left := old.m
	for left > 0 || len(hot) > 0 {
		if left == 0 {
			if err := emit([]byte(hot[0].name), 0, hot[0].positions, hot[0].base); err != nil {
				return err
			}
			hot = hot[1:]
			continue
		}
		if err := readStreamEntry(r, &e, buf); err != nil {
			return err
		}
		left--
		for len(hot) > 0 && compareName(e.name, hot[0].name) > 0 {
			if err := emit([]byte(hot[0].name), 0, hot[0].positions, hot[0].base); err != nil {
				return err
			}
			hot = hot[1:]
		}
		var hotPos []uint64
		if len(hot) > 0 && compareName(e.name, hot[0].name) == 0 {
			hotPos = hot[0].positions
			hot = hot[1:]
		}
		if err := emit(e.name, e.count, hotPos, e.base); err != nil {
			return err
		}
	}
	return nil
}
