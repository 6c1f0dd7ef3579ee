package evm

import (
	"context"
	"fmt"
	"math/big"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/rpc"
)

// PendingNonce is eth_getTransactionCount at "pending": the next nonce the
// node would accept, counting its pool.
func (c *Client) PendingNonce(ctx context.Context, addr common.Address) (uint64, error) {
	n, err := c.nonce(ctx, addr, "pending")
	if err != nil {
		return 0, fmt.Errorf("get pending nonce: %w", err)
	}
	return n, nil
}

// LatestNonce is eth_getTransactionCount at "latest": every nonce below it is
// mined.
func (c *Client) LatestNonce(ctx context.Context, addr common.Address) (uint64, error) {
	n, err := c.nonce(ctx, addr, "latest")
	if err != nil {
		return 0, fmt.Errorf("get latest nonce: %w", err)
	}
	return n, nil
}

// NonceAt is eth_getTransactionCount at block: every nonce below it was
// taken by a transaction mined at that height or lower.
func (c *Client) NonceAt(ctx context.Context, addr common.Address, block uint64) (uint64, error) {
	n, err := c.nonce(ctx, addr, hexutil.Uint64(block))
	if err != nil {
		return 0, fmt.Errorf("get nonce at block %d: %w", block, err)
	}
	return n, nil
}

func (c *Client) nonce(ctx context.Context, addr common.Address, tag any) (uint64, error) {
	var n hexutil.Uint64
	err := c.do(ctx, func(ctx context.Context, rc *rpc.Client) error {
		return rc.CallContext(ctx, &n, "eth_getTransactionCount", addr, tag)
	})
	return uint64(n), err
}

// Balances is eth_getBalance at "latest" for each address, in one batch.
func (c *Client) Balances(ctx context.Context, addrs []common.Address) ([]*big.Int, error) {
	return batchCall(ctx, c, "get balances", "eth_getBalance", addrs,
		func(a common.Address) []any { return []any{a, "latest"} },
		func(_ common.Address, raw *hexutil.Big) (*big.Int, error) { return raw.ToInt(), nil },
		func(a common.Address) string { return a.Hex() })
}
