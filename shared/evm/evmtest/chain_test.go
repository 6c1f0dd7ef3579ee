package evmtest_test

import (
	"context"
	"fmt"
	"math/big"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/testsupport"
)

func TestDevKeys_Deterministic(t *testing.T) {
	t.Parallel()
	a, b := evmtest.DevKeys(3), evmtest.DevKeys(3)
	require.Len(t, a, 3)
	seen := map[string]bool{}
	for i := range a {
		require.Equal(t, a[i].Address, b[i].Address)
		require.Equal(t, crypto.PubkeyToAddress(a[i].Key.PublicKey), a[i].Address)
		require.False(t, seen[a[i].Address.Hex()], "duplicate key")
		seen[a[i].Address.Hex()] = true
	}
}

func TestChain_ServesHTTP(t *testing.T) {
	t.Parallel()
	keys := evmtest.DevKeys(2)
	chain := evmtest.Start(t, evmtest.FundedAlloc(keys, nil))
	ctx := context.Background()

	ec, err := ethclient.DialContext(ctx, chain.URL)
	require.NoError(t, err)
	t.Cleanup(ec.Close)

	id, err := ec.ChainID(ctx)
	require.NoError(t, err)
	require.EqualValues(t, evmtest.ChainID, id.Uint64())

	bal, err := ec.BalanceAt(ctx, keys[0].Address, nil)
	require.NoError(t, err)
	require.Equal(t, evmtest.DevBalance(), bal)

	head, err := ec.HeaderByNumber(ctx, nil)
	require.NoError(t, err)
	to := keys[1].Address
	tx, err := types.SignTx(types.NewTx(&types.DynamicFeeTx{
		ChainID:   big.NewInt(evmtest.ChainID),
		Nonce:     0,
		GasTipCap: big.NewInt(1e9),
		GasFeeCap: new(big.Int).Add(new(big.Int).Mul(head.BaseFee, big.NewInt(2)), big.NewInt(1e9)),
		Gas:       21000,
		To:        &to,
		Value:     big.NewInt(1),
	}), types.LatestSignerForChainID(big.NewInt(evmtest.ChainID)), keys[0].Key)
	require.NoError(t, err)
	require.NoError(t, ec.SendTransaction(ctx, tx))

	waitPending(t, ec, keys[0].Address, 1)
	latest, err := ec.NonceAt(ctx, keys[0].Address, nil)
	require.NoError(t, err)
	require.EqualValues(t, 0, latest)

	stop := chain.StartMining(10 * time.Millisecond)
	defer stop()
	require.Eventually(t, func() bool {
		r, err := ec.TransactionReceipt(ctx, tx.Hash())
		return err == nil && r.Status == types.ReceiptStatusSuccessful
	}, 5*time.Second, 10*time.Millisecond)
}

func TestChain_CloseTwice(t *testing.T) {
	t.Parallel()
	chain, err := evmtest.New(nil)
	require.NoError(t, err)
	chain.StartMining(time.Millisecond)
	require.NoError(t, chain.Close())
	require.NoError(t, chain.Close())
}

func TestChain_UnknownTransactionIsNotFound(t *testing.T) {
	t.Parallel()
	chain := evmtest.Start(t, nil)
	ctx := context.Background()
	ec, err := ethclient.DialContext(ctx, chain.URL)
	require.NoError(t, err)
	t.Cleanup(ec.Close)

	_, _, err = ec.TransactionByHash(ctx, common.HexToHash("0x01"))
	require.ErrorIs(t, err, ethereum.NotFound)
	_, err = ec.TransactionReceipt(ctx, common.HexToHash("0x01"))
	require.ErrorIs(t, err, ethereum.NotFound)
}

func TestChain_Rollback(t *testing.T) {
	t.Parallel()
	keys := evmtest.DevKeys(1)
	chain := evmtest.Start(t, evmtest.FundedAlloc(keys, nil))
	ctx := context.Background()
	ec, err := ethclient.DialContext(ctx, chain.URL)
	require.NoError(t, err)
	t.Cleanup(ec.Close)

	to := keys[0].Address
	tx, err := types.SignTx(types.NewTx(&types.DynamicFeeTx{
		ChainID: big.NewInt(evmtest.ChainID), GasTipCap: big.NewInt(1e9), GasFeeCap: big.NewInt(1e11),
		Gas: 21000, To: &to,
	}), types.LatestSignerForChainID(big.NewInt(evmtest.ChainID)), keys[0].Key)
	require.NoError(t, err)
	require.NoError(t, ec.SendTransaction(ctx, tx))
	waitPending(t, ec, to, 1)

	chain.Rollback()
	pending, err := ec.PendingNonceAt(ctx, to)
	require.NoError(t, err)
	require.Zero(t, pending)
}

