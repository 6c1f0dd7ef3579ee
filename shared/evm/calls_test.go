package evm

import (
	"context"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/rpc"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/evm/rpcproxy"
	"github.com/txfence/txfence/shared/txm"
)

func TestClient_ChainID(t *testing.T) {
	t.Parallel()
	e := setup(t)
	require.EqualValues(t, evmtest.ChainID, e.client.ChainID())
}

func TestClient_PendingAndLatestNonce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	addr := e.keys[0].Address

	tx := e.transfer(t, 0)
	waitPending(t, e, addr, 1, "the pool counts")
	latest, err := e.client.LatestNonce(ctx, addr)
	require.NoError(t, err)
	require.EqualValues(t, 0, latest, "nothing mined yet")

	has, err := e.client.HasTransaction(ctx, tx.Hash())
	require.NoError(t, err)
	require.True(t, has, "a pending transaction is known")

	e.chain.Commit()
	pending, err := e.client.PendingNonce(ctx, addr)
	require.NoError(t, err)
	latest, err = e.client.LatestNonce(ctx, addr)
	require.NoError(t, err)
	require.EqualValues(t, 1, pending)
	require.EqualValues(t, 1, latest)
}

// revertingInitCode deploys a contract whose every call reverts with data.
func revertingInitCode(data []byte) []byte {
	// runtime: CODECOPY(0, 12, len(data)); REVERT(0, len(data)); data
	runtime := append([]byte{
		0x60, byte(len(data)), 0x60, 0x0c, 0x60, 0x00, 0x39,
		0x60, byte(len(data)), 0x60, 0x00, 0xfd,
	}, data...)
	// init: CODECOPY(0, 12, len(runtime)); RETURN(0, len(runtime)); runtime
	init := []byte{
		0x60, byte(len(runtime)), 0x60, 0x0c, 0x60, 0x00, 0x39,
		0x60, byte(len(runtime)), 0x60, 0x00, 0xf3,
	}
	return append(init, runtime...)
}

// errorString is the ABI encoding of Error(reason).
func errorString(t *testing.T, reason string) []byte {
	t.Helper()
	typ, err := abi.NewType("string", "", nil)
	require.NoError(t, err)
	packed, err := abi.Arguments{{Type: typ}}.Pack(reason)
	require.NoError(t, err)
	return append([]byte{0x08, 0xc3, 0x79, 0xa0}, packed...)
}

func (e *env) deploy(t *testing.T, nonce uint64, initCode []byte) common.Address {
	t.Helper()
	tx := signed(t, e.keys[0], nonce, nil, 0, 300_000, initCode)
	e.send(t, tx)
	e.chain.Commit()
	rs, err := e.client.Receipts(context.Background(), []common.Hash{tx.Hash()})
	require.NoError(t, err)
	require.NotNil(t, rs[0])
	require.EqualValues(t, 1, rs[0].Status, "deployment succeeded")
	return crypto.CreateAddress(e.keys[0].Address, nonce)
}

func TestClient_EstimateGas(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	from := e.keys[0].Address

	to := e.keys[1].Address
	gas, err := e.client.EstimateGas(ctx, txm.CallMsg{From: from, To: &to, Value: big.NewInt(1)})
	require.NoError(t, err)
	require.EqualValues(t, 21000*120/100, gas, "a transfer plus the 20% margin")

	reasonData := errorString(t, "nope")
	withReason := e.deploy(t, 0, revertingInitCode(reasonData))
	bare := e.deploy(t, 1, revertingInitCode(nil))

	_, err = e.client.EstimateGas(ctx, txm.CallMsg{From: from, To: &withReason})
	var re *txm.RevertError
	require.ErrorAs(t, err, &re)
	require.Equal(t, "nope", re.Reason)
	require.Equal(t, reasonData, re.Data)

	_, err = e.client.EstimateGas(ctx, txm.CallMsg{From: from, To: &bare, Data: []byte{1, 2, 3}})
	re = nil
	require.ErrorAs(t, err, &re)
	require.Empty(t, re.Reason)
	require.Empty(t, re.Data)
	require.Equal(t, txm.ReasonReverted, txm.ReasonOf(ClassifyBroadcast(err)))
}

