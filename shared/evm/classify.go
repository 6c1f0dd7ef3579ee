package evm

import (
	"context"
	"errors"
	"io"
	"math/big"
	"net"
	"regexp"
	"strings"
	"syscall"

	"github.com/ethereum/go-ethereum/rpc"

	"github.com/txfence/txfence/shared/txm"
)

// This file is the one place in the program where the text of an RPC error
// becomes a txm.BroadcastReason, or another fact the program acts on (a
// method the node does not serve, the balance and need of an insufficient
// funds error). Nothing else may inspect error strings.
//
// Errors from a JSON-RPC node reach us as text: go-ethereum's rpc.Client turns
// an error response into an rpc.jsonError whose Error() is the bare "message"
// field, a non-2xx HTTP reply into an rpc.HTTPError "<status>: <body>", and
// proxies or SDKs sometimes prefix their own words ("Returned error: ", "call
// failed: ", "failed to forward tx to sequencer ... Error message: '...'").
// So every rule below is a lower-case substring, matched anywhere in the
// lower-cased text but only where a word starts (so "known transaction" does
// not match "unknown transaction type").
//
// go-ethereum's sentinels (core.ErrNonceTooLow, core.ErrInsufficientFunds,
// core.ErrIntrinsicGas, core.ErrGasLimitReached, core.ErrFeeCapTooLow,
// txpool.ErrAlreadyKnown, txpool.ErrReplaceUnderpriced, txpool.ErrUnderpriced,
// txpool.ErrGasLimit, ... in v1.17.8 core/error.go and core/txpool/errors.go)
// are matched through their text, which is exactly the pattern listed next to
// each: importing core or core/txpool for errors.Is would pull modules into
// go.mod that the adapter does not otherwise need, and a sentinel only ever
// survives in-process (simulated backends), never across JSON-RPC.

// rule maps the patterns a group of clients use to one reason.
type rule struct {
	reason   txm.BroadcastReason
	patterns []string // lower case; matched at a word start
}

