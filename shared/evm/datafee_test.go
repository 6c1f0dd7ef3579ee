package evm

import (
	"context"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/rpc"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/evm/rpcproxy"
	"github.com/txfence/txfence/shared/txm"
)

// dataFeeEnv is a simulated chain with the predeploys in genesis, a proxy
// that counts calls in front of it and a client of kind.
type dataFeeEnv struct {
	chain  *evmtest.Chain
	proxy  *rpcproxy.Proxy
	client *Client
	keys   []evmtest.DevKey
}

func setupDataFee(t *testing.T, kind DataFeeKind, predeploys bool) *dataFeeEnv {
	t.Helper()
	keys := evmtest.DevKeys(2)
	alloc := evmtest.FundedAlloc(keys, nil)
	if predeploys {
		evmtest.InstallPredeploys(alloc)
	}
	chain := evmtest.Start(t, alloc)
	proxy := rpcproxy.Start(t, chain.URL)
	o := DefaultOptions()
	o.DataFee = kind
	client, err := Dial(context.Background(), evmtest.ChainID, []string{proxy.URL}, o)
	require.NoError(t, err)
	t.Cleanup(client.Close)
	return &dataFeeEnv{chain: chain, proxy: proxy, client: client, keys: keys}
}

// call is an eth_call of method on the predeploy at to, unpacked.
func (e *dataFeeEnv) call(t *testing.T, to common.Address, c *evmtest.Contract, method string, args ...any) []any {
	t.Helper()
	data, err := c.Pack(method, args...)
	require.NoError(t, err)
	var out hexutil.Bytes
	require.NoError(t, e.client.do(context.Background(), func(ctx context.Context, rc *rpc.Client) error {
		return rc.CallContext(ctx, &out, "eth_call", callArgs{To: &to, Data: data}, "latest")
	}))
	vals, err := c.ABI.Unpack(method, out)
	require.NoError(t, err)
	return vals
}

func TestPredeployAddresses(t *testing.T) {
	t.Parallel()
	require.Equal(t, evmtest.GasPriceOracleAddress, GasPriceOracleAddress)
	require.Equal(t, evmtest.NodeInterfaceAddress, NodeInterfaceAddress)
}

// TestDataFees_OPStack: the fee is GasPriceOracle.getL1Fee of the
// transaction as it will be signed: the same, to the wei, as the oracle
// asks of the signed bytes; it grows with the calldata and follows the L1
// base fee; several transactions are priced in one batch.
func TestDataFees_OPStack(t *testing.T) {
	t.Parallel()
	e := setupDataFee(t, DataFeeOPStack, true)
	require.True(t, e.client.ChargesDataFee())
	ctx := context.Background()
	to := e.keys[1].Address
	gpo := evmtest.GasPriceOracle()
	var tx txm.DataFeeTx
	var want *big.Int
	// Nonce 8's signature has r and s of 32 bytes each, as most do; nonce
	// 7's s has a leading zero byte, so its signed bytes are one shorter
	// than priced: the price is never below the signed transaction's.
	for _, nonce := range []uint64{8, 7} {
		tx = txm.DataFeeTx{From: e.keys[0].Address, To: &to, Value: big.NewInt(1), Nonce: nonce, Gas: 21000,
			MaxFeePerGas: big.NewInt(100 * params1Gwei), MaxPriorityFeePerGas: big.NewInt(params1Gwei)}
		fees, err := e.client.DataFees(ctx, []txm.DataFeeTx{tx})
		require.NoError(t, err)
		require.Len(t, fees, 1)

		// The same transaction signed for real, and the oracle's fee of
		// its bytes.
		real, err := types.SignTx(types.NewTx(&types.DynamicFeeTx{ChainID: big.NewInt(evmtest.ChainID), Nonce: nonce,
			GasTipCap: tx.MaxPriorityFeePerGas, GasFeeCap: tx.MaxFeePerGas, Gas: 21000, To: &to, Value: big.NewInt(1)}),
			types.LatestSignerForChainID(big.NewInt(evmtest.ChainID)), e.keys[0].Key)
		require.NoError(t, err)
		raw, err := real.MarshalBinary()
		require.NoError(t, err)
		want = e.call(t, GasPriceOracleAddress, gpo, "getL1Fee", raw)[0].(*big.Int)
		if nonce == 8 {
			require.Equal(t, want, fees[0], "the fee of the signed bytes")
			require.Equal(t, new(big.Int).Mul(big.NewInt(int64(16*len(raw)+188)), evmtest.GenesisL1BaseFee), fees[0])
		} else {
			require.Equal(t, new(big.Int).Add(want, new(big.Int).Mul(big.NewInt(16), evmtest.GenesisL1BaseFee)), fees[0],
				"one byte more than a signature with a short s")
		}
	}
	base, err := e.client.DataFees(ctx, []txm.DataFeeTx{tx})
	require.NoError(t, err)

	// 100 bytes more calldata: 16 L1 gas a byte more (the length prefix
	// grows by one byte too).
	withData := tx
	withData.Data = make([]byte, 100)
	legacy := tx
	legacy.MaxFeePerGas, legacy.MaxPriorityFeePerGas, legacy.GasPrice = nil, nil, big.NewInt(100*params1Gwei)
	e.proxy.Reset()
	fees, err := e.client.DataFees(ctx, []txm.DataFeeTx{tx, withData, legacy})
	require.NoError(t, err)
	require.Len(t, fees, 3)
	require.Equal(t, 3, e.proxy.Count("eth_call"))
	calls := e.proxy.Calls()
	require.Equal(t, calls[0].Request, calls[len(calls)-1].Request, "one batch")
	require.Equal(t, new(big.Int).Mul(big.NewInt(16*101), evmtest.GenesisL1BaseFee), new(big.Int).Sub(fees[1], fees[0]))
	// A legacy transaction carries no chain id, access list or tip field,
	// but an EIP-155 v of two bytes.
	require.NotEqual(t, fees[0], fees[2])

	// The L1 base fee moves: so does the fee.
	set, err := gpo.Pack("setL1BaseFee", big.NewInt(3*params1Gwei))
	require.NoError(t, err)
	e.chain.MustTransact(t, e.keys[0], GasPriceOracleAddress, nil, set)
	moved, err := e.client.DataFees(ctx, []txm.DataFeeTx{tx})
	require.NoError(t, err)
	require.Equal(t, new(big.Int).Mul(base[0], big.NewInt(3)), moved[0])
}

