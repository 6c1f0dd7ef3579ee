package evm

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/rpc"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/evm/rpcproxy"
	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/testsupport"
	"github.com/txfence/txfence/shared/txm"
)

// endpoints is a simulated chain behind one recording proxy per endpoint.
type endpoints struct {
	chain   *evmtest.Chain
	keys    []evmtest.DevKey
	proxies []*rpcproxy.Proxy
}

func startEndpoints(t *testing.T, n int) *endpoints {
	t.Helper()
	keys := evmtest.DevKeys(3)
	chain := evmtest.Start(t, evmtest.FundedAlloc(keys, nil))
	e := &endpoints{chain: chain, keys: keys}
	for range n {
		e.proxies = append(e.proxies, rpcproxy.Start(t, chain.URL))
	}
	return e
}

// dial builds a client over the first read proxies, in order, with fast
// head readings; change edits its options.
func (e *endpoints) dial(t *testing.T, read int, change func(*Options)) *Client {
	t.Helper()
	o := DefaultOptions()
	o.HeadInterval = 10 * time.Millisecond
	if change != nil {
		change(&o)
	}
	var urls []string
	for _, p := range e.proxies[:read] {
		urls = append(urls, p.URL)
	}
	c, err := Dial(context.Background(), evmtest.ChainID, urls, o)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// stateOf waits until endpoint i of c is in state want.
func stateOf(t *testing.T, c *Client, i int, want txm.EndpointState) {
	t.Helper()
	testsupport.Eventually(t, 10*time.Second, fmt.Sprintf("endpoint %d %s", i, want), func() bool {
		_, _ = c.Head(context.Background()) // a call reads the heads that are due
		return c.EndpointHealth()[i].State == want
	})
}

// readsOtherThanHeads counts the calls p received other than the head
// readings and chain id checks.
func readsOtherThanHeads(p *rpcproxy.Proxy) map[string]int {
	out := map[string]int{}
	for _, c := range p.Calls() {
		if c.Method != "eth_blockNumber" && c.Method != "eth_chainId" {
			out[c.Method]++
		}
	}
	return out
}

// TestHealth_LaggingEndpointIsNotRead: the preferred endpoint falls more
// than LagBlocks behind the other; while it lags, nonces, receipts,
// blocks, fees and gas are read from the other only, and once it catches
// up it is preferred again.
func TestHealth_LaggingEndpointIsNotRead(t *testing.T) {
	t.Parallel()
	e := startEndpoints(t, 2)
	for range 12 {
		e.chain.Commit()
	}
	c := e.dial(t, 2, func(o *Options) { o.LagBlocks = 3 })
	ctx := context.Background()
	stateOf(t, c, 0, txm.EndpointHealthy)

	lagging := e.proxies[0]
	lagging.Lag(8)
	stateOf(t, c, 0, txm.EndpointLagging)
	h := c.EndpointHealth()
	assert.EqualValues(t, 8, h[0].Lag)
	assert.Equal(t, h[1].Head, h[0].Head+8)
	lagging.Reset()

	to := e.keys[1].Address
	tx := signed(t, e.keys[0], 0, &to, 1, 21000, nil)
	raw, err := tx.MarshalBinary()
	require.NoError(t, err)
	require.NoError(t, c.SendRawTransaction(ctx, raw))
	e.chain.Commit()
	_, err = c.PendingNonce(ctx, e.keys[0].Address)
	require.NoError(t, err)
	_, err = c.LatestNonce(ctx, e.keys[0].Address)
	require.NoError(t, err)
	rs, err := c.Receipts(ctx, []common.Hash{tx.Hash()})
	require.NoError(t, err)
	require.NotNil(t, rs[0], "the receipt is read from the endpoint that has it")
	_, err = c.BlockReceipts(ctx, []uint64{rs[0].BlockNumber})
	require.NoError(t, err)
	_, _, err = c.Blocks(ctx, []uint64{rs[0].BlockNumber}, []string{"latest"})
	require.NoError(t, err)
	_, err = c.SuggestFees(ctx)
	require.NoError(t, err)
	_, err = c.EstimateGas(ctx, txm.CallMsg{From: e.keys[0].Address, To: &to})
	require.NoError(t, err)
	testsupport.Eventually(t, 5*time.Second, "the lagging endpoint's head still followed", func() bool {
		_, _ = c.Head(ctx)
		return lagging.Count("eth_blockNumber") > 0
	})
	assert.Empty(t, readsOtherThanHeads(lagging), "nothing but head readings goes to the lagging endpoint")

	lagging.Lag(0)
	stateOf(t, c, 0, txm.EndpointHealthy)
	lagging.Reset()
	_, err = c.LatestNonce(ctx, e.keys[0].Address)
	require.NoError(t, err)
	assert.Equal(t, 1, lagging.Count("eth_getTransactionCount"), "caught up, the preferred endpoint is read first again")
}

// TestHealth_DeadEndpointIsRetriedWithBackoff: a dead endpoint is passed
// over, tried again only after its backoff (which doubles), and used again
// once it answers.
func TestHealth_DeadEndpointIsRetriedWithBackoff(t *testing.T) {
	t.Parallel()
	e := startEndpoints(t, 2)
	c := e.dial(t, 2, func(o *Options) { o.DeadBackoffMin, o.DeadBackoffMax = time.Second, time.Hour })
	ctx := context.Background()
	dead := e.proxies[0]
	dead.FailAll(rpcproxy.Fault{HTTPStatus: 502})
	_, err := c.LatestNonce(ctx, e.keys[0].Address) // the first call after the failure fails over
	require.NoError(t, err)
	h := c.EndpointHealth()[0]
	require.Equal(t, txm.EndpointDead, h.State)
	assert.Equal(t, "http_502", h.LastError)
	require.NotNil(t, h.LastErrorAt)

	dead.Reset()
	start := time.Now()
	for time.Since(start) < 500*time.Millisecond {
		_, err := c.LatestNonce(ctx, e.keys[0].Address)
		require.NoError(t, err)
	}
	assert.Empty(t, dead.Calls(), "within its backoff a dead endpoint is not tried")
	testsupport.Eventually(t, 5*time.Second, "the dead endpoint tried again after its backoff", func() bool {
		_, _ = c.LatestNonce(ctx, e.keys[0].Address)
		return len(dead.Calls()) > 0
	})
	first := len(dead.Calls())
	start = time.Now()
	for time.Since(start) < time.Second {
		_, err := c.LatestNonce(ctx, e.keys[0].Address)
		require.NoError(t, err)
	}
	assert.Equal(t, first, len(dead.Calls()), "the second backoff is twice the first")

	dead.Heal()
	stateOf(t, c, 0, txm.EndpointHealthy)
}

// TestHealth_BestAvailable: with every endpoint lagging or dead a read
// still goes to the best available one; with every one dead the error says
// the chain is unreachable.
func TestHealth_BestAvailable(t *testing.T) {
	t.Parallel()
	e := startEndpoints(t, 2)
	for range 12 {
		e.chain.Commit()
	}
	logs := &testsupport.SyncBuffer{}
	c := e.dial(t, 2, func(o *Options) {
		o.LagBlocks = 3
		o.Log = logging.New(logs, "debug", "")
	})
	ctx := context.Background()
	e.proxies[0].Lag(8)
	stateOf(t, c, 0, txm.EndpointLagging)
	e.proxies[1].FailAll(rpcproxy.Fault{HTTPStatus: 503})
	e.proxies[0].Reset()
	_, err := c.LatestNonce(ctx, e.keys[0].Address)
	require.NoError(t, err, "the lagging endpoint is the best available")
	assert.Equal(t, 1, e.proxies[0].Count("eth_getTransactionCount"))
	assert.Contains(t, logs.String(), "no healthy endpoint answered: using the best available")
	assert.Contains(t, logs.String(), "endpoint lagging")
	assert.Contains(t, logs.String(), "endpoint dead")

	e.proxies[0].FailAll(rpcproxy.Fault{Drop: true})
	_, err = c.LatestNonce(ctx, e.keys[0].Address)
	require.ErrorIs(t, err, txm.ErrChainUnreachable)
	for _, h := range c.EndpointHealth() {
		assert.Equal(t, txm.EndpointDead, h.State, h.Name)
	}
	_, err = c.LatestNonce(ctx, e.keys[0].Address)
	require.ErrorIs(t, err, txm.ErrChainUnreachable, "with all dead, each is tried all the same")

	e.proxies[0].Heal()
	e.proxies[1].Heal()
	e.proxies[0].Lag(0)
	_, err = c.LatestNonce(ctx, e.keys[0].Address)
	require.NoError(t, err, "the first call after the outage finds the endpoints back")
}

// TestBroadcast_EveryPath: a broadcast goes to every healthy read
// endpoint and to the send-only endpoint with public fallback, in
// parallel, and is accepted although all but the first to arrive answer
// "already known"; a send-only endpoint is never read from.
func TestBroadcast_EveryPath(t *testing.T) {
	t.Parallel()
	e := startEndpoints(t, 4)
	c := e.dial(t, 3, func(o *Options) {
		o.SendOnly = []SendOnlyEndpoint{{Name: "relay", URL: e.proxies[3].URL, PublicFallback: true}}
	})
	ctx := context.Background()
	e.proxies[2].FailAll(rpcproxy.Fault{Drop: true})
	_, err := c.Head(ctx)
	require.NoError(t, err)
	stateOf(t, c, 2, txm.EndpointDead)
	e.proxies[2].Reset()

	to := e.keys[1].Address
	var raws [][]byte
	for nonce := range uint64(3) {
		raw, err := signed(t, e.keys[0], nonce, &to, 1, 21000, nil).MarshalBinary()
		require.NoError(t, err)
		raws = append(raws, raw)
	}
	require.NoError(t, c.SendRawTransaction(ctx, raws[0]), "accepted by one path, known to the others")
	for i, err := range c.SendRawTransactions(ctx, raws[1:]) {
		require.NoError(t, err, "tx %d", i+1)
	}
	for i, p := range e.proxies {
		want := 3
		if i == 2 {
			want = 0 // dead within its backoff
		}
		assert.Equal(t, want, p.Count("eth_sendRawTransaction"), "endpoint %d", i)
	}
	h := c.EndpointHealth()
	require.Len(t, h, 4)
	assert.Equal(t, "relay", h[3].Name)
	assert.True(t, h[3].SendOnly)
	assert.Equal(t, txm.EndpointHealthy, h[3].State)

	_, err = c.LatestNonce(ctx, e.keys[0].Address)
	require.NoError(t, err)
	for _, call := range e.proxies[3].Calls() {
		assert.Equal(t, "eth_sendRawTransaction", call.Method, "a send-only endpoint is never read from")
	}

	// Sent again, every path knows it: "already known", not a failure.
	for i, err := range c.SendRawTransactions(ctx, raws) {
		assert.Equal(t, txm.ReasonKnown, txm.ReasonOf(err), "tx %d", i)
	}
}

// TestBroadcast_Routes: a signer routed to a private send-only endpoint
// broadcasts to it only; one routed "public" to the read endpoints only;
// the default route skips the private endpoint.
func TestBroadcast_Routes(t *testing.T) {
	t.Parallel()
	e := startEndpoints(t, 3)
	private, fallback := e.proxies[1], e.proxies[2]
	c := e.dial(t, 1, func(o *Options) {
		o.SendOnly = []SendOnlyEndpoint{{Name: "protect", URL: private.URL}, {Name: "relay", URL: fallback.URL, PublicFallback: true}}
		o.Routes = map[common.Address]string{e.keys[0].Address: "protect", e.keys[1].Address: RoutePublic}
	})
	ctx := context.Background()
	to := common.HexToAddress("0xdead")
	send := func(key evmtest.DevKey) {
		raw, err := signed(t, key, 0, &to, 1, 21000, nil).MarshalBinary()
		require.NoError(t, err)
		require.NoError(t, c.SendRawTransaction(ctx, raw))
	}
	counts := func() [3]int {
		var out [3]int
		for i, p := range e.proxies {
			out[i] = p.Count("eth_sendRawTransaction")
		}
		return out
	}
	send(e.keys[0])
	assert.Equal(t, [3]int{0, 1, 0}, counts(), "a private route: its endpoint only")
	send(e.keys[1])
	assert.Equal(t, [3]int{1, 1, 0}, counts(), "the public route: the read endpoints only")
	send(e.keys[2])
	assert.Equal(t, [3]int{2, 1, 1}, counts(), "the default route: the read endpoints and the fallback relay")

	// One batch of two signers takes each one's route.
	var raws [][]byte
	for _, k := range e.keys[:2] {
		raw, err := signed(t, k, 1, &to, 1, 21000, nil).MarshalBinary()
		require.NoError(t, err)
		raws = append(raws, raw)
	}
	for _, err := range c.SendRawTransactions(ctx, raws) {
		require.NoError(t, err)
	}
	assert.Equal(t, [3]int{3, 2, 1}, counts())

	// A private endpoint that is down fails the broadcast, but the chain's
	// endpoints answer: no outage of the chain.
	private.FailAll(rpcproxy.Fault{HTTPStatus: 502})
	raw, err := signed(t, e.keys[0], 2, &to, 1, 21000, nil).MarshalBinary()
	require.NoError(t, err)
	err = c.SendRawTransaction(ctx, raw)
	assert.Equal(t, txm.ReasonTransient, txm.ReasonOf(err))
	assert.NotErrorIs(t, err, txm.ErrChainUnreachable)
	assert.Contains(t, err.Error(), "send-only protect (http://127.0.0.1:")
	assert.Equal(t, txm.EndpointDead, c.EndpointHealth()[1].State)

	e.proxies[0].FailAll(rpcproxy.Fault{HTTPStatus: 502})
	fallback.FailAll(rpcproxy.Fault{HTTPStatus: 502})
	raw, err = signed(t, e.keys[2], 1, &to, 1, 21000, nil).MarshalBinary()
	require.NoError(t, err)
	err = c.SendRawTransaction(ctx, raw)
	assert.ErrorIs(t, err, txm.ErrChainUnreachable, "every path down, the read endpoints included")
}

// TestBroadcast_RequestRoutes: a transaction's own route (its create's
// sendVia) is taken instead of its signer's, per transaction of a batch;
// "" keeps the signer's, and a route naming no endpoint takes the read
// endpoints only.
func TestBroadcast_RequestRoutes(t *testing.T) {
	t.Parallel()
	e := startEndpoints(t, 3)
	private, fallback := e.proxies[1], e.proxies[2]
	c := e.dial(t, 1, func(o *Options) {
		o.SendOnly = []SendOnlyEndpoint{{Name: "protect", URL: private.URL}, {Name: "relay", URL: fallback.URL, PublicFallback: true}}
		o.Routes = map[common.Address]string{e.keys[1].Address: "protect"}
	})
	ctx := context.Background()
	to := common.HexToAddress("0xdead")
	raw := func(key evmtest.DevKey, nonce uint64) []byte {
		b, err := signed(t, key, nonce, &to, 1, 21000, nil).MarshalBinary()
		require.NoError(t, err)
		return b
	}
	counts := func() [3]int {
		var out [3]int
		for i, p := range e.proxies {
			out[i] = p.Count("eth_sendRawTransaction")
		}
		return out
	}
	for _, err := range c.SendRawTransactionsVia(ctx, [][]byte{raw(e.keys[0], 0)}, []string{"protect"}) {
		require.NoError(t, err)
	}
	assert.Equal(t, [3]int{0, 1, 0}, counts(), "a default signer's transaction routed to the private endpoint: it only")
	for _, err := range c.SendRawTransactionsVia(ctx, [][]byte{raw(e.keys[1], 0)}, []string{RoutePublic}) {
		require.NoError(t, err)
	}
	assert.Equal(t, [3]int{1, 1, 0}, counts(), "a privately routed signer's transaction routed public: the read endpoints only")

	// One batch: its own route, the signer's ("" and no routes at all),
	// and a route that names no endpoint.
	errs := c.SendRawTransactionsVia(ctx, [][]byte{raw(e.keys[0], 1), raw(e.keys[1], 1), raw(e.keys[2], 0)}, []string{"protect", "", "gone"})
	for _, err := range errs {
		require.NoError(t, err)
	}
	assert.Equal(t, [3]int{2, 3, 0}, counts())
	for _, err := range c.SendRawTransactionsVia(ctx, [][]byte{raw(e.keys[2], 1)}, nil) {
		require.NoError(t, err)
	}
	assert.Equal(t, [3]int{3, 3, 1}, counts(), "no routes: the default route")
}

// TestBroadcast_Merge: the paths' answers to one transaction make one,
// with real node texts.
func TestBroadcast_Merge(t *testing.T) {
	t.Parallel()
	node := func(msg string) error { return &nodeError{msg} }
	down := &pathError{name: "endpoint 1 (http://a)", err: errors.New("connection refused")}
	tests := []struct {
		name    string
		answers []error
		want    txm.BroadcastReason // "" for accepted
		outage  bool
	}{
		{"one accepted, one known", []error{node("already known"), nil}, "", false},
		{"accepted, the other down", []error{down, nil}, "", false},
		{"known beats a transport failure", []error{down, node("already known")}, txm.ReasonKnown, false},
		{"known beats nonce too low", []error{node("nonce too low: next nonce 5, tx nonce 4"), node("already known")}, txm.ReasonKnown, false},
		{"nonce too low beats a refusal", []error{node("replacement transaction underpriced"), node("nonce too low")}, txm.ReasonNonceTooLow, false},
		{"a reason beats none", []error{node("internal error"), node("insufficient funds for gas * price + value")}, txm.ReasonInsufficientFunds, false},
		{"the first reason wins", []error{node("transaction underpriced"), node("insufficient funds for gas * price + value")}, txm.ReasonUnderpriced, false},
		{"a node's transient answer", []error{down, node("internal error")}, txm.ReasonTransient, false},
		{"all down", []error{down, down}, txm.ReasonTransient, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, outage := range []bool{false, true} {
				err := merge(tt.answers, outage)
				if tt.want == "" {
					require.NoError(t, err)
					continue
				}
				require.Equal(t, tt.want, txm.ReasonOf(err), "%v", err)
				assert.Equal(t, tt.outage && outage, errors.Is(err, txm.ErrChainUnreachable))
			}
		})
	}
}

