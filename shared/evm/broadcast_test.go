package evm

import (
	"context"
	"testing"

	"github.com/ethereum/go-ethereum/rpc"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/testsupport"
	"github.com/txfence/txfence/shared/txm"
)

func TestClient_SendRawTransactionsBatch(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	to := e.keys[1].Address
	var raws [][]byte
	for nonce := uint64(0); nonce < 3; nonce++ {
		raw, err := signed(t, e.keys[0], nonce, &to, 1, 21000, nil).MarshalBinary()
		require.NoError(t, err)
		raws = append(raws, raw)
	}
	for i, err := range e.client.SendRawTransactions(ctx, raws) {
		assert.NoError(t, err, "tx %d accepted", i)
	}
	waitPending(t, e, e.keys[0].Address, 3, "all three reached the pool, in order")

	// Sent again, each answer is classified on its own.
	for i, err := range e.client.SendRawTransactions(ctx, raws) {
		assert.Equal(t, txm.ReasonKnown, txm.ReasonOf(err), "tx %d: %v", i, err)
	}
	assert.Empty(t, e.client.SendRawTransactions(ctx, nil))
}

func TestClient_SendRawTransactionsTransportFailure(t *testing.T) {
	e := setup(t)
	bad, err := New(evmtest.ChainID, []*rpc.Client{dialRPC(t, testsupport.DeadURL(t))}, DefaultOptions())
	require.NoError(t, err)
	defer bad.Close()
	raw, err := signed(t, e.keys[0], 0, &e.keys[1].Address, 1, 21000, nil).MarshalBinary()
	require.NoError(t, err)
	errs := bad.SendRawTransactions(context.Background(), [][]byte{raw, raw})
	require.Len(t, errs, 2)
	for _, err := range errs {
		assert.Equal(t, txm.ReasonTransient, txm.ReasonOf(err))
	}
}
