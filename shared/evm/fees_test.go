package evm

import (
	"context"
	"math/big"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/rpc"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/evm/rpcproxy"
	"github.com/txfence/txfence/shared/txm"
)

// proxied is a simulated chain (only empty blocks) behind a fault proxy, and
// a Client dialled to the proxy.
type proxied struct {
	chain  *evmtest.Chain
	proxy  *rpcproxy.Proxy
	client *Client
}

func setupProxied(t *testing.T, opts ...func(*Options)) *proxied {
	t.Helper()
	chain := evmtest.Start(t, evmtest.FundedAlloc(evmtest.DevKeys(1), nil))
	for range 3 {
		chain.Commit() // quiet blocks: fee history rewards are all 0
	}
	proxy := rpcproxy.Start(t, chain.URL)
	o := DefaultOptions()
	for _, f := range opts {
		f(&o)
	}
	client, err := Dial(context.Background(), evmtest.ChainID, []string{proxy.URL}, o)
	require.NoError(t, err)
	t.Cleanup(client.Close)
	return &proxied{chain: chain, proxy: proxy, client: client}
}

// baseFee is the simulated chain's latest base fee, read in process.
func (p *proxied) baseFee(t *testing.T) *big.Int {
	t.Helper()
	head, err := p.chain.Backend.Client().HeaderByNumber(context.Background(), nil)
	require.NoError(t, err)
	require.NotNil(t, head.BaseFee)
	return head.BaseFee
}

// methodNotFound is geth's own answer for a method it does not serve.
var methodNotFound = rpcproxy.Fault{RPCError: &rpcproxy.RPCError{
	Code: -32601, Message: "the method eth_maxPriorityFeePerGas does not exist/is not available",
}}

