package evm

import (
	"context"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/params"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/evm/rpcproxy"
	"github.com/txfence/txfence/shared/testsupport"
	"github.com/txfence/txfence/shared/txm"
)

// sendTip signs a transfer from the proxied chain's funded key at nonce
// paying tip (max fee 100 gwei), sends it through the client and waits
// until the pool counts it pending.
func (p *proxied) sendTip(t *testing.T, nonce uint64, tip int64) *types.Transaction {
	t.Helper()
	key := evmtest.DevKeys(1)[0]
	id := big.NewInt(evmtest.ChainID)
	tx, err := types.SignNewTx(key.Key, types.LatestSignerForChainID(id), &types.DynamicFeeTx{ChainID: id, Nonce: nonce,
		GasTipCap: big.NewInt(tip), GasFeeCap: big.NewInt(100 * params.GWei), Gas: params.TxGas, To: &common.Address{0xde, 0xad},
		Value: big.NewInt(1)})
	require.NoError(t, err)
	raw, err := tx.MarshalBinary()
	require.NoError(t, err)
	require.NoError(t, p.client.SendRawTransaction(context.Background(), raw))
	testsupport.Within(5*time.Second, func() bool {
		n, err := p.client.PendingNonce(context.Background(), key.Address)
		return err == nil && n > nonce
	})
	return tx
}

// The pool read: a transaction the node never saw is absent, one sent is
// pending, one in a block is mined; each read is one batch of two calls to
// one endpoint.
func TestClient_InclusionPool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := setupProxied(t)

	inc, err := p.client.Inclusion(ctx, common.Hash{0x01})
	require.NoError(t, err)
	assert.Equal(t, txm.PoolAbsent, inc.Pool)

	tx := p.sendTip(t, 0, params.GWei)
	p.proxy.Reset()
	inc, err = p.client.Inclusion(ctx, tx.Hash())
	require.NoError(t, err)
	assert.Equal(t, txm.PoolPending, inc.Pool, "waiting in the pool")
	calls := p.proxy.Calls()
	require.Len(t, calls, 2)
	assert.Equal(t, "eth_getTransactionByHash", calls[0].Method)
	assert.Equal(t, "eth_feeHistory", calls[1].Method)
	assert.Equal(t, calls[0].Request, calls[1].Request, "one batch")

	p.chain.Commit()
	inc, err = p.client.Inclusion(ctx, tx.Hash())
	require.NoError(t, err)
	assert.Equal(t, txm.PoolMined, inc.Pool)
}

// The inclusion price: the next block's base fee, and the median over the
// window of each block's chosen percentile of tips; quiet blocks make a
// tip of 0.
func TestClient_InclusionPrice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("quiet blocks", func(t *testing.T) {
		t.Parallel()
		p := setupProxied(t)
		inc, err := p.client.Inclusion(ctx, common.Hash{0x01})
		require.NoError(t, err)
		require.NotNil(t, inc.Price)
		assert.Zero(t, inc.Price.Tip.Sign(), "empty blocks included anything")
		p.chain.Commit()
		assert.Equal(t, p.baseFee(t), inc.Price.NextBaseFee, "the base fee of the block sealed next")
	})

	t.Run("percentile of the recent blocks", func(t *testing.T) {
		t.Parallel()
		for _, tt := range []struct {
			percentile float64
			want       int64
		}{{10, 2 * params.GWei}, {90, 10 * params.GWei}} {
			p := setupProxied(t, func(o *Options) { o.InclusionBlocks, o.InclusionPercentile = 4, tt.percentile })
			nonce := uint64(0)
			for range 4 { // each block: one transfer at 10 gwei, one at 2
				p.sendTip(t, nonce, 10*params.GWei)
				p.sendTip(t, nonce+1, 2*params.GWei)
				p.chain.Commit()
				nonce += 2
			}
			inc, err := p.client.Inclusion(ctx, common.Hash{0x01})
			require.NoError(t, err)
			require.NotNil(t, inc.Price)
			assert.Equal(t, big.NewInt(tt.want), inc.Price.Tip, "percentile %v", tt.percentile)
			assert.Equal(t, 4, inc.Price.Blocks)
			next := inc.Price.NextBaseFee
			at := func(fee, tip int64) txm.Fees {
				return txm.Fees{MaxFeePerGas: big.NewInt(fee), MaxPriorityFeePerGas: big.NewInt(tip)}
			}
			plenty := int64(100 * params.GWei)
			assert.True(t, inc.Price.Admits(at(plenty, tt.want)), "a tip like what was included")
			assert.False(t, inc.Price.Admits(at(plenty, tt.want-1)), "a tip below it")
			assert.False(t, inc.Price.Admits(at(next.Int64()-1, tt.want)), "a max fee below the next base fee")
			assert.False(t, inc.Price.Admits(at(next.Int64()+tt.want-1, tt.want)), "a max fee that leaves less than the tip")
		}
	})

	t.Run("no fee history", func(t *testing.T) {
		t.Parallel()
		p := setupProxied(t)
		p.proxy.Fail("eth_feeHistory", -1, rpcproxy.Fault{RPCError: &rpcproxy.RPCError{Code: -32601,
			Message: "the method eth_feeHistory does not exist/is not available"}})
		tx := p.sendTip(t, 0, params.GWei)
		inc, err := p.client.Inclusion(ctx, tx.Hash())
		require.NoError(t, err, "the pool's answer stands on its own")
		assert.Equal(t, txm.PoolPending, inc.Pool)
		assert.Nil(t, inc.Price)
	})

	t.Run("the pool read fails", func(t *testing.T) {
		t.Parallel()
		p := setupProxied(t)
		p.proxy.Fail("eth_getTransactionByHash", 1, rpcproxy.Fault{RPCError: &rpcproxy.RPCError{Code: -32000,
			Message: "transaction indexing is in progress"}})
		_, err := p.client.Inclusion(ctx, common.Hash{0x01})
		require.ErrorContains(t, err, "transaction indexing is in progress")
		p.proxy.Fail("eth_getTransactionByHash", 1, rpcproxy.Fault{HTTPStatus: 502})
		_, err = p.client.Inclusion(ctx, common.Hash{0x01})
		require.Error(t, err)
	})
}

