package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"

	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/txm"
)

// CheckReceipts is the Receipt function's use case. It asks the chain once
// for the signer's latest nonce: every TRACKING transaction below it is
// mined by one of its attempts, so only those are loaded and looked up, all
// their attempts' receipts in batched calls, and what was found is written
// as MINED under the signer's chain lease, fenced.
type CheckReceipts struct {
	store   txm.ReceiptStore
	leases  txm.LeaseStore
	chains  map[uint64]txm.Chain
	relay   *Relay
	cfg     config.Receipts
	metrics txm.Recorder
	log     *slog.Logger
	running coalescer[txm.LeaseKey] // one check per signer at a time in this process
	heads   *heads                  // the chains' heads, shared by the checks that wait for a block
}

// NewCheckReceipts returns the use case. relay may be nil.
func NewCheckReceipts(store txm.ReceiptStore, leases txm.LeaseStore, chains map[uint64]txm.Chain, relay *Relay,
	cfg config.Receipts, m txm.Recorder, log *slog.Logger) (*CheckReceipts, error) {
	if store == nil || leases == nil || log == nil {
		return nil, errors.New("new check receipts: store, leases and logger are required")
	}
	return &CheckReceipts{store: store, leases: leases, chains: chains, relay: relay, cfg: cfg, metrics: recorderOr(m), log: log,
		heads: newHeads(headPoll(cfg.FinalityInterval))}, nil
}

// Execute checks one signer. While some broadcast transaction has no
// receipt it follows the chain's head for up to ReceiptWait, checking again
// each time the head moves (a receipt can only appear with a block), and
// then returns ErrNotMined (retry); it returns an error on RPC failure. Its
// spans (children of ctx's): the lease, "receipt.lookup" (the chain's
// latest nonce and the receipts) and "receipt.persist" (MINED, fenced).
// Returning ErrNotMined at once would leave the next look to the prompt's
// retry backoff (1 s doubling on Pub/Sub in terraform), writing a receipt
// up to a backoff after its block.
//
// A check of a signer that is already being checked in this process returns
// at once (0, nil): the running one goes round once more.
func (c *CheckReceipts) Execute(ctx context.Context, chainID uint64, signer common.Address) (int, error) {
	total := 0
	until := time.Now().Add(c.cfg.ReceiptWait)
	_, err := c.running.do(txm.LeaseKey{ChainID: chainID, Signer: signer, Scope: txm.ScopeChain}, func() (bool, error) {
		for {
			// The head before the look: a block that comes during it is
			// looked at again.
			head, herr := c.head(ctx, chainID)
			n, err := c.check(ctx, chainID, signer)
			total += n
			if !errors.Is(err, ErrNotMined) || herr != nil || !time.Now().Before(until) {
				return false, err
			}
			wctx, cancel := context.WithDeadline(ctx, until)
			_, werr := c.heads.after(wctx, chainID, c.chains[chainID], head.Number)
			cancel()
			if werr != nil {
				return false, err // the wait is over: the prompt's retry looks again
			}
		}
	})
	return total, err
}

// head is chainID's head as this process last asked it (within a poll).
func (c *CheckReceipts) head(ctx context.Context, chainID uint64) (txm.Header, error) {
	chain, ok := c.chains[chainID]
	if !ok {
		return txm.Header{}, fmt.Errorf("check receipts: chain %d: %w", chainID, ErrNotServed)
	}
	return c.heads.head(ctx, chainID, chain)
}