// rules is evaluated in order; the first pattern found wins. More specific
// texts come first: "replacement transaction underpriced" before
// "underpriced", the anvil "intrinsic gas too high -- CallGasCostMoreThanGasLimit"
// detail before the generic "intrinsic gas too high".
var rules = []rule{
	{
		// The node already has this exact transaction.
		reason: txm.ReasonKnown,
		patterns: []string{
			"already known",               // geth txpool.ErrAlreadyKnown; reth RpcPoolError::AlreadyKnown; erigon "ALREADY_EXISTS: already known"; Nethermind >= TxPoolErrorMessages; Infura/Alchemy pass geth's through
			"alreadyknown",                // Nethermind AcceptTxResult.AlreadyKnown (code name, older releases)
			"known transaction",           // Besu ETH_SEND_TX_ALREADY_KNOWN "Known transaction"; old geth "known transaction: <hash>"; Klaytn
			"already imported",            // anvil "transaction already imported"; OpenEthereum "Transaction with the same hash was already imported."
			"existing txn with same hash", // erigon DiscardReason DuplicateHash
			"existing tx with same hash",  // erigon DuplicateHash, older releases
			"already in mempool",          // seen in SDK/proxy wrappers; no node source confirmed
		},
	},
	{
		// The nonce is already used on chain. ("nonce too high", Nethermind
		// "NonceGap" and Arbitrum's ambiguous "invalid transaction nonce" are
		// deliberately not here: they fall through to transient.)
		reason: txm.ReasonNonceTooLow,
		patterns: []string{
			"nonce too low",               // geth core.ErrNonceTooLow; Besu "Nonce too low"; reth; anvil; erigon; Nethermind >= TxPoolErrorMessages; Avalanche; Hedera
			"oldnonce",                    // Nethermind AcceptTxResult.OldNonce (older releases)
			"nonce is too low",            // OpenEthereum "Transaction nonce is too low. Try incrementing the nonce."
			"nonce has already been used", // ethers.js NONCE_EXPIRED wrapping of "nonce too low"
		},
	},
	{
		// Another transaction with the same nonce is pending and this one does
		// not bump the fee enough.
		reason: txm.ReasonReplacementUnderpriced,
		patterns: []string{
			"replacement transaction underpriced", // geth txpool.ErrReplaceUnderpriced; Besu "Replacement transaction underpriced"; reth; anvil; erigon; Nethermind >= TxPoolErrorMessages
			"replacementnotallowed",               // Nethermind AcceptTxResult.ReplacementNotAllowed (older releases)
			"insufficient gas price to replace",   // reth/anvil PoolError::ReplacementUnderpriced display, older releases
			"could not replace existing tx",       // erigon DiscardReason NotReplaced
			"replacement fee too low",             // ethers.js v6 REPLACEMENT_UNDERPRICED
			"another transaction with same nonce", // OpenEthereum "Transaction gas price ... is too low. There is another transaction with same nonce in the queue"
			"another tx which has the same nonce", // Klaytn "there is another tx which has the same nonce in the tx pool"
		},
	},
	{
		// The fee is below what the node or the block accepts.
		reason: txm.ReasonUnderpriced,
		patterns: []string{
			"underpriced", // geth txpool.ErrUnderpriced "transaction underpriced"; reth; Nethermind >= TxPoolErrorMessages; erigon "FEE_TOO_LOW: underpriced"
			"max fee per gas less than block base fee", // geth core.ErrFeeCapTooLow; reth FeeCapTooLow; anvil; zkSync
			"transaction gas price below minimum",      // geth txpool.ErrTxGasPriceTooLow
			"below configured minimum gas price",       // Besu GAS_PRICE_TOO_LOW "Gas price below configured minimum gas price"; Hedera relay
			"gas price below current base fee",         // Besu GAS_PRICE_BELOW_CURRENT_BASE_FEE
			"feetoolow",                                // Nethermind AcceptTxResult.FeeTooLow / FeeTooLowToCompete (older releases)
			"fee too low",                              // erigon DiscardReason FeeTooLow
			"fee_too_low",                              // erigon ImportResult FEE_TOO_LOW prefix
			"priority fee below minimum",               // reth PriorityFeeBelowMinimum
			"gas price too low",                        // Arbitrum; Metis
			"gas price is too low",                     // OpenEthereum "Transaction gas price is too low. It does not satisfy your node's minimal gas price"
			"gas price less than block base fee",       // Astar
		},
	},
	{
		// The signer cannot pay value + gas × fee.
		reason: txm.ReasonInsufficientFunds,
		patterns: []string{
			"insufficient funds",                   // geth core.ErrInsufficientFunds / ErrInsufficientFundsForTransfer; reth; anvil; erigon; Nethermind >= TxPoolErrorMessages; Klaytn; Celo
			"insufficientfunds",                    // Nethermind AcceptTxResult.InsufficientFunds (older releases)
			"insufficient balance",                 // old geth "insufficient balance for transfer"; OpenEthereum "Insufficient balance for transaction"; zkSync
			"upfront cost exceeds account balance", // Besu UPFRONT_COST_EXCEEDS_BALANCE
			"sender doesn't have enough funds",     // Hardhat / Ganache (EthereumJS VM)
			"not enough funds",                     // Arbitrum "not enough funds for gas"
			"would cause overdraft",                // old geth txpool "transaction would cause overdraft"
		},
	},
	{
		// The gas limit is below the intrinsic cost.
		reason: txm.ReasonIntrinsicGas,
		patterns: []string{
			"intrinsic gas too low",                // geth core.ErrIntrinsicGas; reth GasTooLow; anvil GasTooLow; Klaytn
			"intrinsicgas",                         // erigon DiscardReason IntrinsicGas
			"intrinsic gas exceeds gas limit",      // Besu INTRINSIC_GAS_EXCEEDS_GAS_LIMIT
			"floor data gas",                       // geth core.ErrFloorDataGas "insufficient gas for floor data gas cost" (EIP-7623)
			"callgascostmorethangaslimit",          // anvil "intrinsic gas too high -- CallGasCostMoreThanGasLimit" (it means gas limit < intrinsic cost)
			"gasfloormorethangaslimit",             // anvil "intrinsic gas too high -- GasFloorMoreThanGasLimit"
			"not enough gas to cover minimal cost", // OpenEthereum "Transaction gas is too low. There is not enough gas to cover minimal cost of the transaction"
			"gas too low",                          // generic form used by several forks and SDKs
		},
	},
	{
		// The gas limit is above the block (or per-transaction) gas limit.
		reason: txm.ReasonExceedsBlockGasLimit,
		patterns: []string{
			"exceeds block gas limit",           // geth txpool.ErrGasLimit; reth ExceedsGasLimit; Besu EXCEEDS_BLOCK_GAS_LIMIT "Transaction gas limit exceeds block gas limit"
			"gaslimitexceeded",                  // Nethermind AcceptTxResult.GasLimitExceeded (older releases)
			"gas limit reached",                 // geth core.ErrGasLimitReached; Nethermind >= TxPoolErrorMessages.GasLimitReached
			"gas limit too high",                // geth core.ErrGasLimitTooHigh "transaction gas limit too high" (EIP-7825 cap); reth GasLimitTooHigh
			"gas limit is too high",             // erigon DiscardReason GasLimitTooHigh
			"exceeds max transaction gas limit", // reth MaxTxGasLimitExceeded
			"intrinsic gas too high",            // reth GasTooHigh and anvil CallerGasLimitMoreThanBlock: tx gas > block gas limit
			"greater than the block gas limit",  // anvil TxGasLimitGreaterThanCap
			"exceeds current gas limit",         // OpenEthereum "Transaction cost exceeds current gas limit. Limit: ..."
		},
	},
	{
		// Execution reverted (estimation, or a node that simulates on submit).
		reason: txm.ReasonReverted,
		patterns: []string{
			"execution reverted", // geth vm.ErrExecutionReverted "execution reverted: <reason>"; reth; anvil; Besu "Execution reverted"
			"revert",             // Ganache "VM Exception while processing transaction: revert"; Hardhat "reverted with reason string"
		},
	},
	{
		// Unavailable, timed out, rate-limited: retry later. Listed for the
		// record; anything unmatched is transient anyway.
		reason: txm.ReasonTransient,
		patterns: []string{
			"header not found",           // geth/Infura/Alchemy behind a load balancer: a node behind the head
			"too many requests",          // HTTP 429 from Infura, Alchemy, QuickNode, Chainstack (rpc.HTTPError "429 Too Many Requests: <body>")
			"rate exceeded",              // Infura "project ID request rate exceeded"
			"rate limit",                 // Infura "daily request count exceeded, request rate limited"
			"exceeded its compute units", // Alchemy
			"credits limited to",         // QuickNode
			"service unavailable",        // HTTP 503
			"bad gateway",                // HTTP 502
			"timeout",                    // "i/o timeout", Besu "Timeout expired"
			"connection refused",
			"connection reset",
			"eof",
			"txpool is full", // geth legacypool.ErrTxPoolOverflow; reth TxPoolOverflow
			"nonce too high", // a gap: an earlier nonce has not reached the node yet
			"noncegap",       // Nethermind AcceptTxResult.NonceGap (older releases)
		},
	},
}

