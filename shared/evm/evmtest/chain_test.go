package evmtest_test

import (
	"context"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/evm/evmtest"
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

	pending, err := ec.PendingNonceAt(ctx, keys[0].Address)
	require.NoError(t, err)
	require.EqualValues(t, 1, pending)
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
	pending, err := ec.PendingNonceAt(ctx, to)
	require.NoError(t, err)
	require.EqualValues(t, 1, pending)

	chain.Rollback()
	pending, err = ec.PendingNonceAt(ctx, to)
	require.NoError(t, err)
	require.Zero(t, pending)
}
