package app

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/txm"
)

// listFeed is one shard's completions, in seq order.
type listFeed struct {
	items []txm.Completion
	err   error
}

func (f *listFeed) CompletionsAfter(_ context.Context, after int64, limit int, only txm.CompletionFilter) ([]txm.Completion, error) {
	if f.err != nil {
		return nil, f.err
	}
	var out []txm.Completion
	for _, c := range f.items {
		if c.Seq > after && len(out) < limit && (only.Lifecycle || !c.Lifecycle) {
			out = append(out, c)
		}
	}
	return out, nil
}

func (f *listFeed) LatestCompletion(context.Context) (int64, error) {
	if len(f.items) == 0 {
		return 0, f.err
	}
	return f.items[len(f.items)-1].Seq, f.err
}

func (f *listFeed) Listen(ctx context.Context, wake func()) error {
	wake()
	<-ctx.Done()
	return nil
}

func TestIssue12_MergedFeed(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(seq int64, sec int) txm.Completion {
		return txm.Completion{Seq: seq, TxID: string(rune('a'+seq)) + time.Duration(sec).String(), CreatedAt: t0.Add(time.Duration(sec) * time.Second)}
	}
	a := &listFeed{items: []txm.Completion{at(1, 1), at(2, 4), at(3, 5)}}
	b := &listFeed{items: []txm.Completion{at(7, 2), at(9, 4), at(10, 9)}}
	r, err := NewShardRouter([]string{"a", "b"}, func(common.Address) (string, bool) { return "a", true }, nil)
	require.NoError(t, err)
	by := map[string]*FollowCompletions{}
	for name, f := range map[string]*listFeed{"a": a, "b": b} {
		by[name], err = NewFollowCompletions(f, f, 5, logging.Discard())
		require.NoError(t, err)
	}
	m, err := NewMergedCompletions(r, by)
	require.NoError(t, err)
	ctx := context.Background()
	who, pol := txm.Principal{ID: "p"}, txm.Policy{AllSigners: true}

	start, err := m.ParseCursor("")
	require.NoError(t, err)
	items, next, down, err := m.Page(ctx, who, pol, start, 4, 0, false)
	require.NoError(t, err)
	assert.Empty(t, down)
	var got []string
	for _, it := range items {
		got = append(got, it.Shard+":"+time.Duration(it.Seq).String())
	}
	assert.Equal(t, []string{"a:1ns", "b:7ns", "a:2ns", "b:9ns"}, got, "by time written; a tie goes to the first shard")
	assert.Equal(t, "a:2,b:9", m.FormatCursor(next))

	again, err := m.ParseCursor(m.FormatCursor(next))
	require.NoError(t, err)
	items, next, _, err = m.Page(ctx, who, pol, again, 4, 0, false)
	require.NoError(t, err)
	require.Len(t, items, 2, "the rest, nothing twice")
	assert.Equal(t, "a:3,b:10", m.FormatCursor(next))

	began := time.Now()
	items, next, down, err = m.Page(ctx, who, pol, FeedCursor{"a": 3, "b": 7}, 10, 10*time.Second, false)
	require.NoError(t, err)
	assert.Empty(t, down, "a wait cut short is no failure")
	require.Len(t, items, 2, "b's items end a's wait")
	assert.Less(t, time.Since(began), 5*time.Second)
	assert.Equal(t, "a:3,b:10", m.FormatCursor(next))
	items, next, _, err = m.Page(ctx, who, pol, FeedCursor{"a": 3, "b": 10}, 10, 50*time.Millisecond, false)
	require.NoError(t, err)
	assert.Empty(t, items, "nothing new: the wait runs out")
	assert.Equal(t, "a:3,b:10", m.FormatCursor(next))

	b.err = txm.ErrUnavailable
	items, next, down, err = m.Page(ctx, who, pol, FeedCursor{"b": 7}, 10, 0, false)
	require.NoError(t, err, "the shards that answer are served")
	assert.Equal(t, []string{"b"}, down)
	assert.Len(t, items, 3)
	assert.Equal(t, "a:3,b:7", m.FormatCursor(next), "the down shard's place is kept")
	a.err = txm.ErrUnavailable
	_, _, _, err = m.Page(ctx, who, pol, FeedCursor{}, 10, 0, false)
	require.ErrorIs(t, err, txm.ErrUnavailable, "no shard answered")

	for _, bad := range []string{"a:1,c:2", "a:1,a:2", "a:-1", "a", "a:x", "12,a:1", ":3", "-1", "latest"} {
		_, err := m.ParseCursor(bad)
		assert.Error(t, err, bad)
	}
	c, err := m.ParseCursor("b:4")
	require.NoError(t, err)
	assert.Equal(t, "a:0,b:4", m.FormatCursor(c), "a shard not named starts at 0")
	c, err = m.ParseCursor("12")
	require.NoError(t, err)
	assert.Equal(t, "a:12,b:0", m.FormatCursor(c), "a bare number is the home shard's seq")
}

// TestIssue49_MergedFeedEvents: the sharded feed passes the events choice
// to every shard, from the database and from a long poll's memory alike:
// the outcomes only by default, every event with lifecycle.
func TestIssue49_MergedFeedEvents(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	ev := func(seq int64, typ txm.EventType) txm.Completion {
		return txm.Completion{Seq: seq, Type: typ, Lifecycle: !typ.IsOutcome(), TxID: fmt.Sprint("tx", seq), Principal: "p",
			CreatedAt: t0.Add(time.Duration(seq) * time.Second)}
	}
	a := &listFeed{items: []txm.Completion{ev(1, txm.EventAccepted), ev(2, txm.EventBroadcast), ev(3, txm.EventConfirmed)}}
	b := &listFeed{items: []txm.Completion{ev(4, txm.EventAccepted), ev(5, txm.EventStuck)}}
	r, err := NewShardRouter([]string{"a", "b"}, func(common.Address) (string, bool) { return "a", true }, nil)
	require.NoError(t, err)
	by := map[string]*FollowCompletions{}
	for name, f := range map[string]*listFeed{"a": a, "b": b} {
		by[name], err = NewFollowCompletions(f, f, 5, logging.Discard())
		require.NoError(t, err)
	}
	m, err := NewMergedCompletions(r, by)
	require.NoError(t, err)
	ctx := context.Background()
	who, pol := txm.Principal{ID: "p"}, txm.Policy{AllSigners: true}
	seqs := func(items []ShardCompletion) []int64 {
		var out []int64
		for _, it := range items {
			out = append(out, it.Seq)
		}
		return out
	}
	for _, wait := range []time.Duration{0, 50 * time.Millisecond} {
		items, _, _, err := m.Page(ctx, who, pol, FeedCursor{}, 10, wait, false)
		require.NoError(t, err)
		assert.Equal(t, []int64{3, 5}, seqs(items), "outcomes only (wait %v)", wait)
		items, _, _, err = m.Page(ctx, who, pol, FeedCursor{}, 10, wait, true)
		require.NoError(t, err)
		assert.Equal(t, []int64{1, 2, 3, 4, 5}, seqs(items), "every event (wait %v)", wait)
	}
}
