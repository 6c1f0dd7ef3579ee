package txm

import (
	"context"
	"slices"
	"time"

	"github.com/ethereum/go-ethereum/common"
)

// Tracked is a broadcast transaction and every hash it was signed as: the
// receipt check looks at each, since any attempt at the nonce may be mined.
type Tracked struct {
	Tx       *Tx
	Attempts []Attempt
}

// Mined records that one attempt of a transaction has a receipt.
type Mined struct {
	TxID      string
	AttemptNo int
	Receipt   Receipt
}

// EventType names a completion event on the topic and in the feed. The
// outcomes (TxConfirmed, TxFailed, TxStuck) are in the default feed and on
// the topic; the lifecycle events are read with events=lifecycle and
// published when TXFENCE_TOPIC_LIFECYCLE is on.
type EventType string

const (
	// EventConfirmed: the transaction's receipt block is final and it
	// succeeded (hash, block, blockHash).
	EventConfirmed EventType = "TxConfirmed"
	// EventFailed: it ended without success (subState; hash and block when
	// mined; revertReason when known).
	EventFailed EventType = "TxFailed"
	// EventStuck: progress stopped (subState says why).
	EventStuck EventType = "TxStuck"

	// EventAccepted: allocated, with its nonce.
	EventAccepted EventType = "TxAccepted"
	// EventPendingApproval: held for approval, with no nonce yet.
	EventPendingApproval EventType = "TxPendingApproval"
	// EventBroadcast: a node accepted an attempt and the transaction is
	// TRACKING (hash, attempt, fees, endpoint when known).
	EventBroadcast EventType = "TxBroadcast"
	// EventReplaced: a new attempt replaces the one before at its nonce
	// (hash, fees, previousHash, previousFees, attempt, reason).
	EventReplaced EventType = "TxReplaced"
	// EventMined: an attempt has a receipt (hash, block, blockHash).
	EventMined EventType = "TxMined"
	// EventReorged: the block that held its receipt left the chain; it is
	// TRACKING again (hash, block, blockHash of the block it left).
	EventReorged EventType = "TxReorged"
)

// EventTypes lists every event type, the lifecycle steps in the order a
// transaction usually meets them, then the outcomes.
func EventTypes() []EventType {
	return []EventType{EventAccepted, EventPendingApproval, EventBroadcast, EventReplaced, EventMined, EventReorged,
		EventStuck, EventConfirmed, EventFailed}
}

// IsOutcome reports whether e is an outcome (TxConfirmed, TxFailed,
// TxStuck), the events the default feed and topic carry.
func (e EventType) IsOutcome() bool {
	return e == EventConfirmed || e == EventFailed || e == EventStuck
}

// Replacement reasons of a TxReplaced event.
const (
	ReplacedBump   = "bump"   // a fee bump
	ReplacedCancel = "cancel" // a cancel, or a placeholder that fills a refused payload's nonce
	ReplacedAdmin  = "admin"  // an admin's action
)

// EventFees are an attempt's fees in an event, in wei as decimal strings:
// EIP-1559's two caps, or a legacy transaction's gas price.
type EventFees struct {
	MaxFeePerGas         string `json:"maxFeePerGas,omitempty"`
	MaxPriorityFeePerGas string `json:"maxPriorityFeePerGas,omitempty"`
	GasPrice             string `json:"gasPrice,omitempty"`
}

// EventDetail is an event's own fields (which ones depends on its type;
// the others are zero).
type EventDetail struct {
	Hash         string     `json:"hash,omitempty"`
	Attempt      int        `json:"attempt,omitempty"`
	Fees         *EventFees `json:"fees,omitempty"`
	Endpoint     string     `json:"endpoint,omitempty"`
	PreviousHash string     `json:"previousHash,omitempty"`
	PreviousFees *EventFees `json:"previousFees,omitempty"`
	Reason       string     `json:"reason,omitempty"`
	Block        *uint64    `json:"block,omitempty"`
	BlockHash    string     `json:"blockHash,omitempty"`
	RevertReason string     `json:"revertReason,omitempty"`
}

