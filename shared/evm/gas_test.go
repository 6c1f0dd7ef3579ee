package evm

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/rpc"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/evm/rpcproxy"
	"github.com/txfence/txfence/shared/testsupport"
	"github.com/txfence/txfence/shared/txm"
)

func TestIssue10_EstimateGasInsufficientFunds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t)
	from := e.keys[0].Address
	to := e.keys[1].Address

	// What the simulated geth really answers (v1.17.8, no fee in the call):
	// "failed with N gas: insufficient funds for gas * price + value:
	// address 0x.. have <balance> want <value>".
	value := new(big.Int).Add(evmtest.DevBalance(), big.NewInt(1))
	_, err := e.client.EstimateGas(ctx, txm.CallMsg{From: from, To: &to, Value: value})
	var fe *txm.InsufficientFundsError
	require.ErrorAs(t, err, &fe)
	t.Logf("node said: %v", fe.Err)
	require.Equal(t, evmtest.DevBalance(), fe.Have)
	require.Equal(t, value, fe.Want)
	var rpcErr rpc.Error
	require.ErrorAs(t, err, &rpcErr, "the node's error is wrapped")
	require.Equal(t, txm.ReasonInsufficientFunds, Classify(err))
	var re *txm.RevertError
	require.False(t, errors.As(err, &re), "not a revert")

	// A signer with nothing, calling with data.
	empty := common.HexToAddress("0x00000000000000000000000000000000000e3e3e")
	_, err = e.client.EstimateGas(ctx, txm.CallMsg{From: empty, To: &to, Value: big.NewInt(1), Data: []byte{1, 2}})
	require.ErrorAs(t, err, &fe)
	require.Zero(t, fe.Have.Sign())
	require.Equal(t, big.NewInt(1), fe.Want)

	// Within the balance: an estimate, no error.
	_, err = e.client.EstimateGas(ctx, txm.CallMsg{From: from, To: &to, Value: evmtest.DevBalance()})
	require.NoError(t, err)
}

func TestIssue10_EstimateGasInsufficientFundsWithoutAmounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	chain := evmtest.Start(t, nil)
	proxy := rpcproxy.Start(t, chain.URL)
	c, err := Dial(ctx, evmtest.ChainID, []string{proxy.URL}, DefaultOptions())
	require.NoError(t, err)
	t.Cleanup(c.Close)
	to := common.HexToAddress("0x000000000000000000000000000000000000dEaD")

	// geth's estimator when the call names a fee (core.ErrInsufficientFundsForTransfer).
	proxy.Fail("eth_estimateGas", 1, rpcproxy.Fault{RPCError: &rpcproxy.RPCError{Code: -32000, Message: "insufficient funds for transfer"}})
	_, err = c.EstimateGas(ctx, txm.CallMsg{To: &to, Value: big.NewInt(1)})
	var fe *txm.InsufficientFundsError
	require.ErrorAs(t, err, &fe)
	require.Nil(t, fe.Have)
	require.Nil(t, fe.Want)
	require.ErrorContains(t, fe.Err, "insufficient funds for transfer")

	// Any other node error stays what it was.
	proxy.Fail("eth_estimateGas", 1, rpcproxy.Fault{RPCError: &rpcproxy.RPCError{Code: -32603, Message: "internal error"}})
	_, err = c.EstimateGas(ctx, txm.CallMsg{To: &to, Value: big.NewInt(1)})
	require.Error(t, err)
	require.False(t, errors.As(err, &fe))
}

