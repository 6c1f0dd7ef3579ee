package evm

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/txfence/txfence/shared/txm"
)

// callArgs is the transaction object of eth_estimateGas.
type callArgs struct {
	From  common.Address  `json:"from"`
	To    *common.Address `json:"to,omitempty"`
	Gas   *hexutil.Uint64 `json:"gas,omitempty"`
	Value *hexutil.Big    `json:"value,omitempty"`
	Data  hexutil.Bytes   `json:"data,omitempty"`
}

// EstimateGas is eth_estimateGas plus GasMarginPercent. A call that would
// revert returns a *txm.RevertError with the reason and the revert data, when
// the node sends them. A call the signer cannot pay for (value + gas × fee
// above its balance) returns a *txm.InsufficientFundsError with the balance
// and the amount needed, when the node says them. A call that fails in the
// EVM in any other way (out of gas at every limit, an invalid opcode, a stack
// underflow, ...) returns a *txm.ExecutionError with the node's words; so does
// any other answer of the node that does not say the node is unwell (see
// executionFailure). Every other error means the node could not be asked.
func (c *Client) EstimateGas(ctx context.Context, msg txm.CallMsg) (uint64, error) {
	args := callArgs{From: msg.From, To: msg.To, Data: msg.Data}
	if msg.Gas > 0 {
		args.Gas = (*hexutil.Uint64)(&msg.Gas)
	}
	if msg.Value != nil {
		args.Value = (*hexutil.Big)(msg.Value)
	}
	var gas hexutil.Uint64
	err := c.do(ctx, func(ctx context.Context, rc *rpc.Client) error {
		return rc.CallContext(ctx, &gas, "eth_estimateGas", args)
	})
	if err != nil {
		if re := revertError(err); re != nil {
			return 0, fmt.Errorf("estimate gas: %w", re)
		}
		if fe := insufficientFunds(err); fe != nil {
			return 0, fmt.Errorf("estimate gas: %w", fe)
		}
		if xe := executionFailure(err); xe != nil {
			return 0, fmt.Errorf("estimate gas: %w", xe)
		}
		return 0, fmt.Errorf("estimate gas: %w", err)
	}
	return uint64(gas) + uint64(gas)*c.opts.GasMarginPercent/100, nil
}

// revertError turns the node's "execution reverted" JSON-RPC error into a
// *txm.RevertError, or returns nil for any other error. Geth answers code 3
// with the revert data as a hex string when there is data; other nodes, and
// geth without data, are recognised by ClassifyBroadcast, the one place that
// reads error text.
func revertError(err error) *txm.RevertError {
	var rpcErr rpc.Error
	if !errors.As(err, &rpcErr) {
		return nil
	}
	if rpcErr.ErrorCode() != 3 && txm.ReasonOf(ClassifyBroadcast(err)) != txm.ReasonReverted {
		return nil
	}
	re := &txm.RevertError{}
	if data, ok := RevertData(err); ok && len(data) > 0 {
		re.Data = data
	}
	if reason, err := abi.UnpackRevert(re.Data); err == nil {
		re.Reason = reason
		return re
	}
	// A custom error, or no data: the reason is what the message says after
	// "execution reverted", so that RevertError.Error does not repeat it.
	msg := rpcErr.Error()
	const prefix = "execution reverted"
	if len(msg) >= len(prefix) && strings.EqualFold(msg[:len(prefix)], prefix) {
		msg = strings.TrimPrefix(strings.TrimSpace(msg[len(prefix):]), ":")
	}
	re.Reason = strings.TrimSpace(msg)
	return re
}
