package embedded

// The sealed part of the log in levels. Each level is a sealed file (the
// format of sealed.go) that indexes a range of positions; the levels, oldest
// first, cover the sealed part [first, n) back to back. A seal writes one new
// level for the positions it seals (the hot part), never touching the older
// ones; a merge replaces the newest levels by one when fanIn of them are of
// one size tier, like the tiers of a log-structured merge tree. So each
// sealed event is rewritten about log_fanIn(sealed / HotEvents) times over
// the life of the log, not once per seal.

import (
	"fmt"
	"math/bits"
	"sort"
	"strconv"
	"strings"

	"github.com/google/uuid"
)

const (
	levelPrefix = sealedName + "-"
	// fanIn is how many levels of one size tier a merge makes one of.
	fanIn = 4
	// maxLevels bounds the levels: past it the newest fanIn are merged
	// whatever their sizes.
	maxLevels = 32
)

// levelName is the file name of the level covering [first, n).
func levelName(first, n uint64) string {
	return fmt.Sprintf("%s%0*d-%0*d", levelPrefix, segDigits, first, segDigits, n)
}

// parseLevelName returns the range of a level file name.
func parseLevelName(name string) (first, n uint64, ok bool) {
	rest, ok := strings.CutPrefix(name, levelPrefix)
	if !ok || len(rest) != 2*segDigits+1 || rest[segDigits] != '-' {
		return 0, 0, false
	}
	a, err1 := strconv.ParseUint(rest[:segDigits], 10, 64)
	b, err2 := strconv.ParseUint(rest[segDigits+1:], 10, 64)
	if err1 != nil || err2 != nil || a >= b {
		return 0, 0, false
	}
	return a, b, true
}

// index is the sealed part of the log: its levels, oldest first. It never
// changes once published; a seal, a merge or a trim replaces it whole.
type index struct {
	levels   []*sealed
	first, n uint64 // positions [first, n) are sealed
	firstOff int64  // logical offset of the record of position first
	end      int64  // logical offset just past the record of position n-1

	// On an index handed to the committer to install (pending): what it
	// comes from.
	trim   *trimInstall // a trim: the start that comes with it
	merged bool         // a merge: the same positions as the current index
	fresh  []*sealed    // its levels that are new (their files are closed if it is never installed)
}

func newIndex(first uint64, firstOff int64, levels []*sealed) *index {
	x := &index{levels: levels, first: first, n: first, firstOff: firstOff, end: firstOff}
	if len(levels) > 0 {
		last := levels[len(levels)-1]
		x.n, x.end = last.n, last.end
	}
	return x
}

// events is how many positions x covers.
func (x *index) events() uint64 { return x.n - x.first }

// with returns x with the level l added as its newest.
func (x *index) with(l *sealed) *index {
	return newIndex(x.first, x.firstOff, append(x.levels[:len(x.levels):len(x.levels)], l))
}

// memory is what x keeps in memory, in bytes (roughly).
func (x *index) memory() int {
	n := 0
	for _, l := range x.levels {
		n += l.memory()
	}
	return n
}

