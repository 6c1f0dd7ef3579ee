package rpcproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/big"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/ethereum/go-ethereum/rpc"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/testsupport"
)

// fixture is a simulated chain with a proxy in front of it.
type fixture struct {
	chain  *evmtest.Chain
	keys   []evmtest.DevKey
	proxy  *Proxy
	rpc    *rpc.Client       // through the proxy
	eth    *ethclient.Client // through the proxy
	direct *ethclient.Client // straight to the chain
}

func setup(t *testing.T) fixture {
	t.Helper()
	keys := evmtest.DevKeys(1)
	chain := evmtest.Start(t, evmtest.FundedAlloc(keys, nil))
	p := Start(t, chain.URL)
	rc := dial(t, p.URL)
	return fixture{
		chain:  chain,
		keys:   keys,
		proxy:  p,
		rpc:    rc,
		eth:    ethclient.NewClient(rc),
		direct: ethclient.NewClient(dial(t, chain.URL)),
	}
}

func dial(t *testing.T, url string) *rpc.Client {
	t.Helper()
	rc, err := rpc.DialContext(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(rc.Close)
	return rc
}

// signTransfer signs a 1 wei transfer from key with the given nonce, paying
// the suggested tip (at least the simulated miner's minimum).
func signTransfer(t *testing.T, ec *ethclient.Client, key evmtest.DevKey, nonce uint64) *types.Transaction {
	t.Helper()
	ctx := context.Background()
	tip, err := ec.SuggestGasTipCap(ctx)
	require.NoError(t, err)
	if minTip := big.NewInt(evmtest.MinerTip); tip.Cmp(minTip) < 0 {
		tip = minTip
	}
	head, err := ec.HeaderByNumber(ctx, nil)
	require.NoError(t, err)
	feeCap := new(big.Int).Add(new(big.Int).Mul(head.BaseFee, big.NewInt(2)), tip)
	to := common.HexToAddress("0x000000000000000000000000000000000000dEaD")
	tx, err := types.SignTx(types.NewTx(&types.DynamicFeeTx{
		ChainID:   big.NewInt(evmtest.ChainID),
		Nonce:     nonce,
		GasTipCap: tip,
		GasFeeCap: feeCap,
		Gas:       21000,
		To:        &to,
		Value:     big.NewInt(1),
	}), types.LatestSignerForChainID(big.NewInt(evmtest.ChainID)), key.Key)
	require.NoError(t, err)
	return tx
}

func requireRPCError(t *testing.T, err error, code int) {
	t.Helper()
	var rpcErr rpc.Error
	require.ErrorAs(t, err, &rpcErr)
	require.Equal(t, code, rpcErr.ErrorCode())
}

func TestProxy_Forwards(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	f.chain.Commit()

	want, err := f.direct.ChainID(ctx)
	require.NoError(t, err)
	got, err := f.eth.ChainID(ctx)
	require.NoError(t, err)
	require.Equal(t, want, got)

	wantHead, err := f.direct.BlockNumber(ctx)
	require.NoError(t, err)
	gotHead, err := f.eth.BlockNumber(ctx)
	require.NoError(t, err)
	require.Equal(t, wantHead, gotHead)

	f.chain.Commit()
	gotHead, err = f.eth.BlockNumber(ctx)
	require.NoError(t, err)
	require.Equal(t, wantHead+1, gotHead)
}

func TestProxy_RecordsCalls(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	before := time.Now()

	_, err := f.eth.ChainID(ctx)
	require.NoError(t, err)
	_, err = f.eth.BalanceAt(ctx, f.keys[0].Address, nil)
	require.NoError(t, err)
	_, err = f.eth.ChainID(ctx)
	require.NoError(t, err)

	require.Equal(t, 2, f.proxy.Count("eth_chainId"))
	require.Equal(t, 1, f.proxy.Count("eth_getBalance"))
	require.Zero(t, f.proxy.Count("eth_blockNumber"))

	calls := f.proxy.Calls()
	require.Len(t, calls, 3)
	require.Equal(t, []string{"eth_chainId", "eth_getBalance", "eth_chainId"},
		[]string{calls[0].Method, calls[1].Method, calls[2].Method})
	var params []string
	require.NoError(t, json.Unmarshal(calls[1].Params, &params))
	require.Equal(t, []string{hexutil.Encode(f.keys[0].Address.Bytes()), "latest"}, params)
	for _, c := range calls {
		require.False(t, c.Faulted)
		require.False(t, c.Time.Before(before))
	}

	f.proxy.Reset()
	require.Empty(t, f.proxy.Calls())
	require.Zero(t, f.proxy.Count("eth_chainId"))
}

func TestProxy_NumbersRequests(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()

	_, err := f.eth.ChainID(ctx)
	require.NoError(t, err)
	var id, n hexutil.Big
	batch := []rpc.BatchElem{{Method: "eth_chainId", Result: &id}, {Method: "eth_blockNumber", Result: &n}}
	require.NoError(t, f.rpc.BatchCallContext(ctx, batch))
	require.NoError(t, batch[0].Error)
	require.NoError(t, batch[1].Error)

	calls := f.proxy.Calls()
	require.Len(t, calls, 3)
	require.Equal(t, 1, calls[0].Request)
	require.Equal(t, 2, calls[1].Request, "a batch is one request")
	require.Equal(t, 2, calls[2].Request)
}

func TestProxy_FailNTimes(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	f.proxy.Fail("eth_chainId", 2, Fault{RPCError: &RPCError{Code: -32000, Message: "boom"}})

	for range 2 {
		_, err := f.eth.ChainID(ctx)
		requireRPCError(t, err, -32000)
		require.ErrorContains(t, err, "boom")
	}
	id, err := f.eth.ChainID(ctx)
	require.NoError(t, err)
	require.EqualValues(t, evmtest.ChainID, id.Uint64())
	_, err = f.eth.BlockNumber(ctx) // other methods never failed
	require.NoError(t, err)

	calls := f.proxy.Calls()
	require.Len(t, calls, 4)
	require.Equal(t, []bool{true, true, false, false},
		[]bool{calls[0].Faulted, calls[1].Faulted, calls[2].Faulted, calls[3].Faulted})
}

func TestProxy_FailAllAndHeal(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	f.proxy.Fail("eth_chainId", -1, Fault{RPCError: &RPCError{Code: -32001, Message: "chain id down"}})
	f.proxy.FailAll(Fault{RPCError: &RPCError{Code: -32099, Message: "node down"}})

	for range 3 {
		_, err := f.eth.ChainID(ctx)
		requireRPCError(t, err, -32099)
		_, err = f.eth.BlockNumber(ctx)
		requireRPCError(t, err, -32099)
	}

	f.proxy.Heal()
	_, err := f.eth.ChainID(ctx)
	require.NoError(t, err)
	_, err = f.eth.BlockNumber(ctx)
	require.NoError(t, err)
	require.Equal(t, 4, f.proxy.Count("eth_chainId"))
}

func TestProxy_HTTPStatus(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	for _, status := range []int{http.StatusBadGateway, http.StatusTooManyRequests} {
		f.proxy.Fail("eth_chainId", 1, Fault{HTTPStatus: status})
		_, err := f.eth.ChainID(ctx)
		var httpErr rpc.HTTPError
		require.ErrorAs(t, err, &httpErr)
		require.Equal(t, status, httpErr.StatusCode)
	}
	_, err := f.eth.ChainID(ctx)
	require.NoError(t, err)
}

func TestProxy_Delay(t *testing.T) {
	t.Parallel()
	f := setup(t)

	t.Run("times the client out", func(t *testing.T) {
		f.proxy.Fail("eth_blockNumber", 1, Fault{Delay: 10 * time.Second})
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := f.eth.BlockNumber(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Less(t, time.Since(start), 5*time.Second)

		_, err = f.eth.BlockNumber(context.Background())
		require.NoError(t, err)
	})

	t.Run("alone only delays the answer", func(t *testing.T) {
		f.proxy.Reset()
		f.proxy.Fail("eth_chainId", 1, Fault{Delay: 150 * time.Millisecond})
		start := time.Now()
		id, err := f.eth.ChainID(context.Background())
		require.NoError(t, err)
		require.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond)
		require.EqualValues(t, evmtest.ChainID, id.Uint64())
		require.False(t, f.proxy.Calls()[0].Faulted)
	})
}

func TestProxy_Drop(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	f.proxy.Fail("eth_chainId", 1, Fault{Drop: true})

	_, err := f.eth.ChainID(ctx)
	require.Error(t, err)
	var rpcErr rpc.Error
	require.False(t, errors.As(err, &rpcErr), "a dropped connection is no JSON-RPC error: %v", err)

	_, err = f.eth.ChainID(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, f.proxy.Count("eth_chainId"))
}

func TestProxy_EmptyResult(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	tx := signTransfer(t, f.direct, f.keys[0], 0)
	require.NoError(t, f.direct.SendTransaction(ctx, tx))
	f.chain.Commit()

	f.proxy.Fail("eth_getTransactionReceipt", 1, Fault{EmptyResult: true})
	_, err := f.eth.TransactionReceipt(ctx, tx.Hash())
	require.ErrorIs(t, err, ethereum.NotFound)

	r, err := f.eth.TransactionReceipt(ctx, tx.Hash())
	require.NoError(t, err)
	require.Equal(t, types.ReceiptStatusSuccessful, r.Status)
}

func TestProxy_SwallowBroadcast(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	lost := signTransfer(t, f.eth, f.keys[0], 0)
	f.proxy.Fail("eth_sendRawTransaction", 1, Fault{Swallow: true})

	var got common.Hash
	require.NoError(t, f.rpc.CallContext(ctx, &got, "eth_sendRawTransaction", hexutil.Encode(mustBinary(t, lost))))
	require.Equal(t, lost.Hash(), got, "answered with the transaction's hash, as accepted")
	_, _, err := f.direct.TransactionByHash(ctx, lost.Hash())
	require.ErrorIs(t, err, ethereum.NotFound, "the node never saw it")
	pending, err := f.direct.PendingNonceAt(ctx, f.keys[0].Address)
	require.NoError(t, err)
	require.Zero(t, pending)

	// In a batch only the swallowed call is lost; the rule is used up, so
	// a rebroadcast of the lost bytes reaches the node.
	next := signTransfer(t, f.eth, f.keys[0], 1)
	f.proxy.Fail("eth_sendRawTransaction", 1, Fault{Swallow: true})
	hashes := make([]common.Hash, 3)
	batch := []rpc.BatchElem{
		{Method: "eth_sendRawTransaction", Args: []any{hexutil.Encode(mustBinary(t, next))}, Result: &hashes[0]},
		{Method: "eth_sendRawTransaction", Args: []any{hexutil.Encode(mustBinary(t, lost))}, Result: &hashes[1]},
		{Method: "eth_sendRawTransaction", Args: []any{"0x1234"}, Result: &hashes[2]},
	}
	require.NoError(t, f.rpc.BatchCallContext(ctx, batch))
	require.NoError(t, batch[0].Error)
	require.Equal(t, next.Hash(), hashes[0])
	require.NoError(t, batch[1].Error)
	require.Equal(t, lost.Hash(), hashes[1])
	require.Error(t, batch[2].Error, "garbage is the node's to refuse")
	require.EqualValues(t, 1, pendingNonce(t, f, 1), "nonce 0 arrived, nonce 1 did not")
	_, _, err = f.direct.TransactionByHash(ctx, next.Hash())
	require.ErrorIs(t, err, ethereum.NotFound, "the swallowed call was the batch's first")
	_, _, err = f.direct.TransactionByHash(ctx, lost.Hash())
	require.NoError(t, err, "the rebroadcast reached the node")

	var faulted []bool
	for _, c := range f.proxy.Calls() {
		if c.Method == "eth_sendRawTransaction" {
			faulted = append(faulted, c.Faulted)
		}
	}
	require.Equal(t, []bool{true, true, false, false}, faulted)
}

func TestProxy_SwallowWithoutTransaction(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.proxy.Fail("eth_chainId", 1, Fault{Swallow: true})
	_, err := f.eth.ChainID(context.Background())
	requireRPCError(t, err, -32602)
}

func mustBinary(t *testing.T, tx *types.Transaction) []byte {
	t.Helper()
	b, err := tx.MarshalBinary()
	require.NoError(t, err)
	return b
}

func TestProxy_Hold(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	tx := signTransfer(t, f.eth, f.keys[0], 0)

	// Hold waits for a call already in flight.
	f.proxy.Fail("eth_sendRawTransaction", 1, Fault{Delay: 300 * time.Millisecond, RPCError: &RPCError{Code: -32000, Message: "slow"}})
	inFlight := make(chan error, 1)
	go func() { inFlight <- f.eth.SendTransaction(ctx, tx) }()
	require.Eventually(t, func() bool { return f.proxy.Count("eth_sendRawTransaction") == 1 }, 5*time.Second, time.Millisecond)
	start := time.Now()
	release := f.proxy.Hold("eth_sendRawTransaction")
	require.Greater(t, time.Since(start), 100*time.Millisecond, "Hold returned before the call in flight was answered")
	requireRPCError(t, <-inFlight, -32000)

	// Held calls wait; other methods pass.
	held := make(chan error, 1)
	go func() { held <- f.eth.SendTransaction(ctx, tx) }()
	_, err := f.eth.ChainID(ctx)
	require.NoError(t, err)
	select {
	case err := <-held:
		t.Fatalf("a held call was answered: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	pending, err := f.direct.PendingNonceAt(ctx, f.keys[0].Address)
	require.NoError(t, err)
	require.Zero(t, pending, "the node saw a held call")

	release()
	release()
	require.NoError(t, <-held)
	require.EqualValues(t, 1, pendingNonce(t, f, 1))
}

// pendingNonce is the first key's pending nonce once it reached want, or
// what it was after a few seconds. The node's pool promotes a transaction
// it accepted to pending in the background: asked at once, a loaded
// machine once answered 0.
func pendingNonce(t *testing.T, f fixture, want uint64) uint64 {
	t.Helper()
	var pending uint64
	testsupport.Within(5*time.Second, func() bool {
		var err error
		pending, err = f.direct.PendingNonceAt(context.Background(), f.keys[0].Address)
		require.NoError(t, err)
		return pending >= want
	})
	return pending
}

func TestProxy_BatchPartialFault(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	f.chain.Commit()
	// A second proxy between the first and the chain sees what is forwarded.
	inner := Start(t, f.chain.URL)
	outer := Start(t, inner.URL)
	rc := dial(t, outer.URL)

	outer.Fail("eth_blockNumber", 1, Fault{RPCError: &RPCError{
		Code: -32005, Message: "limit exceeded", Data: "retry later",
	}})
	var chainID hexutil.Big
	var head hexutil.Uint64
	var balance hexutil.Big
	batch := []rpc.BatchElem{
		{Method: "eth_chainId", Result: &chainID},
		{Method: "eth_blockNumber", Result: &head},
		{Method: "eth_getBalance", Args: []any{f.keys[0].Address, "latest"}, Result: &balance},
	}
	require.NoError(t, rc.BatchCallContext(ctx, batch))

	require.NoError(t, batch[0].Error)
	require.EqualValues(t, evmtest.ChainID, chainID.ToInt().Int64())
	requireRPCError(t, batch[1].Error, -32005)
	var dataErr rpc.DataError
	require.ErrorAs(t, batch[1].Error, &dataErr)
	require.Equal(t, "retry later", dataErr.ErrorData())
	require.NoError(t, batch[2].Error)
	require.Equal(t, evmtest.DevBalance(), balance.ToInt())

	calls := outer.Calls()
	require.Len(t, calls, 3)
	require.Equal(t, []bool{false, true, false}, []bool{calls[0].Faulted, calls[1].Faulted, calls[2].Faulted})
	forwarded := inner.Calls()
	require.Len(t, forwarded, 2)
	require.Equal(t, "eth_chainId", forwarded[0].Method)
	require.Equal(t, "eth_getBalance", forwarded[1].Method)

	// Without faults the same batch goes through whole.
	batch[1].Error = nil
	require.NoError(t, rc.BatchCallContext(ctx, batch))
	for _, el := range batch {
		require.NoError(t, el.Error)
	}
	wantHead, err := f.direct.BlockNumber(ctx)
	require.NoError(t, err)
	require.EqualValues(t, wantHead, head)
	require.Len(t, inner.Calls(), 5)
}

func TestProxy_BatchKeepsOrderAndIDs(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.proxy.Fail("eth_chainId", 1, Fault{EmptyResult: true})
	f.proxy.Fail("eth_getBalance", 1, Fault{RPCError: &RPCError{Code: 3, Message: "nope"}})
	body := `[
		{"jsonrpc":"2.0","id":3,"method":"eth_chainId","params":[]},
		{"jsonrpc":"2.0","id":"two","method":"eth_blockNumber","params":[]},
		{"jsonrpc":"2.0","id":1,"method":"eth_getBalance","params":["` + f.keys[0].Address.Hex() + `","latest"]},
		{"jsonrpc":"2.0","id":0,"method":"net_version","params":[]}
	]`
	head, err := f.direct.BlockNumber(context.Background())
	require.NoError(t, err)
	resp, err := http.Post(f.proxy.URL, "application/json", bytes.NewBufferString(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)

	var answers []struct {
		ID     json.RawMessage `json:"id"`
		Result json.RawMessage `json:"result"` // "null" for null, nil when absent
		Error  *RPCError       `json:"error"`
	}
	require.NoError(t, json.Unmarshal(raw, &answers), "%s", raw)
	require.Len(t, answers, 4)
	require.Equal(t, []string{`3`, `"two"`, `1`, `0`},
		[]string{string(answers[0].ID), string(answers[1].ID), string(answers[2].ID), string(answers[3].ID)})
	require.Equal(t, "null", string(answers[0].Result))
	require.Equal(t, `"`+hexutil.EncodeUint64(head)+`"`, string(answers[1].Result))
	require.Nil(t, answers[2].Result)
	require.Equal(t, &RPCError{Code: 3, Message: "nope"}, answers[2].Error)
	require.Equal(t, `"1337"`, string(answers[3].Result))
}

func TestProxy_BatchWholeRequestFault(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	batch := func() []rpc.BatchElem {
		return []rpc.BatchElem{
			{Method: "eth_chainId", Result: new(hexutil.Big)},
			{Method: "eth_blockNumber", Result: new(hexutil.Uint64)},
		}
	}

	f.proxy.Fail("eth_blockNumber", 1, Fault{HTTPStatus: http.StatusServiceUnavailable})
	var httpErr rpc.HTTPError
	require.ErrorAs(t, f.rpc.BatchCallContext(ctx, batch()), &httpErr)
	require.Equal(t, http.StatusServiceUnavailable, httpErr.StatusCode)

	f.proxy.Fail("eth_chainId", 1, Fault{Drop: true})
	require.Error(t, f.rpc.BatchCallContext(ctx, batch()))

	for _, c := range f.proxy.Calls() {
		require.True(t, c.Faulted, "%s", c.Method)
	}
	b := batch()
	require.NoError(t, f.rpc.BatchCallContext(ctx, b))
	require.NoError(t, b[0].Error)
	require.NoError(t, b[1].Error)
}

func TestProxy_BeforeSeesTxHash(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	tx := signTransfer(t, f.eth, f.keys[0], 0)

	var (
		mu   sync.Mutex
		seen []common.Hash
		veto atomic.Bool
	)
	veto.Store(true)
	f.proxy.Before("eth_sendRawTransaction", func(params json.RawMessage) *Fault {
		h, err := TxHashOf(params)
		if err != nil {
			return &Fault{RPCError: &RPCError{Code: -32602, Message: err.Error()}}
		}
		mu.Lock()
		seen = append(seen, h)
		mu.Unlock()
		if veto.Load() {
			return &Fault{RPCError: &RPCError{Code: -32000, Message: "vetoed by test"}}
		}
		return nil
	})

	err := f.eth.SendTransaction(ctx, tx)
	requireRPCError(t, err, -32000)
	require.ErrorContains(t, err, "vetoed by test")
	pending, err := f.direct.PendingNonceAt(ctx, f.keys[0].Address)
	require.NoError(t, err)
	require.Zero(t, pending, "a vetoed transaction never reaches the node")

	veto.Store(false)
	require.NoError(t, f.eth.SendTransaction(ctx, tx))
	f.chain.Commit()
	r, err := f.eth.TransactionReceipt(ctx, tx.Hash())
	require.NoError(t, err)
	require.Equal(t, types.ReceiptStatusSuccessful, r.Status)

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []common.Hash{tx.Hash(), tx.Hash()}, seen)
	calls := f.proxy.Calls()
	var faulted []bool
	for _, c := range calls {
		if c.Method == "eth_sendRawTransaction" {
			faulted = append(faulted, c.Faulted)
		}
	}
	require.Equal(t, []bool{true, false}, faulted)
}

func TestProxy_CloseCutsDelay(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.proxy.Fail("eth_chainId", 1, Fault{Delay: time.Minute})
	errc := make(chan error, 1)
	go func() {
		_, err := f.eth.ChainID(context.Background())
		errc <- err
	}()
	require.Eventually(t, func() bool { return f.proxy.Count("eth_chainId") == 1 },
		5*time.Second, 5*time.Millisecond)

	start := time.Now()
	f.proxy.Close()
	require.Less(t, time.Since(start), 5*time.Second)
	select {
	case err := <-errc:
		require.Error(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("call still waiting after Close")
	}
	f.proxy.Close() // again: a no-op
}

func TestProxy_Concurrent(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	f.proxy.Fail("eth_chainId", 10, Fault{RPCError: &RPCError{Code: -32000, Message: "boom"}})

	var failed atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 10 {
				if _, err := f.eth.ChainID(ctx); err != nil {
					failed.Add(1)
				}
				_ = f.proxy.Calls()
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, 10, failed.Load())
	require.Equal(t, 80, f.proxy.Count("eth_chainId"))
}

func TestProxy_NewRejectsBadUpstream(t *testing.T) {
	t.Parallel()
	for _, upstream := range []string{"", "127.0.0.1:8545", "ws://127.0.0.1:8546", "http://"} {
		_, err := New(upstream)
		require.Error(t, err, "%q", upstream)
	}
}

func TestProxy_TxHashOfRejectsGarbage(t *testing.T) {
	t.Parallel()
	for _, params := range []string{`{}`, `[]`, `[42]`, `["0x1234"]`} {
		_, err := TxHashOf(json.RawMessage(params))
		require.Error(t, err, params)
	}
}
