package rpcproxy

import (
	"context"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/rpc"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestProxy_Lag: a lagging proxy answers as a node three blocks behind:
// its head, the blocks above it, the receipts and state after them, one
// call at a time and in one batch; Lag(0) answers as the node again.
func TestProxy_Lag(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	dead := common.HexToAddress("0xdead")
	sent, err := f.chain.Send(ctx, f.keys[0].Key, dead, big.NewInt(1))
	require.NoError(t, err)
	minedIn := f.chain.Commit() // the transaction's block
	for range 3 {
		f.chain.Commit()
	}
	head, err := f.direct.BlockNumber(ctx)
	require.NoError(t, err)
	mined, err := f.direct.HeaderByHash(ctx, minedIn)
	require.NoError(t, err)
	require.Equal(t, head-3, mined.Number.Uint64())

	f.proxy.Lag(4) // the transaction's block is above the lagging head
	got, err := f.eth.BlockNumber(ctx)
	require.NoError(t, err)
	assert.Equal(t, head-4, got)
	r, err := f.eth.TransactionReceipt(ctx, sent.Hash())
	assert.Error(t, err, "no receipt: %v", r) // ethclient's NotFound
	_, pending, err := f.eth.TransactionByHash(ctx, sent.Hash())
	require.NoError(t, err)
	assert.True(t, pending, "the node shows it in its pool")
	n, err := f.eth.NonceAt(ctx, f.keys[0].Address, nil)
	require.NoError(t, err)
	assert.Zero(t, n, "the nonce at its head")
	pn, err := f.eth.PendingNonceAt(ctx, f.keys[0].Address)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), pn, "its pool is the node's")
	h, err := f.eth.HeaderByNumber(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, head-4, h.Number.Uint64())
	_, err = f.eth.HeaderByNumber(ctx, mined.Number)
	assert.Error(t, err, "no block above its head")
	_, err = f.eth.HeaderByHash(ctx, minedIn)
	assert.Error(t, err, "no block above its head, by hash")
	_, err = f.eth.NonceAt(ctx, f.keys[0].Address, mined.Number)
	assert.ErrorContains(t, err, "header not found")

	// One batch, a block pinned by hash among the calls.
	var atHash, atLatest hexutil.Uint64
	var block map[string]any
	batch := []rpc.BatchElem{
		{Method: "eth_getTransactionCount", Args: []any{f.keys[0].Address, map[string]any{"blockHash": minedIn}}, Result: &atHash},
		{Method: "eth_getTransactionCount", Args: []any{f.keys[0].Address, "latest"}, Result: &atLatest},
		{Method: "eth_getBlockByNumber", Args: []any{hexutil.EncodeUint64(head), false}, Result: &block},
	}
	require.NoError(t, f.rpc.BatchCallContext(ctx, batch))
	assert.ErrorContains(t, batch[0].Error, "header for hash not found")
	assert.NoError(t, batch[1].Error)
	assert.Zero(t, atLatest)
	assert.NoError(t, batch[2].Error)
	assert.Nil(t, block)

	f.proxy.Lag(2) // now it has the block
	r, err = f.eth.TransactionReceipt(ctx, sent.Hash())
	require.NoError(t, err)
	assert.Equal(t, minedIn, r.BlockHash)
	batch[0].Error, batch[1].Error = nil, nil
	require.NoError(t, f.rpc.BatchCallContext(ctx, batch[:1]))
	require.NoError(t, batch[0].Error)
	assert.Equal(t, hexutil.Uint64(1), atHash)

	f.proxy.Lag(0)
	got, err = f.eth.BlockNumber(ctx)
	require.NoError(t, err)
	assert.Equal(t, head, got)
}
