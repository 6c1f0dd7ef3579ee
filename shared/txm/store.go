package txm

import (
	"context"
	"time"

	"github.com/ethereum/go-ethereum/common"
)

// AllocationBatch is one allocation transaction: K create requests for one
// signer, allocated under the signer's nonce lease by Owner.
type AllocationBatch struct {
	ChainID uint64
	Signer  common.Address
	Owner   string
	// ChainPending is the chain's pending nonce when it was asked for this
	// batch (the cursor's sync was stale); nil when the cursor is trusted.
	ChainPending *uint64
	Requests     []*Request
	// TxIDs are the ids the new rows get, one per request, chosen before
	// the batch so that an unknown commit outcome can be looked up.
	TxIDs []string
	// Caps are the policies, by principal, whose rolling caps and windows
	// the batch's requests must pass (checked against the usage under the
	// nonce lease, and a principal's windows under a lock of their own).
	Caps map[string]Policy
}

// Allocator is the port for nonce allocation.
type Allocator interface {
	// CursorState reads the signer's cursor and how old its chain sync is.
	CursorState(ctx context.Context, chainID uint64, signer common.Address) (CursorState, error)
	// Allocate runs batches, one per signer, in one database transaction.
	// For each: nonce lease, idempotency re-check (existing request ids are
	// answered without a nonce), contiguous nonces from max(cursor,
	// ChainPending), rows, cursor, a `submit` outbox row, release. It returns
	// one Created per request of each batch, in order, and the ids of the
	// outbox rows it wrote; on error nothing was written.
	Allocate(ctx context.Context, batches []AllocationBatch) ([][]Created, []int64, error)
}

// TxFilter selects transactions to list. Zero fields do not filter.
type TxFilter struct {
	ChainID       uint64
	Signer        *common.Address
	Signers       []common.Address // not nil: only these signers (a caller's)
	Principal     string           // not "": only the transactions it created
	State         State
	CreatedAfter  time.Time
	CreatedBefore time.Time
	AfterID       string // cursor: the last id of the previous page
	Limit         int
}

// SignerStatus is what txfence knows of one signer.
type SignerStatus struct {
	ChainID          uint64
	Signer           common.Address
	NextNonce        *uint64 // nil: never allocated
	ChainSyncedAt    *time.Time
	Allocated        int // waiting to be broadcast
	InFlight         int // broadcast, not yet mined
	Mined            int // mined, not yet final
	Stuck            int
	OldestPendingAge *time.Duration // oldest non-final transaction
	ChainLease       *Lease         // the chain-scope lease row, if any
	ChainLeaseLive   bool
}

// TxQueries is the read side the API uses.
type TxQueries interface {
	GetTx(ctx context.Context, id string) (*Tx, error)
	FindByRequestID(ctx context.Context, chainID uint64, signer common.Address, requestID string) (*Tx, error)
	ListTxs(ctx context.Context, f TxFilter) ([]*Tx, error)
	SignerStatus(ctx context.Context, chainID uint64, signer common.Address) (SignerStatus, error)
}
