package app

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/metrics"
	"github.com/txfence/txfence/shared/pgtest"
	"github.com/txfence/txfence/shared/postgres"
	"github.com/txfence/txfence/shared/testsupport"
	"github.com/txfence/txfence/shared/txm"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// newLeases is a lease store over a fresh database.
func newLeases(t *testing.T) *postgres.Leases {
	t.Helper()
	db := pgtest.New(t)
	leases, err := postgres.NewLeases(db.Pool, config.Lease{Duration: 10 * time.Second, RenewEvery: 3 * time.Second, ClockSkew: time.Second},
		metrics.New(), logging.Discard())
	require.NoError(t, err)
	return leases
}

// A chain lease another invocation holds is waited for, up to
// chainLeaseWait, rather than refused at once (which sent the prompt to
// Pub/Sub's growing backoff); one held past the wait is still refused with
// ErrNoLease, and nothing runs under it.
func TestWithChainLease_WaitsForARelease(t *testing.T) {
	t.Parallel()
	leases := newLeases(t)
	ctx := context.Background()
	key := txm.LeaseKey{ChainID: 1337, Signer: common.HexToAddress("0x5"), Scope: txm.ScopeChain}

	held, _, err := leases.Acquire(ctx, key, "drain")
	require.NoError(t, err)
	// The holder lets go once the waiter is waiting (it marks the lease
	// wanted), so that the waiter must notice a release while it waits.
	go func() {
		testsupport.Within(chainLeaseWait, func() bool {
			w, err := leases.Wanted(context.Background(), held)
			return err == nil && w.Any
		})
		_ = leases.Release(context.Background(), held)
	}()
	ran := false
	start := time.Now()
	require.NoError(t, withChainLease(ctx, leases, key, "receipt", wantIt, time.Second, logging.Discard(), func(l txm.Lease, _ *leaseKeeper) error {
		ran = true
		require.Greater(t, l.Token, held.Token, "a new token after the holder let go")
		return nil
	}))
	require.True(t, ran)
	require.Less(t, time.Since(start), chainLeaseWait, "it got the lease once released, not at the end of the wait")

	_, _, err = leases.Acquire(ctx, key, "drain")
	require.NoError(t, err)
	err = withChainLease(ctx, leases, key, "receipt", wantIt, time.Second, logging.Discard(), func(txm.Lease, *leaseKeeper) error {
		t.Error("ran under a lease another holds")
		return nil
	})
	require.True(t, errors.Is(err, ErrNoLease), "held past the wait: %v", err)
}

// A waiter that would do what the holder does (another drain of the
// signer) waits without marking the lease wanted, so the holder's drain
// keeps it; a waiter with work of its own marks it.
func TestWithChainLease_OnlyOtherWorkWantsTheLease(t *testing.T) {
	t.Parallel()
	leases := newLeases(t)
	ctx := context.Background()
	key := txm.LeaseKey{ChainID: 1337, Signer: common.HexToAddress("0x6"), Scope: txm.ScopeChain}
	held, _, err := leases.Acquire(ctx, key, "drain")
	require.NoError(t, err)

	for _, c := range []struct {
		claim  claim
		wanted bool
	}{{awaitIt, false}, {wantIt, true}, {wantItFirst, true}} {
		err = withChainLease(ctx, leases, key, "waiter", c.claim, time.Second, logging.Discard(), func(txm.Lease, *leaseKeeper) error {
			t.Error("ran under a lease another holds")
			return nil
		})
		require.ErrorIs(t, err, ErrNoLease)
		wanted, err := leases.Wanted(ctx, held)
		require.NoError(t, err)
		require.Equal(t, c.wanted, wanted.Any, "claim %v", c.claim)
	}
}

