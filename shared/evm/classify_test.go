package evm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/ethereum/go-ethereum/core/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/txm"
)

// rpcError has the shape of go-ethereum's rpc.jsonError: Error() is the bare
// "message" of the JSON-RPC error object, ErrorCode() its "code". This is how
// every node's reply reaches the adapter through rpc.Client.
type rpcError struct {
	code    int
	message string
}

func (e *rpcError) Error() string  { return e.message }
func (e *rpcError) ErrorCode() int { return e.code }

const testAddr = "0x71C7656EC7ab88b098defB751B7401B5f6d8976F"

// classificationCases are real error texts, each with where it comes from.
// "source" names the file (or the public report) the text was taken from;
// "unconfirmed" marks a text whose exact wording could not be confirmed.
var classificationCases = []struct {
	client string
	msg    string
	want   txm.BroadcastReason
}{
	// --- geth (go-ethereum v1.17.8, read from the module cache) ---
	// core/txpool/errors.go ErrAlreadyKnown
	{"geth", "already known", txm.ReasonKnown},
	// core/state_transition.go: "%w: address %v, tx: %d state: %d", ErrNonceTooLow
	{"geth", "nonce too low: address " + testAddr + ", tx: 5 state: 7", txm.ReasonNonceTooLow},
	// core/txpool/validation.go: "%w: next nonce %v, tx nonce %v", core.ErrNonceTooLow
	{"geth", "nonce too low: next nonce 7, tx nonce 5", txm.ReasonNonceTooLow},
	// core/txpool/errors.go ErrReplaceUnderpriced (legacypool)
	{"geth", "replacement transaction underpriced", txm.ReasonReplacementUnderpriced},
	// core/txpool/blobpool/blobpool.go: "%w: new tx gas fee cap %v <= %v queued"
	{"geth", "replacement transaction underpriced: new tx gas fee cap 10 <= 10 queued", txm.ReasonReplacementUnderpriced},
	// core/txpool/errors.go ErrUnderpriced (legacypool, pool full)
	{"geth", "transaction underpriced", txm.ReasonUnderpriced},
	// geth v1.13/v1.14 core/txpool/validation.go "%w: tip needed %v, tip permitted %v"
	// (gone from v1.17.8; confirmed in forks that still carry that file)
	{"geth", "transaction underpriced: tip needed 1, tip permitted 0", txm.ReasonUnderpriced},
	// core/txpool/validation.go: "%w: gas tip cap %v, minimum needed %v", ErrTxGasPriceTooLow
	{"geth", "transaction gas price below minimum: gas tip cap 1, minimum needed 2", txm.ReasonUnderpriced},
	// core/state_transition.go: "%w: address %v, maxFeePerGas: %s, baseFee: %s", ErrFeeCapTooLow
	{"geth", "max fee per gas less than block base fee: address " + testAddr + ", maxFeePerGas: 1000000000, baseFee: 2000000000", txm.ReasonUnderpriced},
	// core/state_transition.go: "%w: address %v have %v want %v", ErrInsufficientFunds
	{"geth", "insufficient funds for gas * price + value: address " + testAddr + " have 0 want 21000000000000", txm.ReasonInsufficientFunds},
	// core/txpool/validation.go: "%w: balance %v, tx cost %v, overshot %v", core.ErrInsufficientFunds
	{"geth", "insufficient funds for gas * price + value: balance 0, tx cost 21000000000000, overshot 21000000000000", txm.ReasonInsufficientFunds},
	// core/error.go ErrInsufficientFundsForTransfer
	{"geth", "insufficient funds for transfer", txm.ReasonInsufficientFunds},
	// core/txpool/validation.go: "%w: gas %v, minimum needed %v", core.ErrIntrinsicGas
	{"geth", "intrinsic gas too low: gas 20000, minimum needed 21000", txm.ReasonIntrinsicGas},
	// core/txpool/validation.go: "%w: gas %v, minimum needed %v", core.ErrFloorDataGas (EIP-7623)
	{"geth", "insufficient gas for floor data gas cost: gas 21000, minimum needed 21160", txm.ReasonIntrinsicGas},
	// core/txpool/errors.go ErrGasLimit
	{"geth", "exceeds block gas limit", txm.ReasonExceedsBlockGasLimit},
	// core/error.go ErrGasLimitReached
	{"geth", "gas limit reached", txm.ReasonExceedsBlockGasLimit},
	// core/txpool/validation.go: "%w (cap: %d, tx: %d)", core.ErrGasLimitTooHigh (EIP-7825)
	{"geth", "transaction gas limit too high (cap: 16777216, tx: 30000000)", txm.ReasonExceedsBlockGasLimit},
	// internal/ethapi/errors.go newRevertError: "%w: %v", vm.ErrExecutionReverted, reason
	{"geth", "execution reverted: Ownable: caller is not the owner", txm.ReasonReverted},
	// core/state_transition.go ErrNonceTooHigh: a gap, not in the closed set
	{"geth", "nonce too high: address " + testAddr + ", tx: 9 state: 7", txm.ReasonTransient},
	// core/txpool/legacypool/legacypool.go ErrTxPoolOverflow
	{"geth", "txpool is full", txm.ReasonTransient},
	// internal/ethapi/api.go checkTxFee: the node's cap on one transaction's fee
	{"geth", "tx fee (1.10 ether) exceeds the configured cap (1.00 ether)", txm.ReasonTxFeeCap},
	// pre-1.9 geth, quoted from a log in smartcontractkit/chainlink core/chains/evm/client/errors_test.go
	{"geth", "known transaction: 0x7f657507aee0511e36d2d1972a6b22e917cc89f92b6c12c4dbd57eaabb236960", txm.ReasonKnown},

	// --- Besu (ethereum/api/.../jsonrpc/internal/response/RpcErrorType.java; JsonRpcErrorConverter maps TransactionInvalidReason) ---
	// TRANSACTION_ALREADY_KNOWN -> ETH_SEND_TX_ALREADY_KNOWN
	{"besu", "Known transaction", txm.ReasonKnown},
	// NONCE_TOO_LOW
	{"besu", "Nonce too low", txm.ReasonNonceTooLow},
	// REPLACEMENT_UNDERPRICED -> ETH_SEND_TX_REPLACEMENT_UNDERPRICED
	{"besu", "Replacement transaction underpriced", txm.ReasonReplacementUnderpriced},
	// GAS_PRICE_TOO_LOW
	{"besu", "Gas price below configured minimum gas price", txm.ReasonUnderpriced},
	// GAS_PRICE_BELOW_CURRENT_BASE_FEE
	{"besu", "Gas price below current base fee", txm.ReasonUnderpriced},
	// UPFRONT_COST_EXCEEDS_BALANCE -> TRANSACTION_UPFRONT_COST_EXCEEDS_BALANCE
	{"besu", "Upfront cost exceeds account balance", txm.ReasonInsufficientFunds},
	// INTRINSIC_GAS_EXCEEDS_GAS_LIMIT -> INTRINSIC_GAS_EXCEEDS_LIMIT
	{"besu", "Intrinsic gas exceeds gas limit", txm.ReasonIntrinsicGas},
	// EXCEEDS_BLOCK_GAS_LIMIT
	{"besu", "Transaction gas limit exceeds block gas limit", txm.ReasonExceedsBlockGasLimit},
	// REVERT_ERROR
	{"besu", "Execution reverted", txm.ReasonReverted},
	// NONCE_TOO_HIGH: a gap
	{"besu", "Nonce too high", txm.ReasonTransient},
	// TX_FEECAP_EXCEEDED: the node's cap on one transaction's fee
	{"besu", "Transaction fee cap exceeded", txm.ReasonTxFeeCap},
	// TIMEOUT_ERROR
	{"besu", "Timeout expired", txm.ReasonTransient},

	// --- Erigon: rpc/jsonrpc/send_transaction.go returns "%s: %s" of the
	// txpool ImportResult name and txpoolcfg.DiscardReason.String(); the
	// pairing of prefix and reason follows mapDiscardReasonToProto ---
	{"erigon", "ALREADY_EXISTS: already known", txm.ReasonKnown},
	{"erigon", "INTERNAL_ERROR: nonce too low", txm.ReasonNonceTooLow},
	{"erigon", "FEE_TOO_LOW: replacement transaction underpriced", txm.ReasonReplacementUnderpriced},
	{"erigon", "FEE_TOO_LOW: underpriced", txm.ReasonUnderpriced},
	{"erigon", "FEE_TOO_LOW: fee too low", txm.ReasonUnderpriced},
	{"erigon", "INTERNAL_ERROR: insufficient funds", txm.ReasonInsufficientFunds},
	{"erigon", "INTERNAL_ERROR: IntrinsicGas", txm.ReasonIntrinsicGas},
	{"erigon", "INTERNAL_ERROR: gas limit is too high", txm.ReasonExceedsBlockGasLimit},
	{"erigon", "INTERNAL_ERROR: existing txn with same hash", txm.ReasonKnown},
	{"erigon", "INTERNAL_ERROR: could not replace existing tx", txm.ReasonReplacementUnderpriced},

	// --- Nethermind: older releases answer with the AcceptTxResult name and
	// the filter's detail (Nethermind.TxPool/Filters/*.cs; the same strings are
	// in smartcontractkit/chainlink errors_test.go); current releases use the
	// geth phrases of TxPoolErrorMessages.cs ---
	{"nethermind", "AlreadyKnown", txm.ReasonKnown},
	// Filters/OldNonceFilter: "Current nonce: {}, nonce of rejected tx: {}"
	{"nethermind", "OldNonce, Current nonce: 22, nonce of rejected tx: 17", txm.ReasonNonceTooLow},
	{"nethermind", "FeeTooLow, MaxFeePerGas too low. MaxFeePerGas: 50, BaseFee: 100, MaxPriorityFeePerGas:200, Block number: 5", txm.ReasonUnderpriced},
	{"nethermind", "FeeTooLowToCompete", txm.ReasonUnderpriced},
	{"nethermind", "InsufficientFunds, Account balance: 4740799397601480913, cumulative cost: 22019342038993800000", txm.ReasonInsufficientFunds},
	// Filters/GasLimitTxFilter: "Gas limit: {}, gas limit of rejected tx: {}"
	{"nethermind", "GasLimitExceeded, Gas limit: 100, gas limit of rejected tx: 150", txm.ReasonExceedsBlockGasLimit},
	{"nethermind", "NonceGap, Future nonce. Expected nonce: 10", txm.ReasonTransient},
	// current: TxPoolErrorMessages.GasLimitReached + the filter detail, joined
	// as AcceptTxResult.ToString does ("{Code}, {Message}"); the exact RPC
	// text of a current release is unconfirmed
	{"nethermind", "gas limit reached, Gas limit: 30000000, gas limit of rejected tx: 30000001", txm.ReasonExceedsBlockGasLimit},
	// current: TxPoolErrorMessages.NonceTooLow + OldNonceFilter detail (composition unconfirmed)
	{"nethermind", "nonce too low, Current nonce: 22, nonce of rejected tx: 17", txm.ReasonNonceTooLow},
	// behind nginx, from chainlink errors_test.go
	{"nethermind", "call failed: 503 Service Unavailable: <html>\r\n<head><title>503 Service Temporarily Unavailable</title></head>\r\n<body>\r\n<center><h1>503 Service Temporarily Unavailable</h1></center>\r\n</body>\r\n</html>\r\n", txm.ReasonTransient},

	// --- reth (crates/rpc/rpc-eth-types/src/error/mod.rs) ---
	// RpcPoolError::AlreadyKnown
	{"reth", "already known", txm.ReasonKnown},
	// RpcInvalidTransactionError::NonceTooLow "nonce too low: next nonce {state}, tx nonce {tx}"
	{"reth", "nonce too low: next nonce 12, tx nonce 11", txm.ReasonNonceTooLow},
	// RpcPoolError::Underpriced
	{"reth", "transaction underpriced", txm.ReasonUnderpriced},
	// RpcInvalidTransactionError::PriorityFeeBelowMinimum
	{"reth", "transaction priority fee below minimum required priority fee 1000000", txm.ReasonUnderpriced},
	// RpcInvalidTransactionError::InsufficientFunds "... have {balance} want {cost}"
	{"reth", "insufficient funds for gas * price + value: have 0 want 21000000000000", txm.ReasonInsufficientFunds},
	// RpcInvalidTransactionError::GasTooLow
	{"reth", "intrinsic gas too low", txm.ReasonIntrinsicGas},
	// RpcPoolError::ExceedsGasLimit
	{"reth", "exceeds block gas limit", txm.ReasonExceedsBlockGasLimit},
	// RpcPoolError::MaxTxGasLimitExceeded
	{"reth", "exceeds max transaction gas limit", txm.ReasonExceedsBlockGasLimit},
	// RpcInvalidTransactionError::GasTooHigh (CallerGasLimitMoreThanBlock)
	{"reth", "intrinsic gas too high", txm.ReasonExceedsBlockGasLimit},
	// EthApiError::HeaderNotFound
	{"reth", "block not found: latest", txm.ReasonTransient},

	// --- anvil / foundry (crates/anvil/src/eth/error.rs, ToRpcResponseResult) ---
	// PoolError::AlreadyImported
	{"anvil", "transaction already imported", txm.ReasonKnown},
	// PoolError::ReplacementUnderpriced
	{"anvil", "replacement transaction underpriced", txm.ReasonReplacementUnderpriced},
	// InvalidTransactionError::NonceTooLow
	{"anvil", "nonce too low", txm.ReasonNonceTooLow},
	// InvalidTransactionError::FeeCapTooLow
	{"anvil", "max fee per gas less than block base fee", txm.ReasonUnderpriced},
	// InvalidTransactionError::InsufficientFunds
	{"anvil", "Insufficient funds for gas * price + value", txm.ReasonInsufficientFunds},
	// InvalidTransactionError::GasTooHigh for CallGasCostMoreThanGasLimit: the limit is below intrinsic cost
	{"anvil", "intrinsic gas too high -- CallGasCostMoreThanGasLimit", txm.ReasonIntrinsicGas},
	// InvalidTransactionError::GasTooHigh for CallerGasLimitMoreThanBlock
	{"anvil", "intrinsic gas too high -- CallerGasLimitMoreThanBlock", txm.ReasonExceedsBlockGasLimit},
	// InvalidTransactionError::TxGasLimitGreaterThanCap
	{"anvil", "Transaction gas limit is greater than the block gas limit, gas_limit: 40000000, cap: 30000000", txm.ReasonExceedsBlockGasLimit},
	// InvalidTransactionError::Revert with no decodable reason
	{"anvil", "execution reverted", txm.ReasonReverted},
	// BlockchainError::UnknownTransactionType: must not read as "known transaction"
	{"anvil", "Unknown transaction type not supported", txm.ReasonTransient},

	// --- Hardhat / Ganache (EthereumJS VM) ---
	// @ethereumjs/vm runTx, quoted in a Truffle deployment log
	{"hardhat", "sender doesn't have enough funds to send tx. The upfront cost is: 1410000000000000000 and the sender's account only has: 0", txm.ReasonInsufficientFunds},
	// ganache src/chains/ethereum/utils/src/errors/errors.ts VM_EXCEPTION + "revert"
	{"ganache", "VM Exception while processing transaction: revert", txm.ReasonReverted},

	// --- OpenEthereum / Parity (rpc/src/v1/helpers/errors.rs, as quoted in chainlink) ---
	{"openethereum", "Transaction nonce is too low. Try incrementing the nonce.", txm.ReasonNonceTooLow},
	{"openethereum", "Transaction with the same hash was already imported.", txm.ReasonKnown},
	{"openethereum", "Transaction gas price 100wei is too low. There is another transaction with same nonce in the queue with gas price 150wei. Try increasing the gas price or incrementing the nonce.", txm.ReasonReplacementUnderpriced},

	// --- hosted providers and proxies ---
	// Infura 429, JSON-RPC body as reported in status-im/status-app#14665, in
	// go-ethereum's rpc.HTTPError form "<Status>: <body>"
	{"infura", `429 Too Many Requests: {"jsonrpc":"2.0","id":5,"error":{"code":-32005,"message":"project ID request rate exceeded","data":{"see":"https://infura.io/dashboard"}}}`, txm.ReasonTransient},
	// Infura daily cap (CirclesUBI/circles-myxogastria#54)
	{"infura", "daily request count exceeded, request rate limited", txm.ReasonTransient},
	// Infura/Alchemy load balancer behind the head, code -32000 (MetaMask/metamask-extension#7234)
	{"infura", "header not found", txm.ReasonTransient},
	// Alchemy 429 as printed by op-node through go-ethereum's rpc client (conduitxyz/node#36)
	{"alchemy", `429 Too Many Requests: {"jsonrpc":"2.0","id":474,"error":{"code":429,"message":"Your app has exceeded its compute units per second capacity. If you have retries enabled, you can safely ignore this message. If not, check out https://docs.alchemy.com/reference/throughput"}}`, txm.ReasonTransient},
	// Alchemy monthly cap (xmtp/xmtpd#672)
	{"alchemy", `403 Forbidden: {"jsonrpc":"2.0","id":6570,"error":{"code":-32600,"message":"Monthly capacity limit exceeded. Visit https://dashboard.alchemyapi.io/settings/billing to upgrade your scaling policy for continued service."}}`, txm.ReasonTransient},
	// Alchemy 429 through web3.js (dev-protocol/stakes.social#1538)
	{"alchemy", "Returned error: Your app has exceeded its compute units per second capacity.", txm.ReasonTransient},
	// QuickNode support article "Error: credits limited to X/sec" (the number is illustrative)
	{"quicknode", "credits limited to 25/sec", txm.ReasonTransient},
	// QuickNode/Chainstack 429 with an empty body: rpc.HTTPError is then just the status
	{"quicknode", "429 Too Many Requests", txm.ReasonTransient},
	// web3.js prefixes node errors with "Returned error: "
	{"web3.js", "Returned error: nonce too low", txm.ReasonNonceTooLow},
	{"web3.js", "Returned error: replacement transaction underpriced", txm.ReasonReplacementUnderpriced},
	// ethers.js v5 NONCE_EXPIRED
	{"ethers.js", "nonce has already been used", txm.ReasonNonceTooLow},
	// Mantle sequencer forwarding (chainlink errors_test.go)
	{"mantle", "failed to forward tx to sequencer, please try again. Error message: 'nonce too low'", txm.ReasonNonceTooLow},
	// Avalanche (chainlink errors_test.go)
	{"avalanche", "nonce too low: address 0x0499BEA33347cb62D79A9C0b1EDA01d8d329894c current nonce (5833) > tx nonce (5511)", txm.ReasonNonceTooLow},
	// Hedera JSON-RPC relay (chainlink errors_test.go)
	{"hedera", "[Request ID: e4d09e44-19a4-4eb7-babe-270db4c2ebc9] Gas price '830000000000' is below configured minimum gas price '950000000000'", txm.ReasonUnderpriced},
	// Arbitrum classic sends this for both too low and too high: left transient
	{"arbitrum", "invalid transaction nonce", txm.ReasonTransient},
	// nginx in front of a node (chainlink errors_test.go)
	{"proxy", "call failed: 502 Bad Gateway: <html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>", txm.ReasonTransient},
	// unconfirmed: no node source found for this wording
	{"proxy", "transaction already in mempool", txm.ReasonKnown},
}

