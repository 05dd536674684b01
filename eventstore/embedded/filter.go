package embedded

// bloom is a blocked Bloom filter over 64-bit hashes: each key sets
// bloomProbes bits of one 512-bit block (one cache line), chosen by the
// hash. Of the keys not in it, about 1 % are reported present at 10 bits
// per key, 0.4 % at 12 and 0.1 % at 16. The caller hashes its keys; the
// filter never says a key it holds is absent. It is filled before it is shared and only read after.
type bloom struct {
	words  []uint64
	blocks uint64
}

const (
	bloomProbes = 7
	// idBloomBits and nameBloomBits are the bits per key of a level's
	// filters of event ids and of stream names. Each new event's id, and
	// each new stream's name, is looked up in every level, and a false
	// positive costs a read of the level file: the names' filter (a
	// stream per several events) buys its fewer false positives cheaply;
	// the ids' filter keeps the sealed part near 2 bytes an event.
	idBloomBits   = 10
	nameBloomBits = 16
)

// newBloom returns an empty filter sized for n keys at bits bits each.
func newBloom(n, bits int) bloom {
	blocks := uint64(max(1, (n*bits+511)/512))
	return bloom{words: make([]uint64, 8*blocks), blocks: blocks}
}

// block returns the 8 words of h's block.
func (b *bloom) block(h uint64) []uint64 {
	i := (h >> 32) * b.blocks >> 32
	return b.words[8*i : 8*i+8 : 8*i+8]
}

// add sets h's bits.
func (b *bloom) add(h uint64) {
	blk := b.block(h)
	x := h
	for range bloomProbes {
		x = x*0x9e3779b97f4a7c15 + 0x632be59bd9b4e019
		bit := x >> 55 // 0..511
		blk[bit>>6] |= 1 << (bit & 63)
	}
}

// has reports whether h may have been added.
func (b *bloom) has(h uint64) bool {
	if b.blocks == 0 {
		return false
	}
	blk := b.block(h)
	x := h
	for range bloomProbes {
		x = x*0x9e3779b97f4a7c15 + 0x632be59bd9b4e019
		bit := x >> 55
		if blk[bit>>6]&(1<<(bit&63)) == 0 {
			return false
		}
	}
	return true
}

// bytes is the filter's size in memory.
func (b *bloom) bytes() int { return 8 * len(b.words) }