// EventFor maps a reported state to its event type.
func EventFor(s State) EventType {
	switch s {
	case StateConfirmed:
		return EventConfirmed
	case StateFailedFinal:
		return EventFailed
	default:
		return EventStuck
	}
}

// Completion is one event of the feed (an outcome, or with
// CompletionFilter.Lifecycle a lifecycle step), in the order of Seq.
type Completion struct {
	Seq       int64
	Type      EventType
	Version   int64 // the transaction's, after the event (0: written before versions were)
	Lifecycle bool  // a lifecycle event, not an outcome
	TxID      string
	ChainID   uint64
	Signer    common.Address
	State     State
	NewFork   bool    // an earlier reported outcome of this transaction is superseded
	SubState  string  // why: cancelled, nonce_consumed_externally, reverted, the STUCK reason
	Nonce     *uint64 // nil for a transaction that never got one (it ended waiting for approval)
	Hash      *common.Hash
	CreatedAt time.Time
	// Principal created the transaction ("" when unknown); it selects a
	// sender's own outcomes and is not published.
	Principal string
	// Detail is the event's own fields.
	Detail EventDetail
}

// CompletionMessage is the body of a completion topic message: one event.
type CompletionMessage struct {
	Type     EventType `json:"type"`
	Seq      int64     `json:"seq"`
	TxID     string    `json:"txId"`
	ChainID  uint64    `json:"chainId"`
	Signer   string    `json:"signer"`
	State    State     `json:"state"`
	NewFork  bool      `json:"newFork"`
	SubState string    `json:"subState,omitempty"`
	// Nonce is absent for a transaction that never got one: it ended while
	// it waited for approval (rejected, approval_expired,
	// reverted_at_approval, refused_at_approval).
	Nonce *uint64 `json:"nonce,omitempty"`
	// Version is the transaction's after the event: it only grows.
	Version int64 `json:"version"`
	// EventDetail is the event's own fields (hash, fees, block, ...).
	EventDetail
	// Shard names the database the outcome was written in when signers are
	// sharded (TXFENCE_DATABASES): Seq counts per shard, so consumers
	// deduplicate by (shard, seq). Absent with one database.
	Shard string `json:"shard,omitempty"`
}

// SignerRef names a signer on a chain.
type SignerRef struct {
	ChainID uint64
	Signer  common.Address
}

// SignerWork is a signer with work for the finality sweep, and which: a
// pass looks only at what a signer has (most signers have only MINED
// transactions waiting for depth).
//
// The blocks come with it, read for every signer in one query: looked up
// signer by signer, a pass over a hundred signers was some three hundred
// round trips (and every MINED transaction's attempts, raw bytes included)
// before it found what to write, and took seconds on a busy machine.
type SignerWork struct {
	SignerRef
	Mined    bool // MINED transactions: depth to check
	Stale    bool // TRACKING/STUCK ones untouched for a while: receipts to look for
	Reported bool // outcomes reported within the watch in a block that left the chain: to reopen

	MinedBlocks    []Header // the distinct receipt blocks of its MINED transactions, in block order
	MinedCounts    []int    // how many of its MINED transactions each of MinedBlocks holds
	ReportedBlocks []Header // the blocks of its outcomes reported within the watch that are to be re-checked
}

// FinalityWork is what a finality pass looks at: the signers with MINED or
// stale transactions, and each chain's distinct blocks of the outcomes
// reported within the reorg watch. A reported block is checked once per
// chain, not once per signer with outcomes in it; the signers of a block
// that left the chain are read then (ReportedIn).
type FinalityWork struct {
	Signers  []SignerWork
	Reported map[uint64][]Header // by chain id, in block order
}

// SignerAge is how long a signer's oldest non-final transaction has waited.
type SignerAge struct {
	SignerRef
	Age time.Duration
}

