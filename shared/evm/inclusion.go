package evm

import (
	"context"
	"fmt"
	"math/big"
	"slices"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/txfence/txfence/shared/txm"
)

// PublicMempool implements txm.InclusionReader: true unless the options
// say NoPublicMempool.
func (c *Client) PublicMempool() bool { return !c.opts.NoPublicMempool }

// Inclusion implements txm.InclusionReader with one batch to one endpoint:
// eth_getTransactionByHash, whose answer is null for a transaction the
// node does not know, has no block for one waiting in its pool and a block
// for a mined one; and eth_feeHistory over the last InclusionBlocks
// blocks at InclusionPercentile, whose next base fee and median reward
// make the price.
//
// eth_getTransactionByHash rather than txpool_content or
// txpool_contentFrom: every client serves it and answers from its pool for
// a pending transaction (geth, erigon, reth, Nethermind, Besu), while the
// txpool namespace is geth's and reth's only and most providers do not
// expose it.
//
// An endpoint that does not answer eth_feeHistory (not served, or an
// error of its own) leaves Price nil rather than failing the read: the
// pool's answer stands on its own.
func (c *Client) Inclusion(ctx context.Context, hash common.Hash) (txm.Inclusion, error) {
	var (
		tx    *poolTx
		hist  *feeHistory
		elems []rpc.BatchElem
	)
	err := c.do(ctx, func(ctx context.Context, rc *rpc.Client) error {
		tx, hist = nil, nil
		elems = []rpc.BatchElem{
			{Method: "eth_getTransactionByHash", Args: []any{hash}, Result: &tx},
			{Method: "eth_feeHistory", Args: []any{hexutil.Uint64(c.opts.InclusionBlocks), "latest",
				[]float64{c.opts.InclusionPercentile}}, Result: &hist},
		}
		return rc.BatchCallContext(ctx, elems)
	})
	if err != nil {
		return txm.Inclusion{}, fmt.Errorf("read inclusion: %w", err)
	}
	if err := elems[0].Error; err != nil {
		return txm.Inclusion{}, fmt.Errorf("read inclusion: get transaction: %w", c.hideURLs(err))
	}
	out := txm.Inclusion{Pool: tx.status()}
	if elems[1].Error == nil && hist != nil {
		out.Price = hist.price()
	}
	return out, nil
}

// poolTx is the part of an eth_getTransactionByHash result Inclusion reads.
type poolTx struct {
	BlockHash *common.Hash `json:"blockHash"`
}

// status is where the node says the transaction is. Some clients give a
// pending transaction a zero block hash instead of null.
func (t *poolTx) status() txm.PoolStatus {
	switch {
	case t == nil:
		return txm.PoolAbsent
	case t.BlockHash == nil || *t.BlockHash == (common.Hash{}):
		return txm.PoolPending
	}
	return txm.PoolMined
}

// feeHistory is the part of an eth_feeHistory result Inclusion reads.
type feeHistory struct {
	BaseFee []*hexutil.Big   `json:"baseFeePerGas"`
	Reward  [][]*hexutil.Big `json:"reward"`
}

// price is the inclusion price of h: the last base fee (the next block's;
// 0 on a chain without base fees) and the median of the blocks' rewards
// (the upper one of an even count); nil when no block had a reward.
func (h *feeHistory) price() *txm.InclusionPrice {
	var tips []*big.Int
	for _, r := range h.Reward {
		if len(r) > 0 && r[0] != nil {
			tips = append(tips, r[0].ToInt())
		}
	}
	if len(tips) == 0 {
		return nil
	}
	slices.SortFunc(tips, (*big.Int).Cmp)
	next := new(big.Int)
	if n := len(h.BaseFee); n > 0 && h.BaseFee[n-1] != nil {
		next = h.BaseFee[n-1].ToInt()
	}
	return &txm.InclusionPrice{NextBaseFee: next, Tip: tips[len(tips)/2], Blocks: len(tips)}
}
