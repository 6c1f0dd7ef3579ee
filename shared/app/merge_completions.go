package app

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/txfence/txfence/shared/txm"
)

// FeedCursor is a position in the completions feed of a sharded
// deployment: the last seq delivered from each shard (absent: none yet).
// Each shard numbers its completions itself, so one number cannot say
// where a reader is.
type FeedCursor map[string]int64

// ShardCompletion is a completion and the shard it was written in; (Shard,
// Seq) identifies it.
type ShardCompletion struct {
	Shard string
	txm.Completion
}

// MergedCompletions serves the completions feeds of every shard as one.
// A page holds, for each shard, items after the cursor's seq of that shard
// in seq order; between shards they are merged by the time they were
// written (ties: configuration order). The next cursor advances each shard
// to the last of its items on the page, so every outcome is delivered
// exactly once whatever the merge order. A shard that cannot be read is
// left where the cursor had it and named in the answer; the others are
// served.
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

// ParseCursor reads a cursor: "" or "0" is the start of every shard,
// otherwise SHARD:SEQ pairs separated by commas ("a:12,b:40"); a shard
// not named is at its start.
func (m *MergedCompletions) ParseCursor(s string) (FeedCursor, error) {
	c := FeedCursor{}
	s = strings.TrimSpace(s)
	if s == "" || s == "0" {
		return c, nil
	}
	known := map[string]bool{}
	for _, n := range m.r.names {
		known[n] = true
	}
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		name, seq, ok := strings.Cut(part, ":")
		n, err := strconv.ParseInt(seq, 10, 64)
		switch {
		case !ok || err != nil || n < 0:
			return nil, fmt.Errorf("must be the next cursor of a previous page, SHARD:SEQ[,SHARD:SEQ...] (e.g. %s:12), got %q", m.r.names[0], part)
		case !known[name]:
			return nil, fmt.Errorf("names shard %q, which this deployment does not have", name)
		case seen[name]:
			return nil, fmt.Errorf("names shard %q twice", name)
		}
		seen[name] = true
		c[name] = n
	}
	return c, nil
}

// FormatCursor renders c with every shard, in configuration order.
func (m *MergedCompletions) FormatCursor(c FeedCursor) string {
	parts := make([]string, len(m.r.names))
	for i, n := range m.r.names {
		parts[i] = n + ":" + strconv.FormatInt(c[n], 10)
	}
	return strings.Join(parts, ",")
}

// Page returns up to limit completions after the cursor, of the policy's
// signers, waiting up to wait for the first one from any shard; next is
// the cursor of the following page and unavailable the shards that could
// not be read (their part of the cursor did not move). Only when no shard
// could be read is it an error. Each shard counts the caller's waits
// against its cap, as with one database.
func (m *MergedCompletions) Page(ctx context.Context, who txm.Principal, pol txm.Policy, after FeedCursor, limit int,
	wait time.Duration) (items []ShardCompletion, next FeedCursor, unavailable []string, err error) {
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
	var wg sync.WaitGroup
	for _, name := range m.r.names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := m.r.Ready(wctx, name)
			var got []txm.Completion
			if err == nil {
				got, err = m.by[name].Page(wctx, who, pol, after[name], limit, wait)
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
		}()
	}
	wg.Wait()

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
			firstErr = fmt.Errorf("shard %s: %w", name, err)
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
