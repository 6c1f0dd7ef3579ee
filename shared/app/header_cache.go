package app

import (
	"sync"

	"github.com/txfence/txfence/shared/txm"
)

// canonKeep is how many heights below a chain's head canonCache keeps: more
// than a pass looks at in `confirmations` mode (the depth and some lag) or
// in `finalized` mode (two epochs on Ethereum).
const canonKeep = 1024

// canonCache keeps, per chain, the headers that passes read (each pass's
// head, and the blocks it fetched), so that a pass asks the node only for
// the heights it cannot prove canonical from its own head: a header is
// canonical when the chain of parent hashes from the head down reaches it,
// each link matching the cached header's hash. Under load a node busy with
// broadcasts is slow to answer for many blocks and every confirmation of
// the pass waits for that call; with the cache the steady state asks for
// the head alone. A reorg breaks a link, and the heights below it are
// fetched again.
type canonCache struct {
	mu      sync.Mutex
	byChain map[uint64]map[uint64]txm.Header
}

// linked records head as chain id's and returns it with every cached
// header it proves canonical, by height.
func (c *canonCache) linked(id uint64, head txm.Header) map[uint64]*txm.Header {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byChain == nil {
		c.byChain = map[uint64]map[uint64]txm.Header{}
	}
	known := c.byChain[id]
	if known == nil {
		known = map[uint64]txm.Header{}
		c.byChain[id] = known
	}
	out := map[uint64]*txm.Header{head.Number: &head}
	for h := head; h.Number > 0; {
		parent, ok := known[h.Number-1]
		if !ok || parent.Hash != h.ParentHash {
			break
		}
		out[parent.Number] = &parent
		h = parent
	}
	known[head.Number] = head
	if len(known) > canonKeep {
		for n := range known {
			if n+canonKeep/2 < head.Number {
				delete(known, n)
			}
		}
	}
	return out
}

// remember caches headers fetched for chain id (nil ones, heights the node
// does not have, are left out). Whether they are canonical is proven again
// by linked each time they are used.
func (c *canonCache) remember(id uint64, hs []*txm.Header) {
	c.mu.Lock()
	defer c.mu.Unlock()
	known := c.byChain[id]
	if known == nil {
		return
	}
	for _, h := range hs {
		if h != nil {
			known[h.Number] = *h
		}
	}
}
