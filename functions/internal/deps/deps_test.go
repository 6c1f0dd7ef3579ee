package deps

import (
	"time"

	"context"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/evm"
	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/evm/rpcproxy"
	"github.com/txfence/txfence/shared/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestChainOptions(t *testing.T) {
	t.Parallel()
	fees := config.ChainFees{MaxFee: big.NewInt(300), MaxTip: big.NewInt(20), MinTip: big.NewInt(4), MaxBumps: 3}
	prof := config.ChainProfile{Fees: fees, TipSource: config.TipFeeHistory, FeeHistoryPercentile: 25, FeeHistoryBlocks: 4,
		DataFee: config.DataFeeOPStack, PublicMempool: false, LagBlocks: 7, BlockTime: 3 * time.Second}
	opts := ChainOptions(evm.DefaultOptions(), prof)
	require.Equal(t, fees.MaxFee, opts.MaxFeeCap)
	require.Equal(t, fees.MaxTip, opts.MaxPriorityFeeCap)
	require.Equal(t, fees.MinTip, opts.MinPriorityFee)
	require.True(t, opts.TipFromFeeHistory)
	require.Equal(t, 25.0, opts.FeeHistoryPercentile)
	require.Equal(t, 4, opts.FeeHistoryBlocks)
	require.Equal(t, evm.DataFeeOPStack, opts.DataFee)
	require.True(t, opts.NoPublicMempool)
	require.Equal(t, uint64(7), opts.LagBlocks)
	require.Equal(t, 3*time.Second, opts.HeadInterval)
	require.False(t, ChainOptions(evm.DefaultOptions(), config.ChainProfile{PublicMempool: true, FeeHistoryBlocks: 1, LagBlocks: 1, BlockTime: time.Second}).NoPublicMempool)
	require.Equal(t, evm.DefaultOptions().CallTimeout, opts.CallTimeout, "the rest is kept")
}

func TestEndpointOptions(t *testing.T) {
	t.Parallel()
	a, b := common.HexToAddress("0xa1"), common.HexToAddress("0xb2")
	cfg := config.Config{SendOnly: []config.SendOnly{
		{ChainID: 1, Name: "protect", URL: "https://p.example/KEY", Signers: []common.Address{a}},
		{ChainID: 1, Name: "relay", URL: "https://r.example/KEY", PublicFallback: true},
		{ChainID: 2, Name: "other", URL: "https://o.example/KEY", PublicFallback: true, Signers: []common.Address{b}},
	}}
	opts := EndpointOptions(evm.DefaultOptions(), cfg, 1)
	require.Equal(t, []evm.SendOnlyEndpoint{{Name: "protect", URL: "https://p.example/KEY"},
		{Name: "relay", URL: "https://r.example/KEY", PublicFallback: true}}, opts.SendOnly)
	require.Equal(t, map[common.Address]string{a: "protect"}, opts.Routes, "another chain's routes are not this one's")
	require.Empty(t, EndpointOptions(opts, cfg, 3).SendOnly)
}

// TestIssue10_BuildAppliesChainFees builds a process against a real
// database and a simulated chain whose node lacks eth_maxPriorityFeePerGas
// (so the suggested tip over its empty blocks is 0): the chain's own fee
// policy, not the global one, bounds what its client suggests.
func TestIssue10_BuildAppliesChainFees(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	keys := evmtest.DevKeys(1)
	chain := evmtest.Start(t, evmtest.FundedAlloc(keys, nil))
	proxy := rpcproxy.Start(t, chain.URL)
	proxy.Fail("eth_maxPriorityFeePerGas", -1, rpcproxy.Fault{RPCError: &rpcproxy.RPCError{
		Code: -32601, Message: "the method eth_maxPriorityFeePerGas does not exist/is not available",
	}})
	head, err := chain.Backend.Client().HeaderByNumber(ctx, nil)
	require.NoError(t, err)

	db := pgtest.New(t)
	cfg := config.Defaults()
	cfg.Auth.Methods = []string{"dev"}
	cfg.Database.URL = db.URL
	cfg.Chains = []config.Chain{{ID: evmtest.ChainID, RPCURLs: []string{proxy.URL}}}
	cfg.Signers = []config.Signer{{Address: keys[0].Address}}
	minTip := big.NewInt(3_000_000) // above the global floor
	maxFee := new(big.Int).Set(head.BaseFee)
	cfg.ChainFees = map[uint64]config.FeeOverride{evmtest.ChainID: {MaxFee: maxFee, MinTip: minTip, MaxBumps: -1}}
	require.NoError(t, cfg.Validate())
	require.NotEqual(t, minTip, cfg.MinPriorityFee)

	p, err := Build(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(p.Close)

	fees, err := p.Chains[evmtest.ChainID].SuggestFees(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, proxy.Count("eth_feeHistory"), "the fallback was asked")
	require.Equal(t, minTip, fees.MaxPriorityFeePerGas, "the chain's tip floor")
	require.Equal(t, maxFee, fees.MaxFeePerGas, "the chain's fee cap (2 × base fee + tip is above it)")
}