func TestClient_EstimateGasNoMargin(t *testing.T) {
	t.Parallel()
	e := setup(t, func(o *Options) { o.GasMarginPercent = 0 })
	to := e.keys[1].Address
	gas, err := e.client.EstimateGas(context.Background(), txm.CallMsg{From: e.keys[0].Address, To: &to})
	require.NoError(t, err)
	require.EqualValues(t, 21000, gas)
}

func TestClient_SuggestFees(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("eip1559", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		head, err := e.chain.Backend.Client().HeaderByNumber(ctx, nil)
		require.NoError(t, err)
		fees, err := e.client.SuggestFees(ctx)
		require.NoError(t, err)
		require.Nil(t, fees.GasPrice)
		require.NotNil(t, fees.MaxPriorityFeePerGas)
		want := new(big.Int).Add(new(big.Int).Mul(head.BaseFee, big.NewInt(2)), fees.MaxPriorityFeePerGas)
		require.Equal(t, want, fees.MaxFeePerGas, "2 × base fee + tip")
		require.Equal(t, head.BaseFee, fees.BaseFee)
	})

	t.Run("within caps", func(t *testing.T) {
		t.Parallel()
		e := setup(t, func(o *Options) {
			o.MaxFeeCap = big.NewInt(5)
			o.MaxPriorityFeeCap = big.NewInt(2)
			o.MinPriorityFee = big.NewInt(2)
		})
		fees, err := e.client.SuggestFees(ctx)
		require.NoError(t, err)
		require.Equal(t, big.NewInt(5), fees.MaxFeePerGas)
		require.Equal(t, big.NewInt(2), fees.MaxPriorityFeePerGas)
	})

	t.Run("tip never above max fee", func(t *testing.T) {
		t.Parallel()
		e := setup(t, func(o *Options) { o.MaxFeeCap = big.NewInt(3) })
		fees, err := e.client.SuggestFees(ctx)
		require.NoError(t, err)
		require.Equal(t, big.NewInt(3), fees.MaxFeePerGas)
		require.Equal(t, big.NewInt(3), fees.MaxPriorityFeePerGas, "the node's tip (0.001 gwei) held to the max fee")
	})

	t.Run("legacy forced", func(t *testing.T) {
		t.Parallel()
		e := setup(t, func(o *Options) { o.Legacy = true })
		fees, err := e.client.SuggestFees(ctx)
		require.NoError(t, err)
		require.Nil(t, fees.MaxFeePerGas)
		require.Nil(t, fees.MaxPriorityFeePerGas)
		require.Positive(t, fees.GasPrice.Sign())
	})
}

func TestClient_SuggestFeesFallbacks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := map[string]struct {
		fake   *fakeEth
		change func(*Options)
		want   txm.Fees
	}{
		"fee history median when eth_maxPriorityFeePerGas is missing": {
			fake: &fakeEth{rewards: []int64{5, 1, 3}},
			want: txm.Fees{MaxFeePerGas: big.NewInt(203), MaxPriorityFeePerGas: big.NewInt(3), BaseFee: big.NewInt(100)},
		},
		"min priority fee": {
			fake:   &fakeEth{rewards: []int64{5, 1, 3}},
			change: func(o *Options) { o.MinPriorityFee = big.NewInt(10) },
			want:   txm.Fees{MaxFeePerGas: big.NewInt(210), MaxPriorityFeePerGas: big.NewInt(10), BaseFee: big.NewInt(100)},
		},
		"empty fee history": {
			fake:   &fakeEth{},
			change: func(o *Options) { o.BaseFeeMultiplier = 3 },
			want:   txm.Fees{MaxFeePerGas: big.NewInt(300), MaxPriorityFeePerGas: big.NewInt(0), BaseFee: big.NewInt(100)},
		},
		"legacy when the head has no base fee": {
			fake: &fakeEth{noBase: true},
			want: txm.Fees{GasPrice: big.NewInt(42)},
		},
		"legacy clamped": {
			fake:   &fakeEth{noBase: true},
			change: func(o *Options) { o.MaxFeeCap = big.NewInt(40) },
			want:   txm.Fees{GasPrice: big.NewInt(40)},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			o := DefaultOptions()
			if tt.change != nil {
				tt.change(&o)
			}
			c, err := New(evmtest.ChainID, []*rpc.Client{dialRPC(t, newFake(t, tt.fake).url)}, o)
			require.NoError(t, err)
			t.Cleanup(c.Close)
			fees, err := c.SuggestFees(ctx)
			require.NoError(t, err)
			require.Equal(t, tt.want, fees)
		})
	}
}