// send signs a transfer of 1 wei from key at nonce, paying tip and feeCap,
// and sends it to the chain.
// waitPending waits until the node's pending nonce of addr is want: the
// pool promotes a sent transaction in the background (the RPC adds it
// without waiting), so a read at once may not count it yet.
func waitPending(t *testing.T, ec *ethclient.Client, addr common.Address, want uint64) {
	t.Helper()
	var got uint64
	var err error
	testsupport.Within(5*time.Second, func() bool {
		got, err = ec.PendingNonceAt(context.Background(), addr)
		return err == nil && got == want
	})
	require.NoError(t, err)
	require.Equal(t, want, got, "pending nonce")
}

func send(t *testing.T, ec *ethclient.Client, key evmtest.DevKey, nonce uint64, to common.Address, gas uint64, tip, feeCap *big.Int) *types.Transaction {
	t.Helper()
	tx, err := types.SignTx(types.NewTx(&types.DynamicFeeTx{
		ChainID: big.NewInt(evmtest.ChainID), Nonce: nonce, GasTipCap: tip, GasFeeCap: feeCap,
		Gas: gas, To: &to, Value: big.NewInt(1),
	}), types.LatestSignerForChainID(big.NewInt(evmtest.ChainID)), key.Key)
	require.NoError(t, err)
	require.NoError(t, ec.SendTransaction(context.Background(), tx))
	return tx
}

func TestChain_GasBurnerRaisesBaseFee(t *testing.T) {
	t.Parallel()
	spammer := evmtest.NamedDevKey("spammer")
	alloc := evmtest.FundedAlloc([]evmtest.DevKey{spammer}, nil)
	alloc[evmtest.GasBurner] = evmtest.GasBurnerAccount()
	chain := evmtest.Start(t, alloc, evmtest.WithBlockGasLimit(10_000_000), evmtest.WithMinerTip(big.NewInt(1)))
	ctx := context.Background()
	ec, err := ethclient.DialContext(ctx, chain.URL)
	require.NoError(t, err)
	t.Cleanup(ec.Close)

	tip, err := ec.SuggestGasTipCap(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, tip.Int64(), "the miner's minimum tip is the first suggestion")
	before, err := ec.HeaderByNumber(ctx, nil)
	require.NoError(t, err)
	require.EqualValues(t, 10_000_000, before.GasLimit)

	const burn = 9_000_000
	tx := send(t, ec, spammer, 0, evmtest.GasBurner, burn, big.NewInt(100), big.NewInt(1e9))
	chain.Commit()
	r, err := ec.TransactionReceipt(ctx, tx.Hash())
	require.NoError(t, err)
	require.Equal(t, types.ReceiptStatusFailed, r.Status)
	require.EqualValues(t, burn, r.GasUsed, "the call uses its whole gas limit")
	chain.Commit()
	after, err := ec.HeaderByNumber(ctx, nil)
	require.NoError(t, err)
	require.Greater(t, after.Number.Uint64(), before.Number.Uint64())
	parent, err := ec.HeaderByNumber(ctx, r.BlockNumber)
	require.NoError(t, err)
	require.EqualValues(t, burn, parent.GasUsed)
	next, err := ec.HeaderByNumber(ctx, new(big.Int).Add(r.BlockNumber, big.NewInt(1)))
	require.NoError(t, err)
	require.Equal(t, 1, next.BaseFee.Cmp(parent.BaseFee), "a block past the target raises the base fee: %s → %s", parent.BaseFee, next.BaseFee)
}

func TestChain_ReorgKeepsPool(t *testing.T) {
	t.Parallel()
	for _, drop := range []bool{false, true} {
		t.Run(fmt.Sprintf("drop=%v", drop), func(t *testing.T) {
			t.Parallel()
			keys := evmtest.DevKeys(2)
			chain := evmtest.Start(t, evmtest.FundedAlloc(keys, nil))
			ctx := context.Background()
			ec, err := ethclient.DialContext(ctx, chain.URL)
			require.NoError(t, err)
			t.Cleanup(ec.Close)
			tip, feeCap := big.NewInt(1e9), big.NewInt(1e11)

			mined := send(t, ec, keys[0], 0, keys[1].Address, 21000, tip, feeCap)
			chain.Commit()
			r, err := ec.TransactionReceipt(ctx, mined.Hash())
			require.NoError(t, err)
			oldHead := r.BlockHash
			waiting := send(t, ec, keys[0], 1, keys[1].Address, 21000, tip, feeCap) // in the pool
			other := send(t, ec, keys[1], 0, keys[0].Address, 21000, tip, feeCap)   // in the pool

			require.NoError(t, chain.Reorg(1, drop))
			gone, err := ec.HeaderByHash(ctx, oldHead)
			if err == nil {
				canon, err := ec.HeaderByNumber(ctx, gone.Number)
				require.NoError(t, err)
				require.NotEqual(t, oldHead, canon.Hash(), "the old block is no longer canonical")
			}
			chain.Commit()
			_, err = ec.TransactionReceipt(ctx, other.Hash())
			require.NoError(t, err, "a pooled transaction survives the reorg")
			_, err = ec.TransactionReceipt(ctx, mined.Hash())
			_, werr := ec.TransactionReceipt(ctx, waiting.Hash())
			if drop {
				require.ErrorIs(t, err, ethereum.NotFound, "dropped with its block")
				require.ErrorIs(t, werr, ethereum.NotFound, "kept, but waits for the dropped nonce 0")
				pending, err := ec.PendingNonceAt(ctx, keys[0].Address)
				require.NoError(t, err)
				require.Zero(t, pending)
				return
			}
			require.NoError(t, err, "back in the pool, mined again")
			require.NoError(t, werr)
		})
	}
}