// Classify turns a broadcast error into its reason. nil is not a failure and
// has no reason; callers handle it before asking. Anything unrecognised is
// ReasonTransient.
func Classify(err error) txm.BroadcastReason {
	if err == nil {
		return txm.ReasonTransient
	}
	// Already classified (a wrapped *txm.BroadcastError): keep its reason.
	var be *txm.BroadcastError
	if errors.As(err, &be) {
		return be.Reason
	}
	// No answer from the node: the transport failed, so nothing about the
	// transaction is known yet.
	if isTransport(err) {
		return txm.ReasonTransient
	}
	// A revert the adapter already decoded.
	var re *txm.RevertError
	if errors.As(err, &re) {
		return txm.ReasonReverted
	}
	msg := strings.ToLower(err.Error())
	for _, r := range rules {
		for _, p := range r.patterns {
			if containsAtWordStart(msg, p) {
				return r.reason
			}
		}
	}
	return txm.ReasonTransient
}

// ClassifyBroadcast turns an error from sendRawTransaction into a
// *txm.BroadcastError carrying its reason and wrapping err. nil stays nil.
func ClassifyBroadcast(err error) error {
	if err == nil {
		return nil
	}
	return &txm.BroadcastError{Reason: Classify(err), Err: err}
}

// haveWant is how nodes give the balance and the amount needed in an
// insufficient-funds error: geth "... address 0x.. have 123 want 456",
// reth "... have 123 want 456"; a comma or colons are tolerated.
var haveWant = regexp.MustCompile(`\bhave:?\s*(\d+),?\s+want:?\s*(\d+)\b`)

