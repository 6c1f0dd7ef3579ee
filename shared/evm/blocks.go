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

// Blocks implements txm.BlockSource: batches of eth_getBlockByNumber,
// each to one endpoint, for numbers and then for tags. A batch holds at
// most MaxBatch calls, the tags' included, so a long list of numbers goes
// out as several, each ending with the tags.
func (c *Client) Blocks(ctx context.Context, numbers []uint64, tags []string) (headers, tagged []*txm.Header, err error) {
	headers = make([]*txm.Header, len(numbers))
	tagged = make([]*txm.Header, len(tags))
	per := max(c.opts.MaxBatch-len(tags), 1)
	for lo := 0; lo == 0 || lo < len(numbers); lo += per {
		hi := min(lo+per, len(numbers))
		var got []*txm.Header
		err := c.do(ctx, func(ctx context.Context, rc *rpc.Client) error {
			var err error
			got, err = blocksOnce(ctx, rc, numbers[lo:hi], tags)
			return err
		})
		if err != nil {
			return nil, nil, fmt.Errorf("get blocks: %w", err)
		}
		copy(headers[lo:hi], got[:hi-lo])
		for i, h := range got[hi-lo:] {
			if lo == 0 || h == nil || tagged[i] != nil && h.Number < tagged[i].Number {
				tagged[i] = h
			}
		}
	}
	return headers, tagged, nil
}

// blocksOnce is one batch of Blocks against one endpoint: the headers of
// numbers, then of tags, in one list.
func blocksOnce(ctx context.Context, rc *rpc.Client, numbers []uint64, tags []string) ([]*txm.Header, error) {
	raws := make([]*rpcHeader, len(numbers)+len(tags))
	elems := make([]rpc.BatchElem, len(raws))
	for i, n := range numbers {
		elems[i] = rpc.BatchElem{Method: "eth_getBlockByNumber", Args: []any{hexutil.Uint64(n), false}, Result: &raws[i]}
	}
	for i, tag := range tags {
		j := len(numbers) + i
		elems[j] = rpc.BatchElem{Method: "eth_getBlockByNumber", Args: []any{tag, false}, Result: &raws[j]}
	}
	if err := rc.BatchCallContext(ctx, elems); err != nil {
		return nil, err
	}
	out := make([]*txm.Header, len(raws))
	var errs []error
	for i, raw := range raws {
		name := "block " + fmt.Sprint(elems[i].Args[0])
		if i < len(numbers) {
			name = fmt.Sprintf("block %d", numbers[i])
		}
		if err := elems[i].Error; err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		if raw == nil {
			continue
		}
		h, err := raw.toTxm()
		if err == nil && i < len(numbers) && h.Number != numbers[i] {
			err = fmt.Errorf("node returned block %d", h.Number)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		out[i] = &h
	}
	return out, errors.Join(errs...)
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
