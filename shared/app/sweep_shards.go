package app

import (
	"context"
	"sync"
	"time"

	"github.com/txfence/txfence/shared/txm"
)

// ShardedFinality runs every shard's SweepFinality at once, for the same
// budget: a shard that is down fails alone while the others sweep.
type ShardedFinality struct {
	r  *ShardRouter
	by map[string]*SweepFinality
}

// NewShardedFinality returns the sweep over one SweepFinality per shard.
func NewShardedFinality(r *ShardRouter, by map[string]*SweepFinality) (*ShardedFinality, error) {
	if err := checkShards("finality sweep", r, by); err != nil {
		return nil, err
	}
	return &ShardedFinality{r: r, by: by}, nil
}

// Run sweeps every shard for budget and sums what they did; the error
// names each shard that failed.
func (s *ShardedFinality) Run(ctx context.Context, budget, interval time.Duration) (PassStats, error) {
	return everyShard(ctx, s.r, s.by, func(ctx context.Context, w *SweepFinality) (PassStats, error) {
		return w.Run(ctx, budget, interval)
	}, (*PassStats).add)
}

// ShardedResubmit runs every shard's SweepResubmit at once.
type ShardedResubmit struct {
	r  *ShardRouter
	by map[string]*SweepResubmit
}

// NewShardedResubmit returns the sweep over one SweepResubmit per shard.
func NewShardedResubmit(r *ShardRouter, by map[string]*SweepResubmit) (*ShardedResubmit, error) {
	if err := checkShards("resubmit sweep", r, by); err != nil {
		return nil, err
	}
	return &ShardedResubmit{r: r, by: by}, nil
}

// Run sweeps every shard for budget and sums what they did.
func (s *ShardedResubmit) Run(ctx context.Context, budget, interval time.Duration) (ResubmitStats, error) {
	return everyShard(ctx, s.r, s.by, func(ctx context.Context, w *SweepResubmit) (ResubmitStats, error) {
		return w.Run(ctx, budget, interval)
	}, (*ResubmitStats).add)
}

// ShardedRelay sweeps every shard's outbox (each shard's rows are
// published by a Relay over that shard's store).
type ShardedRelay struct {
	r  *ShardRouter
	by map[string]*Relay
}

// NewShardedRelay returns the outbox sweep over one Relay per shard.
func NewShardedRelay(r *ShardRouter, by map[string]*Relay) (*ShardedRelay, error) {
	if err := checkShards("relay", r, by); err != nil {
		return nil, err
	}
	return &ShardedRelay{r: r, by: by}, nil
}

// Sweep relays up to limit unsent rows older than olderThan of each shard
// and returns how many it sent in all.
func (s *ShardedRelay) Sweep(ctx context.Context, olderThan time.Duration, limit int) (int, error) {
	return everyShard(ctx, s.r, s.by, func(ctx context.Context, w *Relay) (int, error) {
		return w.Sweep(ctx, olderThan, limit)
	}, func(total *int, n int) { *total += n })
}

// Backlogs says what waits in each shard's outbox; a shard that does not
// answer is left out and named in the error.
func (s *ShardedRelay) Backlogs(ctx context.Context) (map[string]txm.OutboxBacklog, error) {
	var mu sync.Mutex
	out := map[string]txm.OutboxBacklog{}
	errs := s.r.each(ctx, s.r.names, func(ctx context.Context, name string) error {
		b, err := s.by[name].Backlogs(ctx)
		if err != nil {
			return err
		}
		mu.Lock()
		out[name] = b[""]
		mu.Unlock()
		return nil
	})
	return out, s.r.joinShardErrors(errs)
}

// everyShard runs run on every shard's worker at once and sums what they
// did with add; the error names each shard that failed.
func everyShard[W, T any](ctx context.Context, r *ShardRouter, by map[string]W, run func(context.Context, W) (T, error),
	add func(*T, T)) (T, error) {
	var mu sync.Mutex
	var total T
	errs := r.each(ctx, r.names, func(ctx context.Context, name string) error {
		st, err := run(ctx, by[name])
		mu.Lock()
		add(&total, st)
		mu.Unlock()
		return err
	})
	return total, r.joinShardErrors(errs)
}