func TestInsufficientFunds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err        error
		ok         bool
		have, want int64 // -1: not given
	}{
		{&rpcError{-32000, "insufficient funds for gas * price + value: address " + testAddr + " have 123 want 456"}, true, 123, 456}, // geth core/state_transition.go
		{&rpcError{-32000, "err: insufficient funds for gas * price + value: address " + testAddr + " have 10 want 20 (supplied gas 50000)"}, true, 10, 20},
		{&rpcError{-32003, "insufficient funds for gas * price + value: have 7 want 9"}, true, 7, 9}, // reth
		{&rpcError{-32000, "insufficient funds for gas * price + value: address " + testAddr + ", have: 1, want: 2"}, true, 1, 2},
		{&rpcError{-32000, "insufficient funds for transfer: address " + testAddr}, true, -1, -1}, // geth core.ErrInsufficientFundsForTransfer
		{&rpcError{-32000, "insufficient funds for gas * price + value"}, true, -1, -1},           // geth core.ErrInsufficientFunds bare
		{&rpcError{-32000, "Upfront cost exceeds account balance"}, true, -1, -1},                 // Besu
		{&rpcError{3, "execution reverted"}, false, -1, -1},
		{&rpcError{-32603, "internal error"}, false, -1, -1},
		{errors.New("insufficient funds for transfer"), false, -1, -1}, // not the node's answer
	}
	for _, tt := range tests {
		fe := insufficientFunds(tt.err)
		if !tt.ok {
			require.Nil(t, fe, "%v", tt.err)
			continue
		}
		require.NotNil(t, fe, "%v", tt.err)
		require.Same(t, tt.err, fe.Err)
		if tt.have < 0 {
			require.Nil(t, fe.Have, "%v", tt.err)
			require.Nil(t, fe.Want, "%v", tt.err)
			continue
		}
		require.Equal(t, big.NewInt(tt.have), fe.Have, "%v", tt.err)
		require.Equal(t, big.NewInt(tt.want), fe.Want, "%v", tt.err)
	}
}

// Runtime codes that fail in the EVM whatever the gas.
var (
	codeInvalid      = []byte{0xfe}                                     // INVALID
	codeLoop         = []byte{0x5b, 0x60, 0x00, 0x56}                   // JUMPDEST PUSH1 0 JUMP: out of gas at any limit
	codeUnderflow    = []byte{0x01}                                     // ADD on an empty stack
	codeBadJump      = []byte{0x60, 0x05, 0x56}                         // PUSH1 5 JUMP: no JUMPDEST there
	codeReturnDataOB = []byte{0x60, 0x01, 0x60, 0x00, 0x60, 0x00, 0x3e} // RETURNDATACOPY(0, 0, 1) with no return data
)

