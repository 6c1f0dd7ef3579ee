package api

import (
	"context"
	"math/big"
	"net/http"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/evm"
	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/evm/rpcproxy"
)

// fieldMessages maps each rejected field of a problem to its messages.
func fieldMessages(p problem) map[string][]string {
	out := map[string][]string{}
	for _, f := range p.Errors {
		out[f.Field] = append(out[f.Field], f.Message)
	}
	return out
}

func TestIssue10_IntrinsicGas(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	signer := signers(1)[0]
	first := b.create(t, b.insts[0], transfer(signer, 1, ""))
	require.Equal(t, http.StatusAccepted, first.status, "%s", first.raw)
	require.EqualValues(t, 0, first.tx.nonce())
	before := b.counts(t)

	call := func(gas uint64, data string) map[string]any {
		m := transfer(signer, 1, "")
		m["gasLimit"], m["data"] = gas, data
		return m
	}
	creation := func(gas uint64, code string) map[string]any {
		m := call(gas, code)
		delete(m, "to")
		return m
	}
	cases := []struct {
		name      string
		body      map[string]any
		intrinsic string // as the message must name it
	}{
		// 21000 + the EIP-7623 floor of one non-zero byte (10 × 4 tokens).
		{"21000 with calldata", call(21000, "0x01"), "21040"},
		{"one below", call(21039, "0x01"), "21040"},
		// 21000 + 10 × (4 × 4 + 32) for a selector and one zero word.
		{"selector and a zero word", call(21479, "0xa9059cbb"+strings.Repeat("00", 32)), "21480"},
		// 53000 + 16 for the byte + 2 for its init code word.
		{"creation at the call cost", creation(53000, "0x60"), "53018"},
	}
	for _, tc := range cases {
		r := b.create(t, b.insts[0], tc.body)
		require.Equal(t, http.StatusUnprocessableEntity, r.status, "%s: %s", tc.name, r.raw)
		msgs := fieldMessages(r.prob)["gasLimit"]
		require.Len(t, msgs, 1, "%s names gasLimit: %s", tc.name, r.raw)
		assert.Contains(t, msgs[0], tc.intrinsic, "%s names the intrinsic gas", tc.name)
	}
	assert.Equal(t, before, b.counts(t), "no row written")
	assert.EqualValues(t, 1, b.cursor(t, signer), "the cursor is unchanged")

	// At the intrinsic gas exactly, the create goes through, with the next nonce.
	r := b.create(t, b.insts[0], call(21040, "0x01"))
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.raw)
	assert.EqualValues(t, 1, r.tx.nonce())
	r = b.create(t, b.insts[0], creation(53018, "0x60"))
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.raw)
	assert.EqualValues(t, 2, r.tx.nonce())
	assert.Equal(t, []int64{0, 1, 2}, b.nonces(t, signer))
}

