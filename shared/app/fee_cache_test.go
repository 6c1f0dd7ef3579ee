package app

import (
	"context"
	"errors"
	"math/big"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/testsupport"
	"github.com/txfence/txfence/shared/txm"
)

// oracle is a node's fee suggestion: each ask answers the current tip
// (after gate, when set) or fails while failing is set.
type oracle struct {
	asks    atomic.Int64
	tip     atomic.Int64
	failing atomic.Bool
	gate    chan struct{}
}

func (o *oracle) SuggestFees(ctx context.Context) (txm.Fees, error) {
	o.asks.Add(1)
	if o.gate != nil {
		select {
		case <-o.gate:
		case <-ctx.Done():
			return txm.Fees{}, ctx.Err()
		}
	}
	if o.failing.Load() {
		return txm.Fees{}, errors.New("node down")
	}
	tip := big.NewInt(o.tip.Load())
	return txm.Fees{MaxPriorityFeePerGas: tip, MaxFeePerGas: new(big.Int).Add(tip, big.NewInt(100))}, nil
}

// waitingCtx counts the callers that have come to wait on it: a drain
// waiting for another's ask, or the ask itself held at the oracle's gate.
type waitingCtx struct {
	context.Context
	n *atomic.Int64
}

func (c waitingCtx) Done() <-chan struct{} {
	c.n.Add(1)
	return c.Context.Done()
}

// Drains that need fees at once ask the node once between them and all
// sign with its answer.
func TestFeeCache_ConcurrentDrainsAskOnce(t *testing.T) {
	t.Parallel()
	o := &oracle{gate: make(chan struct{})}
	o.tip.Store(7)
	c := newFeeCache(time.Minute)
	const drains = 40
	var wg sync.WaitGroup
	got := make([]txm.Fees, drains)
	errs := make([]error, drains)
	var waiting atomic.Int64
	ctx := waitingCtx{Context: context.Background(), n: &waiting}
	for i := range drains {
		wg.Go(func() { got[i], errs[i] = c.suggest(ctx, 1, o) })
	}
	require.Eventually(t, func() bool { return o.asks.Load() == 1 }, 5*time.Second, time.Millisecond)
	testsupport.Eventually(t, 5*time.Second, "the others to reach the cache and wait for the one ask", func() bool {
		return waiting.Load() == drains
	})
	close(o.gate)
	wg.Wait()
	require.EqualValues(t, 1, o.asks.Load(), "one ask for all the drains")
	for i := range drains {
		require.NoError(t, errs[i])
		require.EqualValues(t, 7, got[i].MaxPriorityFeePerGas.Int64())
	}
	// Another chain has its own suggestion.
	_, err := c.suggest(context.Background(), 2, o)
	require.NoError(t, err)
	require.EqualValues(t, 2, o.asks.Load())
}

// A suggestion is reused only while it is younger than the reuse time; a
// caller that changes what it got does not change what the next one gets.
func TestFeeCache_AsksAgainWhenOld(t *testing.T) {
	t.Parallel()
	o := &oracle{}
	o.tip.Store(1)
	c := newFeeCache(500 * time.Millisecond)
	now := time.Unix(1000, 0)
	c.now = func() time.Time { return now }

	f, err := c.suggest(context.Background(), 1, o)
	require.NoError(t, err)
	f.MaxPriorityFeePerGas.SetInt64(99)
	o.tip.Store(2)
	now = now.Add(499 * time.Millisecond)
	f, err = c.suggest(context.Background(), 1, o)
	require.NoError(t, err)
	require.EqualValues(t, 1, f.MaxPriorityFeePerGas.Int64(), "reused, unchanged by the first caller")
	require.EqualValues(t, 1, o.asks.Load())

	now = now.Add(time.Millisecond)
	f, err = c.suggest(context.Background(), 1, o)
	require.NoError(t, err)
	require.EqualValues(t, 2, f.MaxPriorityFeePerGas.Int64(), "asked afresh once old")
	require.EqualValues(t, 2, o.asks.Load())
}

// A failed ask is the asker's error and is not kept: the next caller asks
// the node itself. A caller whose context ends while it waits for another's
// ask stops waiting.
func TestFeeCache_FailedAskNotKept(t *testing.T) {
	t.Parallel()
	o := &oracle{}
	o.tip.Store(3)
	o.failing.Store(true)
	c := newFeeCache(time.Minute)
	_, err := c.suggest(context.Background(), 1, o)
	require.ErrorContains(t, err, "node down")
	o.failing.Store(false)
	f, err := c.suggest(context.Background(), 1, o)
	require.NoError(t, err)
	require.EqualValues(t, 3, f.MaxPriorityFeePerGas.Int64())
	require.EqualValues(t, 2, o.asks.Load())

	slow := &oracle{gate: make(chan struct{})}
	c = newFeeCache(time.Minute)
	done := make(chan error, 1)
	go func() {
		_, err := c.suggest(context.Background(), 1, slow)
		done <- err
	}()
	require.Eventually(t, func() bool { return slow.asks.Load() == 1 }, 5*time.Second, time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err = c.suggest(ctx, 1, slow)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	close(slow.gate)
	require.NoError(t, <-done)
	require.EqualValues(t, 1, slow.asks.Load(), "the waiter did not ask itself")
}
