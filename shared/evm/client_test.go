package evm

import (
	"context"
	"errors"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/rpc"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/testsupport"
	"github.com/txfence/txfence/shared/txm"
)

// env is a simulated chain served over HTTP and a Client dialled to it.
type env struct {
	chain  *evmtest.Chain
	client *Client
	keys   []evmtest.DevKey
}

func setup(t *testing.T, opts ...func(*Options)) *env {
	t.Helper()
	keys := evmtest.DevKeys(3)
	chain := evmtest.Start(t, evmtest.FundedAlloc(keys, nil))
	o := DefaultOptions()
	for _, f := range opts {
		f(&o)
	}
	client, err := Dial(context.Background(), evmtest.ChainID, []string{chain.URL}, o)
	require.NoError(t, err)
	t.Cleanup(client.Close)
	return &env{chain: chain, client: client, keys: keys}
}

// signed builds and signs a transaction from key; to nil deploys data.
func signed(t *testing.T, key evmtest.DevKey, nonce uint64, to *common.Address, value int64, gas uint64, data []byte) *types.Transaction {
	t.Helper()
	tx, err := types.SignTx(types.NewTx(&types.DynamicFeeTx{
		ChainID:   big.NewInt(evmtest.ChainID),
		Nonce:     nonce,
		GasTipCap: big.NewInt(params1Gwei),
		GasFeeCap: big.NewInt(100 * params1Gwei),
		Gas:       gas,
		To:        to,
		Value:     big.NewInt(value),
		Data:      data,
	}), types.LatestSignerForChainID(big.NewInt(evmtest.ChainID)), key.Key)
	require.NoError(t, err)
	return tx
}

const params1Gwei = 1_000_000_000

// send broadcasts tx through the client under test.
func (e *env) send(t *testing.T, tx *types.Transaction) {
	t.Helper()
	raw, err := tx.MarshalBinary()
	require.NoError(t, err)
	require.NoError(t, e.client.SendRawTransaction(context.Background(), raw))
}

// transfer sends 1 wei from key 0 to key 1 at nonce.
func (e *env) transfer(t *testing.T, nonce uint64) *types.Transaction {
	t.Helper()
	to := e.keys[1].Address
	tx := signed(t, e.keys[0], nonce, &to, 1, 21000, nil)
	e.send(t, tx)
	return tx
}

// waitPending waits until the node's pending nonce of addr is want. The
// pool promotes what it accepted in the background: read at once, on a
// busy machine, the pending nonce saw one of three transactions sent in
// one batch.
func waitPending(t *testing.T, e *env, addr common.Address, want uint64, msg string) {
	t.Helper()
	var got uint64
	var err error
	testsupport.Within(5*time.Second, func() bool {
		got, err = e.client.PendingNonce(context.Background(), addr)
		return err == nil && got == want
	})
	require.NoError(t, err)
	require.Equal(t, want, got, msg)
}

func dialRPC(t *testing.T, url string) *rpc.Client {
	t.Helper()
	rc, err := rpc.DialContext(context.Background(), url)
	require.NoError(t, err)
	return rc
}

func TestClient_DialRefusesWrongChain(t *testing.T) {
	t.Parallel()
	chain := evmtest.Start(t, nil)

	_, err := Dial(context.Background(), 1, []string{chain.URL}, DefaultOptions())
	require.ErrorIs(t, err, ErrWrongChain)
	require.ErrorContains(t, err, chain.URL)
	require.ErrorContains(t, err, "chain id 1337, want 1")
}

func TestClient_DialKeepsUnreachableEndpoint(t *testing.T) {
	t.Parallel()
	chain := evmtest.Start(t, nil)
	ctx := context.Background()

	c, err := Dial(ctx, evmtest.ChainID, []string{testsupport.DeadURL(t), chain.URL}, DefaultOptions())
	require.NoError(t, err)
	t.Cleanup(c.Close)
	_, err = c.Head(ctx)
	require.NoError(t, err)

	_, err = Dial(ctx, evmtest.ChainID, []string{testsupport.DeadURL(t)}, DefaultOptions())
	require.ErrorContains(t, err, "no endpoint reachable")
}

func TestClient_DialRejectsBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, err := Dial(ctx, 1, nil, DefaultOptions())
	require.Error(t, err)
	_, err = Dial(ctx, 1, []string{"http://127.0.0.1:1"}, Options{})
	require.ErrorContains(t, err, "call timeout")
	_, err = New(1, []*rpc.Client{nil}, DefaultOptions())
	require.Error(t, err)
	_, err = New(1, nil, DefaultOptions())
	require.Error(t, err)
}

