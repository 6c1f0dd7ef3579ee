package evm

import (
	"context"

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
