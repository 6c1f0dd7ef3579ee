package txm

import (
	"context"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum/common"
)

// AttemptKind says why an attempt was signed.
type AttemptKind string

const (
	// AttemptOriginal is the first signing of a transaction.
	AttemptOriginal AttemptKind = "original"
	// AttemptReplace is a fee bump at the same nonce.
	AttemptReplace AttemptKind = "replace"
	// AttemptCancel is a 0-value self-transfer at the nonce.
	AttemptCancel AttemptKind = "cancel"
	// AttemptPlaceholder fills a nonce that will never be sent otherwise.
	AttemptPlaceholder AttemptKind = "placeholder"
)

// Attempt is one signed form of a transaction, persisted (fenced) before it
// is broadcast. Rebroadcasts send the same Raw bytes.
type Attempt struct {
	TxID                 string
	No                   int
	Kind                 AttemptKind
	Hash                 common.Hash
	Raw                  []byte
	Nonce                uint64
	GasLimit             uint64
	MaxFeePerGas         *big.Int
	MaxPriorityFeePerGas *big.Int
	GasPrice             *big.Int
	CreatedAt            time.Time
	BroadcastAt          *time.Time // when a node first accepted it
	BroadcastCount       int
	Outcome              string // "mined", "replaced" (another attempt at the nonce was mined), or ""
}

// Latest is the newest attempt of attempts, or nil.
func Latest(attempts []Attempt) *Attempt {
	if len(attempts) == 0 {
		return nil
	}
	return &attempts[len(attempts)-1]
}

// BestAccepted is the newest attempt a node accepted (the one with the
// highest fees in the pool), or the newest attempt when none was accepted,
// or nil.
func BestAccepted(attempts []Attempt) *Attempt {
	for i := len(attempts) - 1; i >= 0; i-- {
		if attempts[i].BroadcastAt != nil {
			return &attempts[i]
		}
	}
	return Latest(attempts)
}

// Failure is a failed round of work on a transaction, recorded with its
// backoff.
type Failure struct {
	TxID     string
	SubState string // "" keeps the current one
	Detail   string // the error, for last_error
	// Outage says no endpoint of the chain answered (ErrChainUnreachable):
	// the backoff ends as soon as they answer again (OutageStore).
	Outage bool
}

// Failing is what recording a failure left: failures in a row and how long
// they have been going on (database time).
type Failing struct {
	Failures int
	For      time.Duration
}

// BackoffPolicy bounds the wait between failed rounds of work on a
// transaction: Min after the first failure, doubling, at most Max.
type BackoffPolicy struct {
	Min, Max time.Duration
}

// SubmitItem is an ALLOCATED transaction to submit and its latest attempt,
// if one was already persisted (a crash between persisting and broadcasting,
// or between broadcasting and marking it TRACKING).
type SubmitItem struct {
	Tx      *Tx
	Attempt *Attempt
}

// Broadcasted records a successful broadcast of an attempt.
type Broadcasted struct {
	TxID      string
	AttemptNo int
	Outcome   BroadcastReason // "" for a clean accept, or known / nonce_too_low
}

// AttemptStore writes attempts and what became of them. Every write is
// fenced by the signer's chain lease.
type AttemptStore interface {
	// SaveAttempts persists signed attempts in one transaction.
	SaveAttempts(ctx context.Context, l Lease, attempts []Attempt) error
	// MarkTracking moves broadcast transactions (ALLOCATED, STUCK, or
	// TRACKING after a replacement) to TRACKING, clears their backoff, stamps
	// their attempts as broadcast, and writes one `receipt` outbox row (and a
	// `submit` one when a STUCK transaction held ALLOCATED work back), in one
	// transaction. It returns the outbox ids written.
	MarkTracking(ctx context.Context, l Lease, done []Broadcasted) ([]int64, error)
	// MarkStuck moves a transaction to STUCK with subState (a broadcast
	// reason, or why progress stopped) as its sub-state
	// and detail as its last error. It returns the outbox ids written.
	MarkStuck(ctx context.Context, l Lease, txID string, subState string, detail string) ([]int64, error)
	// NoteFailure records a failed round of work on an open transaction
	// without changing its state: sub-state (unless empty) and last error,
	// one more failure in a row, and the next attempt no sooner than the
	// backoff.
	NoteFailure(ctx context.Context, l Lease, f Failure, b BackoffPolicy) (Failing, error)
	// SaveReplacement persists a replacement attempt (a fee bump, a cancel,
	// a placeholder, or a first signing after a failure) and its audit row in
	// tx_history, fenced, before the chain sees it.
	SaveReplacement(ctx context.Context, l Lease, a Attempt, audit Audit) error
	// NoteRebroadcast records that the transactions' attempts (given by tx
	// id and attempt number) were broadcast again.
	NoteRebroadcast(ctx context.Context, l Lease, sent []Broadcasted) error
}

