package app

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/txm"
)

// lateFeed is a feed whose first completion commits just after a waiter
// found the feed empty and before the listener, started for that waiter,
// read where the feed ends.
type lateFeed struct {
	mu        sync.Mutex
	items     []txm.Completion
	firstRead chan struct{}
	once      sync.Once
}

func (f *lateFeed) CompletionsAfter(_ context.Context, after int64, limit int, _ txm.CompletionFilter) ([]txm.Completion, error) {
	f.mu.Lock()
	var out []txm.Completion
	for _, c := range f.items {
		if c.Seq > after && len(out) < limit {
			out = append(out, c)
		}
	}
	f.mu.Unlock()
	f.once.Do(func() { close(f.firstRead) })
	return out, nil
}

func (f *lateFeed) LatestCompletion(context.Context) (int64, error) {
	<-f.firstRead
	f.mu.Lock()
	defer f.mu.Unlock()
	f.items = append(f.items, txm.Completion{Seq: 1, TxID: "t1"})
	return 1, nil
}

func (f *lateFeed) Listen(ctx context.Context, wake func()) error {
	wake()
	<-ctx.Done()
	return nil
}

// A completion that commits between a waiter's empty read and the
// listener's first look at the feed's end is answered to the waiter at
// once: the listener starting from the newest seq had left it behind its
// memory with nothing to wake the waiter, which then waited out its whole
// wait (seen in the quick-start test: the feed empty after CONFIRMED).
func TestFollowCompletions_CompletionBeforeTheListenerStarts(t *testing.T) {
	t.Parallel()
	feed := &lateFeed{firstRead: make(chan struct{})}
	f, err := NewFollowCompletions(feed, feed, 5, logging.Discard())
	require.NoError(t, err)
	start := time.Now()
	items, err := f.Page(context.Background(), txm.Principal{ID: "p"}, txm.Policy{AllSigners: true}, 0, 10, 3*time.Second, false)
	require.NoError(t, err)
	require.Len(t, items, 1, "answered after %s", time.Since(start))
	require.Equal(t, "t1", items[0].TxID)
}