func TestClient_SendRawTransaction(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()

	tx := e.transfer(t, 0)
	raw, err := tx.MarshalBinary()
	require.NoError(t, err)

	err = e.client.SendRawTransaction(ctx, raw)
	var be *txm.BroadcastError
	require.ErrorAs(t, err, &be, "sending the same bytes again is a classified error")
	t.Logf("resend classified as %q: %v", be.Reason, be.Err)

	err = e.client.SendRawTransaction(ctx, []byte{0xde, 0xad})
	require.ErrorAs(t, err, &be)
}

func TestClient_Receipts(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()

	start, err := e.client.Head(ctx)
	require.NoError(t, err)
	tx := e.transfer(t, 0)
	blockHash := e.chain.Commit()
	unknown := common.HexToHash("0x1234")

	rs, err := e.client.Receipts(ctx, []common.Hash{tx.Hash(), unknown})
	require.NoError(t, err)
	require.Len(t, rs, 2)
	require.Nil(t, rs[1])
	r := rs[0]
	require.NotNil(t, r)
	require.Equal(t, tx.Hash(), r.TxHash)
	require.Equal(t, blockHash, r.BlockHash)
	require.Equal(t, start.Number+1, r.BlockNumber)
	require.EqualValues(t, 1, r.Status)
	require.EqualValues(t, 21000, r.GasUsed)
	require.Positive(t, r.EffectiveGasPrice.Sign())

	rs, err = e.client.Receipts(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, rs)
}

func TestClient_BlockReceipts(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	a, b := e.transfer(t, 0), e.transfer(t, 1)
	waitPending(t, e, e.keys[0].Address, 2, "both in the pool")
	blockHash := e.chain.Commit()
	head, err := e.client.Head(ctx)
	require.NoError(t, err)
	c := e.transfer(t, 2)
	e.chain.Commit()

	blocks, err := e.client.BlockReceipts(ctx, []uint64{head.Number, head.Number + 1, head.Number + 50})
	require.NoError(t, err)
	require.Len(t, blocks, 3)
	require.Len(t, blocks[0], 2)
	for i, tx := range []common.Hash{a.Hash(), b.Hash()} {
		r := blocks[0][i]
		assert.Equal(t, tx, r.TxHash)
		assert.Equal(t, blockHash, r.BlockHash)
		assert.Equal(t, head.Number, r.BlockNumber)
		assert.EqualValues(t, 1, r.Status)
		assert.EqualValues(t, 21000, r.GasUsed)
	}
	require.Len(t, blocks[1], 1)
	assert.Equal(t, c.Hash(), blocks[1][0].TxHash)
	assert.Nil(t, blocks[2], "no block there yet")
}