func TestClient_OptionsValidate(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		change func(*Options)
		ok     bool
	}{
		"defaults":              {func(*Options) {}, true},
		"zero timeout":          {func(o *Options) { o.CallTimeout = 0 }, false},
		"zero multiplier":       {func(o *Options) { o.BaseFeeMultiplier = 0 }, false},
		"negative cap":          {func(o *Options) { o.MaxFeeCap = big.NewInt(-1) }, false},
		"min tip above tipcap":  {func(o *Options) { o.MinPriorityFee, o.MaxPriorityFeeCap = big.NewInt(2), big.NewInt(1) }, false},
		"min tip above fee cap": {func(o *Options) { o.MinPriorityFee, o.MaxFeeCap = big.NewInt(2), big.NewInt(1) }, false},
		"min tip at fee cap":    {func(o *Options) { o.MinPriorityFee, o.MaxFeeCap = big.NewInt(1), big.NewInt(1) }, true},
		"caps":                  {func(o *Options) { o.MaxFeeCap, o.MaxPriorityFeeCap = big.NewInt(10), big.NewInt(20) }, true},
		"op-stack data fee":     {func(o *Options) { o.DataFee = DataFeeOPStack }, true},
		"arbitrum data fee":     {func(o *Options) { o.DataFee = DataFeeArbitrum }, true},
		"unknown data fee":      {func(o *Options) { o.DataFee = "optimism" }, false},
		"negative retries":      {func(o *Options) { o.NonceTooHighRetries = -1 }, false},
		"no inclusion blocks":   {func(o *Options) { o.InclusionBlocks = 0 }, false},
		"too many blocks":       {func(o *Options) { o.InclusionBlocks = 1025 }, false},
		"percentile above 100":  {func(o *Options) { o.InclusionPercentile = 101 }, false},
		"negative percentile":   {func(o *Options) { o.InclusionPercentile = -1 }, false},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			o := DefaultOptions()
			tt.change(&o)
			if tt.ok {
				require.NoError(t, o.validate())
			} else {
				require.Error(t, o.validate())
			}
		})
	}
}

func TestClient_RedactsURLs(t *testing.T) {
	t.Parallel()
	require.Equal(t, "endpoint 0 (https://mainnet.example.io/...)", endpointName(0, "https://user:pw@mainnet.example.io/v3/SECRET"))
	require.Equal(t, "endpoint 1 (http://127.0.0.1:8545)", endpointName(1, "http://127.0.0.1:8545"))
	require.Equal(t, "endpoint 2 (wss://node.example/...)", endpointName(2, "wss://node.example?key=SECRET"))
	require.Equal(t, "endpoint 3", endpointName(3, "http://user:pw@node.example:x/SECRET"))
}

func TestClient_FailoverFromDeadEndpoint(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()

	c, err := New(evmtest.ChainID, []*rpc.Client{dialRPC(t, testsupport.DeadURL(t)), dialRPC(t, e.chain.URL)}, DefaultOptions())
	require.NoError(t, err)
	t.Cleanup(c.Close)

	n, err := c.PendingNonce(ctx, e.keys[0].Address)
	require.NoError(t, err)
	require.Zero(t, n)
	health := c.EndpointHealth()
	require.Equal(t, txm.EndpointDead, health[0].State, "the dead endpoint is known dead")
	require.Equal(t, "connection", health[0].LastError)
	require.Equal(t, txm.EndpointHealthy, health[1].State)
}

func TestClient_FailoverFromBadGateway(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()

	var hits atomic.Int64
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Error(w, "upstream down", http.StatusBadGateway)
	}))
	t.Cleanup(bad.Close)

	c, err := New(evmtest.ChainID, []*rpc.Client{dialRPC(t, bad.URL), dialRPC(t, e.chain.URL)}, DefaultOptions())
	require.NoError(t, err)
	t.Cleanup(c.Close)

	for range 3 {
		_, err := c.Head(ctx)
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, hits.Load(), "after one failover the good endpoint is used first")
}