// A hot signer's drains take the lease one after another (every allocation
// prompts one): one that lets it go asks for it again at once. A waiter
// with work of its own (receipts, confirmations) still gets it as soon as
// the holder lets it go, because drains leave a wanted lease to the waiter.
// When drains took it back the moment it was released, such a waiter lost
// the race to every drain and gave up after chainLeaseWait.
func TestWithChainLease_DrainsLeaveAWantedLeaseToItsWaiter(t *testing.T) {
	t.Parallel()
	leases := newLeases(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	key := txm.LeaseKey{ChainID: 1337, Signer: common.HexToAddress("0x7"), Scope: txm.ScopeChain}

	var drains sync.WaitGroup
	var drained atomic.Int64
	for i := range 3 {
		drains.Go(func() {
			for ctx.Err() == nil {
				_ = withChainLease(ctx, leases, key, fmt.Sprintf("drain-%d", i), awaitIt, time.Second, logging.Discard(),
					func(txm.Lease, *leaseKeeper) error {
						drained.Add(1)
						// sleep: a drain's work holds the lease this long, so that the others queue behind it
						time.Sleep(30 * time.Millisecond)
						return nil
					})
			}
		})
	}
	testsupport.Eventually(t, 10*time.Second, "the drains to be taking the lease one after another", func() bool { return drained.Load() >= 3 })
	for i := range 5 {
		ran := false
		err := withChainLease(context.Background(), leases, key, fmt.Sprintf("finality-%d", i), wantIt, time.Second, logging.Discard(),
			func(txm.Lease, *leaseKeeper) error {
				ran = true
				return nil
			})
		require.NoError(t, err, "waiter %d", i)
		require.True(t, ran)
	}
	cancel()
	drains.Wait()
}

// countingLeases counts the asks for a lease (Acquire, AcquireYielding) by
// owner.
type countingLeases struct {
	txm.LeaseStore
	mu   sync.Mutex
	asks map[string]int
}

func (c *countingLeases) ask(owner string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.asks[owner]++
}

func (c *countingLeases) Acquire(ctx context.Context, key txm.LeaseKey, owner string) (txm.Lease, txm.AcquireResult, error) {
	c.ask(owner)
	return c.LeaseStore.Acquire(ctx, key, owner)
}

func (c *countingLeases) AcquireYielding(ctx context.Context, key txm.LeaseKey, owner string, within time.Duration) (txm.Lease, txm.AcquireResult, error) {
	c.ask(owner)
	return c.LeaseStore.AcquireYielding(ctx, key, owner, within)
}

func (c *countingLeases) AcquireBehindFirst(ctx context.Context, key txm.LeaseKey, owner string, within time.Duration) (txm.Lease, txm.AcquireResult, error) {
	c.ask(owner)
	return c.LeaseStore.AcquireBehindFirst(ctx, key, owner, within)
}

// A confirmation asks for a held lease more often than the other waiters
// (a receipt write, a drain waiting for another drain), so that it usually
// gets the lease first once the holder lets it go: a hot signer's lease is
// busy most of the time, and its finality lag was a confirmation's wait in
// that queue. The three wait at once for a lease held most of
// chainLeaseWait; the counts are taken before it is let go.
func TestWithChainLease_AConfirmationAsksMostOften(t *testing.T) {
	t.Parallel()
	real := newLeases(t)
	leases := &countingLeases{LeaseStore: real, asks: map[string]int{}}
	ctx := context.Background()
	key := txm.LeaseKey{ChainID: 1337, Signer: common.HexToAddress("0x8"), Scope: txm.ScopeChain}
	held, _, err := real.Acquire(ctx, key, "drain")
	require.NoError(t, err)

	var waiters sync.WaitGroup
	for _, w := range []struct {
		owner string
		claim claim
	}{{"finality", wantItFirst}, {"receipt", wantIt}, {"drain-2", awaitIt}} {
		waiters.Go(func() {
			_ = withChainLease(ctx, leases, key, w.owner, w.claim, time.Second, logging.Discard(), func(txm.Lease, *leaseKeeper) error { return nil })
		})
	}
	// sleep: the asks are counted over most of chainLeaseWait while the lease is held; the rate is what is under test
	time.Sleep(chainLeaseWait * 9 / 10)
	leases.mu.Lock()
	first, receipt, await := leases.asks["finality"], leases.asks["receipt"], leases.asks["drain-2"]
	leases.mu.Unlock()
	require.NoError(t, real.Release(ctx, held))
	waiters.Wait()
	t.Logf("asks while held: %d by the confirmation, %d by the receipt write, %d by another drain", first, receipt, await)
	require.Greater(t, float64(first), 1.5*float64(receipt), "the confirmation asks more often than the receipt write")
	require.Greater(t, float64(first), 1.5*float64(await), "and than a drain")
}

// A confirmation waiting for a held lease marks it wanted first, and a
// receipt write that asks for it the moment the holder lets it go leaves it
// to the confirmation: the receipt write had it first whenever its ask came
// between the release and the confirmation's next one (a hot signer's
// confirmation then waited behind the drain and the receipt write both).
func TestWithChainLease_AConfirmationGoesBeforeAReceiptWrite(t *testing.T) {
	t.Parallel()
	leases := newLeases(t)
	ctx := context.Background()
	key := txm.LeaseKey{ChainID: 1337, Signer: common.HexToAddress("0x9"), Scope: txm.ScopeChain}
	held, _, err := leases.Acquire(ctx, key, "drain")
	require.NoError(t, err)

	var mu sync.Mutex
	var order []string
	ran := func(who string) func(txm.Lease, *leaseKeeper) error {
		return func(txm.Lease, *leaseKeeper) error {
			mu.Lock()
			order = append(order, who)
			mu.Unlock()
			// sleep: the work holds the lease a while, as a confirmation's does
			time.Sleep(20 * time.Millisecond)
			return nil
		}
	}
	confirmed := make(chan error, 1)
	go func() {
		confirmed <- withChainLease(ctx, leases, key, "finality", wantItFirst, time.Second, logging.Discard(), ran("finality"))
	}()
	require.Eventually(t, func() bool {
		w, err := leases.Wanted(ctx, held)
		return err == nil && w.First
	}, time.Second, time.Millisecond, "the confirmation marks the lease wanted first")

	require.NoError(t, leases.Release(ctx, held))
	require.NoError(t, withChainLease(ctx, leases, key, "receipt", wantIt, time.Second, logging.Discard(), ran("receipt")))
	require.NoError(t, <-confirmed)
	require.Equal(t, []string{"finality", "receipt"}, order)
}