// ReceiptStore is the storage the Receipt function and the finality sweep
// need. Writes are fenced by the signer's chain lease.
type ReceiptStore interface {
	// TrackingBelow returns the signer's TRACKING (and STUCK, which may
	// still be mined) transactions with a nonce below nonce (the chain's
	// latest: the only ones that can be mined), with all their attempts, in
	// nonce order, and counts the others, which are still waiting;
	// olderThan > 0 limits both to those untouched for at least that long.
	TrackingBelow(ctx context.Context, chainID uint64, signer common.Address, nonce uint64, olderThan time.Duration) (below []Tracked, waiting int, err error)
	// MarkMined writes receipts and moves the transactions that are still
	// TRACKING or STUCK to MINED (the others are left as they are), and
	// prompts Submit when the signer has ALLOCATED work waiting.
	MarkMined(ctx context.Context, l Lease, mined []Mined) ([]int64, error)
	// StillUnmined returns those of the transactions (by id) that MarkMined
	// would still move: TRACKING or STUCK. It only reads.
	StillUnmined(ctx context.Context, txIDs []string) (map[string]bool, error)
	// MinedTxs returns the signer's MINED transactions (receipt included).
	MinedTxs(ctx context.Context, chainID uint64, signer common.Address) ([]Tracked, error)
	// Finalize moves MINED transactions to their final state and records
	// each outcome, pending, in the same transaction: NumberCompletions
	// numbers it into the feed (a completion and a completion outbox row),
	// after the caller let the lease go.
	Finalize(ctx context.Context, l Lease, txIDs []string) error
	// FinalizeBlocks moves the signer's MINED transactions whose receipt is
	// in one of blocks (number and hash: the canonical blocks the caller
	// found final) to their final outcome, as Finalize does, and returns
	// them. What is not MINED in those blocks when it runs is left alone.
	FinalizeBlocks(ctx context.Context, l Lease, blocks []Header) ([]Final, error)
	// Reorged moves a MINED transaction back to TRACKING: its receipt block
	// left the canonical chain.
	Reorged(ctx context.Context, l Lease, txID string, detail string) error
	// SignersWithWork lists signers with MINED transactions or TRACKING ones
	// untouched for staleAfter, which of the two each has, and the blocks;
	// and each chain's distinct receipt blocks of the outcomes reported
	// within watch.
	SignersWithWork(ctx context.Context, staleAfter, watch time.Duration) (FinalityWork, error)
	// PruneReported forgets the blocks of outcomes reported before watch,
	// which SignersWithWork no longer lists.
	PruneReported(ctx context.Context, watch time.Duration) error
	// ReportedIn lists the signers with outcomes reported within watch in
	// one of blocks of chain chainID, each with Reported set and those of
	// blocks it has outcomes in as ReportedBlocks.
	ReportedIn(ctx context.Context, chainID uint64, blocks []Header, watch time.Duration) ([]SignerWork, error)
	// ConsumedExternally ends open transactions whose nonce another
	// transaction took, FAILED_FINAL `nonce_consumed_externally`, each with
	// its outcome recorded pending, as Finalize does.
	ConsumedExternally(ctx context.Context, l Lease, txIDs []string, detail string) error
	// ConsumedSince returns the transactions that ended FAILED_FINAL
	// `nonce_consumed_externally` within the last since, with all their
	// attempts: outcomes a later look at the chain may contradict.
	ConsumedSince(ctx context.Context, since time.Duration) ([]Tracked, error)
	// ReopenBlock moves the signer's reported transactions whose receipt is
	// in block (number, hash) back to TRACKING — a reorg deeper than the
	// confirmation depth — and returns them with their attempts.
	ReopenBlock(ctx context.Context, l Lease, block Header, detail string) ([]Tracked, error)
	// NumberCompletions numbers the outcomes that writes recorded pending
	// (Finalize, FinalizeBlocks and ConsumedExternally leave theirs to it;
	// other writers number theirs, unless they crashed or lost the database
	// after committing) and returns the completion outbox rows it wrote.
	NumberCompletions(ctx context.Context) ([]int64, error)
}