func TestIssue44_EstimateGasExecutionErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	keys := evmtest.DevKeys(1)
	alloc := evmtest.FundedAlloc(keys, nil)
	contracts := map[string]common.Address{}
	for i, c := range []struct {
		name string
		code []byte
	}{{"invalid", codeInvalid}, {"loop", codeLoop}, {"underflow", codeUnderflow}, {"badjump", codeBadJump}, {"returndata", codeReturnDataOB}} {
		addr := common.BigToAddress(big.NewInt(int64(0xc0de00 + i)))
		alloc[addr] = types.Account{Code: c.code, Balance: new(big.Int)}
		contracts[c.name] = addr
	}
	// A small block gas limit bounds the estimate's search, so the loop
	// runs out of gas in a few hundred thousand steps, even under -race.
	chain := evmtest.Start(t, alloc, evmtest.WithBlockGasLimit(3_000_000))
	c, err := Dial(ctx, evmtest.ChainID, []string{chain.URL}, DefaultOptions())
	require.NoError(t, err)
	t.Cleanup(c.Close)
	from := keys[0].Address
	call := func(name string) txm.CallMsg {
		to := contracts[name]
		return txm.CallMsg{From: from, To: &to}
	}
	blake2f := common.BytesToAddress([]byte{0x09})

	for _, tc := range []struct {
		name   string
		msg    txm.CallMsg
		reason string // what geth v1.17.8 says, in full or its start
	}{
		{"call hits INVALID", call("invalid"), "invalid opcode: INVALID"},
		{"creation hits INVALID", txm.CallMsg{From: from, Data: codeInvalid}, "invalid opcode: INVALID"},
		{"call loops until out of gas", call("loop"), "gas required exceeds allowance ("},
		{"creation loops until out of gas", txm.CallMsg{From: from, Data: codeLoop}, "gas required exceeds allowance ("},
		{"call underflows the stack", call("underflow"), "stack underflow (0 <=> 2)"},
		{"creation underflows the stack", txm.CallMsg{From: from, Data: codeUnderflow}, "stack underflow (0 <=> 2)"},
		{"call jumps nowhere", call("badjump"), "invalid jump destination"},
		{"call reads past the return data", call("returndata"), "return data out of bounds"},
		{"precompile refuses its input", txm.CallMsg{From: from, To: &blake2f, Data: []byte{1, 2, 3}}, "invalid input length"},
	} {
		_, err := c.EstimateGas(ctx, tc.msg)
		var xe *txm.ExecutionError
		require.ErrorAs(t, err, &xe, "%s: %v", tc.name, err)
		assert.True(t, strings.HasPrefix(xe.Reason, tc.reason), "%s: reason %q, want %q", tc.name, xe.Reason, tc.reason)
		assert.ErrorIs(t, err, txm.ErrInvalid, "%s: the call's fault, not an outage", tc.name)
		var rpcErr rpc.Error
		assert.ErrorAs(t, err, &rpcErr, "%s: the node's answer is kept", tc.name)
		var re *txm.RevertError
		assert.False(t, errors.As(err, &re), "%s: not a revert", tc.name)
		var fe *txm.InsufficientFundsError
		assert.False(t, errors.As(err, &fe), "%s: not a balance problem", tc.name)
	}

	// A call that works is still estimated.
	to := keys[0].Address
	_, err = c.EstimateGas(ctx, txm.CallMsg{From: from, To: &to, Value: big.NewInt(1)})
	require.NoError(t, err)
}