// check is one round of Execute. The lookups are reads and need no lease:
// only the write of what was found is made under the signer's chain lease
// (fenced, and guarded by state, so a transaction that another check
// marked meanwhile, or that left TRACKING, is left alone). A check that
// finds nothing mined, as most do between blocks, never takes the lease:
// taking it each time made a hot signer's drain hand the lease on for
// nothing.
func (c *CheckReceipts) check(ctx context.Context, chainID uint64, signer common.Address) (int, error) {
	chain, ok := c.chains[chainID]
	if !ok {
		return 0, fmt.Errorf("check receipts: chain %d: %w", chainID, ErrNotServed)
	}
	lctx, span := c.metrics.StartClientSpan(ctx, "receipt.lookup")
	latest, err := chain.LatestNonce(lctx, signer)
	if err != nil {
		span.End()
		c.metrics.ReceiptCheck(ctx, "rpc_error")
		return 0, fmt.Errorf("latest nonce: %w", err)
	}
	tracked, waiting, err := c.store.TrackingBelow(ctx, chainID, signer, latest, 0)
	if err != nil {
		span.End()
		return 0, err
	}
	found, err := findReceipts(lctx, chain, tracked, latest)
	span.End()
	if err != nil {
		c.metrics.ReceiptCheck(ctx, "rpc_error")
		return 0, err
	}
	mined := len(found) // by this check or, meanwhile, by another
	if len(found) > 0 {
		key := txm.LeaseKey{ChainID: chainID, Signer: signer, Scope: txm.ScopeChain}
		var ids []int64
		written := false
		// While another holds the lease (often another process's check
		// writing these same receipts), keep only what is still unmined.
		needed := func(ctx context.Context) (bool, error) {
			txIDs := make([]string, len(found))
			for i, m := range found {
				txIDs[i] = m.TxID
			}
			still, err := c.store.StillUnmined(ctx, txIDs)
			if err != nil {
				return false, err
			}
			found = slices.DeleteFunc(found, func(m txm.Mined) bool { return !still[m.TxID] })
			return len(found) > 0, nil
		}
		err := withChainLeaseIf(ctx, c.leases, key, c.cfg.InstanceID+"/receipt/"+uuid.NewString(), wantIt, needed, c.cfg.RenewEvery, c.log,
			func(l txm.Lease, _ *leaseKeeper) error {
				written = true
				pctx, span := c.metrics.StartSpan(ctx, "receipt.persist")
				var err error
				ids, err = c.store.MarkMined(pctx, l, found)
				span.End()
				if err != nil {
					return err
				}
				recordReceiptLatency(ctx, c.metrics, tracked, found)
				return nil
			})
		// Relayed with the lease let go, for whoever waits for it.
		c.relay.Publish(ctx, ids)
		if err != nil {
			return 0, err
		}
		if written {
			// The TxMined events are numbered now, not at the next finality
			// pass, and with the lease let go: numbering waits for the
			// feed's lock behind every other writer.
			numbered, nerr := c.store.NumberCompletions(ctx)
			if nerr != nil {
				c.log.WarnContext(ctx, "mined events recorded but not numbered yet; the next finality pass numbers them",
					slog.Any("error", nerr))
			}
			c.relay.Publish(ctx, numbered)
		}
		if written {
			for range found {
				c.metrics.ReceiptCheck(ctx, "mined")
			}
		}
	}
	// A transaction below the latest nonce without a receipt is waiting for
	// a lagging node, or another transaction took its nonce: the finality
	// sweep settles that at depth, and the prompt's retries are bounded by
	// its subscription.
	if pending := len(tracked) + waiting - mined; pending > 0 {
		c.metrics.ReceiptCheck(ctx, "not_mined")
		return mined, fmt.Errorf("%d of %d: %w", pending, len(tracked)+waiting, ErrNotMined)
	}
	return mined, nil
}

// findReceipts looks up the receipts of every attempt of the tracked
// transactions whose nonce is below latest (the only ones that can be
// mined), and returns one Mined per transaction found: in one batched call
// of a receipt each, or, for blockReceiptsFrom of them or more, through
// their blocks' receipts (findInBlocks).
func findReceipts(ctx context.Context, chain txm.Chain, tracked []txm.Tracked, latest uint64) ([]txm.Mined, error) {
	var below []txm.Tracked
	for _, t := range tracked {
		if t.Tx.Nonce < latest && len(t.Attempts) > 0 {
			below = append(below, t)
		}
	}
	if len(below) >= blockReceiptsFrom {
		out, rest, err := findInBlocks(ctx, chain, below)
		if err != nil || len(rest) == 0 {
			return out, err
		}
		more, err := findEach(ctx, chain, rest)
		return append(out, more...), err
	}
	return findEach(ctx, chain, below)
}

// findEach looks up the receipts of every attempt of tracked in one batched
// call of eth_getTransactionReceipt.
func findEach(ctx context.Context, chain txm.Chain, tracked []txm.Tracked) ([]txm.Mined, error) {
	type ref struct{ tx, attempt int }
	var hashes []common.Hash
	var refs []ref
	for i, t := range tracked {
		for j, a := range t.Attempts {
			hashes = append(hashes, a.Hash)
			refs = append(refs, ref{i, j})
		}
	}
	if len(hashes) == 0 {
		return nil, nil
	}
	receipts, err := chain.Receipts(ctx, hashes)
	if err != nil {
		return nil, fmt.Errorf("receipts: %w", err)
	}
	seen := map[int]bool{}
	var out []txm.Mined
	for k, r := range receipts {
		if r == nil || seen[refs[k].tx] {
			continue
		}
		seen[refs[k].tx] = true
		t := tracked[refs[k].tx]
		out = append(out, txm.Mined{TxID: t.Tx.ID, AttemptNo: t.Attempts[refs[k].attempt].No, Receipt: *r})
	}
	return out, nil
}

