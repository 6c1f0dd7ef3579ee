package evm

import (
	"context"
	"errors"
	"fmt"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/txfence/txfence/shared/txm"
)

// ErrNoFinalized means the node reports no block under the finalized tag.
var ErrNoFinalized = errors.New("no finalized block")

// rpcHeader is the part of an eth_getBlockByNumber result txfence reads.
type rpcHeader struct {
	Number     *hexutil.Uint64 `json:"number"`
	Hash       *common.Hash    `json:"hash"`
	ParentHash common.Hash     `json:"parentHash"`
	BaseFee    *hexutil.Big    `json:"baseFeePerGas"`
}

func (h *rpcHeader) toTxm() (txm.Header, error) {
	if h.Number == nil || h.Hash == nil {
		return txm.Header{}, errors.New("decode block: missing number or hash")
	}
	return txm.Header{Number: uint64(*h.Number), Hash: *h.Hash, ParentHash: h.ParentHash}, nil
}

// header fetches the block at a tag ("latest", "finalized", ...) or a
// number; nil when the node has none.
func (c *Client) header(ctx context.Context, at any) (*rpcHeader, error) {
	var h *rpcHeader
	err := c.do(ctx, func(ctx context.Context, rc *rpc.Client) error {
		return rc.CallContext(ctx, &h, "eth_getBlockByNumber", at, false)
	})
	return h, err
}

// Head is the latest block.
func (c *Client) Head(ctx context.Context) (txm.Header, error) {
	h, err := c.header(ctx, "latest")
	if err == nil && h == nil {
		err = errors.New("node has no latest block")
	}
	if err != nil {
		return txm.Header{}, fmt.Errorf("get head: %w", err)
	}
	out, err := h.toTxm()
	if err != nil {
		return txm.Header{}, fmt.Errorf("get head: %w", err)
	}
	return out, nil
}

// Finalized is the block under the finalized tag. A node that does not know
// the tag returns its JSON-RPC error; one that has no finalized block yet
// returns ErrNoFinalized.
func (c *Client) Finalized(ctx context.Context) (txm.Header, error) {
	h, err := c.header(ctx, "finalized")
	if err == nil && h == nil {
		err = ErrNoFinalized
	}
	if err != nil {
		return txm.Header{}, fmt.Errorf("get finalized block: %w", err)
	}
	out, err := h.toTxm()
	if err != nil {
		return txm.Header{}, fmt.Errorf("get finalized block: %w", err)
	}
	return out, nil
}

// HeadersByNumber fetches canonical headers in one batch of
// eth_getBlockByNumber; a number with no block yields nil at its index.
func (c *Client) HeadersByNumber(ctx context.Context, numbers []uint64) ([]*txm.Header, error) {
	return batchCall(ctx, c, "get headers", "eth_getBlockByNumber", numbers,
		func(n uint64) []any { return []any{hexutil.Uint64(n), false} },
		func(n uint64, raw *rpcHeader) (*txm.Header, error) {
			h, err := raw.toTxm()
			if err == nil && h.Number != n {
				err = fmt.Errorf("node returned block %d", h.Number)
			}
			return &h, err
		},
		func(n uint64) string { return fmt.Sprintf("block %d", n) })
}

// HasTransaction reports whether eth_getTransactionByHash knows the
// transaction, mined or pending.
func (c *Client) HasTransaction(ctx context.Context, hash common.Hash) (bool, error) {
	var tx *struct {
		Hash common.Hash `json:"hash"`
	}
	err := c.do(ctx, func(ctx context.Context, rc *rpc.Client) error {
		return rc.CallContext(ctx, &tx, "eth_getTransactionByHash", hash)
	})
	if err != nil {
		return false, fmt.Errorf("get transaction: %w", err)
	}
	return tx != nil, nil
}
