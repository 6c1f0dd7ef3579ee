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
	"unicode/utf8"

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
// detail before the generic "intrinsic gas too high", a wrong chain id before
// the invalid sender it is reported as. The refusals added after the revert
// rule come after it so that a contract's revert reason ("execution reverted:
// invalid signature") stays a revert.
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
		// The sender carries an EIP-7702 delegation (or a pending one) and
		// the node already holds the one executable transaction it allows
		// such a sender, or this one would leave a gap: it waits its turn.
		reason: txm.ReasonDelegatedLimit,
		patterns: []string{
			"in-flight transaction limit reached for delegated accounts", // geth txpool.ErrInflightTxLimitReached (core/txpool/errors.go); reth passes the same text
			"gapped-nonce tx from delegated accounts",                    // geth legacypool.ErrOutOfOrderTxFromDelegated (core/txpool/legacypool/legacypool.go)
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
		// fee cap × gas limit is above the node's cap on one transaction's
		// fee: the node refuses before its pool sees the transaction.
		reason: txm.ReasonTxFeeCap,
		patterns: []string{
			"exceeds the configured cap",   // geth internal/ethapi/api.go checkTxFee "tx fee (%.2f ether) exceeds the configured cap (%.2f ether)"; erigon rpc/jsonrpc/send_transaction.go checkTxFee (same text); reth RpcPoolError::ExceedsFeeCap "tx fee ({} wei) exceeds the configured cap ({} wei)"; Infura/Alchemy/QuickNode pass geth's through
			"transaction fee cap exceeded", // Besu RpcErrorType.TX_FEECAP_EXCEEDED "Transaction fee cap exceeded"
		},
	},
	{
		// The transaction, or its init code, is larger than the pool or the
		// protocol accepts.
		reason: txm.ReasonOversized,
		patterns: []string{
			"oversized data",             // geth txpool.ErrOversizedData "oversized data: transaction size %v, limit %v" (core/txpool/validation.go); reth RpcPoolError::OversizedData (same text); erigon DiscardReason OversizedData
			"transaction too large",      // Nethermind TxPoolErrorMessages.TransactionTooLarge (AcceptTxResult.MaxTxSizeExceeded)
			"maxtxsizeexceeded",          // Nethermind AcceptTxResult.MaxTxSizeExceeded (code name, older releases)
			"rlptoolong",                 // erigon DiscardReason RLPTooLong
			"max initcode size exceeded", // geth vm.ErrMaxInitCodeSizeExceeded "max initcode size exceeded: code size %v limit %v" (core/vm/common.go, from txpool validation); reth MaxInitCodeSizeExceeded; Nethermind TxErrorMessages.ContractSizeTooBig
			"initcode too large",         // erigon DiscardReason InitCodeTooLarge
		},
	},
	{
		// Signed for another chain, or without the EIP-155 chain id the node
		// requires. Before the signature rule: geth reports a wrong chain id
		// as "invalid sender: invalid chain id for signer: have 1 want 1337".
		reason: txm.ReasonWrongChainID,
		patterns: []string{
			"invalid chain id",                 // geth types.ErrInvalidChainId "invalid chain id for signer" (core/types/transaction_signing.go); erigon SendRawTransaction "invalid chain id, expected: %d got: %d"; reth RpcInvalidTransactionError::InvalidChainId "invalid chain ID"; anvil InvalidTransactionError::InvalidChainId
			"only replay-protected",            // geth SubmitTransaction and erigon SendRawTransaction "only replay-protected (EIP-155) transactions allowed over RPC"
			"wrong chainid",                    // Besu RpcErrorType.WRONG_CHAIN_ID "Wrong chainId"
			"chainid is required",              // Besu RpcErrorType.REPLAY_PROTECTED_SIGNATURE_REQUIRED "ChainId is required"
			"chainid not supported",            // Besu RpcErrorType.REPLAY_PROTECTED_SIGNATURES_NOT_SUPPORTED "ChainId not supported"
			"invalidtxchainid",                 // Nethermind TxErrorMessages.InvalidTxChainId "InvalidTxChainId: Expected {expected}, got {actual}."
			"incompatible eip-155 transaction", // anvil IncompatibleEIP155 "Incompatible EIP-155 transaction, signed for another chain"; Hardhat "Trying to send an incompatible EIP-155 transaction, signed for another chain."
			"incorrect chain id",               // seen in SDK/provider wrappers; no EVM node source confirmed
		},
	},
	{
		// No sender can be recovered from the signature.
		reason: txm.ReasonInvalidSignature,
		patterns: []string{
			"invalid sender",                     // geth txpool.ErrInvalidSender "invalid sender: %v" (core/txpool/validation.go); reth RpcPoolError::InvalidSender; erigon DiscardReason InvalidSender
			"invalid transaction v, r, s values", // geth types.ErrInvalidSig (core/types/transaction.go)
			"invalid transaction signature",      // reth EthApiError::InvalidTransactionSignature
			"invalid signature",                  // Besu RpcErrorType.INVALID_TRANSACTION_SIGNATURE "Invalid signature"; OpenEthereum "Invalid signature"
			"failed to recover sender",           // Nethermind TxPoolErrorMessages.FailedToRecoverSender (AcceptTxResult.FailedToResolveSender)
			"failedtoresolvesender",              // Nethermind AcceptTxResult.FailedToResolveSender (code name, older releases)
			"invalidtxsignature",                 // Nethermind TxErrorMessages.InvalidTxSignature "InvalidTxSignature: Signature is invalid."
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

// nonceTooHigh reports whether err is the node's answer that the
// transaction's nonce is ahead of the sender's next one: a nonce before it
// has not reached the node yet. It stays ReasonTransient, not the
// transaction's fault; a chain without a public pool is sent the same
// bytes again at once (SendRawTransaction).
func nonceTooHigh(err error) bool {
	var rpcErr rpc.Error
	if !errors.As(err, &rpcErr) || Classify(err) != txm.ReasonTransient {
		return false
	}
	return containsAtWordStart(strings.ToLower(rpcErr.Error()), "nonce too high") // geth core.ErrNonceTooHigh; Arbitrum's sequencer; reth; anvil
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

// executionFailurePatterns are how nodes say that a call they ran failed in
// the EVM for a reason other than a revert: the call's own fault, which no
// retry changes. Listed so that their wording is on record and wins over a
// code or word below that would otherwise read as node trouble; an answer
// that matches neither list is an execution failure too (see
// executionFailure).
var executionFailurePatterns = []string{
	// geth core/vm/errors.go (v1.17.8); erigon core/vm/errors.go carries the
	// same texts. "out of gas" also covers vm.ErrCodeStoreOutOfGas
	// "contract creation code storage out of gas".
	"out of gas",                     // vm.ErrOutOfGas; Nethermind EvmExceptionType.OutOfGas; Besu ExceptionalHaltReason INSUFFICIENT_GAS "Out of gas"; reth BasicOutOfGas "out of gas: gas required exceeds: {limit}" (and Memory/Precompile/InvalidOperand variants)
	"gas required exceeds allowance", // geth eth/gasestimator "gas required exceeds allowance (%d)"; erigon rpc/jsonrpc/eth_call.go; reth GasRequiredExceedsAllowance; Nethermind GasEstimator.GasExceedsAllowanceMsgPrefix
	"max call depth exceeded",        // vm.ErrDepth; Nethermind EvmExceptionType.StackOverflow description
	"contract address collision",     // vm.ErrContractAddressCollision; Nethermind TransactionCollision
	"max code size exceeded",         // vm.ErrMaxCodeSizeExceeded
	"max initcode size exceeded",     // vm.ErrMaxInitCodeSizeExceeded; reth MaxInitCodeSizeExceeded
	"invalid jump destination",       // vm.ErrInvalidJump; Nethermind InvalidJumpDestination
	"write protection",               // vm.ErrWriteProtection; Nethermind StaticCallViolation
	"return data out of bounds",      // vm.ErrReturnDataOutOfBounds; Nethermind AccessViolation
	"gas uint64 overflow",            // vm.ErrGasUintOverflow; Nethermind GasUInt64Overflow
	"invalid code",                   // vm.ErrInvalidCode "invalid code: must not begin with 0xef"; erigon "invalid code"
	"nonce uint64 overflow",          // vm.ErrNonceUintOverflow
	"stack underflow",                // vm.ErrStackUnderflow "stack underflow (%d <=> %d)"; Nethermind StackUnderflow; Besu INSUFFICIENT_STACK_ITEMS "Stack underflow"
	"stack limit reached",            // vm.ErrStackOverflow "stack limit reached %d (%d)"; Nethermind ExecutionFailureText
	"invalid opcode",                 // vm.ErrInvalidOpCode "invalid opcode: %s" (INVALID for 0xfe, "opcode 0x.. not defined"); Nethermind ExecutionFailureText
	"invalid subroutine entry",       // erigon vm.ErrInvalidSubroutineEntry
	"invalid retsub",                 // erigon vm.ErrInvalidRetsub
	// geth core/vm/contracts.go: a precompile called at the top level
	// fails with its own error.
	"invalid input length",            // blake2f, BLS12-381, point evaluation
	"bad elliptic curve pairing size", // bn256 pairing
	"invalid field element",           // BLS12-381 "invalid field element top bytes" / "... length"
	"not on correct subgroup",         // BLS12-381 "g1/g2 point is not on correct subgroup"
	"invalid point",                   // BLS12-381 "invalid point: not on curve"
	"error verifying kzg proof",       // point evaluation
	"mismatched versioned hash",       // point evaluation
	"exceeded 1024 bytes",             // modexp "one or more of base/exponent/modulus length exceeded 1024 bytes"
	"invalid final flag",              // blake2f
	// Nethermind (Nethermind.Evm EvmExceptionExtensions, Nethermind.Blockchain GasEstimator)
	"invalid instruction",         // EvmExceptionType.BadInstruction
	"precompile error",            // EvmExceptionType.PrecompileFailure; Besu PRECOMPILE_ERROR "Precompile error"
	"gas estimation failed",       // "Gas estimation failed due to out of gas"
	"transaction execution fails", // "Transaction execution fails"
	"cannot estimate gas",         // "Cannot estimate gas, gas spent exceeded transaction and block gas limit[ or transaction gas limit cap]"
	// Besu: RpcErrorType.EXECUTION_HALTED "Transaction processing could not
	// be completed due to an exception (<ExceptionalHaltReason>)".
	"could not be completed due to an exception",
	"bad instruction",      // ExceptionalHaltReason INVALID_OPERATION
	"bad jump destination", // INVALID_JUMP_DESTINATION
	"out of bounds",        // INVALID_RETURN_DATA_BUFFER_ACCESS, OUT_OF_BOUNDS
	"out of stack",         // TOO_MANY_STACK_ITEMS
	"illegal state change", // ILLEGAL_STATE_CHANGE
	"code is too large",    // CODE_TOO_LARGE
	"code is invalid",      // INVALID_CODE
	"address out of range", // ADDRESS_OUT_OF_RANGE
	// reth crates/rpc/rpc-eth-types/src/error/mod.rs
	"evm error",     // RpcInvalidTransactionError::EvmHalt "EVM error: {HaltReason:?}" (OpcodeNotFound, InvalidFEOpcode, StackUnderflow, InvalidJump, ...)
	"out of memory", // MemoryLimitOutOfGas "out of memory: memory limit exceeded during memory expansion"
}

// nodeTroubleCodes are JSON-RPC codes that say the node, not the call,
// failed.
var nodeTroubleCodes = map[int]bool{
	-32700:            true, // parse error: the request did not arrive whole
	-32600:            true, // invalid request: likewise
	errMethodNotFound: true, // the node does not serve the method
	-32603:            true, // internal error: geth "method handler crashed" (rpc/service.go), Besu/Nethermind "Internal error", reth internal errors
	-32002:            true, // EIP-1474 "resource unavailable"; geth rpc errcodeTimeout "request timed out"
	-32005:            true, // EIP-1474 "limit exceeded"; Infura rate limits
	429:               true, // Alchemy and others put the HTTP status in the JSON-RPC code
}

// nodeTroublePatterns are how nodes and providers say they cannot answer
// now: missing state or headers, syncing, timeouts, rate limits, internal
// failures.
var nodeTroublePatterns = []string{
	"header not found",             // geth eth/api_backend.go StateAndHeaderByNumberOrHash; Infura/Alchemy behind a load balancer
	"block not found",              // reth EthApiError::HeaderNotFound answered as "block not found: <id>" (-32001); Besu BLOCK_NOT_FOUND "Block not found"
	"unknown block",                // Besu UNKNOWN_BLOCK "Unknown block"
	"could not find the block",     // erigon rpc/jsonrpc/eth_call.go EstimateGas "could not find the block %s in cache or db"
	"can't get the current state",  // erigon EstimateGas
	"missing trie node",            // geth trie.MissingNodeError "missing trie node %x (path %x) %v"
	"not available",                // geth "historical state %x is not available", "state %x is not available" (core/state/database_history.go), "pending state is not available" (eth/api_backend.go)
	"unavailable",                  // Besu WORLD_STATE_UNAVAILABLE "World state unavailable", PRUNED_HISTORY_UNAVAILABLE; reth "pruned history unavailable"; "Service Unavailable"
	"in progress",                  // Besu CHAIN_HEAD_WORLD_STATE_NOT_AVAILABLE "Initial sync is still in progress"; geth "transaction indexing is in progress"
	"is syncing",                   // Nethermind TxPoolErrorMessages.NodeIsSyncing "node is syncing"
	"timeout",                      // Besu TIMEOUT_ERROR "Timeout expired"; geth/reth "execution aborted (timeout = %v)"
	"timed out",                    // geth rpc errMsgTimeout "request timed out"
	"execution aborted",            // geth internal/ethapi/api.go "execution aborted (timeout = %v)"; reth ExecutionTimedOut
	"internal error",               // JSON-RPC 2.0 -32603 "Internal error" (Besu, Nethermind); Besu UNKNOWN "Unknown internal error"
	"internal eth error",           // reth EthApiError::InternalEthError
	"internal blocking task error", // reth EthApiError::InternalBlockingTaskError
	"method handler crashed",       // geth rpc/service.go, a panic in the handler
	"too many requests",            // HTTP 429 in a JSON-RPC answer
	"rate exceeded",                // Infura "project ID request rate exceeded"
	"rate limit",                   // Infura "daily request count exceeded, request rate limited"
	"request count exceeded",       // Infura daily cap
	"exceeded its compute units",   // Alchemy "Your app has exceeded its compute units per second capacity"
	"capacity limit exceeded",      // Alchemy "Monthly capacity limit exceeded"
	"credits limited to",           // QuickNode "credits limited to X/sec"
}

// executionFailure turns the node's answer to eth_estimateGas, once a revert
// and insufficient funds are ruled out, into a *txm.ExecutionError wrapping
// err; nil when the node could not be asked. Not asked: no JSON-RPC answer
// at all (transport errors, a non-2xx HTTP status, timeouts, an endpoint
// whose chain could not be verified: what failover moves past), or an
// answer that says the node is unwell (nodeTroubleCodes, nodeTroublePatterns).
// Every other answer is the node's verdict on this call: the known wordings
// of executionFailurePatterns and, by the same rule, a text nobody has
// listed yet, since the node did run the call and an open set of EVM
// failures (new opcodes, precompiles, L2 rules) keeps growing while the
// ways a node says it is unwell are few and listed.
func executionFailure(err error) *txm.ExecutionError {
	var rpcErr rpc.Error
	if failover(err) || !errors.As(err, &rpcErr) {
		return nil
	}
	msg := strings.ToLower(rpcErr.Error())
	known := false
	for _, p := range executionFailurePatterns {
		if containsAtWordStart(msg, p) {
			known = true
			break
		}
	}
	if !known {
		if nodeTroubleCodes[rpcErr.ErrorCode()] {
			return nil
		}
		for _, p := range nodeTroublePatterns {
			if containsAtWordStart(msg, p) {
				return nil
			}
		}
	}
	return &txm.ExecutionError{Reason: nodeReason(rpcErr.Error()), Err: err}
}

// maxReasonLen bounds the node's words carried to the caller.
const maxReasonLen = 512

// nodeReason is a node's message as a caller may read it: trimmed, and cut
// at maxReasonLen bytes on a character boundary.
func nodeReason(msg string) string {
	msg = strings.TrimSpace(msg)
	if len(msg) <= maxReasonLen {
		return msg
	}
	cut := maxReasonLen
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "…"
}

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