// CompletionFilter selects completions: what one caller may read of the
// feed. The zero filter selects every one.
type CompletionFilter struct {
	Signers   []common.Address // not nil: only these signers (none when empty)
	Principal string           // not "": only the transactions it created
	Lifecycle bool             // the lifecycle events too, not only the outcomes
}

// Selects reports whether c passes the filter.
func (f CompletionFilter) Selects(c Completion) bool {
	return (f.Lifecycle || !c.Lifecycle) && (f.Signers == nil || slices.Contains(f.Signers, c.Signer)) &&
		(f.Principal == "" || f.Principal == c.Principal)
}

// CompletionFeed reads reported outcomes in seq order.
type CompletionFeed interface {
	// CompletionsAfter returns up to limit completions with seq > after
	// that f selects, in seq order.
	CompletionsAfter(ctx context.Context, after int64, limit int, f CompletionFilter) ([]Completion, error)
	// LatestCompletion is the highest seq written (0 when none).
	LatestCompletion(ctx context.Context) (int64, error)
}

// CompletionListener tells when completions may have been written.
type CompletionListener interface {
	// Listen calls wake after each write of completions anywhere (and
	// once when it starts listening), until ctx ends (nil) or the
	// listening connection fails (an error).
	Listen(ctx context.Context, wake func()) error
}

// OutageStore ends the backoffs that an outage of a chain's endpoints
// caused (Failure.Outage), once they answer again.
type OutageStore interface {
	// OutageHeld lists the chains that have transactions backing off after
	// an outage of their endpoints.
	OutageHeld(ctx context.Context) ([]uint64, error)
	// ResumeAfterOutage ends the backoff of chain chainID's transactions
	// that back off after an outage, writes a `submit` prompt for each of
	// their signers, and returns how many it resumed and the outbox ids.
	// A prompt is harmless and an ended backoff only makes work due: it is
	// not fenced.
	ResumeAfterOutage(ctx context.Context, chainID uint64) (int, []int64, error)
}

// ResubmitStore is the storage the ResubmitSweep needs.
type ResubmitStore interface {
	AttemptStore
	ActionQueue
	OutageStore
	// PromptStranded writes a `submit` prompt for every signer with ALLOCATED
	// transactions whose backoff has run out, or that have waited olderThan
	// untouched (their prompt was lost or given up on), and returns the
	// outbox ids.
	PromptStranded(ctx context.Context, olderThan time.Duration) ([]int64, error)
	// PruneUsage forgets the usage older than the longest window: the
	// rolling caps' (a day) and the policies' windows' (MaxWindowPeriod).
	PruneUsage(ctx context.Context) error
	// SignersToTend lists signers with work for the sweep: TRACKING
	// transactions last broadcast at least olderThan ago, a lowest-nonce
	// TRACKING transaction last broadcast at least headOlderThan ago, STUCK
	// ones whose backoff has run out, or pending admin actions.
	SignersToTend(ctx context.Context, olderThan, headOlderThan time.Duration) ([]SignerRef, error)
	// OpenTxs returns the signer's TRACKING and STUCK transactions with
	// their attempts, in nonce order, and the database's time, against
	// which their timestamps are judged.
	OpenTxs(ctx context.Context, chainID uint64, signer common.Address) (time.Time, []Tracked, error)
	// OldestPending is, for each signer with non-final transactions, the
	// age of its oldest, for the pending_oldest_age_seconds gauge.
	OldestPending(ctx context.Context) ([]SignerAge, error)
}

// Final is a transaction FinalizeBlocks moved to its final outcome.
type Final struct {
	TxID      string
	State     State // CONFIRMED or FAILED_FINAL
	CreatedAt time.Time
}
