package evm

import (
	"context"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/evm/rpcproxy"
	"github.com/txfence/txfence/shared/txm"
)

// Hand-assembled runtime codes, put in the genesis, until the Solidity
// test contracts exist.
var (
	// simEmitter emits an ERC-20 Transfer(caller, to, amount) for the
	// calldata (to, amount), two 32-byte words, as a token would.
	simEmitter = cat(
		[]byte{0x60, 0x20, 0x35},            // PUSH1 32 CALLDATALOAD: amount
		[]byte{0x60, 0x00, 0x52},            // PUSH1 0 MSTORE: memory[0:32] = amount
		[]byte{0x60, 0x00, 0x35},            // PUSH1 0 CALLDATALOAD: to (topic 2)
		[]byte{0x33},                        // CALLER: from (topic 1)
		[]byte{0x7f}, topicTransfer.Bytes(), // PUSH32 Transfer topic
		[]byte{0x60, 0x20, 0x60, 0x00}, // PUSH1 32 PUSH1 0: size, offset
		[]byte{0xa3, 0x00},             // LOG3 STOP
	)
	// simForwarder sends the call's value on to the address in calldata
	// word 0: CALL(gas, to, callvalue, 0, 0, 0, 0).
	simForwarder = []byte{
		0x60, 0x00, 0x60, 0x00, 0x60, 0x00, 0x60, 0x00, // PUSH1 0 ×4: no args, no return
		0x34,             // CALLVALUE
		0x60, 0x00, 0x35, // PUSH1 0 CALLDATALOAD: to
		0x5a,       // GAS
		0xf1,       // CALL
		0x50, 0x00, // POP STOP
	}
)

// simReverter reverts with data: CODECOPY(0, 12, len) REVERT(0, len), data.
func simReverter(data []byte) []byte {
	return append([]byte{0x60, byte(len(data)), 0x60, 0x0c, 0x60, 0x00, 0x39, 0x60, byte(len(data)), 0x60, 0x00, 0xfd}, data...)
}

var (
	simEmitterAddr   = common.HexToAddress("0x00000000000000000000000000000000047e0001")
	simForwarderAddr = common.HexToAddress("0x00000000000000000000000000000000047e0002")
	simReverterAddr  = common.HexToAddress("0x00000000000000000000000000000000047e0003")
	simRecipient     = common.HexToAddress("0x00000000000000000000000000000000000dea1e")
)

// simEnv is a simulated chain holding the contracts above, a fault proxy
// in front of it and a Client dialled to the proxy.
type simEnv struct {
	chain  *evmtest.Chain
	proxy  *rpcproxy.Proxy
	client *Client
	keys   []evmtest.DevKey
}

func simSetup(t *testing.T, opts ...func(*Options)) *simEnv {
	t.Helper()
	keys := evmtest.DevKeys(2)
	alloc := evmtest.FundedAlloc(keys, nil)
	alloc[simEmitterAddr] = types.Account{Code: simEmitter, Balance: new(big.Int)}
	alloc[simForwarderAddr] = types.Account{Code: simForwarder, Balance: new(big.Int)}
	alloc[simReverterAddr] = types.Account{Code: simReverter(errorString(t, "nope")), Balance: new(big.Int)}
	alloc[evmtest.GasBurner] = evmtest.GasBurnerAccount()
	chain := evmtest.Start(t, alloc)
	proxy := rpcproxy.Start(t, chain.URL)
	o := DefaultOptions()
	for _, f := range opts {
		f(&o)
	}
	client, err := Dial(context.Background(), evmtest.ChainID, []string{proxy.URL}, o)
	require.NoError(t, err)
	t.Cleanup(client.Close)
	proxy.Reset() // forget the chain id check
	return &simEnv{chain: chain, proxy: proxy, client: client, keys: keys}
}