// SubmitStore is the storage the Submit function needs.
// SubmitWork is what HasSubmitWork found.
type SubmitWork struct {
	Rows    bool // an ALLOCATED transaction to send
	Actions bool // a pending admin action
}

// Any reports whether there is anything to do.
func (w SubmitWork) Any() bool { return w.Rows || w.Actions }

type SubmitStore interface {
	AttemptStore
	ActionQueue
	// NextToSubmit returns up to limit ALLOCATED transactions of the signer
	// in nonce order, each with its persisted attempt, if any, and no more
	// than maxInFlight leaves room for; and how many of the signer's
	// transactions are in flight (broadcast but unmined, STUCK ones
	// included). It stops before the first one whose backoff has not run
	// out, and returns nothing beyond a STUCK transaction no node has
	// accepted yet (the later nonces could not be mined before it).
	NextToSubmit(ctx context.Context, chainID uint64, signer common.Address, maxInFlight, limit int) ([]SubmitItem, int, error)
	// HasSubmitWork reports what a drain of the signer would find to do:
	// an ALLOCATED transaction NextToSubmit would return, a pending admin
	// action. It only reads, and takes no lease.
	HasSubmitWork(ctx context.Context, chainID uint64, signer common.Address) (SubmitWork, error)
	// PromptSubmit writes a submit prompt for the signer to the outbox when
	// it has ALLOCATED transactions, and returns the rows to relay.
	PromptSubmit(ctx context.Context, key LeaseKey) ([]int64, error)
	// NumberCompletions numbers the events recorded pending (the drain's
	// broadcasts, and the TxAccepted events the create path leaves to it)
	// and returns the completion outbox rows it wrote.
	NumberCompletions(ctx context.Context) ([]int64, error)
}

// Audit says who or what acted on a transaction, for tx_history.
type Audit struct {
	Action string // bump, cancel, placeholder, resubmit, resign, ...
	Actor  string // an admin principal, "policy:static", "policy:webhook", "txfence"
	Reason string
	// ActionID, when set, is the admin action this carries out; it is
	// marked done in the same transaction.
	ActionID string
	// Refused, when set, is the node's refusal for good of the payload
	// this attempt (a placeholder) fills the nonce of: the transaction's
	// sub-state now, and its final one once the placeholder is mined.
	Refused BroadcastReason
}

// OutboxStore hands out unsent outbox rows for publishing.
type OutboxStore interface {
	// Relay publishes the given unsent rows (all unsent rows older than
	// olderThan when ids is empty, at most limit) through publish, at once
	// and in id order, and deletes each one publish accepted. Given ids
	// are the rows the caller just wrote, relayed within seconds of their
	// commit; rows another relay by age is publishing are skipped. It
	// returns how many were sent.
	Relay(ctx context.Context, ids []int64, olderThan time.Duration, limit int, publish func(context.Context, []Message) []error) (int, error)
	// PublishOutbox publishes the given unsent rows, which the caller just
	// wrote, like Relay, but leaves the published rows in place: it returns
	// their ids, for DeleteOutbox to delete later (rows of many relays in
	// one statement). Until then a published row is still unsent to the
	// sweep, which takes only rows older than an invocation's relay.
	PublishOutbox(ctx context.Context, ids []int64, publish func(context.Context, []Message) []error) ([]int64, error)
	// DeleteOutbox deletes the given rows (those already gone are skipped).
	DeleteOutbox(ctx context.Context, ids []int64) error
	// OutboxBacklog says what waits to be published.
	OutboxBacklog(ctx context.Context) (OutboxBacklog, error)
}

// OutboxBacklog is what waits in an outbox: rows written and not yet
// published, those of them whose publish failed at least once, and the age
// of the oldest (0 when none waits). Rows wait seconds at most while
// Pub/Sub takes what is published; an old backlog means publishing fails.
type OutboxBacklog struct {
	Rows, Failing int64
	OldestAge     time.Duration
}