func TestIssue4_Classification(t *testing.T) {
	t.Run("real error strings", func(t *testing.T) {
		require.GreaterOrEqual(t, len(classificationCases), 30)
		for _, c := range classificationCases {
			name := c.client + ": " + c.msg
			if len(name) > 80 {
				name = name[:80]
			}
			t.Run(name, func(t *testing.T) {
				// The shapes a reply arrives in: the bare rpc.jsonError, the
				// same wrapped by the adapter, and a proxy's prefix.
				shapes := []error{
					&rpcError{code: -32000, message: c.msg},
					fmt.Errorf("eth_sendRawTransaction: %w", &rpcError{code: -32000, message: c.msg}),
					errors.New("Returned error: " + c.msg),
				}
				for _, e := range shapes {
					assert.Equal(t, c.want, Classify(e), "%s (%s)", e, c.client)
					got := ClassifyBroadcast(e)
					var be *txm.BroadcastError
					require.ErrorAs(t, got, &be)
					assert.Equal(t, c.want, be.Reason)
					assert.Equal(t, c.want, txm.ReasonOf(got))
				}
			})
		}
	})

	t.Run("nil stays nil", func(t *testing.T) {
		assert.Nil(t, ClassifyBroadcast(nil))
	})

	t.Run("wraps the original error", func(t *testing.T) {
		orig := &rpcError{code: -32000, message: "nonce too low: next nonce 7, tx nonce 5"}
		got := ClassifyBroadcast(orig)
		require.Error(t, got)
		assert.Same(t, orig, errors.Unwrap(got))
		assert.ErrorIs(t, got, orig)
		var re *rpcError
		require.ErrorAs(t, got, &re)
		assert.Equal(t, -32000, re.ErrorCode())
		assert.Equal(t, txm.ReasonNonceTooLow, txm.ReasonOf(got))
		// ReasonOf still finds it under further wrapping.
		assert.Equal(t, txm.ReasonNonceTooLow, txm.ReasonOf(fmt.Errorf("attempt 3: %w", got)))
		assert.Contains(t, got.Error(), "nonce_too_low")
		assert.Contains(t, got.Error(), orig.Error())
	})

	t.Run("unknown text is transient", func(t *testing.T) {
		for _, msg := range []string{
			"something no client has ever said",
			"",
			"json-rpc error -32603",
			"EOF",
		} {
			assert.Equal(t, txm.ReasonTransient, Classify(errors.New(msg)), msg)
			assert.Equal(t, txm.ReasonTransient, txm.ReasonOf(ClassifyBroadcast(errors.New(msg))), msg)
		}
		// An error that was never classified reads as transient too.
		assert.Equal(t, txm.ReasonTransient, txm.ReasonOf(errors.New("already known")))
	})

	t.Run("transport failures are transient", func(t *testing.T) {
		const endpoint = "https://mainnet.infura.io/v3/key"
		for _, e := range []error{
			context.DeadlineExceeded,
			fmt.Errorf("Post %q: %w", endpoint, context.DeadlineExceeded),
			context.Canceled,
			fmt.Errorf("send: %w", context.Canceled),
			// net/http: the server closed the connection mid-reply
			&url.Error{Op: "Post", URL: endpoint, Err: io.EOF},
			io.ErrUnexpectedEOF,
			// dial tcp 127.0.0.1:8545: connect: connection refused
			&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)},
			fmt.Errorf("read: %w", syscall.ECONNRESET),
			&url.Error{Op: "Post", URL: endpoint, Err: os.ErrDeadlineExceeded},
			// a transport error whose text happens to hold a verdict word
			&url.Error{Op: "Post", URL: "https://node.example/nonce too low", Err: io.EOF},
		} {
			assert.Equal(t, txm.ReasonTransient, Classify(e), "%v", e)
			assert.Equal(t, txm.ReasonTransient, txm.ReasonOf(ClassifyBroadcast(e)), "%v", e)
			assert.ErrorIs(t, ClassifyBroadcast(e), e)
		}
	})

	t.Run("typed errors", func(t *testing.T) {
		// A revert the adapter decoded itself.
		assert.Equal(t, txm.ReasonReverted, Classify(&txm.RevertError{Reason: "Ownable: caller is not the owner"}))
		assert.Equal(t, txm.ReasonReverted, Classify(fmt.Errorf("estimate: %w", &txm.RevertError{})))
		// An error already classified keeps its reason.
		prior := &txm.BroadcastError{Reason: txm.ReasonKnown, Err: errors.New("something odd")}
		assert.Equal(t, txm.ReasonKnown, Classify(fmt.Errorf("retry: %w", prior)))
	})

	t.Run("deterministic reasons", func(t *testing.T) {
		want := map[txm.BroadcastReason]bool{
			txm.ReasonKnown:                  false,
			txm.ReasonNonceTooLow:            false,
			txm.ReasonReplacementUnderpriced: false,
			txm.ReasonUnderpriced:            false,
			txm.ReasonInsufficientFunds:      true,
			txm.ReasonIntrinsicGas:           true,
			txm.ReasonExceedsBlockGasLimit:   true,
			txm.ReasonTxFeeCap:               true,
			txm.ReasonOversized:              true,
			txm.ReasonInvalidSignature:       true,
			txm.ReasonWrongChainID:           true,
			txm.ReasonReverted:               false,
			txm.ReasonDelegatedLimit:         false,
			txm.ReasonTransient:              false,
		}
		for r, det := range want {
			assert.Equal(t, det, r.Deterministic(), string(r))
		}
		// And through the classifier.
		assert.True(t, txm.ReasonOf(ClassifyBroadcast(errors.New("Upfront cost exceeds account balance"))).Deterministic())
		assert.True(t, txm.ReasonOf(ClassifyBroadcast(errors.New("intrinsic gas too low"))).Deterministic())
		assert.True(t, txm.ReasonOf(ClassifyBroadcast(errors.New("exceeds block gas limit"))).Deterministic())
		assert.False(t, txm.ReasonOf(ClassifyBroadcast(errors.New("nonce too low"))).Deterministic())
		assert.False(t, txm.ReasonOf(ClassifyBroadcast(errors.New("header not found"))).Deterministic())
	})

	t.Run("rule table is well formed", func(t *testing.T) {
		closed := map[txm.BroadcastReason]bool{
			txm.ReasonKnown: true, txm.ReasonNonceTooLow: true, txm.ReasonReplacementUnderpriced: true,
			txm.ReasonUnderpriced: true, txm.ReasonInsufficientFunds: true, txm.ReasonIntrinsicGas: true,
			txm.ReasonExceedsBlockGasLimit: true, txm.ReasonReverted: true, txm.ReasonTransient: true,
			txm.ReasonTxFeeCap: true, txm.ReasonOversized: true, txm.ReasonInvalidSignature: true, txm.ReasonWrongChainID: true,
			txm.ReasonDelegatedLimit: true,
		}
		seen := map[string]bool{}
		for _, r := range rules {
			assert.True(t, closed[r.reason], "reason %q is outside the closed set", r.reason)
			for _, p := range r.patterns {
				assert.NotEmpty(t, p)
				assert.Equal(t, strings.ToLower(p), p, "patterns are lower case")
				assert.False(t, seen[p], "pattern %q listed twice", p)
				seen[p] = true
			}
		}
	})

	t.Run("every client is covered", func(t *testing.T) {
		clients := map[string]int{}
		for _, c := range classificationCases {
			clients[c.client]++
		}
		for _, c := range []string{"geth", "besu", "erigon", "nethermind", "reth", "anvil", "infura", "alchemy", "quicknode"} {
			assert.Positive(t, clients[c], c)
		}
	})
}

