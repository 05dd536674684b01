// Package archive keeps the part of the log that has left the live log
// (docs/archive.md): segment files of gzip-compressed JSON
// lines, one event per line in position order, each with an index file, in
// one directory. It writes segments crash-safely and idempotently (Write),
// finds an archived stream through the indexes (ReadStream), reads the
// archive and the live log as one history (History), and checks every
// segment against its index and the hash chain (Verify).
//
// Segments are readable with nothing of ours:
//
//	gzip -dc DIR/segment-*.jsonl.gz | jq .
package archive

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore/diskfs"
)

// ErrArchive marks an archive directory that is not consistent: a missing
// index or segment, a gap, an overlap, names that disagree with contents.
var ErrArchive = errors.New("archive inconsistent")

// Segment describes one archived segment.
type Segment struct {
	Name     string      // the segment file's name, segment-<first>-<last>.jsonl.gz
	First    uint64      // its first position
	Last     uint64      // its last position
	Count    uint64      // events in it (Last-First+1)
	Bytes    int64       // size of the segment file
	PrevHash domain.Hash // the chain hash before First
	LastHash domain.Hash // the chain hash of Last
	// FirstTime and LastTime are the log times of its first and last events
	// (zero for a segment written before they were recorded: unknown).
	FirstTime, LastTime time.Time
}

// Archive is an archive directory. Its methods are safe for concurrent use;
// one process writes a directory at a time (the archiver holds the
// executor's lease), others may read it.
type Archive struct {
	fs  diskfs.FS
	dir string

	wmu  sync.Mutex // serialises Write
	mu   sync.Mutex
	segs []*segment // in position order, dense
	cur  *cursor    // the last read's place, reused by the next read that continues it

	segEvents int // events per segment written; guarded by wmu

	lookups *lookupCache // the segments' filters and member tables, within a budget
}

// segment is a segment as an Archive keeps it in memory: its summary and
// its filter's probe count. The rest of its index header is read when
// needed (lookupCache, Verify), so that memory does not grow with the
// archive's length beyond a small summary per segment.
type segment struct {
	Segment
	filterK int

	vmu     sync.Mutex // serialises its verification
	checked bool       // verified (or found not to verify: bad)
	bad     error      // the *Mismatch it failed with
}

var (
	segmentName = regexp.MustCompile(`^segment-(\d{20})-(\d{20})\.jsonl\.gz$`)
	indexName   = regexp.MustCompile(`^segment-(\d{20})-(\d{20})\.index\.json\.gz$`)
)

func baseName(first, last uint64) string {
	return fmt.Sprintf("segment-%020d-%020d", first, last)
}

func segmentFile(first, last uint64) string { return baseName(first, last) + ".jsonl.gz" }
func indexFile(first, last uint64) string   { return baseName(first, last) + ".index.json.gz" }

// Open opens the archive in dir, creating the directory if it does not
// exist. It reads every index's header (not the streams lists, nor the
// segments) and checks that every segment has its index, that the names
// agree with the headers, and that the segments cover one range of
// positions with no gap and no overlap, each starting with the chain hash
// its predecessor ended with. A segment without its index after the last
// indexed one is a write that a crash interrupted: it does not count, and
// Write writes it again. Files of other names are ignored. A directory it
// creates is the owner's alone (diskfs.DirMode), and so is every file Write
// writes (diskfs.FileMode).
func Open(dir string) (*Archive, error) { return OpenFS(diskfs.OS{}, dir) }

// OpenFS is Open on the file system fsys (a simulated disk in power-loss
// tests).
func OpenFS(fsys diskfs.FS, dir string) (*Archive, error) {
	if err := fsys.MkdirAll(dir); err != nil {
		return nil, err
	}
	a := &Archive{fs: fsys, dir: dir, lookups: newLookupCache(DefaultFilterCacheBytes)}
	if err := a.Refresh(); err != nil {
		return nil, err
	}
	return a, nil
}

// SetFilterCacheBytes sets how many bytes of segments' look-up tables (their
// stream filters, mostly) the archive keeps in memory
// (DefaultFilterCacheBytes until then).
func (a *Archive) SetFilterCacheBytes(n int) { a.lookups.setBudget(n) }

// Dir returns the archive's directory.
func (a *Archive) Dir() string { return a.dir }

// Refresh reads the directory again, to see segments another process wrote
// since Open, with the checks of Open. It reads the headers of new segments
// only: a segment's files never change once written (Verify checks them
// against their hashes), so the headers it has read stay true, and a
// refresh costs a directory listing however long the archive is.
func (a *Archive) Refresh() error {
	a.mu.Lock()
	known := make(map[[2]uint64]*segment, len(a.segs))
	for _, s := range a.segs {
		known[[2]uint64{s.First, s.Last}] = s
	}
	a.mu.Unlock()
	segs, err := scan(a.fs, a.dir, known)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.segs = segs
	a.mu.Unlock()
	return nil
}

// readHeaders counts the index headers scan reads (tests).
var readHeaders atomic.Int64