// closeFiles closes the levels' files.
func (x *index) closeFiles() error {
	var first error
	for _, l := range x.levels {
		if l.f != nil {
			if err := l.f.Close(); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// level returns the level that holds position p (first <= p < n).
func (x *index) level(p uint64) *sealed {
	i := sort.Search(len(x.levels), func(i int) bool { return x.levels[i].n > p })
	return x.levels[i]
}

// levelEnd returns the end of the level that holds position p: a range
// of sealed offsets is read from one level.
func (x *index) levelEnd(p uint64) uint64 { return x.level(p).n }

// offsets fills out with the record offsets of positions [from, from+k)
// and the end of the last (k+1 values), k = len(out)-1; the positions lie in
// one level (levelEnd).
func (x *index) offsets(from uint64, out []int64, buf []byte) error {
	return x.level(from).offsets(from, out, buf)
}

// findID returns the position of the sealed event whose id is id, asking
// the newest level first.
func (x *index) findID(id uuid.UUID) (uint64, bool, error) {
	h := hashID(id)
	for i := len(x.levels) - 1; i >= 0; i-- {
		if p, ok, err := x.levels[i].findIDHashed(id, h); ok || err != nil {
			return p, ok, err
		}
	}
	return 0, false, nil
}

// indexStream is what the sealed part holds about one stream: its
// events in each level that has some, oldest first. Versions are the
// stream's own (a level's entry says the version of its first event there).
type indexStream struct {
	first uint64 // the version of its first sealed event
	count uint64 // its versions up to its last sealed event
	parts []levelStream
}

type levelStream struct {
	l  *sealed
	ss sealedStream
}

// findStream looks a stream up in every level.
func (x *index) findStream(name string) (indexStream, bool, error) {
	var out indexStream
	h := hashName(name)
	for _, l := range x.levels {
		ss, ok, err := l.findStreamHashed(name, h)
		if err != nil {
			return indexStream{}, false, err
		}
		if ok {
			if len(out.parts) == 0 {
				out.first = ss.base
			}
			out.parts = append(out.parts, levelStream{l: l, ss: ss})
			out.count = ss.base + ss.count
		}
	}
	return out, len(out.parts) > 0, nil
}

// count returns the stream's versions up to its last sealed event, from
// the newest level that holds it (false: none does).
func (x *index) count(name string) (uint64, bool, error) {
	return x.countHashed(name, hashName(name))
}

// countHashed is count for a name whose hashName is h.
func (x *index) countHashed(name string, h uint64) (uint64, bool, error) {
	for i := len(x.levels) - 1; i >= 0; i-- {
		ss, ok, err := x.levels[i].findStreamHashed(name, h)
		if ok || err != nil {
			return ss.base + ss.count, ok, err
		}
	}
	return 0, false, nil
}

// positions returns the positions of the stream's versions [from, from+n),
// all sealed.
func (x *index) positions(st indexStream, from, n uint64) ([]uint64, error) {
	out := make([]uint64, 0, n)
	for _, p := range st.parts {
		lo, hi := max(from, p.ss.base), min(from+n, p.ss.base+p.ss.count)
		if lo >= hi {
			continue
		}
		ps, err := p.l.positions(p.ss, lo-p.ss.base, hi-lo)
		if err != nil {
			return nil, err
		}
		out = append(out, ps...)
	}
	if uint64(len(out)) != n {
		return nil, fmt.Errorf("embedded: the sealed part lists %d of versions %d to %d: %w", len(out), from, from+n, errBadSealed)
	}
	return out, nil
}

// versionOf returns the stream's version of its event at pos.
func (x *index) versionOf(st indexStream, pos uint64) (uint64, bool, error) {
	for _, p := range st.parts {
		if pos >= p.l.first && pos < p.l.n {
			v, ok, err := p.l.versionOf(p.ss, pos)
			return p.ss.base + v, ok, err
		}
	}
	return 0, false, nil
}

// tier is the size class of a level of n events: levels of one tier are
// within a factor fanIn of each other.
func tier(n, unit uint64) int {
	q := n / max(unit, 1)
	if q == 0 {
		return 0
	}
	return (bits.Len64(q) - 1) / bits.Len64(fanIn-1) // log_fanIn(q), fanIn a power of two
}

// toMerge returns how many of the newest levels of x a merge should make
// one: fanIn when they are of one tier (or when there are too many
// levels), else 0.
func (x *index) toMerge(unit uint64) int {
	k := len(x.levels)
	if k < fanIn {
		return 0
	}
	if k > maxLevels {
		return fanIn
	}
	t := tier(x.levels[k-1].events(), unit)
	for _, l := range x.levels[k-fanIn:] {
		if tier(l.events(), unit) != t {
			return 0
		}
	}
	return fanIn
}