func TestIssue10_EstimateInsufficientFunds(t *testing.T) {
	t.Parallel()
	require.EqualValues(t, evmtest.ChainID, testChain)
	keys := evmtest.DevKeys(1)
	signer := keys[0].Address
	balance := big.NewInt(1_000_000_000_000_000_000) // 1 ether
	chain := evmtest.Start(t, evmtest.FundedAlloc(keys, balance))
	client, err := evm.Dial(context.Background(), evmtest.ChainID, []string{chain.URL}, evm.DefaultOptions())
	require.NoError(t, err)
	t.Cleanup(client.Close)

	b := setup(t, 0, func(c *config.Config) {
		c.Chains = []config.Chain{{ID: testChain, RPCURLs: []string{chain.URL}}}
		c.Signers = append(c.Signers, config.Signer{Address: signer})
	})
	b.reader = client
	b.insts = append(b.insts, b.newInstance(t, "api0", b.db.URL))

	pay := func(value string) map[string]any { // no gasLimit: the chain estimates
		return map[string]any{"chainId": testChain, "from": signer.Hex(), "to": "0x000000000000000000000000000000000000dEaD", "value": value}
	}
	first := b.create(t, b.insts[0], pay("1000"))
	require.Equal(t, http.StatusAccepted, first.status, "%s", first.raw)
	require.EqualValues(t, 0, first.tx.nonce())
	before := b.counts(t)

	r := b.create(t, b.insts[0], pay("2000000000000000000"))
	require.Equal(t, http.StatusUnprocessableEntity, r.status, "a refusal, not an outage: %s", r.raw)
	assert.Empty(t, r.header.Get("Retry-After"))
	assert.Equal(t, []string{"the signer's balance is 1000000000000000000 wei; the transaction needs 2000000000000000000 wei"},
		fieldMessages(r.prob)["value"], "%s", r.raw)
	assert.Equal(t, before, b.counts(t), "no row written")
	assert.EqualValues(t, 1, b.cursor(t, signer), "the cursor is unchanged")

	next := b.create(t, b.insts[0], pay("1"))
	require.Equal(t, http.StatusAccepted, next.status, "%s", next.raw)
	assert.EqualValues(t, 1, next.tx.nonce(), "no nonce was consumed")
}

