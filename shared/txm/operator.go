package txm

import (
	"context"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum/common"
)

// The read side of the operator console: every signer's nonce lanes on one
// page, and a transaction's attempts and history.

// SignerListFilter selects a page of signers. Signers are every (chain,
// signer) the database knows (a nonce cursor) plus every configured signer
// on every configured chain, ordered by chain then address.
type SignerListFilter struct {
	ChainID uint64 // 0: every chain
	// Prefix keeps addresses starting with it (lower-case hex, with 0x).
	Prefix string
	// Only, when not nil, keeps these signers alone (a caller's signers).
	Only []common.Address
	// Configured signers on Chains are listed even before their first
	// transaction.
	Configured []common.Address
	Chains     []uint64
	// After is the cursor: the last row of the previous page.
	After *SignerKey
	Limit int
}

// SignerKey names one signer on one chain.
type SignerKey struct {
	ChainID uint64
	Signer  common.Address
}

// LaneTx is one open transaction in a signer's lane.
type LaneTx struct {
	ID       string
	Nonce    uint64
	State    State
	SubState string
}

// SignerLanes is one signer's nonce lanes as the console draws them.
type SignerLanes struct {
	SignerKey
	NextNonce *uint64 // nil: never allocated
	// FinalBelow: every nonce below it is final (CONFIRMED or
	// FAILED_FINAL) or was never txfence's; the lowest open nonce, or the
	// next nonce when nothing is open.
	FinalBelow                        uint64
	Allocated, Tracking, Mined, Stuck int
	// Lane is the first open transactions in nonce order (at most
	// LaneLength); Lane[0] is the one the others wait on.
	Lane             []LaneTx
	OldestPendingAge *time.Duration
	// InFlightNeed is what the open transactions not yet mined may spend
	// (value + gas limit × fee cap of their newest attempt, or of the
	// request when unsigned); a fee suggested at signing counts 0.
	InFlightNeed   *big.Int
	ChainLease     *Lease
	ChainLeaseLive bool
	// LastError is the newest error recorded on an open transaction.
	LastError   string
	LastErrorAt *time.Time
}

// LaneLength is how many open transactions a lane shows.
const LaneLength = 24

// SignerPage is one page of signers and how many match the filter.
type SignerPage struct {
	Items []SignerLanes
	Total int
}

// HistoryEntry is one state change of a transaction: why, under which
// token, and who or what acted.
type HistoryEntry struct {
	From      State // "" for the first entry
	To        State
	SubState  string
	Reason    string
	Owner     string
	Token     int64
	Action    string
	Actor     string
	CreatedAt time.Time
}

// AttemptView is an attempt as the console shows it (no raw bytes).
type AttemptView struct {
	Attempt
	LastError string
	Token     int64
}

// OperatorQueries is the console's read side.
type OperatorQueries interface {
	ListSigners(ctx context.Context, f SignerListFilter) (SignerPage, error)
	TxAttempts(ctx context.Context, txID string) ([]AttemptView, error)
	TxHistory(ctx context.Context, txID string) ([]HistoryEntry, error)
}

// BalanceSource reads signers' balances, in one batched call.
type BalanceSource interface {
	Balances(ctx context.Context, addrs []common.Address) ([]*big.Int, error)
}

// ChainView is what the console reads of a chain: balances, and the head
// for confirmation counts.
type ChainView interface {
	BalanceSource
	Head(ctx context.Context) (Header, error)
}
