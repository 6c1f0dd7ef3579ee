package txm

import (
	"context"
	"errors"
	"fmt"
	"math/big"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
)

// The chain ports. Each consumer asks only for what it uses; the adapter in
// shared/evm implements all of them.

// NonceSource reads a signer's nonces from the chain.
type NonceSource interface {
	// PendingNonce is the next nonce the node would accept, counting its
	// pending pool.
	PendingNonce(ctx context.Context, addr common.Address) (uint64, error)
	// LatestNonce is the number of the signer's transactions mined at the
	// latest block: every nonce below it is mined.
	LatestNonce(ctx context.Context, addr common.Address) (uint64, error)
}

// NonceProof is one node's answer, read in one batched call and pinned to
// one block by its hash, to whether a signer's nonces were taken and by
// which of the given transactions: what an outcome that the chain took a
// nonce from outside rests on. Reads from different nodes, or of different
// heights, cannot be combined into it: a lagging node's "no receipt" and
// another's "the nonce is used" would say a mined transaction was not.
type NonceProof struct {
	// Block is the block the answer is pinned to: canonical on the node
	// that answered, at its height, before and after the other reads.
	Block Header
	// Nonce is the signer's transaction count at Block: every nonce below
	// it was taken at or below Block.
	Nonce uint64
	// Receipts holds the receipt of each hash asked, in order; nil where
	// the node has none on its canonical chain.
	Receipts []*Receipt
}

// NonceProver reads a NonceProof.
type NonceProver interface {
	// ProveNonce reads from one node, in one batched call, the block at
	// at's height (which must be at, before and after the other reads),
	// addr's nonce at at's hash, and the receipt of each hash. An endpoint
	// that cannot answer for at is passed over for the next; when none
	// can, the error wraps ErrNodeBehind.
	ProveNonce(ctx context.Context, addr common.Address, at Header, hashes []common.Hash) (NonceProof, error)
}

// CallMsg is a transaction as the caller described it, for gas estimation.
type CallMsg struct {
	From  common.Address
	To    *common.Address // nil: contract creation
	Value *big.Int
	Data  []byte
	// Gas is the most the call may use (0: as much as the node allows): a
	// caller's gas limit, which the estimate then checks is enough.
	Gas uint64
}

// GasEstimator estimates the gas a call needs, including the configured
// margin. A call that would revert returns a *RevertError, one the signer
// cannot pay for an *InsufficientFundsError, and one that fails in any other
// way on the node (out of gas, an invalid opcode, a stack underflow, ...) an
// *ExecutionError. Any other error means the node could not be asked.
type GasEstimator interface {
	EstimateGas(ctx context.Context, msg CallMsg) (uint64, error)
}

// DataFeeTx is a transaction as it will be signed, for pricing its data
// fee: what is not known yet (the nonce before allocation, the fees before
// signing) is given at the most it can be, so that the size priced is at
// least the signed transaction's.
type DataFeeTx struct {
	From  common.Address
	To    *common.Address // nil: contract creation
	Value *big.Int
	Data  []byte
	Nonce uint64
	Gas   uint64
	// The most it may pay per gas: MaxFeePerGas and MaxPriorityFeePerGas
	// (EIP-1559), or GasPrice (legacy, when set); nil where none bounds
	// it.
	MaxFeePerGas, MaxPriorityFeePerGas, GasPrice *big.Int
}

// DataFeeOracle prices the data fee a rollup charges, beside its execution
// gas, for posting a transaction to its L1: what the transaction's worst
// case adds to value + gas × fee ceiling. A chain whose oracle is missing
// where its kind says it is fails with an error wrapping
// ErrNoDataFeeOracle.
type DataFeeOracle interface {
	// ChargesDataFee reports whether the chain charges one at all; when
	// not, every transaction's is zero and DataFees need not be asked.
	ChargesDataFee() bool
	// DataFees prices each of txs, in wei, in one batched call (zero for
	// each, without a call, on a chain that charges none).
	DataFees(ctx context.Context, txs []DataFeeTx) ([]*big.Int, error)
}

// Fees are what a new attempt will pay. For EIP-1559 chains GasPrice is nil;
// for legacy chains the 1559 fields are nil.
type Fees struct {
	MaxFeePerGas         *big.Int
	MaxPriorityFeePerGas *big.Int
	GasPrice             *big.Int
	// BaseFee is the base fee of the block a suggestion was made from
	// (informational: an attempt whose max fee is below it cannot be mined
	// now); nil on legacy chains and on an attempt's own fees.
	BaseFee *big.Int
}

// FeeOracle suggests fees for a new attempt, within the configured caps.
type FeeOracle interface {
	SuggestFees(ctx context.Context) (Fees, error)
}