// blockReceiptsFrom is how many transactions a look-up must have before it
// goes through their blocks' receipts, and blockReceiptsMost how many
// blocks it reads so at most. A node finds a receipt by its transaction's
// hash by hashing the transactions of its block up to it (geth's
// findTxInBlockBody), so hundreds of a hot signer's receipts in a large
// block cost the node far more than the block's receipts, which come whole
// in one call.
const (
	blockReceiptsFrom = 32
	blockReceiptsMost = 8
)

// findInBlocks looks up the receipts of tracked (all below the chain's
// latest nonce) through their blocks: the receipts of the lowest and
// highest nonce give the blocks, since a signer's nonces are mined in order,
// and those blocks' receipts, read in one batched call, give the rest. It
// returns what it found and the transactions it did not, for findEach:
// all of them when the ends have no receipts (a node behind, a reorg),
// their blocks are too many, the node does not serve block receipts or
// the blocks are not those of the ends' receipts (a reorg between the
// calls); the few whose nonce another transaction took.
func findInBlocks(ctx context.Context, chain txm.Chain, tracked []txm.Tracked) ([]txm.Mined, []txm.Tracked, error) {
	lo := slices.MinFunc(tracked, func(a, b txm.Tracked) int { return cmp.Compare(a.Tx.Nonce, b.Tx.Nonce) })
	hi := slices.MaxFunc(tracked, func(a, b txm.Tracked) int { return cmp.Compare(a.Tx.Nonce, b.Tx.Nonce) })
	ends, err := findEach(ctx, chain, []txm.Tracked{lo, hi})
	if err != nil || len(ends) != 2 {
		return nil, tracked, err
	}
	first, last := ends[0].Receipt, ends[1].Receipt
	if last.BlockNumber < first.BlockNumber || last.BlockNumber-first.BlockNumber >= blockReceiptsMost {
		return nil, tracked, nil
	}
	numbers := make([]uint64, 0, last.BlockNumber-first.BlockNumber+1)
	for n := first.BlockNumber; n <= last.BlockNumber; n++ {
		numbers = append(numbers, n)
	}
	blocks, err := chain.BlockReceipts(ctx, numbers)
	switch {
	case errors.Is(err, txm.ErrNoBlockReceipts):
		return nil, tracked, nil
	case err != nil:
		return nil, nil, fmt.Errorf("block receipts: %w", err)
	}
	byHash := map[common.Hash]*txm.Receipt{}
	for _, rs := range blocks {
		for _, r := range rs {
			byHash[r.TxHash] = r
		}
	}
	for _, end := range []txm.Receipt{first, last} {
		if r := byHash[end.TxHash]; r == nil || r.BlockHash != end.BlockHash {
			return nil, tracked, nil // the blocks moved between the calls
		}
	}
	var out []txm.Mined
	var rest []txm.Tracked
	for _, t := range tracked {
		i := slices.IndexFunc(t.Attempts, func(a txm.Attempt) bool { return byHash[a.Hash] != nil })
		if i < 0 {
			rest = append(rest, t)
			continue
		}
		out = append(out, txm.Mined{TxID: t.Tx.ID, AttemptNo: t.Attempts[i].No, Receipt: *byHash[t.Attempts[i].Hash]})
	}
	return out, rest, nil
}

// recordReceiptLatency records, for each transaction found mined, the time
// since its first accepted broadcast.
func recordReceiptLatency(ctx context.Context, m txm.Recorder, tracked []txm.Tracked, found []txm.Mined) {
	if _, nop := m.(txm.NopRecorder); nop || len(found) == 0 {
		return
	}
	mined := make(map[string]bool, len(found))
	for _, f := range found {
		mined[f.TxID] = true
	}
	for _, t := range tracked {
		if !mined[t.Tx.ID] {
			continue
		}
		var first *time.Time
		for _, a := range t.Attempts {
			if a.BroadcastAt != nil && (first == nil || a.BroadcastAt.Before(*first)) {
				first = a.BroadcastAt
			}
		}
		if first != nil {
			m.Latency(ctx, txm.StageReceipt, time.Since(*first).Seconds())
		}
	}
}
