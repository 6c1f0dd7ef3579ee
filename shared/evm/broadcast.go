package evm

import (
	"context"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/rpc"
)

// SendRawTransaction is eth_sendRawTransaction. Its error, from the node or
// the transport, is classified by ClassifyBroadcast into a
// *txm.BroadcastError. On a chain without a public pool, an answer of
// "nonce too high" is followed by the same bytes again at once, up to
// NonceTooHighRetries times (see nonceTooHighRetries).
func (c *Client) SendRawTransaction(ctx context.Context, raw []byte) error {
	err := c.sendOne(ctx, raw)
	for try := 0; try < c.nonceTooHighRetries() && nonceTooHigh(err) && ctx.Err() == nil; try++ {
		err = c.sendOne(ctx, raw)
	}
	return err
}

func (c *Client) sendOne(ctx context.Context, raw []byte) error {
	err := c.do(ctx, func(ctx context.Context, rc *rpc.Client) error {
		return rc.CallContext(ctx, nil, "eth_sendRawTransaction", hexutil.Bytes(raw))
	})
	return ClassifyBroadcast(err)
}

// SendRawTransactions sends raws, in order, in JSON-RPC batches of at most
// MaxBatch calls, one after another (nodes process a batch's calls in
// order). It returns one error per transaction, nil for accepted ones, each
// classified like SendRawTransaction's; a transport failure is the error of
// every element of its batch and of those after it, which are not sent. On a
// chain without a public pool, the transactions answered "nonce too high"
// are sent again, in order, at once, up to NonceTooHighRetries times.
func (c *Client) SendRawTransactions(ctx context.Context, raws [][]byte) []error {
	errs := c.sendBatches(ctx, raws)
	for try := 0; try < c.nonceTooHighRetries() && ctx.Err() == nil; try++ {
		var again []int
		for i, err := range errs {
			if nonceTooHigh(err) {
				again = append(again, i)
			}
		}
		if len(again) == 0 {
			break
		}
		resend := make([][]byte, len(again))
		for j, i := range again {
			resend[j] = raws[i]
		}
		for j, err := range c.sendBatches(ctx, resend) {
			errs[again[j]] = err
		}
	}
	return errs
}

// nonceTooHighRetries is how many times a "nonce too high" answer is
// followed by the same bytes: a sequencer keeps no transaction whose nonce
// is ahead of the sender's (it holds one for a moment, then refuses it), so
// one whose predecessor is still on its way, through another endpoint or an
// earlier batch, gets in when sent again; a public pool queues such a
// transaction itself and answers no such thing.
func (c *Client) nonceTooHighRetries() int {
	if !c.opts.NoPublicMempool {
		return 0
	}
	return c.opts.NonceTooHighRetries
}

// sendBatches is SendRawTransactions without the retries.
func (c *Client) sendBatches(ctx context.Context, raws [][]byte) []error {
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