// Broadcaster sends a signed transaction. Its error, if any, is a
// *BroadcastError whose Reason is one of the closed set below.
type Broadcaster interface {
	SendRawTransaction(ctx context.Context, raw []byte) error
	// SendRawTransactions sends several in order in one round trip and
	// returns one (classified) error per transaction, nil where accepted.
	SendRawTransactions(ctx context.Context, raws [][]byte) []error
	// SendRawTransactionsVia is SendRawTransactions with each
	// transaction's route (Request.SendVia): routes[i] names a send-only
	// endpoint of the chain or "public" (its read endpoints only); "" or
	// a nil routes takes the signer's route.
	SendRawTransactionsVia(ctx context.Context, raws [][]byte, routes []string) []error
}

// Receipt is the part of a receipt txfence keeps.
type Receipt struct {
	TxHash            common.Hash
	BlockNumber       uint64
	BlockHash         common.Hash
	Status            uint64 // 1 success, 0 failure
	GasUsed           uint64
	EffectiveGasPrice *big.Int
}

// Header is the part of a block header txfence uses.
type Header struct {
	Number     uint64
	Hash       common.Hash
	ParentHash common.Hash
}

// ReceiptSource fetches receipts in one batched call; a hash with no receipt
// (not mined, or dropped by a reorg) yields nil at its index.
type ReceiptSource interface {
	Receipts(ctx context.Context, hashes []common.Hash) ([]*Receipt, error)
	// BlockReceipts fetches every receipt of each canonical block of
	// numbers in one batched call; a number with no block yields nil at its
	// index. A node that does not serve it fails with an error wrapping
	// ErrNoBlockReceipts.
	BlockReceipts(ctx context.Context, numbers []uint64) ([][]*Receipt, error)
}

// BlockSource reads the canonical chain.
type BlockSource interface {
	// Head is the latest block.
	Head(ctx context.Context) (Header, error)
	// Finalized is the block the chain reports under the `finalized` tag.
	Finalized(ctx context.Context) (Header, error)
	// Blocks reads, in one batched call, the canonical header of each of
	// numbers (nil at its index where the node has no block yet) and then,
	// from the same node, the block under each of tags ("latest",
	// "finalized"; nil where the node has none). Every header it returns
	// is canonical on a node whose blocks under tags were at least those
	// returned: when the call goes out as several batches, each ends with
	// the tags, and the lowest answer of each tag is returned.
	Blocks(ctx context.Context, numbers []uint64, tags []string) (headers, tagged []*Header, err error)
	// HasTransaction reports whether the node knows the transaction (mined
	// or pending).
	HasTransaction(ctx context.Context, hash common.Hash) (bool, error)
}

// DelegationDesignator is the code an EIP-7702 delegated account holds,
// followed by the 20-byte address it delegates to.
var DelegationDesignator = []byte{0xef, 0x01, 0x00}

// DelegationReader tells whether an account carries an EIP-7702
// delegation: its code at the latest block begins with
// DelegationDesignator. Nodes allow such a sender fewer transactions in
// their pool.
type DelegationReader interface {
	Delegated(ctx context.Context, addr common.Address) (bool, error)
}

// Chain is everything txfence asks of one EVM chain.
type Chain interface {
	ChainID() uint64
	NonceSource
	NonceProver
	GasEstimator
	FeeOracle
	Broadcaster
	ReceiptSource
	BlockSource
	InclusionReader
}

// Signer signs transactions for one address. Implementations: a local key
// (development only) and Cloud KMS.
type Signer interface {
	Address() common.Address
	// SignTx returns tx signed for chainID with the London (EIP-1559 and
	// legacy) signer rules.
	SignTx(ctx context.Context, tx *types.Transaction, chainID *big.Int) (*types.Transaction, error)
}

// BroadcastReason is the closed set of outcomes a failed broadcast is
// classified into, in one place (shared/evm). Anything unrecognised is
// ReasonTransient.
type BroadcastReason string

