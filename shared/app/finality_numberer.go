package app

import (
	"context"
	"fmt"
)

// number numbers the outcomes recorded pending (by this run's sweeps, or
// by writers that crashed after their commit) and relays their messages,
// once for each kick: a kick that comes while it numbers is one more
// round, so no write's outcomes wait for another write. It runs beside
// the signers' sweeps, after their leases were let go and in no worker
// slot, because numbering queues for the feed's lock behind the other
// signers' writes, and inside a sweep's holding that wait kept the signer's
// drain, its next confirmations and the other signers' sweeps waiting.
func (s *SweepFinality) number(ctx context.Context, sw *sweeps) {
	defer close(sw.numbered)
	for range sw.kicks {
		outbox, err := s.store.NumberCompletions(ctx)
		s.relay.Publish(ctx, outbox)
		// One cut short by the run's end is the next run's to finish.
		if err != nil && ctx.Err() == nil {
			sw.mu.Lock()
			sw.failed++
			sw.last = fmt.Errorf("number outcomes: %w", err)
			sw.mu.Unlock()
		}
	}
}

// kick asks the numberer to number (see number).
func (w *sweeps) kick() {
	select {
	case w.kicks <- struct{}{}:
	default: // one is waiting: it numbers these too
	}
}
