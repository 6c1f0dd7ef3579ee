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

// ProveNonce implements txm.NonceProver: one batch to one endpoint of the
// block at at's height, addr's nonce pinned to at's hash (EIP-1898, with
// requireCanonical), the receipt of each hash, and the block at at's height
// again. An endpoint whose block there is missing or another, before or
// after the other reads, or that fails any of them, cannot answer: do
// tries the next. Hashes beyond one batch go out in several, each its own
// proof of the same block.
func (c *Client) ProveNonce(ctx context.Context, addr common.Address, at txm.Header, hashes []common.Hash) (txm.NonceProof, error) {
	proof := txm.NonceProof{Block: at, Receipts: make([]*txm.Receipt, len(hashes))}
	per := max(c.opts.MaxBatch-3, 1)
	for lo := 0; lo == 0 || lo < len(hashes); lo += per {
		hi := min(lo+per, len(hashes))
		var nonce uint64
		err := c.do(ctx, func(ctx context.Context, rc *rpc.Client) error {
			n, err := proveOnce(ctx, rc, addr, at, hashes[lo:hi], proof.Receipts[lo:hi])
			nonce = n
			return err
		})
		if err != nil {
			return txm.NonceProof{}, fmt.Errorf("prove nonce at block %d: %w", at.Number, err)
		}
		if lo > 0 && nonce != proof.Nonce {
			return txm.NonceProof{}, fmt.Errorf("prove nonce at block %d: the nonce at one block read as %d and %d", at.Number, proof.Nonce, nonce)
		}
		proof.Nonce = nonce
	}
	return proof, nil
}

// proveOnce is one batch of ProveNonce against one endpoint; it fills
// receipts (one per hash) and returns the nonce.
func proveOnce(ctx context.Context, rc *rpc.Client, addr common.Address, at txm.Header, hashes []common.Hash,
	receipts []*txm.Receipt) (uint64, error) {
	var before, after *rpcHeader
	var nonce hexutil.Uint64
	raws := make([]*rpcReceipt, len(hashes))
	number := hexutil.Uint64(at.Number)
	elems := []rpc.BatchElem{
		{Method: "eth_getBlockByNumber", Args: []any{number, false}, Result: &before},
		{Method: "eth_getTransactionCount", Args: []any{addr, map[string]any{"blockHash": at.Hash, "requireCanonical": true}}, Result: &nonce},
	}
	for i, h := range hashes {
		elems = append(elems, rpc.BatchElem{Method: "eth_getTransactionReceipt", Args: []any{h}, Result: &raws[i]})
	}
	elems = append(elems, rpc.BatchElem{Method: "eth_getBlockByNumber", Args: []any{number, false}, Result: &after})
	if err := rc.BatchCallContext(ctx, elems); err != nil {
		return 0, err
	}
	for _, e := range elems {
		if e.Error != nil {
			return 0, behind(fmt.Errorf("%s: %w", e.Method, e.Error))
		}
	}
	for _, h := range []*rpcHeader{before, after} {
		if h == nil || h.Hash == nil || *h.Hash != at.Hash {
			return 0, behind(fmt.Errorf("its block %d is not %s", at.Number, at.Hash.Hex()))
		}
	}
	for i, raw := range raws {
		receipts[i] = nil
		if raw == nil {
			continue
		}
		r, err := raw.toTxm(hashes[i])
		if err != nil {
			return 0, behind(err)
		}
		receipts[i] = r
	}
	return uint64(nonce), nil
}

// behindError is an endpoint's answer that cannot be used for a block: it
// has not reached it, has another block at its height, or failed a read
// pinned to it. do tries the next endpoint.
type behindError struct{ err error }

func behind(err error) error { return &behindError{err: err} }

func (e *behindError) Error() string   { return txm.ErrNodeBehind.Error() + ": " + e.err.Error() }
func (e *behindError) Unwrap() []error { return []error{txm.ErrNodeBehind, e.err} }

// isBehind reports whether err is an endpoint's behindError.
func isBehind(err error) bool {
	var be *behindError
	return errors.As(err, &be)
}
