package app

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A failed pass does not end the sweep: the passes after it still run (one
// signer's fault once stopped finality for every signer until the next
// invocation), and the failure is still reported.
func TestRunPasses_GoesOnAfterAFailedPass(t *testing.T) {
	t.Parallel()
	calls, total := 0, 0
	err := runPasses(context.Background(), 100*time.Millisecond, 5*time.Millisecond, func(context.Context) (int, error) {
		calls++
		if calls == 1 {
			return 1, errors.New("signer 0xabc: batch too large")
		}
		return 1, nil
	}, func(n int) { total += n }, sleep(5*time.Millisecond))
	require.Greater(t, calls, 1, "passes after the failed one ran")
	require.Equal(t, calls, total)
	require.ErrorContains(t, err, "1 of")
	require.ErrorContains(t, err, "batch too large")

	calls = 0
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, runPasses(ctx, time.Minute, time.Millisecond, func(context.Context) (int, error) { calls++; return 0, nil }, func(int) {}, sleep(time.Millisecond)))
	require.Equal(t, 1, calls, "an ended context stops after the pass in hand")
}

// A finality sweep asks for the head every fifth of its interval, but not
// more often than every 10 ms nor less often than every second.
func TestHeadPoll_AFifthOfTheIntervalWithinBounds(t *testing.T) {
	t.Parallel()
	for interval, want := range map[time.Duration]time.Duration{
		500 * time.Millisecond: 100 * time.Millisecond,
		2 * time.Second:        400 * time.Millisecond,
		20 * time.Millisecond:  10 * time.Millisecond,
		time.Hour:              time.Second,
	} {
		require.Equal(t, want, headPoll(interval), "interval %s", interval)
	}
}