func TestClient_PublicMempool(t *testing.T) {
	t.Parallel()
	assert.True(t, setupProxied(t).client.PublicMempool())
	assert.False(t, setupProxied(t, func(o *Options) { o.NoPublicMempool = true }).client.PublicMempool())
}

// nonceTooHigh is the answer of a sequencer that has not yet seen the
// nonce before the transaction's.
var nonceTooHighFault = rpcproxy.Fault{RPCError: &rpcproxy.RPCError{Code: -32000, Message: "nonce too high"}}

// On a chain without a public pool, "nonce too high" is followed by the
// same bytes at once, up to NonceTooHighRetries times; on a chain with one
// it is returned as it came, transient.
func TestClient_NonceTooHighRetries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	raw := func(t *testing.T, nonce uint64) []byte {
		key := evmtest.DevKeys(1)[0]
		b, err := signed(t, key, nonce, &common.Address{0xde, 0xad}, 1, params.TxGas, nil).MarshalBinary()
		require.NoError(t, err)
		return b
	}

	t.Run("public pool", func(t *testing.T) {
		t.Parallel()
		p := setupProxied(t)
		p.proxy.Fail("eth_sendRawTransaction", 1, nonceTooHighFault)
		err := p.client.SendRawTransaction(ctx, raw(t, 0))
		assert.Equal(t, txm.ReasonTransient, txm.ReasonOf(err))
		assert.Equal(t, 1, p.proxy.Count("eth_sendRawTransaction"), "not sent again")
	})

	t.Run("no public pool", func(t *testing.T) {
		t.Parallel()
		p := setupProxied(t, func(o *Options) { o.NoPublicMempool, o.NonceTooHighRetries = true, 3 })
		p.proxy.Fail("eth_sendRawTransaction", 2, nonceTooHighFault)
		require.NoError(t, p.client.SendRawTransaction(ctx, raw(t, 0)))
		assert.Equal(t, 3, p.proxy.Count("eth_sendRawTransaction"), "sent again until the sequencer took it")

		p.proxy.Reset()
		p.proxy.Fail("eth_sendRawTransaction", 10, nonceTooHighFault)
		err := p.client.SendRawTransaction(ctx, raw(t, 1))
		assert.Equal(t, txm.ReasonTransient, txm.ReasonOf(err), "the answer once the retries are spent")
		assert.Equal(t, 4, p.proxy.Count("eth_sendRawTransaction"))

		p.proxy.Heal()
		p.proxy.Reset()
		// In a batch, the transactions answered so are sent again, in order.
		p.proxy.Fail("eth_sendRawTransaction", 2, nonceTooHighFault)
		for i, err := range p.client.SendRawTransactions(ctx, [][]byte{raw(t, 1), raw(t, 2), raw(t, 3)}) {
			assert.NoError(t, err, "tx %d", i)
		}
		calls := p.proxy.Calls()
		require.Len(t, calls, 5)
		assert.NotEqual(t, calls[0].Request, calls[3].Request, "a second batch")
		assert.Equal(t, calls[3].Request, calls[4].Request)
		for i, c := range []int{0, 1} {
			assert.Equal(t, string(calls[c].Params), string(calls[3+i].Params), "the same bytes, in order")
		}
	})
}