// scan lists dir's segments; known holds segments whose headers were read
// already, by their first and last position.
func scan(fsys diskfs.FS, dir string, known map[[2]uint64]*segment) ([]*segment, error) {
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	type pair struct{ first, last uint64 }
	data := map[pair]bool{}
	var indexes []pair
	for _, name := range names {
		if m := segmentName.FindStringSubmatch(name); m != nil {
			data[pair{atou(m[1]), atou(m[2])}] = true
		} else if m := indexName.FindStringSubmatch(name); m != nil {
			indexes = append(indexes, pair{atou(m[1]), atou(m[2])})
		}
	}
	slices.SortFunc(indexes, func(x, y pair) int { return cmpU(x.first, y.first) })
	segs := make([]*segment, 0, len(indexes))
	for i, p := range indexes {
		if !data[p] {
			return nil, fmt.Errorf("%w: %s has an index but no segment file", ErrArchive, filepath.Join(dir, segmentFile(p.first, p.last)))
		}
		delete(data, p)
		name := segmentFile(p.first, p.last)
		seg, ok := known[[2]uint64{p.first, p.last}]
		if !ok {
			h, err := readHeader(fsys, filepath.Join(dir, indexFile(p.first, p.last)))
			if err != nil {
				return nil, fmt.Errorf("%w: %v", ErrArchive, err)
			}
			readHeaders.Add(1)
			switch {
			case h.First != p.first || h.Last != p.last || p.last < p.first:
				return nil, fmt.Errorf("%w: %s: its index says positions %d..%d", ErrArchive, name, h.First, h.Last)
			case h.Count != p.last-p.first+1:
				return nil, fmt.Errorf("%w: %s: its index counts %d events for %d positions", ErrArchive, name, h.Count, p.last-p.first+1)
			}
			seg = &segment{
				Segment: Segment{Name: name, First: h.First, Last: h.Last, Count: h.Count, Bytes: h.Bytes, PrevHash: h.PrevHash, LastHash: h.LastHash,
					FirstTime: h.FirstTime, LastTime: h.LastTime},
				filterK: h.FilterK,
			}
		}
		if i > 0 {
			prev := segs[i-1]
			switch {
			case p.first > prev.Last+1:
				return nil, fmt.Errorf("%w: gap: positions %d..%d are in no segment (between %s and %s)", ErrArchive, prev.Last+1, p.first-1, prev.Name, name)
			case p.first <= prev.Last:
				return nil, fmt.Errorf("%w: %s overlaps %s", ErrArchive, name, prev.Name)
			case seg.PrevHash != prev.LastHash:
				return nil, fmt.Errorf("%w: %s starts after chain hash %s, but %s ends with %s", ErrArchive, name, seg.PrevHash, prev.Name, prev.LastHash)
			}
		}
		segs = append(segs, seg)
	}
	for p := range data { // segments without an index
		if len(segs) == 0 || p.first > segs[len(segs)-1].Last {
			continue // an interrupted write: Write rewrites it
		}
		return nil, fmt.Errorf("%w: %s has no index", ErrArchive, filepath.Join(dir, segmentFile(p.first, p.last)))
	}
	return segs, nil
}

func atou(s string) uint64 { n, _ := strconv.ParseUint(s, 10, 64); return n }

func cmpU(x, y uint64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// Segments returns the archive's segments in position order.
func (a *Archive) Segments() []Segment {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]Segment, len(a.segs))
	for i, s := range a.segs {
		out[i] = s.Segment
	}
	return out
}

// First returns the archive's first position (0 if it is empty).
func (a *Archive) First() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.segs) == 0 {
		return 0
	}
	return a.segs[0].First
}

// End returns the position after the archive's last event: 0 if it is empty.
func (a *Archive) End() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return endOf(a.segs)
}

func endOf(segs []*segment) uint64 {
	if len(segs) == 0 {
		return 0
	}
	return segs[len(segs)-1].Last + 1
}

// EndHash returns the chain hash of the archive's last event: the hash the
// live log's start must continue (the zero Hash if the archive is empty).
func (a *Archive) EndHash() domain.Hash {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.segs) == 0 {
		return domain.Hash{}
	}
	return a.segs[len(a.segs)-1].LastHash
}

// PrevHash returns the chain hash of the event before pos, for pos from
// First to End: what an event at pos chains after.
func (a *Archive) PrevHash(ctx context.Context, pos uint64) (domain.Hash, error) {
	a.mu.Lock()
	segs := a.segs
	a.mu.Unlock()
	if len(segs) == 0 || pos < segs[0].First || pos > endOf(segs) {
		return domain.Hash{}, fmt.Errorf("archive: position %d is outside the archive (%d..%d)", pos, a.First(), endOf(segs))
	}
	if pos == endOf(segs) {
		return segs[len(segs)-1].LastHash, nil
	}
	s := find(segs, pos)
	if pos == s.First {
		return s.PrevHash, nil
	}
	evs, err := a.Read(ctx, pos-1, 1)
	if err != nil {
		return domain.Hash{}, err
	}
	if len(evs) != 1 {
		return domain.Hash{}, fmt.Errorf("%w: position %d not found in %s", ErrArchive, pos-1, s.Name)
	}
	return evs[0].Hash, nil
}

// find returns the segment holding pos (nil if none).
func find(segs []*segment, pos uint64) *segment {
	i, _ := slices.BinarySearchFunc(segs, pos, func(s *segment, p uint64) int {
		switch {
		case s.Last < p:
			return -1
		case s.First > p:
			return 1
		}
		return 0
	})
	if i < len(segs) && segs[i].First <= pos && pos <= segs[i].Last {
		return segs[i]
	}
	return nil
}

func (a *Archive) snapshot() []*segment {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.segs
}