// TestIssue44_EstimationErrorShapes: how each node's JSON-RPC answer to
// eth_estimateGas is read. ExecutionError (the caller's 422) for the node's
// verdict on the call, known wording or not; nil (the caller's 503) when the
// node says it is unwell. Codes and texts are the nodes' own (sources next
// to the patterns in classify.go).
func TestIssue44_EstimationErrorShapes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		client string
		code   int
		msg    string
		exec   bool
	}{
		// geth v1.17.8: core/vm errors answered with the default code -32000
		{"geth", -32000, "invalid opcode: INVALID", true},
		{"geth", -32000, "gas required exceeds allowance (50000000)", true},
		{"geth", -32000, "stack underflow (0 <=> 2)", true},
		{"geth", -32000, "stack limit reached 1024 (1023)", true},
		{"geth", -32000, "invalid jump destination", true},
		{"geth", -32000, "write protection", true},
		{"geth", -32000, "return data out of bounds", true},
		{"geth", -32000, "max code size exceeded", true},
		{"geth", -32000, "max initcode size exceeded: code size 49153 limit 49152", true},
		{"geth", -32000, "contract creation code storage out of gas", true},
		{"geth", -32000, "max call depth exceeded", true},
		{"geth", -32000, "invalid code: must not begin with 0xef", true},
		{"geth", -32000, "invalid input length", true},
		{"geth", -32000, "invalid point: not on curve", true},
		// erigon: the same vm texts, its own estimator's
		{"erigon", -32000, "gas required exceeds allowance (30000000)", true},
		{"erigon", -32000, "invalid opcode: opcode 0xef not defined", true},
		// Nethermind: GasEstimator and EvmExceptionType texts, code -32000
		{"nethermind", -32000, "Gas estimation failed due to out of gas", true},
		{"nethermind", -32000, "Transaction execution fails", true},
		{"nethermind", -32000, "invalid instruction", true},
		{"nethermind", -32000, "stack underflow", true},
		{"nethermind", -32000, "precompile error", true},
		{"nethermind", -32000, "Cannot estimate gas, gas spent exceeded transaction and block gas limit or transaction gas limit cap", true},
		// Besu: EXECUTION_HALTED with the ExceptionalHaltReason
		{"besu", -32000, "Transaction processing could not be completed due to an exception (Bad instruction)", true},
		{"besu", -32000, "Transaction processing could not be completed due to an exception (Out of gas)", true},
		{"besu", -32000, "Transaction processing could not be completed due to an exception (Stack underflow)", true},
		// reth: halts with code -32003 (TransactionRejected), out of gas with -32000
		{"reth", -32003, "EVM error: InvalidFEOpcode", true},
		{"reth", -32003, "EVM error: StackUnderflow", true},
		{"reth", -32003, "EVM error: OpcodeNotFound", true},
		{"reth", -32003, "out of gas: gas required exceeds: 30000000", true},
		{"reth", -32000, "gas required exceeds allowance (30000000)", true},
		{"reth", -32003, "out of memory: memory limit exceeded during memory expansion", true},
		// an answer nobody has listed: the node's word on this call
		{"l2", -32000, "sequencer rejected call: forbidden precompile", true},
		{"geth", -32602, "invalid argument 0: json: cannot unmarshal hex string without 0x prefix", true},

		// node trouble: 503
		{"geth", -32000, "header not found", false},
		{"geth", -32000, "missing trie node 1a2b3c (path ) <nil>", false},
		{"geth", -32000, "historical state 1a2b3c is not available", false},
		{"geth", -32000, "execution aborted (timeout = 5s)", false},
		{"geth", -32002, "request timed out", false},
		{"geth", -32603, "method handler crashed", false},
		{"geth", -32601, "the method eth_estimateGas does not exist/is not available", false},
		{"besu", -32603, "Internal error", false},
		{"besu", -32603, "Timeout expired", false},
		{"besu", -32000, "World state unavailable", false},
		{"besu", -32008, "Initial sync is still in progress", false},
		{"reth", -32603, "internal eth error", false},
		{"reth", -32001, "block not found: hash 0x1a2b", false},
		{"erigon", -32000, "could not find the block latest in cache or db", false},
		{"nethermind", -32603, "Internal error", false},
		{"nethermind", -32000, "node is syncing", false},
		{"infura", -32005, "project ID request rate exceeded", false},
		{"infura", -32005, "daily request count exceeded, request rate limited", false},
		{"alchemy", 429, "Your app has exceeded its compute units per second capacity. If you have retries enabled, you can safely ignore this message.", false},
		{"alchemy", -32600, "Monthly capacity limit exceeded.", false},
		{"quicknode", -32007, "credits limited to 25/sec", false},
		// a known execution text wins over the code
		{"besu", -32603, "Transaction processing could not be completed due to an exception (Bad instruction)", true},
	} {
		err := fmt.Errorf("estimate: %w", &rpcError{code: c.code, message: c.msg})
		xe := executionFailure(err)
		if !c.exec {
			assert.Nil(t, xe, "%s %d %q is node trouble", c.client, c.code, c.msg)
			continue
		}
		if assert.NotNil(t, xe, "%s %d %q is the call's failure", c.client, c.code, c.msg) {
			assert.Equal(t, c.msg, xe.Reason)
			assert.ErrorIs(t, xe, err)
		}
	}

	// No JSON-RPC answer at all: never the call's failure.
	for _, err := range []error{
		context.DeadlineExceeded,
		&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)},
		rpc.HTTPError{StatusCode: 502, Status: "502 Bad Gateway", Body: []byte("invalid opcode")},
		errors.New("invalid opcode: INVALID"), // text alone, not the node's answer
		// an endpoint whose chain id could not be read, whatever it said
		&unverifiedError{err: &rpcError{code: -32000, message: "invalid opcode: INVALID"}},
	} {
		assert.Nil(t, executionFailure(err), "%v", err)
	}

	// The lists are lower case, without repeats, and no execution wording
	// reads as node trouble or the other way round.
	seen := map[string]bool{}
	for _, list := range [][]string{executionFailurePatterns, nodeTroublePatterns} {
		for _, p := range list {
			assert.Equal(t, strings.ToLower(p), p)
			assert.False(t, seen[p], "%q listed twice", p)
			seen[p] = true
		}
	}
	for _, x := range executionFailurePatterns {
		for _, n := range nodeTroublePatterns {
			assert.False(t, containsAtWordStart(x, n) || containsAtWordStart(n, x), "%q and %q overlap", x, n)
		}
	}

	// A long answer is cut on a character boundary.
	long := strings.Repeat("é", 400)
	xe := executionFailure(&rpcError{code: -32000, message: long})
	require.NotNil(t, xe)
	assert.LessOrEqual(t, len(xe.Reason), maxReasonLen+len("…"))
	assert.True(t, utf8.ValidString(xe.Reason))
}

