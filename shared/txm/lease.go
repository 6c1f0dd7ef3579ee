package txm

import (
	"context"
	"fmt"
	"time"

	"github.com/ethereum/go-ethereum/common"
)

// Scope separates the two leases a signer has, so that nonce allocation never
// waits on chain I/O.
type Scope string

const (
	// ScopeNonce is taken, used and released inside the one database
	// transaction that allocates a batch of nonces.
	ScopeNonce Scope = "nonce"
	// ScopeChain is taken by an invocation before any chain side effect for the
	// signer (submit, rebroadcast, receipt and finality write-backs), renewed
	// while it works and released when it is done.
	ScopeChain Scope = "chain"
)

// Valid reports whether s is one of the declared scopes.
func (s Scope) Valid() bool { return s == ScopeNonce || s == ScopeChain }

// LeaseKey names one lease: a signer on a chain, in one scope.
type LeaseKey struct {
	ChainID uint64
	Signer  common.Address
	Scope   Scope
}

func (k LeaseKey) String() string {
	return fmt.Sprintf("%d/%s/%s", k.ChainID, CanonicalAddress(k.Signer), k.Scope)
}

// Lease is a held lease. Token is the fencing token every write made under
// the lease must carry; ExpiresAt is database time and is informational only:
// whether a lease is still valid is decided by the database, never by the
// caller's clock.
type Lease struct {
	Key       LeaseKey
	Owner     string
	Token     int64
	ExpiresAt time.Time
}

// AcquireResult says how a lease was obtained.
type AcquireResult string

const (
	// AcquireNew means no lease row existed; the token is 1.
	AcquireNew AcquireResult = "acquired"
	// AcquireRenewed means the caller already held the lease; token unchanged.
	AcquireRenewed AcquireResult = "renewed"
	// AcquireTakenOver means the previous holder's lease had expired (by more
	// than the clock-skew allowance) or was released; token + 1.
	AcquireTakenOver AcquireResult = "taken_over"
)

// LeaseStore is the port for per-signer leases. Every judgement of expiry is
// made with the database clock.
type LeaseStore interface {
	// Acquire takes or renews the lease for owner. It returns ErrLeaseHeld when
	// another owner holds an unexpired lease.
	Acquire(ctx context.Context, key LeaseKey, owner string) (Lease, AcquireResult, error)
	// AcquireYielding is Acquire for an owner that yields to waiters with
	// work of their own: it does not take a lease that another marked
	// wanted (Want) less than wantLife ago, and returns ErrLeaseHeld until
	// that waiter took it or gave up. It renews its own lease as Acquire
	// does.
	AcquireYielding(ctx context.Context, key LeaseKey, owner string, wantLife time.Duration) (Lease, AcquireResult, error)
	// AcquireBehindFirst is Acquire for an owner with work of its own that
	// goes after a waiter that wants the lease first (Want with first): it
	// does not take a lease so marked by another less than wantLife ago.
	AcquireBehindFirst(ctx context.Context, key LeaseKey, owner string, wantLife time.Duration) (Lease, AcquireResult, error)
	// Renew extends a held lease without changing its token. It returns
	// ErrFenced when the lease is no longer the caller's or has expired.
	Renew(ctx context.Context, l Lease) (Lease, error)
	// Release gives the lease up so that another owner can take it over at
	// once. It returns ErrFenced when the caller is not the holder.
	Release(ctx context.Context, l Lease) error
	// Check returns nil when l is still current by database time, ErrFenced
	// otherwise. Callers check before a side effect outside the database.
	Check(ctx context.Context, l Lease) error
	// Want marks key's lease, while another owner than owner holds it, as
	// wanted by someone who waits for it; with first, by one whose work
	// goes before the other waiters' (a confirmation).
	Want(ctx context.Context, key LeaseKey, owner string, first bool) error
	// Wanted reports how l's lease was marked wanted since it was taken. A
	// lease that is no longer l's reports no mark.
	Wanted(ctx context.Context, l Lease) (Wanting, error)
}

// Wanting is how a held lease was marked wanted (LeaseStore.Want): by any
// waiter, and by one that wants it first.
type Wanting struct{ Any, First bool }