// simCalls are a plain transfer, a token transfer, a forwarded value, a
// revert and a failure, all from key 0.
func (e *simEnv) simCalls() []txm.SimCall {
	from := e.keys[0].Address
	to := e.keys[1].Address
	emitter, forwarder, reverter, burner := simEmitterAddr, simForwarderAddr, simReverterAddr, evmtest.GasBurner
	return []txm.SimCall{
		{From: from, To: &to, Value: big.NewInt(1e18)},
		{From: from, To: &emitter, Data: cat(common.BytesToHash(simRecipient.Bytes()).Bytes(), u256(1000))},
		{From: from, To: &forwarder, Value: big.NewInt(7), Data: common.BytesToHash(simRecipient.Bytes()).Bytes()},
		{From: from, To: &reverter},
		{From: from, To: &burner},
	}
}

// estimate is the client's own gas estimate of call, margin included.
func (e *simEnv) estimate(t *testing.T, call txm.SimCall) uint64 {
	t.Helper()
	gas, err := e.client.EstimateGas(context.Background(), txm.CallMsg{From: call.From, To: call.To, Value: call.Value, Data: call.Data})
	require.NoError(t, err)
	return gas
}

// requestsOf is the methods each HTTP request the proxy saw carried, in
// order of arrival.
func requestsOf(p *rpcproxy.Proxy) [][]string {
	var out [][]string
	last := 0
	for _, c := range p.Calls() {
		if c.Request != last {
			out = append(out, nil)
			last = c.Request
		}
		out[len(out)-1] = append(out[len(out)-1], c.Method)
	}
	return out
}

func countMethods(methods []string) map[string]int {
	out := map[string]int{}
	for _, m := range methods {
		out[m]++
	}
	return out
}

func TestIssue47_Simulate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := simSetup(t)
	from := e.keys[0].Address
	calls := e.simCalls()

	require.Empty(t, e.client.SimulationMethod(), "nothing simulated yet")
	res, err := e.client.Simulate(ctx, calls)
	require.NoError(t, err)
	require.Len(t, res, len(calls))

	// One HTTP request carried every call's simulation and estimate.
	reqs := requestsOf(e.proxy)
	require.Len(t, reqs, 1, "one batched round trip: %v", reqs)
	require.Equal(t, map[string]int{"eth_simulateV1": len(calls), "eth_estimateGas": len(calls)}, countMethods(reqs[0]))
	for _, r := range res {
		require.Equal(t, txm.SimSimulateV1, r.Method)
	}
	require.Equal(t, txm.SimSimulateV1, e.client.SimulationMethod())

	// A plain transfer: its value, and the node's estimate as the gas.
	require.NoError(t, res[0].Err)
	require.False(t, res[0].Reverted)
	require.Equal(t, []txm.Effect{{Kind: txm.EffectNative, From: from, To: e.keys[1].Address, Amount: big.NewInt(1e18)}}, res[0].Effects)
	require.Equal(t, e.estimate(t, calls[0]), res[0].Gas)
	require.EqualValues(t, 21000*120/100, res[0].Gas)

	// A token's Transfer event.
	require.NoError(t, res[1].Err)
	require.Equal(t, []txm.Effect{{Kind: txm.EffectERC20Transfer, Token: simEmitterAddr, From: from, To: simRecipient, Amount: big.NewInt(1000)}}, res[1].Effects)
	require.Equal(t, e.estimate(t, calls[1]), res[1].Gas)
	require.Greater(t, res[1].Gas, uint64(21000))

	// Value forwarded inside the call: both transfers, in order.
	require.NoError(t, res[2].Err)
	require.Equal(t, []txm.Effect{
		{Kind: txm.EffectNative, From: from, To: simForwarderAddr, Amount: big.NewInt(7)},
		{Kind: txm.EffectNative, From: simForwarderAddr, To: simRecipient, Amount: big.NewInt(7)},
	}, res[2].Effects)
	require.Equal(t, e.estimate(t, calls[2]), res[2].Gas)

	// A revert is a result with its data, not an error.
	require.True(t, res[3].Reverted)
	require.Equal(t, errorString(t, "nope"), res[3].RevertData)
	require.NoError(t, res[3].Err)
	require.Empty(t, res[3].Effects)
	require.Zero(t, res[3].Gas)

	// A failure in the EVM other than a revert.
	var xe *txm.ExecutionError
	require.ErrorAs(t, res[4].Err, &xe)
	require.Contains(t, xe.Reason, "invalid opcode")
	require.False(t, res[4].Reverted)
	require.Zero(t, res[4].Gas)

	// More calls than MaxBatch go out as several batches, each call's two
	// requests together.
	small := simSetup(t, func(o *Options) { o.MaxBatch = 4 })
	res2, err := small.client.Simulate(ctx, calls)
	require.NoError(t, err)
	require.Equal(t, res, res2)
	reqs = requestsOf(small.proxy)
	require.Len(t, reqs, 3)
	for _, methods := range reqs[:2] {
		require.Equal(t, map[string]int{"eth_simulateV1": 2, "eth_estimateGas": 2}, countMethods(methods))
	}
}