func TestIssue10_PriorityFeeRPCError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("internal error is returned, no fallback", func(t *testing.T) {
		t.Parallel()
		p := setupProxied(t, func(o *Options) { o.MinPriorityFee = big.NewInt(5) })
		p.proxy.Fail("eth_maxPriorityFeePerGas", -1, rpcproxy.Fault{RPCError: &rpcproxy.RPCError{Code: -32603, Message: "internal error"}})

		fees, err := p.client.SuggestFees(ctx)
		require.ErrorContains(t, err, "internal error")
		var rpcErr rpc.Error
		require.ErrorAs(t, err, &rpcErr)
		require.Equal(t, -32603, rpcErr.ErrorCode())
		require.Equal(t, txm.Fees{}, fees)
		require.Equal(t, 1, p.proxy.Count("eth_maxPriorityFeePerGas"))
		require.Zero(t, p.proxy.Count("eth_feeHistory"), "a node error is not a missing method")
	})

	t.Run("timeout is returned, no fallback", func(t *testing.T) {
		t.Parallel()
		p := setupProxied(t, func(o *Options) { o.CallTimeout = 300 * time.Millisecond })
		p.proxy.Fail("eth_maxPriorityFeePerGas", -1, rpcproxy.Fault{Delay: time.Minute})

		_, err := p.client.SuggestFees(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Zero(t, p.proxy.Count("eth_feeHistory"))
	})

	t.Run("method not found falls back to fee history", func(t *testing.T) {
		t.Parallel()
		floor := big.NewInt(7)
		p := setupProxied(t, func(o *Options) { o.MinPriorityFee = floor })
		p.proxy.Fail("eth_maxPriorityFeePerGas", -1, methodNotFound)

		// The fallback over quiet blocks really is 0: without the floor the
		// transaction would be signed with no tip.
		median, err := p.client.tip(ctx)
		require.NoError(t, err)
		require.Zero(t, median.Sign(), "median reward of empty blocks")
		require.Equal(t, 1, p.proxy.Count("eth_feeHistory"))

		fees, err := p.client.SuggestFees(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, p.proxy.Count("eth_feeHistory"), "the fallback was used")
		require.Equal(t, floor, fees.MaxPriorityFeePerGas, "the tip is the floor, never 0")
		base := p.baseFee(t)
		require.Equal(t, base, fees.BaseFee)
		require.Equal(t, new(big.Int).Add(new(big.Int).Mul(base, big.NewInt(2)), floor), fees.MaxFeePerGas)
	})

	t.Run("method not supported, said without -32601", func(t *testing.T) {
		t.Parallel()
		p := setupProxied(t, func(o *Options) { o.MinPriorityFee = big.NewInt(9) })
		p.proxy.Fail("eth_maxPriorityFeePerGas", -1, rpcproxy.Fault{RPCError: &rpcproxy.RPCError{Code: -32004, Message: "Method not supported"}})

		fees, err := p.client.SuggestFees(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, p.proxy.Count("eth_feeHistory"))
		require.Equal(t, big.NewInt(9), fees.MaxPriorityFeePerGas)
	})

	t.Run("node's own tip with base fee", func(t *testing.T) {
		t.Parallel()
		p := setupProxied(t)
		fees, err := p.client.SuggestFees(ctx)
		require.NoError(t, err)
		require.Zero(t, p.proxy.Count("eth_feeHistory"))
		require.Equal(t, p.baseFee(t), fees.BaseFee)
		require.Positive(t, fees.MaxPriorityFeePerGas.Sign())
	})

	t.Run("node answers 0", func(t *testing.T) {
		t.Parallel()
		floor := big.NewInt(11)
		fake := newFake(t, &fakeEth{})
		zero := newFakeWith(t, zeroTipEth{&fakeEth{}})
		for _, tt := range []struct {
			url      string
			wantHist bool
		}{{zero, false}, {fake.url, true}} {
			o := DefaultOptions()
			o.MinPriorityFee = floor
			c, err := New(evmtest.ChainID, []*rpc.Client{dialRPC(t, tt.url)}, o)
			require.NoError(t, err)
			t.Cleanup(c.Close)
			raw, err := c.tip(ctx)
			require.NoError(t, err)
			require.Zero(t, raw.Sign(), "the node suggests no tip")
			fees, err := c.SuggestFees(ctx)
			require.NoError(t, err)
			require.Equal(t, floor, fees.MaxPriorityFeePerGas)
			require.Equal(t, big.NewInt(100), fees.BaseFee)
			require.Equal(t, big.NewInt(211), fees.MaxFeePerGas)
		}
	})
}

// zeroTipEth is a node that serves eth_maxPriorityFeePerGas and answers 0.
type zeroTipEth struct{ *fakeEth }

func (zeroTipEth) MaxPriorityFeePerGas() *hexutil.Big { return (*hexutil.Big)(new(big.Int)) }

// newFakeWith serves svc's methods as the eth namespace and returns its URL.
func newFakeWith(t *testing.T, svc any) string {
	t.Helper()
	srv := rpc.NewServer()
	require.NoError(t, srv.RegisterName("eth", svc))
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		hs.Close()
		srv.Stop()
	})
	return hs.URL
}

func TestMethodMissing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want bool
	}{
		{&rpcError{-32601, "the method eth_maxPriorityFeePerGas does not exist/is not available"}, true}, // geth, Infura
		{&rpcError{-32601, "Method not found"}, true},                                                    // Besu, Nethermind
		{&rpcError{-32004, "Method not supported"}, true},                                                // EIP-1474
		{&rpcError{-32600, "Unsupported method: eth_maxPriorityFeePerGas"}, true},                        // Alchemy
		{&rpcError{-32000, "eth_maxPriorityFeePerGas is not supported on this network"}, true},
		{&rpcError{-32603, "internal error"}, false},
		{&rpcError{-32603, "service is not available"}, false},
		{&rpcError{-32000, "header not found"}, false},
		{&rpcError{-32005, "rate limit exceeded"}, false},
		{context.DeadlineExceeded, false},
		{rpc.HTTPError{StatusCode: 404, Status: "404 Not Found", Body: []byte("method not found")}, false},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, methodMissing(tt.err), "%v", tt.err)
	}
}
