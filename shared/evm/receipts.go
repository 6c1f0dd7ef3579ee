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