func TestClient_NoFailoverOnJSONRPCError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	first := newFake(t, &fakeEth{nonceErr: errors.New("boom from the node")})
	second := newFake(t, &fakeEth{})

	c, err := New(evmtest.ChainID, []*rpc.Client{dialRPC(t, first.url), dialRPC(t, second.url)}, DefaultOptions())
	require.NoError(t, err)
	t.Cleanup(c.Close)
	_, err = c.Head(ctx) // the first call reads every endpoint's head
	require.NoError(t, err)
	second.hits.Store(0)

	_, err = c.PendingNonce(ctx, common.Address{})
	require.ErrorContains(t, err, "boom from the node")
	var rpcErr rpc.Error
	require.ErrorAs(t, err, &rpcErr, "the node's JSON-RPC error comes back as it was")
	require.Zero(t, second.hits.Load(), "a JSON-RPC error is an answer: no failover")
}

func TestClient_FailoverSkipsWrongChain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	wrong := newFake(t, &fakeEth{chainID: 1})
	right := newFake(t, &fakeEth{})

	c, err := New(evmtest.ChainID, []*rpc.Client{dialRPC(t, wrong.url), dialRPC(t, right.url)}, DefaultOptions())
	require.NoError(t, err)
	t.Cleanup(c.Close)

	for range 2 {
		n, err := c.LatestNonce(ctx, common.Address{})
		require.NoError(t, err)
		require.EqualValues(t, 7, n)
	}
	require.EqualValues(t, 1, wrong.hits.Load(), "checked once, then never used")

	only, err := New(evmtest.ChainID, []*rpc.Client{dialRPC(t, wrong.url)}, DefaultOptions())
	require.NoError(t, err)
	t.Cleanup(only.Close)
	_, err = only.LatestNonce(ctx, common.Address{})
	require.ErrorIs(t, err, ErrWrongChain)
}

func TestClient_CallTimeout(t *testing.T) {
	t.Parallel()
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // so the server sees the client go away
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}))
	t.Cleanup(slow.Close)

	o := DefaultOptions()
	o.CallTimeout = 200 * time.Millisecond
	c, err := New(evmtest.ChainID, []*rpc.Client{dialRPC(t, slow.URL)}, o)
	require.NoError(t, err)
	t.Cleanup(c.Close)

	_, err = c.Head(context.Background())
	require.Error(t, err)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestClient_CallerCancelStopsFailover(t *testing.T) {
	t.Parallel()
	second := newFake(t, &fakeEth{})
	c, err := New(evmtest.ChainID, []*rpc.Client{dialRPC(t, testsupport.DeadURL(t)), dialRPC(t, second.url)}, DefaultOptions())
	require.NoError(t, err)
	t.Cleanup(c.Close)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = c.Head(ctx)
	require.ErrorIs(t, err, context.Canceled)
	require.Zero(t, second.hits.Load())
}

// fakeEth is a scripted eth namespace for paths the simulated chain does not
// take: missing methods, legacy chains, other chains, node errors.
type fakeEth struct {
	chainID  uint64 // 0: evmtest.ChainID
	noBase   bool   // headers without baseFeePerGas (a legacy chain)
	nonceErr error
	rewards  []int64 // eth_feeHistory 50th percentile rewards
}

func (f *fakeEth) ChainId() hexutil.Uint64 {
	if f.chainID == 0 {
		return evmtest.ChainID
	}
	return hexutil.Uint64(f.chainID)
}

func (f *fakeEth) GetTransactionCount(_ common.Address, _ string) (hexutil.Uint64, error) {
	return 7, f.nonceErr
}

func (f *fakeEth) GetBlockByNumber(_ string, _ bool) map[string]any {
	h := map[string]any{
		"number":     hexutil.Uint64(5),
		"hash":       common.HexToHash("0x05"),
		"parentHash": common.HexToHash("0x04"),
	}
	if !f.noBase {
		h["baseFeePerGas"] = (*hexutil.Big)(big.NewInt(100))
	}
	return h
}

func (f *fakeEth) GasPrice() *hexutil.Big { return (*hexutil.Big)(big.NewInt(42)) }

func (f *fakeEth) FeeHistory(_ hexutil.Uint64, _ string, _ []float64) map[string]any {
	var reward [][]*hexutil.Big
	for _, r := range f.rewards {
		reward = append(reward, []*hexutil.Big{(*hexutil.Big)(big.NewInt(r))})
	}
	return map[string]any{"oldestBlock": hexutil.Uint64(1), "reward": reward}
}

type fakeServer struct {
	url  string
	hits atomic.Int64
}

func newFake(t *testing.T, svc *fakeEth) *fakeServer {
	t.Helper()
	srv := rpc.NewServer()
	require.NoError(t, srv.RegisterName("eth", svc))
	fs := &fakeServer{}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fs.hits.Add(1)
		srv.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		hs.Close()
		srv.Stop()
	})
	fs.url = hs.URL
	return fs
}
