package app

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/txfence/txfence/shared/txm"
)

// ShardCompletion is a completion and the shard it was written in; (Shard,
// Seq) identifies it.
type ShardCompletion struct {
	Shard string
	txm.Completion
}

// MergedCompletions serves the completions feeds of every shard as one (of
// the one database: its feed as it is). A page holds, for each shard, items
// after the cursor's seq of that shard in seq order; between shards they
// are merged by the time they were written (ties: configuration order). The
// next cursor advances each shard to the last of its items on the page, so
// every outcome is delivered exactly once whatever the merge order. A shard
// that cannot be read is left where the cursor had it and named in the
// answer; the others are served.
//
// A cursor's text is SHARD:SEQ pairs separated by commas ("a:12,b:40"), a
// shard not named being at its start. A bare SEQ is the home shard's (the
// first): the one database's cursor is a plain number, as it always was,
// and a consumer's numeric cursor keeps its place when a deployment moves
// from one database to shards, the database becoming the home shard.
type MergedCompletions struct {
	r  *ShardRouter
	by map[string]*FollowCompletions
}

// NewMergedCompletions returns the feed over one FollowCompletions per
// shard (each with its own listener on its own database).
func NewMergedCompletions(r *ShardRouter, by map[string]*FollowCompletions) (*MergedCompletions, error) {
	if err := checkShards("completions", r, by); err != nil {
		return nil, err
	}
	return &MergedCompletions{r: r, by: by}, nil
}

// Latest is the cursor at every shard's newest seq: where a caller that
// wants only what happens from now on starts (after=latest). Every shard
// must answer: one left at its start would replay its whole past.
func (m *MergedCompletions) Latest(ctx context.Context) (FeedCursor, error) {
	var mu sync.Mutex
	c := FeedCursor{}
	errs := m.r.each(ctx, m.r.names, func(ctx context.Context, name string) error {
		n, err := m.by[name].Latest(ctx)
		if err == nil {
			mu.Lock()
			c[name] = n
			mu.Unlock()
		}
		return err
	})
	if len(errs) > 0 {
		return nil, m.r.joinShardErrors(errs)
	}
	return c, nil
}

// Page returns up to limit completions after the cursor, of the policy's
// signers (the outcomes only, or with lifecycle every event), waiting up to wait for the first one from any shard; next is
// the cursor of the following page and unavailable the shards that could
// not be read (their part of the cursor did not move). Only when no shard
// could be read is it an error. Each shard counts the caller's waits
// against its cap, as with one database.
func (m *MergedCompletions) Page(ctx context.Context, who txm.Principal, pol txm.Policy, after FeedCursor, limit int,
	wait time.Duration, lifecycle bool) (items []ShardCompletion, next FeedCursor, unavailable []string, err error) {
	type result struct {
		items []txm.Completion
		err   error
	}
	// The first shard with items ends every other's wait (a page without
	// wait reads every shard once).
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	results := map[string]result{}
	read := func(name string) {
		err := m.r.Ready(wctx, name)
		var got []txm.Completion
		if err == nil {
			got, err = m.by[name].Page(wctx, who, pol, after[name], limit, wait, lifecycle)
		}
		if errors.Is(err, context.Canceled) && wctx.Err() != nil && ctx.Err() == nil {
			err = nil // its wait was cut short because another shard answered
		}
		mu.Lock()
		results[name] = result{items: got, err: err}
		mu.Unlock()
		if len(got) > 0 && wait > 0 {
			cancel()
		}
	}
	if len(m.r.names) == 1 {
		read(m.r.names[0])
	} else {
		var wg sync.WaitGroup
		for _, name := range m.r.names {
			wg.Add(1)
			go func() {
				defer wg.Done()
				read(name)
			}()
		}
		wg.Wait()
	}

	next = FeedCursor{}
	for n, seq := range after {
		next[n] = seq
	}
	var firstErr error
	for _, name := range m.r.names {
		err := results[name].err
		if err == nil {
			continue
		}
		var limited *txm.RateLimitError
		if errors.As(err, &limited) {
			return nil, nil, nil, err
		}
		unavailable = append(unavailable, name)
		if firstErr == nil {
			firstErr = shardError(name, err)
		}
	}
	if len(unavailable) == len(m.r.names) {
		return nil, nil, nil, firstErr
	}
	heads := make([]int, len(m.r.names))
	for len(items) < limit {
		best := -1
		for i, name := range m.r.names {
			list := results[name].items
			if heads[i] >= len(list) {
				continue
			}
			if best < 0 || list[heads[i]].CreatedAt.Before(results[m.r.names[best]].items[heads[best]].CreatedAt) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		name := m.r.names[best]
		c := results[name].items[heads[best]]
		heads[best]++
		items = append(items, ShardCompletion{Shard: name, Completion: c})
		next[name] = c.Seq
	}
	return items, next, unavailable, nil
}
