package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/ethereum/go-ethereum/common"

	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/txm"
)

// contradictions remembers the outcomes a process has already reported as
// contradicted, so that each is reported once per process, not every
// invocation.
type contradictions struct {
	mu   sync.Mutex
	seen map[string]bool
}

// first reports whether tx id is reported for the first time, and keeps
// only the ids still listed (keep) for the next time.
func (c *contradictions) first(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen = map[string]bool{}
	}
	if c.seen[id] {
		return false
	}
	c.seen[id] = true
	return true
}

func (c *contradictions) keep(ids map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.seen {
		if !ids[id] {
			delete(c.seen, id)
		}
	}
}

// CheckOutcomes looks again at the outcomes the sweep decided without a
// receipt, FAILED_FINAL `nonce_consumed_externally` within the reorg
// watch: should one of their attempts be mined on the canonical chain after
// all, the outcome was wrong and its caller may have paid again. That is a
// bug, reported loudly (an error log line, outcome_contradicted_total, an
// alert) and never corrected silently: the outcome was published, and an
// operator must decide with the caller. It returns the contradicted ones.
func (s *SweepFinality) CheckOutcomes(ctx context.Context) ([]txm.Mined, error) {
	ended, err := s.store.ConsumedSince(ctx, s.cfg.ReorgWatch)
	if err != nil {
		return nil, err
	}
	listed := make(map[string]bool, len(ended))
	byChain := map[uint64][]txm.Tracked{}
	for _, t := range ended {
		listed[t.Tx.ID] = true
		byChain[t.Tx.ChainID] = append(byChain[t.Tx.ChainID], t)
	}
	s.reported.keep(listed)
	var out []txm.Mined
	var errs []error
	for id, txs := range byChain {
		chain, ok := s.chains[id]
		if !ok {
			continue
		}
		mined, err := minedOnChain(ctx, chain, txs)
		if err != nil {
			errs = append(errs, fmt.Errorf("chain %d: %w", id, err))
			continue
		}
		for _, m := range mined {
			out = append(out, m)
			if !s.reported.first(m.TxID) {
				continue
			}
			s.metrics.OutcomeContradicted(ctx, txm.SubStateNonceConsumedExternally)
			s.log.ErrorContext(ctx, "a FAILED_FINAL outcome is contradicted by the chain: an attempt of the transaction is mined",
				slog.String(logging.KeyTxID, m.TxID), slog.String("sub_state", txm.SubStateNonceConsumedExternally),
				slog.Int("attempt", m.AttemptNo), slog.String("hash", m.Receipt.TxHash.Hex()),
				slog.Uint64("block", m.Receipt.BlockNumber), slog.String("block_hash", m.Receipt.BlockHash.Hex()))
		}
	}
	return out, errors.Join(errs...)
}

// minedOnChain returns, for those of txs one of whose attempts has a
// receipt in a block that is canonical on the node that answered, that
// receipt.
func minedOnChain(ctx context.Context, chain txm.Chain, txs []txm.Tracked) ([]txm.Mined, error) {
	var hashes []common.Hash
	for _, t := range txs {
		for _, a := range t.Attempts {
			hashes = append(hashes, a.Hash)
		}
	}
	if len(hashes) == 0 {
		return nil, nil
	}
	receipts, err := chain.Receipts(ctx, hashes)
	if err != nil {
		return nil, fmt.Errorf("receipts: %w", err)
	}
	var found []txm.Mined
	var heights []uint64
	k := 0
	for _, t := range txs {
		for _, a := range t.Attempts {
			if r := receipts[k]; r != nil {
				found = append(found, txm.Mined{TxID: t.Tx.ID, AttemptNo: a.No, Receipt: *r})
				heights = append(heights, r.BlockNumber)
			}
			k++
		}
	}
	if len(found) == 0 {
		return nil, nil
	}
	blocks, _, err := chain.Blocks(ctx, heights, nil)
	if err != nil {
		return nil, fmt.Errorf("blocks: %w", err)
	}
	var out []txm.Mined
	for i, m := range found {
		if b := blocks[i]; b != nil && b.Hash == m.Receipt.BlockHash {
			out = append(out, m)
		}
	}
	return out, nil
}