func TestIssue47_SimulateIndependent(t *testing.T) {
	t.Parallel()
	e := simSetup(t)
	from := e.keys[0].Address
	to := e.keys[1].Address
	// Each call alone can be paid; after the other, it could not: each is
	// simulated against the latest state, not after the calls before it.
	most := new(big.Int).Sub(evmtest.DevBalance(), big.NewInt(1e18))
	calls := []txm.SimCall{{From: from, To: &to, Value: most}, {From: from, To: &to, Value: most}}
	res, err := e.client.Simulate(context.Background(), calls)
	require.NoError(t, err)
	for i, r := range res {
		require.NoError(t, r.Err, "call %d", i)
		require.False(t, r.Reverted, "call %d", i)
		require.Equal(t, []txm.Effect{{Kind: txm.EffectNative, From: from, To: to, Amount: most}}, r.Effects, "call %d", i)
	}

	// A call the signer cannot pay for is a result too.
	poor := []txm.SimCall{{From: from, To: &to, Value: new(big.Int).Add(evmtest.DevBalance(), big.NewInt(1))}}
	res, err = e.client.Simulate(context.Background(), poor)
	require.NoError(t, err)
	var fe *txm.InsufficientFundsError
	require.ErrorAs(t, res[0].Err, &fe)
	require.Empty(t, res[0].Effects)
}

// simulateMissing is geth's answer to a method it does not serve.
var simulateMissing = rpcproxy.Fault{RPCError: &rpcproxy.RPCError{Code: -32601, Message: "the method eth_simulateV1 does not exist/is not available"}}

func TestIssue47_SimulateFallback(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := simSetup(t)
	from := e.keys[0].Address
	calls := e.simCalls()
	e.proxy.Fail("eth_simulateV1", -1, simulateMissing)

	check := func(res []txm.SimResult) {
		t.Helper()
		require.Len(t, res, len(calls))
		for _, r := range res {
			require.Equal(t, txm.SimCallEstimate, r.Method)
		}
		require.Equal(t, []txm.Effect{{Kind: txm.EffectNative, From: from, To: e.keys[1].Address, Amount: big.NewInt(1e18)}}, res[0].Effects)
		require.Equal(t, e.estimate(t, calls[0]), res[0].Gas)
		require.Empty(t, res[1].Effects, "eth_call shows no logs")
		require.Equal(t, e.estimate(t, calls[1]), res[1].Gas)
		require.Equal(t, []txm.Effect{{Kind: txm.EffectNative, From: from, To: simForwarderAddr, Amount: big.NewInt(7)}}, res[2].Effects,
			"the top-level value only")
		require.Equal(t, e.estimate(t, calls[2]), res[2].Gas)
		require.True(t, res[3].Reverted)
		require.Equal(t, errorString(t, "nope"), res[3].RevertData)
		require.Zero(t, res[3].Gas)
		var xe *txm.ExecutionError
		require.ErrorAs(t, res[4].Err, &xe)
	}

	// Found out: the batch's estimates stand, one more batch of eth_call.
	res, err := e.client.Simulate(ctx, calls)
	require.NoError(t, err)
	reqs := requestsOf(e.proxy)
	require.Len(t, reqs, 2, "%v", reqs)
	require.Equal(t, map[string]int{"eth_simulateV1": len(calls), "eth_estimateGas": len(calls)}, countMethods(reqs[0]))
	require.Equal(t, map[string]int{"eth_call": len(calls)}, countMethods(reqs[1]))
	check(res)
	require.Equal(t, txm.SimCallEstimate, e.client.SimulationMethod())

	// Remembered: eth_call and eth_estimateGas at once, in one batch.
	e.proxy.Reset()
	res, err = e.client.Simulate(ctx, calls)
	require.NoError(t, err)
	reqs = requestsOf(e.proxy)
	require.Len(t, reqs, 1, "%v", reqs)
	require.Equal(t, map[string]int{"eth_call": len(calls), "eth_estimateGas": len(calls)}, countMethods(reqs[0]))
	check(res)

	// Still remembered after the node learns it, until SimulateRecheck.
	e.proxy.Heal()
	e.proxy.Reset()
	res, err = e.client.Simulate(ctx, calls[:1])
	require.NoError(t, err)
	require.Equal(t, txm.SimCallEstimate, res[0].Method)
	require.Zero(t, e.proxy.Count("eth_simulateV1"))
}

