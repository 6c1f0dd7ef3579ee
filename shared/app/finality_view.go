package app

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/txm"
)

// chainView caches one pass's look at a chain, so that one pass sees one
// chain: the head and finalized block are read once, and each block height
// at most once. The pass's workers share it.
//
// A header is final only by what the node that gave it said in the same
// answer: each is kept with the block under tag (the head, or the
// finalized block) of that answer, so that a block read from a node behind
// or on another fork is never counted deep on the word of another node.
type chainView struct {
	chain     txm.Chain
	tag       string // "latest" or "finalized": the block a header's depth is counted from
	head      txm.Header
	finalized *txm.Header
	fetched   func([]*txm.Header) // remembers what load fetched for later passes
	// mode and confirmations are how the chain's transactions become final.
	mode          config.FinalityMode
	confirmations uint64

	mu      sync.Mutex // guards headers and under; held while missing ones are fetched
	headers map[uint64]*txm.Header
	under   map[uint64]uint64 // per height: the block under tag of the answer that gave its header
}

func (v *chainView) load(ctx context.Context, numbers []uint64) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	var missing []uint64
	asked := map[uint64]bool{}
	for _, n := range numbers {
		if _, ok := v.headers[n]; !ok && !asked[n] {
			asked[n] = true
			missing = append(missing, n)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	hs, tagged, err := v.chain.Blocks(ctx, missing, []string{v.tag})
	if err != nil {
		return fmt.Errorf("headers: %w", err)
	}
	for i, n := range missing {
		v.headers[n] = hs[i]
		if hs[i] != nil && tagged[0] != nil {
			v.under[n] = tagged[0].Number
		}
	}
	if v.fetched != nil {
		v.fetched(hs)
	}
	return nil
}

// depthFrom is the block under the view's tag that header n was read
// with; false when there is none (the node had no finalized block).
func (v *chainView) depthFrom(n uint64) (uint64, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	top, ok := v.under[n]
	return top, ok
}

// header is the canonical header at n: the head, one the cache proved
// from it, or one load fetched (nil: the node has no block there yet).
func (v *chainView) header(n uint64) *txm.Header {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.headers[n]
}

// view reads a chain's head (and finalized block) once for a pass, in one
// call, so that both come from one node.
func (s *SweepFinality) view(ctx context.Context, id uint64, chain txm.Chain) (*chainView, error) {
	v := &chainView{chain: chain, tag: "latest", fetched: func(hs []*txm.Header) { s.canon.remember(id, hs) }}
	v.mode, v.confirmations = s.cfg.For(id)
	tags := []string{"latest"}
	if v.mode == config.FinalityFinalized {
		v.tag = "finalized"
		tags = append(tags, "finalized")
	}
	_, tagged, err := chain.Blocks(ctx, nil, tags)
	switch {
	case err != nil:
		return nil, fmt.Errorf("head: %w", err)
	case tagged[0] == nil:
		return nil, errors.New("head: the node has no latest block")
	case len(tagged) > 1 && tagged[1] == nil:
		return nil, errors.New("finalized: the node has no finalized block")
	}
	v.head = *tagged[0]
	s.sawHead(id, v.head)
	v.headers = s.canon.linked(id, v.head)
	top := v.head.Number
	if len(tagged) > 1 {
		v.finalized = tagged[1]
		top = v.finalized.Number
	}
	v.under = make(map[uint64]uint64, len(v.headers))
	for n := range v.headers {
		v.under[n] = top
	}
	return v, nil
}

// blockHeights lists the heights of the blocks.
func blockHeights(lists ...[]txm.Header) []uint64 {
	var heights []uint64
	for _, l := range lists {
		for _, b := range l {
			heights = append(heights, b.Number)
		}
	}
	return heights
}

// receiptHeights lists the receipt blocks of MINED transactions.
func receiptHeights(mined []txm.Tracked) []uint64 {
	heights := make([]uint64, 0, len(mined))
	for _, m := range mined {
		heights = append(heights, m.Tx.Receipt.BlockNumber)
	}
	return heights
}

// isFinal reports whether the view's header at block is final by the
// answer it was read with: deep enough below that answer's head, or at or
// below its finalized block.
func (s *SweepFinality) isFinal(view *chainView, block uint64) bool {
	top, ok := view.depthFrom(block)
	if !ok || top < block {
		return false
	}
	if view.mode == config.FinalityFinalized {
		return true
	}
	return top-block+1 >= view.confirmations
}

// finalHeader is the highest block that is final in this pass's view,
// with its hash; false when there is none yet (or the node has not got
// it).
func (s *SweepFinality) finalHeader(ctx context.Context, view *chainView) (txm.Header, bool, error) {
	if view.mode == config.FinalityFinalized {
		if view.finalized == nil {
			return txm.Header{}, false, nil
		}
		return *view.finalized, true, nil
	}
	if view.head.Number+1 < view.confirmations {
		return txm.Header{}, false, nil
	}
	n := view.head.Number + 1 - view.confirmations
	if err := view.load(ctx, []uint64{n}); err != nil {
		s.metrics.ReceiptCheck(ctx, "rpc_error")
		return txm.Header{}, false, err
	}
	h := view.header(n)
	if h == nil {
		return txm.Header{}, false, nil
	}
	return *h, true, nil
}
