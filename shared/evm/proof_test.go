package evm

import (
	"context"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/evm/rpcproxy"
	"github.com/txfence/txfence/shared/txm"
)

// TestClient_ProveNonce: the proof reads the block, the nonce at it and
// the receipts from one node. An endpoint that has not reached the block
// (a lagging one, first in the list) is passed over for one that has; with
// none that has, or a block no endpoint has at that height, the error is
// ErrNodeBehind and nothing is concluded. Hashes beyond one batch go out in
// several.
func TestClient_ProveNonce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	mined := e.transfer(t, 0)
	e.chain.Commit()
	e.transfer(t, 1)
	e.chain.Commit()
	at, err := e.client.Head(ctx)
	require.NoError(t, err)
	e.chain.Commit()
	unknown := common.HexToHash("0xabc")

	lagging := rpcproxy.Start(t, e.chain.URL)
	lagging.Lag(3)
	dial := func(urls ...string) *Client {
		o := DefaultOptions()
		o.MaxBatch = 4 // the block twice, the nonce and one receipt a batch
		c, err := Dial(ctx, evmtest.ChainID, urls, o)
		require.NoError(t, err)
		t.Cleanup(c.Close)
		return c
	}

	both := dial(lagging.URL, e.chain.URL)
	p, err := both.ProveNonce(ctx, e.keys[0].Address, at, []common.Hash{mined.Hash(), unknown})
	require.NoError(t, err)
	assert.Equal(t, at, p.Block)
	assert.Equal(t, uint64(2), p.Nonce, "the nonce at the block")
	require.Len(t, p.Receipts, 2)
	require.NotNil(t, p.Receipts[0])
	assert.Equal(t, mined.Hash(), p.Receipts[0].TxHash)
	assert.Nil(t, p.Receipts[1])

	_, err = dial(lagging.URL).ProveNonce(ctx, e.keys[0].Address, at, []common.Hash{mined.Hash()})
	assert.ErrorIs(t, err, txm.ErrNodeBehind, "the lagging node alone cannot answer")

	other := at
	other.Hash = common.HexToHash("0x1234")
	_, err = both.ProveNonce(ctx, e.keys[0].Address, other, nil)
	assert.ErrorIs(t, err, txm.ErrNodeBehind, "no endpoint has that block at that height")

	p, err = both.ProveNonce(ctx, e.keys[0].Address, at, nil)
	require.NoError(t, err)
	assert.Equal(t, uint64(2), p.Nonce, "no hashes: the nonce alone")
}