func TestIssue47_SimulateRedetect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := simSetup(t, func(o *Options) { o.SimulateRecheck = 0 })
	calls := e.simCalls()[2:3] // the forwarder: its internal transfer shows the method

	e.proxy.Fail("eth_simulateV1", 1, simulateMissing)
	res, err := e.client.Simulate(ctx, calls)
	require.NoError(t, err)
	require.Equal(t, txm.SimCallEstimate, res[0].Method)
	require.Len(t, res[0].Effects, 1)

	// The recheck is due: the node serves it now.
	res, err = e.client.Simulate(ctx, calls)
	require.NoError(t, err)
	require.Equal(t, txm.SimSimulateV1, res[0].Method)
	require.Len(t, res[0].Effects, 2)
	require.Equal(t, txm.SimSimulateV1, e.client.SimulationMethod())

	// A later method-not-found switches back within the same call.
	e.proxy.Fail("eth_simulateV1", 1, simulateMissing)
	res, err = e.client.Simulate(ctx, calls)
	require.NoError(t, err)
	require.Equal(t, txm.SimCallEstimate, res[0].Method)
	require.Equal(t, txm.SimCallEstimate, e.client.SimulationMethod())
}

func TestIssue47_SimulateErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := simSetup(t)
	calls := e.simCalls()[:1]

	// Node trouble is an error, not a result.
	e.proxy.Fail("eth_simulateV1", 1, rpcproxy.Fault{RPCError: &rpcproxy.RPCError{Code: -32603, Message: "internal error"}})
	_, err := e.client.Simulate(ctx, calls)
	require.Error(t, err)
	e.proxy.Fail("eth_estimateGas", 1, rpcproxy.Fault{RPCError: &rpcproxy.RPCError{Code: -32002, Message: "request timed out"}})
	_, err = e.client.Simulate(ctx, calls)
	require.Error(t, err)

	// The endpoint's URL, which may carry a provider's key, never shows.
	keyed, err := Dial(ctx, evmtest.ChainID, []string{e.proxy.URL + "/v3/secret-key-47"}, DefaultOptions())
	require.NoError(t, err)
	t.Cleanup(keyed.Close)
	e.proxy.Fail("eth_simulateV1", 1, rpcproxy.Fault{HTTPStatus: 502})
	_, err = keyed.Simulate(ctx, calls)
	require.Error(t, err)
	require.NotContains(t, err.Error(), "secret-key-47")
	e.proxy.Fail("eth_simulateV1", 1, rpcproxy.Fault{RPCError: &rpcproxy.RPCError{Code: -32603, Message: "upstream " + e.proxy.URL + "/v3/secret-key-47 failed"}})
	_, err = keyed.Simulate(ctx, calls)
	require.Error(t, err)
	require.NotContains(t, err.Error(), "secret-key-47")

	// Both kinds of fee is bad input, and nothing is asked.
	e.proxy.Reset()
	bad := calls[0]
	bad.GasPrice, bad.MaxFeePerGas = big.NewInt(1), big.NewInt(1)
	_, err = e.client.Simulate(ctx, []txm.SimCall{bad})
	require.ErrorIs(t, err, txm.ErrInvalid)
	require.Empty(t, e.proxy.Calls())

	// Nothing to simulate asks nothing.
	res, err := e.client.Simulate(ctx, nil)
	require.NoError(t, err)
	require.Nil(t, res)
	require.Empty(t, e.proxy.Calls())
}