// TestDataFees_Arbitrum: the fee is NodeInterface's gasEstimateL1Component
// for the calldata, in L2 gas, at the most the transaction may pay per gas;
// without a price, at the L2 base fee the node answered with.
func TestDataFees_Arbitrum(t *testing.T) {
	t.Parallel()
	e := setupDataFee(t, DataFeeArbitrum, true)
	ctx := context.Background()
	to := e.keys[1].Address
	maxFee := big.NewInt(50 * params1Gwei)
	tx := txm.DataFeeTx{From: e.keys[0].Address, To: &to, Data: make([]byte, 60), Gas: 50000, MaxFeePerGas: maxFee,
		MaxPriorityFeePerGas: big.NewInt(params1Gwei)}
	create := txm.DataFeeTx{From: e.keys[0].Address, Data: make([]byte, 10), Gas: 90000, GasPrice: big.NewInt(7)}
	unpriced := txm.DataFeeTx{From: e.keys[0].Address, To: &to, Gas: 21000}

	fees, err := e.client.DataFees(ctx, []txm.DataFeeTx{tx, create, unpriced})
	require.NoError(t, err)
	gas := func(n int64) *big.Int { return big.NewInt((n + 140) * evmtest.GenesisGasPerByte.Int64()) }
	require.Equal(t, new(big.Int).Mul(gas(60), maxFee), fees[0])
	require.Equal(t, new(big.Int).Mul(gas(10), big.NewInt(7)), fees[1])
	// geth runs eth_call without a price at a base fee of zero: the base
	// fee answered is what the call saw.
	got := e.call(t, NodeInterfaceAddress, evmtest.NodeInterface(), "gasEstimateL1Component", to, false, []byte{})
	require.Equal(t, new(big.Int).Mul(gas(0), got[1].(*big.Int)), fees[2])

	set, err := evmtest.NodeInterface().Pack("setGasPerByte", big.NewInt(2))
	require.NoError(t, err)
	e.chain.MustTransact(t, e.keys[0], NodeInterfaceAddress, nil, set)
	fees, err = e.client.DataFees(ctx, []txm.DataFeeTx{tx})
	require.NoError(t, err)
	require.Equal(t, new(big.Int).Mul(big.NewInt((60+140)*2), maxFee), fees[0])
}

// TestDataFees_None: a chain without a data fee prices every transaction
// at zero without asking the node.
func TestDataFees_None(t *testing.T) {
	t.Parallel()
	e := setupDataFee(t, DataFeeNone, false)
	require.False(t, e.client.ChargesDataFee())
	e.proxy.Reset()
	fees, err := e.client.DataFees(context.Background(), []txm.DataFeeTx{{From: e.keys[0].Address}, {From: e.keys[1].Address}})
	require.NoError(t, err)
	require.Equal(t, []*big.Int{new(big.Int), new(big.Int)}, fees)
	require.Empty(t, e.proxy.Calls())
}

// TestDataFees_NoOracle: a chain of a kind whose oracle is not there (no
// code at the predeploy's address) is told, not priced at zero.
func TestDataFees_NoOracle(t *testing.T) {
	t.Parallel()
	for _, kind := range []DataFeeKind{DataFeeOPStack, DataFeeArbitrum} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			e := setupDataFee(t, kind, false)
			to := e.keys[1].Address
			_, err := e.client.DataFees(context.Background(), []txm.DataFeeTx{{From: e.keys[0].Address, To: &to, Gas: 21000}})
			require.ErrorIs(t, err, txm.ErrNoDataFeeOracle)
		})
	}
}
