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

// SendRawTransactions sends raws, in order, in one JSON-RPC batch (nodes
// process a batch's calls in order). It returns one error per transaction,
// nil for accepted ones, each classified like SendRawTransaction's; a
// transport failure is every element's error.
func (c *Client) SendRawTransactions(ctx context.Context, raws [][]byte) []error {
	errs := make([]error, len(raws))
	if len(raws) == 0 {
		return errs
	}
	var elems []rpc.BatchElem
	hashes := make([]common.Hash, len(raws))
	err := c.do(ctx, func(ctx context.Context, rc *rpc.Client) error {
		elems = make([]rpc.BatchElem, len(raws))
		for i, raw := range raws {
			elems[i] = rpc.BatchElem{Method: "eth_sendRawTransaction", Args: []any{hexutil.Bytes(raw)}, Result: &hashes[i]}
		}
		return rc.BatchCallContext(ctx, elems)
	})
	for i := range raws {
		if err != nil {
			errs[i] = ClassifyBroadcast(err)
		} else {
			errs[i] = ClassifyBroadcast(elems[i].Error)
		}
	}
	return errs
}