// permanentCases are nodes' refusals of a transaction for a property of the
// transaction itself, each with where it comes from: the sources named next
// to the patterns in classify.go, read at go-ethereum v1.17.8 (module
// cache), Besu, reth, Erigon and Nethermind main.
var permanentCases = []struct {
	client string
	msg    string
	want   txm.BroadcastReason
}{
	// --- fee × gas above the node's transaction fee cap ---
	// geth internal/ethapi/api.go checkTxFee, --rpc.txfeecap 1 (the default)
	{"geth", "tx fee (1.00 ether) exceeds the configured cap (1.00 ether)", txm.ReasonTxFeeCap},
	{"geth", "tx fee (3.15 ether) exceeds the configured cap (1.00 ether)", txm.ReasonTxFeeCap},
	// erigon rpc/jsonrpc/send_transaction.go checkTxFee
	{"erigon", "tx fee (2.10 ether) exceeds the configured cap (1.00 ether)", txm.ReasonTxFeeCap},
	// reth RpcPoolError::ExceedsFeeCap
	{"reth", "tx fee (2100000000000000000 wei) exceeds the configured cap (1000000000000000000 wei)", txm.ReasonTxFeeCap},
	// Besu RpcErrorType.TX_FEECAP_EXCEEDED
	{"besu", "Transaction fee cap exceeded", txm.ReasonTxFeeCap},
	// providers forward geth's text (code -32000)
	{"infura", "tx fee (1.05 ether) exceeds the configured cap (1.00 ether)", txm.ReasonTxFeeCap},
	{"alchemy", "tx fee (4.20 ether) exceeds the configured cap (1.00 ether)", txm.ReasonTxFeeCap},

	// --- oversized transaction ---
	// geth core/txpool/validation.go: "%w: transaction size %v, limit %v", ErrOversizedData
	{"geth", "oversized data: transaction size 131329, limit 131072", txm.ReasonOversized},
	// geth core/vm/common.go CheckMaxInitCodeSize via txpool validation
	{"geth", "max initcode size exceeded: code size 49153 limit 49152", txm.ReasonOversized},
	// reth RpcPoolError::OversizedData
	{"reth", "oversized data: transaction size 131329, limit 131072", txm.ReasonOversized},
	// erigon: ImportResult INVALID with DiscardReason OversizedData / InitCodeTooLarge / RLPTooLong
	{"erigon", "INVALID: oversized data", txm.ReasonOversized},
	{"erigon", "INVALID: initcode too large", txm.ReasonOversized},
	{"erigon", "INVALID: RLPTooLong", txm.ReasonOversized},
	// Nethermind AcceptTxResult.MaxTxSizeExceeded: TxPoolErrorMessages.TransactionTooLarge, older code name
	{"nethermind", "transaction too large", txm.ReasonOversized},
	{"nethermind", "MaxTxSizeExceeded", txm.ReasonOversized},

	// --- invalid signature ---
	// geth core/txpool/validation.go "%w: %v", ErrInvalidSender, with types.ErrInvalidSig
	{"geth", "invalid sender: invalid transaction v, r, s values", txm.ReasonInvalidSignature},
	// geth core/types/transaction.go ErrInvalidSig on its own (decoding)
	{"geth", "invalid transaction v, r, s values", txm.ReasonInvalidSignature},
	// reth RpcPoolError::InvalidSender, EthApiError::InvalidTransactionSignature
	{"reth", "invalid sender", txm.ReasonInvalidSignature},
	{"reth", "invalid transaction signature", txm.ReasonInvalidSignature},
	// erigon DiscardReason InvalidSender
	{"erigon", "INVALID: invalid sender", txm.ReasonInvalidSignature},
	// Besu RpcErrorType.INVALID_TRANSACTION_SIGNATURE
	{"besu", "Invalid signature", txm.ReasonInvalidSignature},
	// Nethermind TxPoolErrorMessages.FailedToRecoverSender, the older code name, and
	// AcceptTxResult.Invalid carrying TxErrorMessages.InvalidTxSignature
	{"nethermind", "failed to recover sender", txm.ReasonInvalidSignature},
	{"nethermind", "FailedToResolveSender", txm.ReasonInvalidSignature},
	{"nethermind", "transaction invalid, InvalidTxSignature: Signature is invalid.", txm.ReasonInvalidSignature},

	// --- EIP-7702 delegated sender over its in-flight limit ---
	// geth txpool.ErrInflightTxLimitReached, legacypool.ErrOutOfOrderTxFromDelegated
	{"geth", "in-flight transaction limit reached for delegated accounts", txm.ReasonDelegatedLimit},
	{"geth", "gapped-nonce tx from delegated accounts", txm.ReasonDelegatedLimit},

	// --- wrong chain id / not replay-protected ---
	// geth: types.ErrInvalidChainId "%w: have %d want %d" inside ErrInvalidSender
	{"geth", "invalid sender: invalid chain id for signer: have 1 want 1337", txm.ReasonWrongChainID},
	// geth internal/ethapi/api.go SubmitTransaction; erigon SendRawTransaction
	{"geth", "only replay-protected (EIP-155) transactions allowed over RPC", txm.ReasonWrongChainID},
	// erigon rpc/jsonrpc/send_transaction.go
	{"erigon", "invalid chain id, expected: 1337 got: 1", txm.ReasonWrongChainID},
	// reth RpcInvalidTransactionError::InvalidChainId
	{"reth", "invalid chain ID", txm.ReasonWrongChainID},
	// Besu WRONG_CHAIN_ID, REPLAY_PROTECTED_SIGNATURE_REQUIRED, REPLAY_PROTECTED_SIGNATURES_NOT_SUPPORTED
	{"besu", "Wrong chainId", txm.ReasonWrongChainID},
	{"besu", "ChainId is required", txm.ReasonWrongChainID},
	{"besu", "ChainId not supported", txm.ReasonWrongChainID},
	// Nethermind AcceptTxResult.Invalid with TxErrorMessages.InvalidTxChainId, current and older code
	{"nethermind", "transaction invalid, InvalidTxChainId: Expected 1337, got 1.", txm.ReasonWrongChainID},
	{"nethermind", "Invalid, InvalidTxChainId: Expected 1337, got 1.", txm.ReasonWrongChainID},
	// anvil InvalidTransactionError::InvalidChainId / IncompatibleEIP155; Hardhat's wording
	{"anvil", "invalid chain id for signer", txm.ReasonWrongChainID},
	{"anvil", "Incompatible EIP-155 transaction, signed for another chain", txm.ReasonWrongChainID},
	{"hardhat", "Trying to send an incompatible EIP-155 transaction, signed for another chain.", txm.ReasonWrongChainID},
	// unconfirmed: seen in SDK/provider wrappers
	{"proxy", "incorrect chain id", txm.ReasonWrongChainID},

	// --- gas limit above the block's (existing reasons, now Permanent) ---
	{"geth", "exceeds block gas limit", txm.ReasonExceedsBlockGasLimit},
	{"geth", "transaction gas limit too high (cap: 16777216, tx: 30000000)", txm.ReasonExceedsBlockGasLimit},
	{"besu", "Transaction gas limit exceeds block gas limit", txm.ReasonExceedsBlockGasLimit},
	{"geth", "intrinsic gas too low: gas 20000, minimum needed 21000", txm.ReasonIntrinsicGas},

	// --- what must not read as permanent ---
	// a contract's revert reason that happens to say "invalid signature" (OpenZeppelin ECDSA)
	{"geth", "execution reverted: ECDSA: invalid signature", txm.ReasonReverted},
	{"geth", "execution reverted: invalid chain id", txm.ReasonReverted},
	// the signer can be funded
	{"geth", "insufficient funds for gas * price + value: balance 0, tx cost 21000000000000, overshot 21000000000000", txm.ReasonInsufficientFunds},
	// the node or provider is unwell, or the text is unknown
	{"geth", "txpool is full", txm.ReasonTransient},
	{"geth", "nonce too high: address " + testAddr + ", tx: 9 state: 7", txm.ReasonTransient},
	{"geth", "request timed out", txm.ReasonTransient},
	{"infura", "header not found", txm.ReasonTransient},
	{"infura", "project ID request rate exceeded", txm.ReasonTransient},
	{"alchemy", `429 Too Many Requests: {"jsonrpc":"2.0","id":1,"error":{"code":429,"message":"Your app has exceeded its compute units per second capacity."}}`, txm.ReasonTransient},
	{"quicknode", "credits limited to 25/sec", txm.ReasonTransient},
	{"besu", "Internal error", txm.ReasonTransient},
	{"nethermind", "node is syncing", txm.ReasonTransient},
	{"unknown", "something no client has ever said", txm.ReasonTransient},
}

