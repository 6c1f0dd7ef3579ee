package app

import (
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/txm"
)

// branch builds headers from..to whose hashes name the branch, each the
// parent of the next; below is the parent hash of the first.
func branch(name byte, from, to uint64, below common.Hash) []txm.Header {
	var hs []txm.Header
	parent := below
	for n := from; n <= to; n++ {
		h := txm.Header{Number: n, Hash: common.Hash{name, byte(n >> 8), byte(n)}, ParentHash: parent}
		hs = append(hs, h)
		parent = h.Hash
	}
	return hs
}

func heights(m map[uint64]*txm.Header) []uint64 {
	var out []uint64
	for n := range m {
		out = append(out, n)
	}
	return out
}

// TestCanonCache_ProvesOnlyWhatTheHeadReaches: a cached header is given to
// a pass only when the parent hashes from the pass's head reach it through
// cached headers; a replaced block stops the walk there, and a gap too.
func TestCanonCache_ProvesOnlyWhatTheHeadReaches(t *testing.T) {
	var c canonCache
	a := branch('a', 1, 10, common.Hash{})
	c.linked(1, a[4]) // head 5
	c.remember(1, []*txm.Header{&a[0], &a[1], &a[2], &a[3]})
	got := c.linked(1, a[5]) // head 6: links through 5 (the last head) down to 1
	assert.ElementsMatch(t, []uint64{1, 2, 3, 4, 5, 6}, heights(got))
	assert.Equal(t, a[2], *got[3])

	// A reorg from block 4: the new head's parents differ from 5 down to 4.
	b := branch('b', 4, 7, a[2].Hash)
	got = c.linked(1, b[3]) // head 7 of branch b; 6 cached is a's
	assert.ElementsMatch(t, []uint64{7}, heights(got), "a's block 6 is not b's 7's parent: nothing below is proven")
	c.remember(1, []*txm.Header{&b[0], &b[1], &b[2]}) // what the pass fetched
	got = c.linked(1, branch('b', 8, 8, b[3].Hash)[0])
	assert.ElementsMatch(t, []uint64{1, 2, 3, 4, 5, 6, 7, 8}, heights(got), "b's blocks link down to a's 3")
	assert.Equal(t, b[0].Hash, got[4].Hash)

	// Another chain id knows nothing of these.
	assert.ElementsMatch(t, []uint64{6}, heights(c.linked(2, a[5])))
}

// TestCanonCache_Bounded: the cache keeps what is near the head.
func TestCanonCache_Bounded(t *testing.T) {
	var c canonCache
	hs := branch('a', 1, 2*canonKeep+10, common.Hash{})
	for i := range hs {
		c.linked(1, hs[i])
	}
	require.LessOrEqual(t, len(c.byChain[1]), canonKeep+1)
	got := c.linked(1, hs[len(hs)-1])
	assert.GreaterOrEqual(t, len(got), canonKeep/2, "the heights near the head are still proven")
}