func TestChain_ReorgUnderTraffic(t *testing.T) {
	t.Parallel()
	keys := evmtest.DevKeys(1)
	chain := evmtest.Start(t, evmtest.FundedAlloc(keys, nil))
	ctx := context.Background()
	ec, err := ethclient.DialContext(ctx, chain.URL)
	require.NoError(t, err)
	t.Cleanup(ec.Close)
	stop := chain.StartMining(20 * time.Millisecond)
	defer stop()
	require.Eventually(t, func() bool {
		h, err := ec.BlockNumber(ctx)
		return err == nil && h > 3
	}, 10*time.Second, 10*time.Millisecond)

	// A sender keeps the pool busy while reorgs run, and then, as a wallet
	// does, rebroadcasts what is not mined yet (a reorg may lose a
	// transaction that arrives at the wrong moment).
	const n = 150
	signer := types.LatestSignerForChainID(big.NewInt(evmtest.ChainID))
	txs := make([]*types.Transaction, n)
	for i := range txs {
		txs[i] = types.MustSignNewTx(keys[0].Key, signer, &types.DynamicFeeTx{ChainID: big.NewInt(evmtest.ChainID), Nonce: uint64(i),
			GasTipCap: big.NewInt(1e9), GasFeeCap: big.NewInt(1e11), Gas: 21000, To: &keys[0].Address})
	}
	sent := make(chan error, 1)
	var count atomic.Int64
	go func() {
		for _, tx := range txs {
			if err := ec.SendTransaction(ctx, tx); err != nil {
				sent <- fmt.Errorf("nonce %d: %w", tx.Nonce(), err)
				return
			}
			count.Add(1)
			// sleep: the sender's traffic is spread over the reorgs, a transaction a millisecond
			time.Sleep(time.Millisecond)
		}
		sent <- nil
	}()
	// Each reorg comes after another sixth of the traffic, so that all five
	// run while transactions arrive.
	for i := 1; i <= 5; i++ {
		testsupport.Eventually(t, 20*time.Second, fmt.Sprintf("%d transactions sent before reorg %d", i*n/6, i), func() bool {
			return count.Load() >= int64(i*n/6)
		})
		require.NoError(t, chain.Reorg(2, false))
	}
	require.NoError(t, <-sent)
	require.Eventually(t, func() bool {
		mined, err := ec.NonceAt(ctx, keys[0].Address, nil)
		if err != nil {
			return false
		}
		for _, tx := range txs[mined:] {
			_ = ec.SendTransaction(ctx, tx)
		}
		return mined == n
	}, 20*time.Second, 200*time.Millisecond, "every transaction mined")
}

// TestChain_TxPoolQueue sends 200 transactions of one account behind a
// nonce gap, so that all of them wait for promotion: geth's pool keeps 64
// of them by default, and every one with WithTxPoolQueue(256).
func TestChain_TxPoolQueue(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		queue uint64
		kept  int
	}{{0, 64}, {256, 200}} {
		t.Run(fmt.Sprintf("queue=%d", c.queue), func(t *testing.T) {
			t.Parallel()
			keys := evmtest.DevKeys(2)
			var opts []evmtest.Option
			if c.queue != 0 {
				opts = append(opts, evmtest.WithTxPoolQueue(c.queue))
			}
			chain := evmtest.Start(t, evmtest.FundedAlloc(keys, nil), opts...)
			ctx := context.Background()
			ec, err := ethclient.DialContext(ctx, chain.URL)
			require.NoError(t, err)
			t.Cleanup(ec.Close)
			for nonce := uint64(1); nonce <= 200; nonce++ { // nonce 0 never comes
				send(t, ec, keys[0], nonce, keys[1].Address, 21000, big.NewInt(1e9), big.NewInt(1e11))
			}
			chain.Commit() // a block lands while they wait
			var status struct{ Pending, Queued hexutil.Uint }
			require.Eventually(t, func() bool {
				err := ec.Client().CallContext(ctx, &status, "txpool_status")
				return err == nil && int(status.Queued) == c.kept
			}, 5*time.Second, 20*time.Millisecond, "queued: %d, want %d", status.Queued, c.kept)
			require.Zero(t, status.Pending)
		})
	}
}
