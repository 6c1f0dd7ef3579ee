package evm

import (
	"context"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/eth/ethconfig"
	"github.com/ethereum/go-ethereum/node"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/evm/evmtest"
)

// A node refuses JSON-RPC batches past its limit (geth: 1,000; hosted
// providers often 100). A hot signer's receipts once went in one batch of
// every transaction in flight, and past the limit the signer's receipts
// failed on every try: calls go in batches of at most MaxBatch.
func TestClient_BatchesWithinTheNodesLimit(t *testing.T) {
	t.Parallel()
	const limit, n = 4, 10
	keys := evmtest.DevKeys(2)
	chain := evmtest.Start(t, evmtest.FundedAlloc(keys, nil), evmtest.WithBackendOption(func(nc *node.Config, _ *ethconfig.Config) {
		nc.BatchRequestLimit = limit
	}))
	dial := func(maxBatch int) *Client {
		o := DefaultOptions()
		o.MaxBatch = maxBatch
		c, err := Dial(context.Background(), evmtest.ChainID, []string{chain.URL}, o)
		require.NoError(t, err)
		t.Cleanup(c.Close)
		return c
	}
	client, unbounded := dial(limit), dial(100)
	e := &env{chain: chain, client: client, keys: keys}
	ctx := context.Background()

	to := keys[1].Address
	raws := make([][]byte, n)
	hashes := make([]common.Hash, n)
	for i := range raws {
		tx := signed(t, keys[0], uint64(i), &to, 1, 21000, nil)
		raw, err := tx.MarshalBinary()
		require.NoError(t, err)
		raws[i], hashes[i] = raw, tx.Hash()
	}
	for i, err := range e.client.SendRawTransactions(ctx, raws) {
		require.NoError(t, err, "broadcast %d", i)
	}
	chain.Commit()

	rs, err := client.Receipts(ctx, hashes)
	require.NoError(t, err)
	for i, r := range rs {
		require.NotNil(t, r, "receipt %d", i)
		require.Equal(t, hashes[i], r.TxHash)
	}
	head, err := client.Head(ctx)
	require.NoError(t, err)
	numbers := make([]uint64, 0, n)
	for i := range n {
		numbers = append(numbers, head.Number-uint64(i%int(head.Number+1)))
	}
	hs, tagged, err := client.Blocks(ctx, numbers, []string{"latest"})
	require.NoError(t, err)
	for i, h := range hs {
		require.Equal(t, numbers[i], h.Number)
	}
	require.Equal(t, head, *tagged[0])

	_, err = unbounded.Receipts(ctx, hashes)
	require.ErrorContains(t, err, "batch too large", "the node's limit is real")
}
