package embedded

// bloom is a blocked Bloom filter over 64-bit hashes: each key sets
// bloomProbes bits of one 512-bit block (one cache line), chosen by the
// hash. At bloomBits bits per key about 1 to 2 % of the keys not in it are
// reported present. The caller hashes its keys; the filter never says a key
// it holds is absent. It is filled before it is shared and only read after.
type bloom struct {
	words  []uint64
	blocks uint64
}

const (
	bloomBits   = 10 // bits per key
	bloomProbes = 7
)

// newBloom returns an empty filter sized for n keys.
func newBloom(n int) bloom {
	blocks := uint64(max(1, (n*bloomBits+511)/512))
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
