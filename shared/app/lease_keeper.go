package app

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/txm"
)

// leaseKeeper renews a held chain lease every renewEvery while an
// invocation works, from a goroutine that lives exactly as long as the
// invocation (Stop ends it). Renewal keeps the token, so the holder's
// fenced writes keep using the lease it acquired; if renewal is fenced the
// keeper records that the lease is lost and stops.
type leaseKeeper struct {
	mu   sync.Mutex
	lost error
	stop chan struct{}
	done chan struct{}
}

func keepLease(ctx context.Context, leases txm.LeaseStore, l txm.Lease, every time.Duration, log *slog.Logger) *leaseKeeper {
	k := &leaseKeeper{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(k.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-k.stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if _, err := leases.Renew(ctx, l); err != nil {
				if errors.Is(err, txm.ErrFenced) {
					k.mu.Lock()
					k.lost = err
					k.mu.Unlock()
					return
				}
				log.WarnContext(ctx, "renew lease", slog.String(logging.KeyOwner, l.Owner), slog.Int64(logging.KeyToken, l.Token), slog.Any("error", err))
			}
		}
	}()
	return k
}

// Lost returns the error that lost the lease, or nil while it is held.
func (k *leaseKeeper) Lost() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lost
}

// Stop ends renewal and waits for the goroutine to exit.
func (k *leaseKeeper) Stop() {
	close(k.stop)
	<-k.done
}

// chainLeaseWait is how long an invocation waits for a signer's chain
// lease that another holds before giving up with ErrNoLease. Submit,
// Receipt and the sweeps share the lease and each holds it briefly (a
// drain that is told the lease is wanted yields it after drainHold), so a
// short wait usually gets it: failing
// at once sent the prompt back to Pub/Sub's growing backoff, and under load
// a hot signer's receipts and confirmations waited seconds for nothing.
const chainLeaseWait = time.Second

// claim says what a waiter for a signer's chain lease asks of its holder.
type claim int

const (
	// awaitIt: the waiter would do what the holder is doing (another drain
	// of the signer), so it waits without asking: marking the lease wanted
	// only made two instances' drains hand it back and forth.
	awaitIt claim = iota
	// wantIt: the waiter has work of its own (receipts, a resubmit sweep),
	// so it marks the lease wanted and a drain lets it go.
	wantIt
	// wantItFirst: wantIt for a confirmation, which should get the lease
	// before the other waiters: it marks the lease wanted first, so that a
	// drain lets it go after the batch it is on (not after drainHold) and
	// the wantIt waiters leave it to the confirmation; and it asks most
	// often (see longestPause), so that it does not queue behind the
	// drains and receipt writes of a hot signer.
	wantItFirst
)

// longestPause is how long a waiter waits at most between two asks. A
// confirmation (wantItFirst) asks every 25 ms, the others every 100 ms:
// the holder lets the lease go once its batch is done, and a hot signer's
// lease is busy most of the time, so the confirmation asks often enough to
// take it before a receipt write does, and the others ask less so as not
// to crowd it.
func (c claim) longestPause() time.Duration {
	if c == wantItFirst {
		return 25 * time.Millisecond
	}
	return 100 * time.Millisecond
}

// withChainLease runs fn under the signer's chain lease: acquired (waiting
// up to chainLeaseWait for a holder to release it, polling at a backoff
// from 5ms to longestPause, or ErrNoLease), renewed while fn runs, released after.
func withChainLease(ctx context.Context, leases txm.LeaseStore, key txm.LeaseKey, owner string, c claim, renewEvery time.Duration,
	log *slog.Logger, fn func(l txm.Lease, k *leaseKeeper) error) error {
	return withChainLeaseIf(ctx, leases, key, owner, c, nil, renewEvery, log, fn)
}

// withChainLeaseIf is withChainLease for a waiter whose work another
// invocation may do meanwhile: after each refusal it asks needed, and once
// that says no it stops waiting and returns nil without running fn. Two
// processes' receipt checks of a hot signer find the same receipts at the
// same block; the second would wait for the busy lease only to write
// nothing.
func withChainLeaseIf(ctx context.Context, leases txm.LeaseStore, key txm.LeaseKey, owner string, c claim,
	needed func(context.Context) (bool, error), renewEvery time.Duration, log *slog.Logger, fn func(l txm.Lease, k *leaseKeeper) error) error {
	l, err := acquireWaiting(ctx, leases, key, owner, c, chainLeaseWait, needed)
	if errors.Is(err, errNotNeeded) {
		return nil
	}
	if errors.Is(err, txm.ErrLeaseHeld) {
		return errors.Join(ErrNoLease, err)
	}
	if err != nil {
		return err
	}
	k := keepLease(ctx, leases, l, renewEvery, log)
	defer func() {
		k.Stop()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := leases.Release(rctx, l); err != nil && !errors.Is(err, txm.ErrFenced) {
			log.WarnContext(ctx, "release chain lease", slog.String(logging.KeyOwner, owner), slog.Any("error", err))
		}
	}()
	return fn(l, k)
}

// acquireWaiting acquires key's lease, asking again while another holds it
// until wait has passed (the last answer is returned) or ctx ends. A
// waiter with work of its own (wantIt, wantItFirst) marks the lease wanted
// (wantItFirst: first) after each refusal (a mark is cleared when someone
// takes the lease), so that a holder that would keep it (a hot signer's
// drain) lets it go, and so that a drain does not take it back before the
// waiter: one that awaitIt does not take a lease wanted within
// chainLeaseWait (the longest a waiter waits), nor one that wantIt a lease
// wanted first within it. Without that, a hot signer's drains, prompted by
// every allocation, took the lease again the moment it was released, and
// its confirmations and receipts waited for a lucky poll.
func acquireWaiting(ctx context.Context, leases txm.LeaseStore, key txm.LeaseKey, owner string, c claim, wait time.Duration,
	needed func(context.Context) (bool, error)) (txm.Lease, error) {
	deadline := time.Now().Add(wait)
	pause := 5 * time.Millisecond
	for {
		var l txm.Lease
		var err error
		switch c {
		case awaitIt:
			l, _, err = leases.AcquireYielding(ctx, key, owner, chainLeaseWait)
		case wantIt:
			l, _, err = leases.AcquireBehindFirst(ctx, key, owner, chainLeaseWait)
		default:
			l, _, err = leases.Acquire(ctx, key, owner)
		}
		if !errors.Is(err, txm.ErrLeaseHeld) || time.Now().Add(pause).After(deadline) {
			return l, err
		}
		if needed != nil {
			ok, nerr := needed(ctx)
			switch {
			case nerr != nil:
				return l, nerr
			case !ok:
				return l, errNotNeeded
			}
		}
		if c != awaitIt {
			if err := leases.Want(ctx, key, owner, c == wantItFirst); err != nil {
				return l, err
			}
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return l, err
		case <-t.C:
		}
		pause = min(2*pause, c.longestPause())
	}
}
