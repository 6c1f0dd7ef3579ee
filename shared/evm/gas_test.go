package evm

import (
	"context"
	"errors"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/rpc"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/evm/rpcproxy"
	"github.com/txfence/txfence/shared/txm"
)

func TestIssue10_EstimateGasInsufficientFunds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t)
	from := e.keys[0].Address
	to := e.keys[1].Address

	// What the simulated geth really answers (v1.17.8, no fee in the call):
	// "failed with N gas: insufficient funds for gas * price + value:
	// address 0x.. have <balance> want <value>".
	value := new(big.Int).Add(evmtest.DevBalance(), big.NewInt(1))
	_, err := e.client.EstimateGas(ctx, txm.CallMsg{From: from, To: &to, Value: value})
	var fe *txm.InsufficientFundsError
	require.ErrorAs(t, err, &fe)
	t.Logf("node said: %v", fe.Err)
	require.Equal(t, evmtest.DevBalance(), fe.Have)
	require.Equal(t, value, fe.Want)
	var rpcErr rpc.Error
	require.ErrorAs(t, err, &rpcErr, "the node's error is wrapped")
	require.Equal(t, txm.ReasonInsufficientFunds, Classify(err))
	var re *txm.RevertError
	require.False(t, errors.As(err, &re), "not a revert")

	// A signer with nothing, calling with data.
	empty := common.HexToAddress("0x00000000000000000000000000000000000e3e3e")
	_, err = e.client.EstimateGas(ctx, txm.CallMsg{From: empty, To: &to, Value: big.NewInt(1), Data: []byte{1, 2}})
	require.ErrorAs(t, err, &fe)
	require.Zero(t, fe.Have.Sign())
	require.Equal(t, big.NewInt(1), fe.Want)

	// Within the balance: an estimate, no error.
	_, err = e.client.EstimateGas(ctx, txm.CallMsg{From: from, To: &to, Value: evmtest.DevBalance()})
	require.NoError(t, err)
}

func TestIssue10_EstimateGasInsufficientFundsWithoutAmounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	chain := evmtest.Start(t, nil)
	proxy := rpcproxy.Start(t, chain.URL)
	c, err := Dial(ctx, evmtest.ChainID, []string{proxy.URL}, DefaultOptions())
	require.NoError(t, err)
	t.Cleanup(c.Close)
	to := common.HexToAddress("0x000000000000000000000000000000000000dEaD")

	// geth's estimator when the call names a fee (core.ErrInsufficientFundsForTransfer).
	proxy.Fail("eth_estimateGas", 1, rpcproxy.Fault{RPCError: &rpcproxy.RPCError{Code: -32000, Message: "insufficient funds for transfer"}})
	_, err = c.EstimateGas(ctx, txm.CallMsg{To: &to, Value: big.NewInt(1)})
	var fe *txm.InsufficientFundsError
	require.ErrorAs(t, err, &fe)
	require.Nil(t, fe.Have)
	require.Nil(t, fe.Want)
	require.ErrorContains(t, fe.Err, "insufficient funds for transfer")

	// Any other node error stays what it was.
	proxy.Fail("eth_estimateGas", 1, rpcproxy.Fault{RPCError: &rpcproxy.RPCError{Code: -32603, Message: "internal error"}})
	_, err = c.EstimateGas(ctx, txm.CallMsg{To: &to, Value: big.NewInt(1)})
	require.Error(t, err)
	require.False(t, errors.As(err, &fe))
}

func TestInsufficientFunds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err        error
		ok         bool
		have, want int64 // -1: not given
	}{
		{&rpcError{-32000, "insufficient funds for gas * price + value: address " + testAddr + " have 123 want 456"}, true, 123, 456}, // geth core/state_transition.go
		{&rpcError{-32000, "err: insufficient funds for gas * price + value: address " + testAddr + " have 10 want 20 (supplied gas 50000)"}, true, 10, 20},
		{&rpcError{-32003, "insufficient funds for gas * price + value: have 7 want 9"}, true, 7, 9}, // reth
		{&rpcError{-32000, "insufficient funds for gas * price + value: address " + testAddr + ", have: 1, want: 2"}, true, 1, 2},
		{&rpcError{-32000, "insufficient funds for transfer: address " + testAddr}, true, -1, -1}, // geth core.ErrInsufficientFundsForTransfer
		{&rpcError{-32000, "insufficient funds for gas * price + value"}, true, -1, -1},           // geth core.ErrInsufficientFunds bare
		{&rpcError{-32000, "Upfront cost exceeds account balance"}, true, -1, -1},                 // Besu
		{&rpcError{3, "execution reverted"}, false, -1, -1},
		{&rpcError{-32603, "internal error"}, false, -1, -1},
		{errors.New("insufficient funds for transfer"), false, -1, -1}, // not the node's answer
	}
	for _, tt := range tests {
		fe := insufficientFunds(tt.err)
		if !tt.ok {
			require.Nil(t, fe, "%v", tt.err)
			continue
		}
		require.NotNil(t, fe, "%v", tt.err)
		require.Same(t, tt.err, fe.Err)
		if tt.have < 0 {
			require.Nil(t, fe.Have, "%v", tt.err)
			require.Nil(t, fe.Want, "%v", tt.err)
			continue
		}
		require.Equal(t, big.NewInt(tt.have), fe.Have, "%v", tt.err)
		require.Equal(t, big.NewInt(tt.want), fe.Want, "%v", tt.err)
	}
}
