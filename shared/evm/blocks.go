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
	if len(numbers) == 0 {
		return nil, nil
	}
	results := make([]*rpcHeader, len(numbers))
	var elems []rpc.BatchElem
	err := c.do(ctx, func(ctx context.Context, rc *rpc.Client) error {
		elems = make([]rpc.BatchElem, len(numbers))
		for i, n := range numbers {
			results[i] = nil
			elems[i] = rpc.BatchElem{
				Method: "eth_getBlockByNumber",
				Args:   []any{hexutil.Uint64(n), false},
				Result: &results[i],
			}
		}
		return rc.BatchCallContext(ctx, elems)
	})
	if err != nil {
		return nil, fmt.Errorf("get headers: %w", err)
	}
	var errs []error
	out := make([]*txm.Header, len(numbers))
	for i, n := range numbers {
		if err := elems[i].Error; err != nil {
			errs = append(errs, fmt.Errorf("block %d: %w", n, err))
			continue
		}
		if results[i] == nil {
			continue
		}
		h, err := results[i].toTxm()
		if err == nil && h.Number != n {
			err = fmt.Errorf("node returned block %d", h.Number)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("block %d: %w", n, err))
			continue
		}
		out[i] = &h
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("get headers: %w", errors.Join(errs...))
	}
	return out, nil
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