// insufficientFunds turns the node's answer that the sender cannot pay
// (ReasonInsufficientFunds) into a *txm.InsufficientFundsError wrapping err,
// with Have and Want when the message gives them; nil for any other error,
// and for failures that are not the node's answer.
func insufficientFunds(err error) *txm.InsufficientFundsError {
	var rpcErr rpc.Error
	if !errors.As(err, &rpcErr) || Classify(err) != txm.ReasonInsufficientFunds {
		return nil
	}
	fe := &txm.InsufficientFundsError{Err: err}
	if m := haveWant.FindStringSubmatch(rpcErr.Error()); m != nil {
		have, okHave := new(big.Int).SetString(m[1], 10)
		want, okWant := new(big.Int).SetString(m[2], 10)
		if okHave && okWant {
			fe.Have, fe.Want = have, want
		}
	}
	return fe
}

// errMethodNotFound is JSON-RPC 2.0's code for "the method does not exist /
// is not available".
const errMethodNotFound = -32601

// methodMissingPatterns are what nodes and providers that do not use
// errMethodNotFound say instead; matched only in a message that speaks of a
// method ("method", or a name such as "eth_..."), so that "service is not
// available" (-32603) is not one.
var methodMissingPatterns = []string{
	"method not found",   // JSON-RPC 2.0's message for -32601; Besu, Nethermind
	"does not exist",     // geth rpc "the method %s does not exist/is not available"; Infura
	"is not available",   // the same geth text; Alchemy "... is not available on ..."
	"not supported",      // "Method not supported" (-32004, EIP-1474); Erigon; several L2 sequencers
	"unsupported method", // Alchemy "Unsupported method: ..."; QuickNode
}

// methodMissing reports whether err is the node's JSON-RPC answer that it
// does not serve the method called: code -32601, or a message saying so.
// Anything else, an internal error (-32603) or no answer at all, is not.
func methodMissing(err error) bool {
	var rpcErr rpc.Error
	if !errors.As(err, &rpcErr) {
		return false
	}
	if rpcErr.ErrorCode() == errMethodNotFound {
		return true
	}
	msg := strings.ToLower(rpcErr.Error())
	if !containsAtWordStart(msg, "method") && !containsAtWordStart(msg, "eth_") {
		return false
	}
	for _, p := range methodMissingPatterns {
		if containsAtWordStart(msg, p) {
			return true
		}
	}
	return false
}

// isTransport reports a failure to get any answer: cancelled or expired
// contexts, network errors (dial, reset, timeouts; *url.Error is a net.Error)
// and a connection closed mid-reply.
func isTransport(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne)
}

// containsAtWordStart reports whether sub occurs in s at a position not
// preceded by a letter or digit.
func containsAtWordStart(s, sub string) bool {
	for from := 0; from <= len(s)-len(sub); {
		i := strings.Index(s[from:], sub)
		if i < 0 {
			return false
		}
		i += from
		if i == 0 || !isWordByte(s[i-1]) {
			return true
		}
		from = i + 1
	}
	return false
}

func isWordByte(b byte) bool {
	return (b >= 'a' && b <= 'z') || (b >= '0' && b <= '9')
}