const (
	// ReasonKnown: the node already has this exact transaction. Success when
	// the attempt's hash was persisted.
	ReasonKnown BroadcastReason = "known"
	// ReasonNonceTooLow: the nonce is already used on chain, by this attempt
	// or another at the same nonce. Success when a persisted attempt is mined.
	ReasonNonceTooLow BroadcastReason = "nonce_too_low"
	// ReasonReplacementUnderpriced: another transaction with the same nonce is
	// pending and this one does not pay enough more to replace it.
	ReasonReplacementUnderpriced BroadcastReason = "replacement_underpriced"
	// ReasonUnderpriced: the fee is below the node's minimum.
	ReasonUnderpriced BroadcastReason = "underpriced"
	// ReasonInsufficientFunds: the signer cannot pay value + gas × fee.
	ReasonInsufficientFunds BroadcastReason = "insufficient_funds"
	// ReasonIntrinsicGas: the gas limit is below the intrinsic cost.
	ReasonIntrinsicGas BroadcastReason = "intrinsic_gas_too_low"
	// ReasonExceedsBlockGasLimit: the gas limit is above the block gas limit.
	ReasonExceedsBlockGasLimit BroadcastReason = "exceeds_block_gas_limit"
	// ReasonTxFeeCap: fee cap × gas limit is above the node's cap on one
	// transaction's fee (geth's --rpc.txfeecap, 1 ether by default; Erigon,
	// Besu and reth have the same).
	ReasonTxFeeCap BroadcastReason = "tx_fee_cap_exceeded"
	// ReasonOversized: the transaction, or its init code, is larger than the
	// node's pool or the protocol accepts.
	ReasonOversized BroadcastReason = "oversized"
	// ReasonInvalidSignature: the node cannot recover a sender from the
	// signature.
	ReasonInvalidSignature BroadcastReason = "invalid_signature"
	// ReasonWrongChainID: the transaction is signed for another chain, or
	// without the EIP-155 chain id the node requires.
	ReasonWrongChainID BroadcastReason = "wrong_chain_id"
	// ReasonReverted: execution reverted (from estimation or a node that
	// simulates on submission).
	ReasonReverted BroadcastReason = "reverted"
	// ReasonDelegatedLimit: the signer's account carries an EIP-7702
	// delegation and the node holds as many of its transactions as it
	// allows a delegated account (geth and reth: one executable). Not a
	// failure of the transaction: it waits until the one before is mined.
	ReasonDelegatedLimit BroadcastReason = "delegated_in_flight_limit"
	// ReasonTransient: unavailable, timed out, rate-limited or unrecognised:
	// retry later.
	ReasonTransient BroadcastReason = "transient"
)

// Deterministic reports whether retrying the same bytes cannot succeed, so the
// transaction should go to STUCK with the reason recorded: every Permanent
// reason, and insufficient funds, which funding the signer heals.
func (r BroadcastReason) Deterministic() bool {
	return r.Permanent() || r == ReasonInsufficientFunds
}

// Permanent reports whether the node refused the bytes for a property of
// the transaction itself that waiting cannot change: no later attempt of
// the same bytes, on this node, can be accepted, whatever happens to the
// signer's balance or the fee market.
func (r BroadcastReason) Permanent() bool {
	switch r {
	case ReasonIntrinsicGas, ReasonExceedsBlockGasLimit, ReasonTxFeeCap, ReasonOversized,
		ReasonInvalidSignature, ReasonWrongChainID:
		return true
	}
	return false
}

// BroadcastError is a classified broadcast failure.
type BroadcastError struct {
	Reason BroadcastReason
	Err    error
}

func (e *BroadcastError) Error() string { return fmt.Sprintf("broadcast: %s: %v", e.Reason, e.Err) }
func (e *BroadcastError) Unwrap() error { return e.Err }

// ReasonOf returns the classified reason of err, or ReasonTransient.
func ReasonOf(err error) BroadcastReason {
	var be *BroadcastError
	if errors.As(err, &be) {
		return be.Reason
	}
	return ReasonTransient
}

// InsufficientFundsError says the signer's balance cannot pay for a call
// or transaction (value + gas × fee). Have and Want are nil when the node
// did not say.
type InsufficientFundsError struct {
	Have, Want *big.Int
	Err        error
}

func (e *InsufficientFundsError) Error() string {
	if e.Have != nil && e.Want != nil {
		return fmt.Sprintf("insufficient funds: the balance is %s wei and %s wei is needed", e.Have, e.Want)
	}
	return "insufficient funds: the signer's balance cannot pay for the value and gas"
}

func (e *InsufficientFundsError) Unwrap() error { return e.Err }

// RevertError says a call would revert (or reverted), with the node's reason.
type RevertError struct {
	Reason string
	Data   []byte
}

func (e *RevertError) Error() string {
	if e.Reason == "" {
		return "execution reverted"
	}
	return "execution reverted: " + e.Reason
}

// ExecutionError says the node ran the call and it failed for a reason other
// than a revert or the signer's balance: out of gas at any gas limit, an
// invalid opcode, a stack underflow, a precompile's refusal, ... Reason is
// the node's own words. Like a revert, it is the call's fault, not an
// outage: it matches ErrInvalid under errors.Is.
type ExecutionError struct {
	Reason string
	Err    error // the node's answer, when there is one
}

func (e *ExecutionError) Error() string {
	if e.Reason == "" {
		return "execution failed"
	}
	return "execution failed: " + e.Reason
}

func (e *ExecutionError) Unwrap() error { return e.Err }

// Is makes an ExecutionError match ErrInvalid.
func (e *ExecutionError) Is(target error) bool { return target == ErrInvalid }