// TestClient_BlockReceiptsNotServed: a node that does not serve
// eth_getBlockReceipts fails with ErrNoBlockReceipts, any other failure
// without it.
func TestClient_BlockReceiptsNotServed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := setupProxied(t)
	p.proxy.Fail("eth_getBlockReceipts", 1, methodNotFound)
	_, err := p.client.BlockReceipts(ctx, []uint64{1})
	require.ErrorIs(t, err, txm.ErrNoBlockReceipts)
	p.proxy.Fail("eth_getBlockReceipts", 1, rpcproxy.Fault{RPCError: &rpcproxy.RPCError{Code: -32603, Message: "internal error"}})
	_, err = p.client.BlockReceipts(ctx, []uint64{1})
	require.Error(t, err)
	require.NotErrorIs(t, err, txm.ErrNoBlockReceipts)
	blocks, err := p.client.BlockReceipts(ctx, []uint64{1})
	require.NoError(t, err)
	require.Len(t, blocks, 1)
}

func TestClient_Blocks(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	start, err := e.client.Head(ctx)
	require.NoError(t, err)
	for range 3 {
		e.chain.Commit()
	}

	head, err := e.client.Head(ctx)
	require.NoError(t, err)
	require.Equal(t, start.Number+3, head.Number)

	hs, tagged, err := e.client.Blocks(ctx, []uint64{1, head.Number, head.Number + 100}, []string{"latest", "finalized"})
	require.NoError(t, err)
	require.Len(t, hs, 3)
	require.Len(t, tagged, 2)
	require.Equal(t, head, *tagged[0], "the head, read with the blocks")
	require.NotNil(t, tagged[1])
	require.Nil(t, hs[2])
	for i, n := range []uint64{1, head.Number} {
		want, err := e.chain.Backend.Client().HeaderByNumber(ctx, new(big.Int).SetUint64(n))
		require.NoError(t, err)
		require.NotNil(t, hs[i])
		require.Equal(t, n, hs[i].Number)
		require.Equal(t, want.Hash(), hs[i].Hash)
		require.Equal(t, want.ParentHash, hs[i].ParentHash)
	}
	require.Equal(t, head, *hs[1])

	fin, err := e.client.Finalized(ctx)
	require.NoError(t, err)
	require.LessOrEqual(t, fin.Number, head.Number)
	want, err := e.chain.Backend.Client().HeaderByNumber(ctx, new(big.Int).SetUint64(fin.Number))
	require.NoError(t, err)
	require.Equal(t, want.Hash(), fin.Hash)
	require.Equal(t, fin, *tagged[1])
}

func TestClient_Reorg(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()

	parent, err := e.client.Head(ctx)
	require.NoError(t, err)
	height := parent.Number + 1
	tx := e.transfer(t, 0)
	old := e.chain.Commit()

	rs, err := e.client.Receipts(ctx, []common.Hash{tx.Hash()})
	require.NoError(t, err)
	require.NotNil(t, rs[0])
	require.Equal(t, old, rs[0].BlockHash)
	require.Equal(t, height, rs[0].BlockNumber)

	require.NoError(t, e.chain.Fork(parent.Hash))
	e.chain.Commit()
	e.chain.Commit()

	hs, _, err := e.client.Blocks(ctx, []uint64{height}, nil)
	require.NoError(t, err)
	require.NotNil(t, hs[0])
	require.NotEqual(t, old, hs[0].Hash, "the block holding the transaction was reorganised away")

	rs, err = e.client.Receipts(ctx, []common.Hash{tx.Hash()})
	require.NoError(t, err)
	has, err := e.client.HasTransaction(ctx, tx.Hash())
	require.NoError(t, err)
	if rs[0] == nil {
		t.Log("the dropped transaction was not re-included")
		return
	}
	// The simulated pool takes the dropped transaction back, and the next
	// block re-includes it: its receipt follows the new canonical chain.
	require.NotEqual(t, old, rs[0].BlockHash)
	canonical, _, err := e.client.Blocks(ctx, []uint64{rs[0].BlockNumber}, nil)
	require.NoError(t, err)
	require.Equal(t, canonical[0].Hash, rs[0].BlockHash)
	require.True(t, has)
}

func TestClient_HasTransactionUnknown(t *testing.T) {
	t.Parallel()
	e := setup(t)
	has, err := e.client.HasTransaction(context.Background(), common.HexToHash("0xabcdef"))
	require.NoError(t, err)
	require.False(t, has)
}
