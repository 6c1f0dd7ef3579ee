package evm

import (
	"bytes"
	"context"
	"fmt"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/txfence/txfence/shared/txm"
)

var _ txm.DelegationReader = (*Client)(nil)

// Delegated is eth_getCode at "latest": whether addr's code begins with
// the EIP-7702 delegation designator. It is read each time; callers cache.
func (c *Client) Delegated(ctx context.Context, addr common.Address) (bool, error) {
	var code hexutil.Bytes
	err := c.do(ctx, func(ctx context.Context, rc *rpc.Client) error {
		return rc.CallContext(ctx, &code, "eth_getCode", addr, "latest")
	})
	if err != nil {
		return false, fmt.Errorf("get code: %w", err)
	}
	return bytes.HasPrefix(code, txm.DelegationDesignator), nil
}