// TestIssue44_EstimationErrorsOverJSONRPC: the same reading over HTTP, with
// the fault proxy answering in each node's shape.
func TestIssue44_EstimationErrorsOverJSONRPC(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	chain := evmtest.Start(t, nil)
	proxy := rpcproxy.Start(t, chain.URL)
	c, err := Dial(ctx, evmtest.ChainID, []string{proxy.URL}, DefaultOptions())
	require.NoError(t, err)
	t.Cleanup(c.Close)
	to := common.HexToAddress("0x000000000000000000000000000000000000dEaD")
	msg := txm.CallMsg{To: &to, Data: []byte{1}}

	for _, f := range []struct {
		fault rpcproxy.Fault
		exec  string // the reason of the ExecutionError; "" when the node could not be asked
	}{
		{rpcproxy.Fault{RPCError: &rpcproxy.RPCError{Code: -32000, Message: "invalid opcode: INVALID"}}, "invalid opcode: INVALID"},
		{rpcproxy.Fault{RPCError: &rpcproxy.RPCError{Code: -32003, Message: "EVM error: StackUnderflow"}}, "EVM error: StackUnderflow"},
		{rpcproxy.Fault{RPCError: &rpcproxy.RPCError{Code: -32000, Message: "Transaction processing could not be completed due to an exception (Out of gas)"}},
			"Transaction processing could not be completed due to an exception (Out of gas)"},
		{rpcproxy.Fault{RPCError: &rpcproxy.RPCError{Code: -32000, Message: "header not found"}}, ""},
		{rpcproxy.Fault{RPCError: &rpcproxy.RPCError{Code: -32603, Message: "Internal error"}}, ""},
		{rpcproxy.Fault{RPCError: &rpcproxy.RPCError{Code: -32005, Message: "project ID request rate exceeded"}}, ""},
		{rpcproxy.Fault{HTTPStatus: http.StatusBadGateway}, ""},
		{rpcproxy.Fault{HTTPStatus: http.StatusTooManyRequests}, ""},
		{rpcproxy.Fault{Drop: true}, ""},
	} {
		proxy.Fail("eth_estimateGas", 1, f.fault)
		_, err := c.EstimateGas(ctx, msg)
		require.Error(t, err)
		var xe *txm.ExecutionError
		if f.exec == "" {
			assert.False(t, errors.As(err, &xe), "%+v: the node could not be asked: %v", f.fault, err)
			assert.NotErrorIs(t, err, txm.ErrInvalid)
			continue
		}
		require.ErrorAs(t, err, &xe, "%+v", f.fault)
		assert.Equal(t, f.exec, xe.Reason)
	}

	// A closed endpoint.
	dead, err := New(evmtest.ChainID, []*rpc.Client{dialRPC(t, testsupport.DeadURL(t))}, DefaultOptions())
	require.NoError(t, err)
	defer dead.Close()
	_, err = dead.EstimateGas(ctx, msg)
	require.Error(t, err)
	var xe *txm.ExecutionError
	assert.False(t, errors.As(err, &xe), "%v", err)
}