func TestIssue47_SimulateGasLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := simSetup(t)
	call := e.simCalls()[1] // the token transfer, which needs more than 21000

	// The caller's limit is too low: the call fails, whatever it emits.
	low := call
	low.Gas = 22_000 // above the calldata floor, below the LOG3's cost
	res, err := e.client.Simulate(ctx, []txm.SimCall{low})
	require.NoError(t, err)
	var xe *txm.ExecutionError
	require.ErrorAs(t, res[0].Err, &xe)
	require.Contains(t, xe.Reason, "out of gas")
	require.Empty(t, res[0].Effects)

	// Below the calldata floor (EIP-7623), which geth's eth_simulateV1
	// refuses with -32603: still the call's fault.
	low.Gas = 21_500
	res, err = e.client.Simulate(ctx, []txm.SimCall{low})
	require.NoError(t, err)
	require.ErrorAs(t, res[0].Err, &xe)
	require.Contains(t, xe.Reason, "floor data gas")

	// Enough, with fees the signer can pay: the estimate is the gas.
	ok := call
	ok.Gas = 100_000
	ok.MaxFeePerGas, ok.MaxPriorityFeePerGas = big.NewInt(100*params1Gwei), big.NewInt(params1Gwei)
	res, err = e.client.Simulate(ctx, []txm.SimCall{ok})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	require.Len(t, res[0].Effects, 1)
	require.Equal(t, e.estimate(t, call), res[0].Gas)
}

func TestIssue47_HasCode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := simSetup(t)
	eoa := e.keys[1].Address
	addrs := []common.Address{eoa, simEmitterAddr, simRecipient, simEmitterAddr}

	has, err := e.client.HasCode(ctx, addrs)
	require.NoError(t, err)
	require.Equal(t, []bool{false, true, false, true}, has)
	reqs := requestsOf(e.proxy)
	require.Len(t, reqs, 1, "one batch")
	require.Equal(t, map[string]int{"eth_getCode": 3}, countMethods(reqs[0]), "each address asked once")

	// Cached: nothing asked.
	e.proxy.Reset()
	has, err = e.client.HasCode(ctx, addrs[:2])
	require.NoError(t, err)
	require.Equal(t, []bool{false, true}, has)
	require.Empty(t, e.proxy.Calls())

	// Without reuse, every check asks.
	fresh := simSetup(t, func(o *Options) { o.CodeCacheTTL = 0 })
	for range 2 {
		has, err = fresh.client.HasCode(ctx, addrs[:2])
		require.NoError(t, err)
		require.Equal(t, []bool{false, true}, has)
	}
	require.Equal(t, 4, fresh.proxy.Count("eth_getCode"))
}

func TestIssue47_SimulateCreate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := simSetup(t, func(o *Options) { o.SimulateRecheck = 0 })
	from := e.keys[0].Address
	// Init code that deploys nothing (STOP), endowed with 5 wei.
	call := txm.SimCall{From: from, Value: big.NewInt(5), Data: []byte{0x00}}

	res, err := e.client.Simulate(ctx, []txm.SimCall{call})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	require.Equal(t, txm.SimSimulateV1, res[0].Method)
	require.Equal(t, []txm.Effect{{Kind: txm.EffectNative, From: from, To: crypto.CreateAddress(from, 0), Amount: big.NewInt(5)}}, res[0].Effects,
		"the value goes to the address the creation gets at the signer's nonce")
	require.Greater(t, res[0].Gas, uint64(53000))

	// Without eth_simulateV1 the new address is not known: the zero
	// address stands for it.
	e.proxy.Fail("eth_simulateV1", 1, simulateMissing)
	res, err = e.client.Simulate(ctx, []txm.SimCall{call})
	require.NoError(t, err)
	require.Equal(t, txm.SimCallEstimate, res[0].Method)
	require.Equal(t, []txm.Effect{{Kind: txm.EffectNative, From: from, To: common.Address{}, Amount: big.NewInt(5)}}, res[0].Effects)
}
