package evm

import (
	"context"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/rpc"
)

// SendRawTransaction is eth_sendRawTransaction. Its error, from the node or
// the transport, is classified by ClassifyBroadcast into a
// *txm.BroadcastError.
func (c *Client) SendRawTransaction(ctx context.Context, raw []byte) error {
	err := c.do(ctx, func(ctx context.Context, rc *rpc.Client) error {
		return rc.CallContext(ctx, nil, "eth_sendRawTransaction", hexutil.Bytes(raw))
	})
	return ClassifyBroadcast(err)
}

// SendRawTransactions sends raws, in order, in JSON-RPC batches of at most
// MaxBatch calls, one after another (nodes process a batch's calls in
// order). It returns one error per transaction, nil for accepted ones, each
// classified like SendRawTransaction's; a transport failure is the error of
// every element of its batch and of those after it, which are not sent.
func (c *Client) SendRawTransactions(ctx context.Context, raws [][]byte) []error {
	errs := make([]error, len(raws))
	elems := make([]rpc.BatchElem, len(raws))
	hashes := make([]common.Hash, len(raws))
	for lo := 0; lo < len(raws); lo += c.opts.MaxBatch {
		hi := min(lo+c.opts.MaxBatch, len(raws))
		err := c.do(ctx, func(ctx context.Context, rc *rpc.Client) error {
			for i := lo; i < hi; i++ {
				elems[i] = rpc.BatchElem{Method: "eth_sendRawTransaction", Args: []any{hexutil.Bytes(raws[i])}, Result: &hashes[i]}
			}
			return rc.BatchCallContext(ctx, elems[lo:hi])
		})
		if err != nil {
			for i := lo; i < len(raws); i++ {
				errs[i] = ClassifyBroadcast(err)
			}
			return errs
		}
		for i := lo; i < hi; i++ {
			errs[i] = ClassifyBroadcast(c.hideURLs(elems[i].Error))
		}
	}
	return errs
}
