package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/txfence/txfence/shared/txm"
)

// ResumeAfterOutage ends, as soon as a chain's endpoints answer again, the
// backoffs of the transactions whose last round failed because none of
// them answered (txm.ErrChainUnreachable), and prompts their signers: a
// node restarted after 20 seconds otherwise left signed rows waiting for
// their own backoff, and their signer's later rows behind them. Whether
// the endpoints answer is asked only for chains that have such rows (one
// head read), so it costs one small indexed read when there are none.
// Every resubmit pass runs it; the database says which rows wait, so it
// resumes work that any instance backed off.
type ResumeAfterOutage struct {
	store  txm.OutageStore
	chains map[uint64]txm.Chain
	relay  *Relay
	log    *slog.Logger
}

// NewResumeAfterOutage returns the use case. relay may be nil.
func NewResumeAfterOutage(store txm.OutageStore, chains map[uint64]txm.Chain, relay *Relay, log *slog.Logger) (*ResumeAfterOutage, error) {
	if store == nil || log == nil {
		return nil, errors.New("new resume after outage: store and logger are required")
	}
	return &ResumeAfterOutage{store: store, chains: chains, relay: relay, log: log}, nil
}

// Execute resumes the work of every chain served here whose endpoints
// answer again, and returns how many transactions it resumed. A chain
// still out keeps its rows backing off; its failure is not an error.
func (r *ResumeAfterOutage) Execute(ctx context.Context) (int, error) {
	held, err := r.store.OutageHeld(ctx)
	if err != nil || len(held) == 0 {
		return 0, err
	}
	total := 0
	var errs []error
	for _, id := range held {
		chain, ok := r.chains[id]
		if !ok {
			continue // not served by this deployment
		}
		if _, err := chain.Head(ctx); err != nil {
			continue // still out: the backoffs run on
		}
		n, ids, err := r.store.ResumeAfterOutage(ctx, id)
		if err != nil {
			errs = append(errs, fmt.Errorf("chain %d: %w", id, err))
			continue
		}
		total += n
		r.relay.Publish(ctx, ids)
		if n > 0 {
			r.log.InfoContext(ctx, "the chain's endpoints answer again: work that backed off during the outage resumes",
				slog.Uint64("chain_id", id), slog.Int("resumed", n), slog.Int("signers_prompted", len(ids)))
		}
	}
	return total, errors.Join(errs...)
}
