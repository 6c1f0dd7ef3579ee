package app

import (
	"context"
	"time"
)

// runPasses runs pass, then again every interval, for as long as another
// pass fits in budget and ctx lasts: a scheduled sweep keeps working for
// most of the scheduler's period. It stops at the first error; add folds
// each pass's stats into the total.
func runPasses[S any](ctx context.Context, budget, interval time.Duration, pass func(context.Context) (S, error), add func(S)) error {
	start := time.Now()
	for {
		st, err := pass(ctx)
		add(st)
		if err != nil {
			return err
		}
		if time.Since(start)+interval >= budget {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}