// nodeError is a node's JSON-RPC error answer.
type nodeError struct{ msg string }

func (e *nodeError) Error() string  { return e.msg }
func (e *nodeError) ErrorCode() int { return -32000 }

var _ rpc.Error = (*nodeError)(nil)

// TestHealth_OptionsValidate: the endpoint options are checked, and an
// error names a send-only endpoint, never its URL.
func TestHealth_OptionsValidate(t *testing.T) {
	t.Parallel()
	signer := common.HexToAddress("0x01")
	tests := map[string]func(*Options){
		"zero head interval": func(o *Options) { o.HeadInterval = 0 },
		"zero backoff":       func(o *Options) { o.DeadBackoffMin = 0 },
		"max below min":      func(o *Options) { o.DeadBackoffMax = o.DeadBackoffMin / 2 },
		"unnamed":            func(o *Options) { o.SendOnly = []SendOnlyEndpoint{{URL: "https://x.example/KEY"}} },
		"named public":       func(o *Options) { o.SendOnly = []SendOnlyEndpoint{{Name: RoutePublic, URL: "https://x.example/KEY"}} },
		"named with a space": func(o *Options) { o.SendOnly = []SendOnlyEndpoint{{Name: "a b", URL: "https://x.example/KEY"}} },
		"bad URL":            func(o *Options) { o.SendOnly = []SendOnlyEndpoint{{Name: "p", URL: "https://u:SECRETKEY@x:y/KEY"}} },
		"named twice": func(o *Options) {
			o.SendOnly = []SendOnlyEndpoint{{Name: "p", URL: "https://x/KEY"}, {Name: "p", URL: "https://y/KEY"}}
		},
		"route to no one":     func(o *Options) { o.Routes = map[common.Address]string{signer: "nope"} },
		"route before config": func(o *Options) { o.Routes = map[common.Address]string{signer: ""} },
	}
	for name, change := range tests {
		t.Run(name, func(t *testing.T) {
			o := DefaultOptions()
			change(&o)
			err := o.validate()
			require.Error(t, err)
			assert.NotContains(t, err.Error(), "KEY")
		})
	}
	o := DefaultOptions()
	o.SendOnly = []SendOnlyEndpoint{{Name: "protect-1", URL: "https://x.example/KEY"}}
	o.Routes = map[common.Address]string{signer: "protect-1", common.HexToAddress("0x02"): RoutePublic}
	require.NoError(t, o.validate())
}

// TestHealth_NothingRunsAfterCalls: the client follows heads only inside
// calls: once they have returned (a slow dead endpoint's head reading
// included), no goroutine of it is left. Not parallel, so that no other
// test's calls are running.
func TestHealth_NothingRunsAfterCalls(t *testing.T) {
	e := startEndpoints(t, 3)
	e.proxies[2].FailAll(rpcproxy.Fault{Delay: 200 * time.Millisecond, HTTPStatus: 502})
	c := e.dial(t, 3, func(o *Options) { o.DeadBackoffMin = time.Millisecond })
	to := e.keys[1].Address
	raw, err := signed(t, e.keys[0], 0, &to, 1, 21000, nil).MarshalBinary()
	require.NoError(t, err)
	require.NoError(t, c.SendRawTransaction(context.Background(), raw))
	for range 5 {
		_, err := c.Head(context.Background())
		require.NoError(t, err)
	}
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	assert.NotContains(t, stacks, "shared/evm.(*Client)", "no goroutine of the client outlives its calls")
	c.Close()
}
