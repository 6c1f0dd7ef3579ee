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
	BroadcastAt          *time.Time
	BroadcastCount       int
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

// SubmitStore is the storage the Submit function needs. Every write is
// fenced by the signer's chain lease.
type SubmitStore interface {
	// NextToSubmit returns up to limit ALLOCATED transactions of the signer
	// in nonce order, each with its persisted attempt, if any.
	NextToSubmit(ctx context.Context, chainID uint64, signer common.Address, limit int) ([]SubmitItem, error)
	// InFlight counts the signer's broadcast-but-unmined transactions.
	InFlight(ctx context.Context, chainID uint64, signer common.Address) (int, error)
	// SaveAttempts persists signed attempts in one transaction.
	SaveAttempts(ctx context.Context, l Lease, attempts []Attempt) error
	// MarkTracking moves broadcast transactions to TRACKING, stamps their
	// attempts as broadcast, and writes one `receipt` outbox row, in one
	// transaction. It returns the outbox ids written.
	MarkTracking(ctx context.Context, l Lease, done []Broadcasted) ([]int64, error)
	// MarkStuck moves a transaction to STUCK with subState (a broadcast
	// reason, or why progress stopped) as its sub-state
	// and detail as its last error. It returns the outbox ids written.
	MarkStuck(ctx context.Context, l Lease, txID string, subState string, detail string) ([]int64, error)
	// NoteBroadcastError records a retryable broadcast failure on the
	// transaction (sub-state and last error) without changing its state.
	NoteBroadcastError(ctx context.Context, l Lease, txID string, reason BroadcastReason, detail string) error
}

// OutboxStore hands out unsent outbox rows for publishing.
type OutboxStore interface {
	// Relay publishes the given unsent rows (all unsent rows older than
	// olderThan when ids is empty, at most limit) through publish, marking
	// each sent once publish returns nil. Rows another relay is publishing
	// are skipped. It returns how many were sent.
	Relay(ctx context.Context, ids []int64, olderThan time.Duration, limit int, publish func(context.Context, Message) error) (int, error)
}
