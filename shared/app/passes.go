package app

import (
	"context"
	"fmt"
	"time"
)

// runPasses runs pass, then again once pause returns (every interval, or
// sooner, as pause decides), for as long as another interval fits in budget
// and ctx lasts: a scheduled sweep keeps working for most of the
// scheduler's period. add folds each pass's stats into the
// total. A failed pass does not end the sweep: a pass that failed for one
// signer or one chain has still swept the others, and the next pass may
// succeed, so one signer's fault never stops finality for the rest until the
// next invocation. The last failure is returned, with how many passes
// failed.
func runPasses[S any](ctx context.Context, budget, interval time.Duration, pass func(context.Context) (S, error), add func(S),
	pause func(context.Context)) error {
	start := time.Now()
	var last error
	passes, failed := 0, 0
	for {
		st, err := pass(ctx)
		add(st)
		passes++
		if err != nil {
			last = err
			failed++
		}
		if time.Since(start)+interval >= budget || ctx.Err() != nil {
			break
		}
		pause(ctx)
		if ctx.Err() != nil {
			break
		}
	}
	if last != nil {
		return fmt.Errorf("%d of %d passes failed, the last: %w", failed, passes, last)
	}
	return nil
}

// sleep is a pause of d (or until ctx ends).
func sleep(d time.Duration) func(context.Context) {
	return func(ctx context.Context) {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
}