func TestIssue44_ClassifyPermanent(t *testing.T) {
	t.Run("real error strings", func(t *testing.T) {
		for _, c := range permanentCases {
			name := c.client + ": " + c.msg
			if len(name) > 80 {
				name = name[:80]
			}
			t.Run(name, func(t *testing.T) {
				for _, e := range []error{
					&rpcError{code: -32000, message: c.msg},
					fmt.Errorf("eth_sendRawTransaction: %w", &rpcError{code: -32003, message: c.msg}),
					errors.New("Returned error: " + c.msg),
				} {
					got := txm.ReasonOf(ClassifyBroadcast(e))
					assert.Equal(t, c.want, got, "%s (%s)", e, c.client)
					assert.Equal(t, c.want.Permanent(), got.Permanent(), "%s", e)
				}
			})
		}
	})

	t.Run("permanent and deterministic", func(t *testing.T) {
		permanent := []txm.BroadcastReason{
			txm.ReasonTxFeeCap, txm.ReasonOversized, txm.ReasonInvalidSignature, txm.ReasonWrongChainID,
			txm.ReasonExceedsBlockGasLimit, txm.ReasonIntrinsicGas,
		}
		for _, r := range permanent {
			assert.True(t, r.Permanent(), "%s is permanent", r)
			assert.True(t, r.Deterministic(), "%s is deterministic", r)
		}
		// Funding the signer heals it: deterministic for the same bytes now,
		// but not permanent.
		assert.False(t, txm.ReasonInsufficientFunds.Permanent())
		assert.True(t, txm.ReasonInsufficientFunds.Deterministic())
		for _, r := range []txm.BroadcastReason{txm.ReasonKnown, txm.ReasonNonceTooLow, txm.ReasonReplacementUnderpriced,
			txm.ReasonUnderpriced, txm.ReasonReverted, txm.ReasonTransient} {
			assert.False(t, r.Permanent(), "%s is not permanent", r)
		}
		// Every case of the other tables keeps its permanence in step with
		// its reason.
		for _, c := range classificationCases {
			assert.Equal(t, c.want.Permanent(), Classify(errors.New(c.msg)).Permanent(), c.msg)
		}
	})

	t.Run("every client is covered", func(t *testing.T) {
		byReason := map[txm.BroadcastReason]map[string]bool{}
		for _, c := range permanentCases {
			if byReason[c.want] == nil {
				byReason[c.want] = map[string]bool{}
			}
			byReason[c.want][c.client] = true
		}
		for _, r := range []txm.BroadcastReason{txm.ReasonTxFeeCap, txm.ReasonOversized, txm.ReasonInvalidSignature, txm.ReasonWrongChainID} {
			for _, client := range []string{"geth", "reth"} {
				assert.True(t, byReason[r][client], "%s has a %s case", r, client)
			}
		}
		for _, client := range []string{"erigon", "besu", "nethermind"} {
			for _, r := range []txm.BroadcastReason{txm.ReasonOversized, txm.ReasonInvalidSignature, txm.ReasonWrongChainID} {
				if client == "besu" && r == txm.ReasonOversized {
					continue // Besu's pool has no size refusal of its own
				}
				assert.True(t, byReason[r][client], "%s has a %s case", r, client)
			}
		}
	})

	t.Run("a real geth node", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		ctx := context.Background()
		key := e.keys[0]
		to := e.keys[1].Address
		chainID := big.NewInt(evmtest.ChainID)
		dynamic := func(id *big.Int, gas uint64, feeCap int64, data []byte) *types.Transaction {
			tx, err := types.SignTx(types.NewTx(&types.DynamicFeeTx{ChainID: id, Nonce: 0, GasTipCap: big.NewInt(params1Gwei),
				GasFeeCap: big.NewInt(feeCap), Gas: gas, To: &to, Data: data}), types.LatestSignerForChainID(id), key.Key)
			require.NoError(t, err)
			return tx
		}
		unprotected, err := types.SignTx(types.NewTx(&types.LegacyTx{Nonce: 0, GasPrice: big.NewInt(100 * params1Gwei), Gas: 21000, To: &to}),
			types.HomesteadSigner{}, key.Key)
		require.NoError(t, err)
		// A signature whose r is zero: no sender can be recovered.
		good := dynamic(chainID, 21000, 100*params1Gwei, nil)
		_, _, s := good.RawSignatureValues()
		badSig := make([]byte, 65)
		s.FillBytes(badSig[32:64])
		forged, err := good.WithSignature(types.LatestSignerForChainID(chainID), badSig)
		require.NoError(t, err)

		for _, c := range []struct {
			name string
			tx   *types.Transaction
			want txm.BroadcastReason
		}{
			// 21000 gas × 100,000 gwei = 2.1 ether, above the node's 1 ether cap
			{"fee above the node's cap", dynamic(chainID, 21000, 100_000*params1Gwei, nil), txm.ReasonTxFeeCap},
			// 140 kB of data, above the pool's 128 kB
			{"oversized", dynamic(chainID, 3_000_000, 2*params1Gwei, make([]byte, 140_000)), txm.ReasonOversized},
			{"signed for chain 1", dynamic(big.NewInt(1), 21000, 100*params1Gwei, nil), txm.ReasonWrongChainID},
			{"not replay-protected", unprotected, txm.ReasonWrongChainID},
			{"no recoverable sender", forged, txm.ReasonInvalidSignature},
			{"gas above the block's", dynamic(chainID, 100_000_000, 2*params1Gwei, nil), txm.ReasonExceedsBlockGasLimit},
			{"gas below the intrinsic cost", dynamic(chainID, 20_000, 100*params1Gwei, nil), txm.ReasonIntrinsicGas},
		} {
			raw, err := c.tx.MarshalBinary()
			require.NoError(t, err)
			err = e.client.SendRawTransaction(ctx, raw)
			require.Error(t, err, c.name)
			t.Logf("%s: geth said %q", c.name, errors.Unwrap(err))
			assert.Equal(t, c.want, txm.ReasonOf(err), "%s: %v", c.name, err)
			assert.True(t, txm.ReasonOf(err).Permanent(), "%s: %v", c.name, err)
		}
		// Nothing reached the pool.
		n, err := e.client.PendingNonce(ctx, key.Address)
		require.NoError(t, err)
		assert.Zero(t, n)
	})
}