// TestIssue44_EstimationErrors: a create whose gas estimate fails in the EVM
// on a real node (go-ethereum's simulated chain) answers 422
// execution-failed with the node's reason and writes nothing; only a node
// that cannot be asked answers 503 with Retry-After.
func TestIssue44_EstimationErrors(t *testing.T) {
	t.Parallel()
	require.EqualValues(t, evmtest.ChainID, testChain)
	ctx := context.Background()
	keys := evmtest.DevKeys(1)
	signer := keys[0].Address
	alloc := evmtest.FundedAlloc(keys, nil)
	// Contracts in the genesis, each failing whatever the gas.
	invalid := common.HexToAddress("0x00000000000000000000000000000000c0de00fe")
	loop := common.HexToAddress("0x00000000000000000000000000000000c0de0056")
	underflow := common.HexToAddress("0x00000000000000000000000000000000c0de0001")
	alloc[invalid] = types.Account{Code: []byte{0xfe}, Balance: new(big.Int)}                // INVALID
	alloc[loop] = types.Account{Code: []byte{0x5b, 0x60, 0x00, 0x56}, Balance: new(big.Int)} // JUMPDEST PUSH1 0 JUMP
	alloc[underflow] = types.Account{Code: []byte{0x01}, Balance: new(big.Int)}              // ADD, empty stack
	// A small block gas limit bounds the estimate's search, so the loop
	// runs out of gas in a few hundred thousand steps, even under -race.
	chain := evmtest.Start(t, alloc, evmtest.WithBlockGasLimit(3_000_000))
	proxy := rpcproxy.Start(t, chain.URL)
	client, err := evm.Dial(ctx, evmtest.ChainID, []string{proxy.URL}, evm.DefaultOptions())
	require.NoError(t, err)
	t.Cleanup(client.Close)

	b := setup(t, 0, func(c *config.Config) {
		c.Chains = []config.Chain{{ID: testChain, RPCURLs: []string{proxy.URL}}}
		c.Signers = append(c.Signers, config.Signer{Address: signer})
	})
	b.reader = client
	b.insts = append(b.insts, b.newInstance(t, "api0", b.db.URL))

	call := func(to common.Address, data string) map[string]any { // no gasLimit: the chain estimates
		m := map[string]any{"chainId": testChain, "from": signer.Hex(), "to": to.Hex(), "value": "0"}
		if data != "" {
			m["data"] = data
		}
		return m
	}
	creation := func(code string) map[string]any {
		return map[string]any{"chainId": testChain, "from": signer.Hex(), "value": "0", "data": code}
	}
	first := b.create(t, b.insts[0], call(common.HexToAddress("0x000000000000000000000000000000000000dEaD"), ""))
	require.Equal(t, http.StatusAccepted, first.status, "%s", first.raw)
	require.EqualValues(t, 0, first.tx.nonce())
	before := b.counts(t)

	for _, c := range []struct {
		name   string
		body   map[string]any
		reason string // what geth says, in full or its start
	}{
		{"a call that hits INVALID", call(invalid, ""), "invalid opcode: INVALID"},
		{"a creation that hits INVALID", creation("0xfe"), "invalid opcode: INVALID"},
		// The simulation, which runs the call at the block's gas limit,
		// says it first.
		{"a call that runs out of gas", call(loop, "0x01"), "out of gas"},
		{"a creation that runs out of gas", creation("0x5b600056"), "out of gas"},
		{"a call that underflows the stack", call(underflow, ""), "stack underflow (0 <=> 2)"},
		{"a creation that underflows the stack", creation("0x01"), "stack underflow (0 <=> 2)"},
	} {
		r := b.create(t, b.insts[0], c.body)
		require.Equal(t, http.StatusUnprocessableEntity, r.status, "%s: the call's fault, not an outage: %s", c.name, r.raw)
		assert.Equal(t, problemBase+"execution-failed", r.prob.Type, "%s", c.name)
		assert.Empty(t, r.header.Get("Retry-After"), "%s: never retry", c.name)
		assert.Contains(t, r.prob.Detail, "the call fails on chain: "+c.reason, "%s: %s", c.name, r.raw)
		msgs := fieldMessages(r.prob)["data"]
		if assert.Len(t, msgs, 1, "%s: %s", c.name, r.raw) {
			assert.True(t, strings.HasPrefix(msgs[0], "the call fails on chain: "+c.reason), "%s: %q", c.name, msgs[0])
		}
		assert.Equal(t, before, b.counts(t), "%s: no row written", c.name)
		assert.EqualValues(t, 1, b.cursor(t, signer), "%s: no nonce used", c.name)
	}

	// The node cannot be asked: 503 with Retry-After, nothing written.
	for _, f := range []struct {
		name  string
		fault rpcproxy.Fault
	}{
		{"a 502 from the provider", rpcproxy.Fault{HTTPStatus: http.StatusBadGateway}},
		{"a 429 from the provider", rpcproxy.Fault{HTTPStatus: http.StatusTooManyRequests}},
		{"the connection dropped", rpcproxy.Fault{Drop: true}},
		{"the node's internal error", rpcproxy.Fault{RPCError: &rpcproxy.RPCError{Code: -32603, Message: "Internal error"}}},
		{"a node behind the head", rpcproxy.Fault{RPCError: &rpcproxy.RPCError{Code: -32000, Message: "header not found"}}},
	} {
		// The create's simulation asks both, in one batch.
		proxy.Fail("eth_simulateV1", 1, f.fault)
		proxy.Fail("eth_estimateGas", 1, f.fault)
		r := b.create(t, b.insts[0], call(invalid, ""))
		require.Equal(t, http.StatusServiceUnavailable, r.status, "%s: %s", f.name, r.raw)
		assert.NotEmpty(t, r.header.Get("Retry-After"), "%s", f.name)
		assert.Equal(t, before, b.counts(t), "%s: no row written", f.name)
	}

	// With a gas limit there is no estimate: the create goes through, at
	// the next nonce, none having been used by the refusals.
	withGas := call(invalid, "")
	withGas["gasLimit"] = 50_000
	r := b.create(t, b.insts[0], withGas)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.raw)
	assert.EqualValues(t, 1, r.tx.nonce())

	// An endpoint that is gone.
	proxy.Close()
	r = b.create(t, b.insts[0], call(invalid, ""))
	require.Equal(t, http.StatusServiceUnavailable, r.status, "%s", r.raw)
	assert.NotEmpty(t, r.header.Get("Retry-After"))
	assert.Equal(t, []int64{0, 1}, b.nonces(t, signer))
}
