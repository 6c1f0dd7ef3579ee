package evm

import (
	"context"
	"errors"
	"fmt"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"

	"github.com/txfence/txfence/shared/txm"
)

// rpcReceipt is the part of an eth_getTransactionReceipt result txfence
// reads.
type rpcReceipt struct {
	TxHash            common.Hash     `json:"transactionHash"`
	BlockHash         common.Hash     `json:"blockHash"`
	BlockNumber       *hexutil.Uint64 `json:"blockNumber"`
	Status            *hexutil.Uint64 `json:"status"`
	GasUsed           hexutil.Uint64  `json:"gasUsed"`
	EffectiveGasPrice *hexutil.Big    `json:"effectiveGasPrice"`
}

func (r *rpcReceipt) toTxm(want common.Hash) (*txm.Receipt, error) {
	switch {
	case r.TxHash != want:
		return nil, fmt.Errorf("node returned the receipt of %s", r.TxHash)
	case r.BlockNumber == nil:
		return nil, errors.New("receipt has no block number")
	case r.Status == nil:
		return nil, errors.New("receipt has no status (pre-Byzantium chain?)")
	}
	out := &txm.Receipt{
		TxHash:      r.TxHash,
		BlockNumber: uint64(*r.BlockNumber),
		BlockHash:   r.BlockHash,
		Status:      uint64(*r.Status),
		GasUsed:     uint64(r.GasUsed),
	}
	if r.EffectiveGasPrice != nil {
		out.EffectiveGasPrice = r.EffectiveGasPrice.ToInt()
	}
	return out, nil
}

// Receipts fetches receipts in one batch of eth_getTransactionReceipt; a
// hash with no receipt (not mined, or dropped by a reorg) yields nil at its
// index. Any element's error fails the whole call.
func (c *Client) Receipts(ctx context.Context, hashes []common.Hash) ([]*txm.Receipt, error) {
	return batchCall(ctx, c, "get receipts", "eth_getTransactionReceipt", hashes,
		func(h common.Hash) []any { return []any{h} },
		func(h common.Hash, raw *rpcReceipt) (*txm.Receipt, error) { return raw.toTxm(h) },
		func(h common.Hash) string { return h.Hex() })
}

// BlockReceipts fetches every receipt of each canonical block of numbers in
// one batch of eth_getBlockReceipts; a number with no block yields nil at
// its index. A node that does not serve the method (see methodMissing)
// fails with an error wrapping txm.ErrNoBlockReceipts.
func (c *Client) BlockReceipts(ctx context.Context, numbers []uint64) ([][]*txm.Receipt, error) {
	out, err := batchCall(ctx, c, "get block receipts", "eth_getBlockReceipts", numbers,
		func(n uint64) []any { return []any{hexutil.Uint64(n)} },
		func(n uint64, raw *[]rpcReceipt) ([]*txm.Receipt, error) {
			rs := make([]*txm.Receipt, len(*raw))
			for i := range *raw {
				r, err := (*raw)[i].toTxm((*raw)[i].TxHash)
				if err == nil && r.BlockNumber != n {
					err = fmt.Errorf("node returned a receipt of block %d", r.BlockNumber)
				}
				if err != nil {
					return nil, err
				}
				rs[i] = r
			}
			return rs, nil
		},
		func(n uint64) string { return fmt.Sprintf("block %d", n) })
	if err != nil && methodMissing(err) {
		return nil, fmt.Errorf("%w: %w", txm.ErrNoBlockReceipts, err)
	}
	return out, err
}
