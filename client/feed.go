package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// CursorLatest starts the feed from now: only outcomes written from then
// on.
const CursorLatest = "latest"

// Completion is one event on the feed: an outcome (TxConfirmed, TxFailed,
// TxStuck), or with Events set to EventsLifecycle any step of a
// transaction's life. The fields after Shard are set by the events that
// carry them.
type Completion struct {
	Seq int64 `json:"seq"`
	// Type is one of the Event constants.
	Type     string `json:"type"`
	TxID     string `json:"txId"`
	ChainID  uint64 `json:"chainId"`
	Signer   string `json:"signer"`
	State    State  `json:"state"`
	NewFork  bool   `json:"newFork"`
	SubState string `json:"subState,omitempty"`
	// Nonce is nil for a transaction that never got one.
	Nonce     *uint64   `json:"nonce,omitempty"`
	Hash      *string   `json:"hash"`
	CreatedAt time.Time `json:"createdAt"`
	// Shard is the database the event was written in, empty with one:
	// (Shard, Seq) names an event once.
	Shard string `json:"shard,omitempty"`

	// Version counts the transaction's events: each one's is higher than
	// the one before it.
	Version int64 `json:"version,omitempty"`
	// Attempt is the broadcast's attempt number (TxBroadcast, TxReplaced).
	Attempt int `json:"attempt,omitempty"`
	// Fees are the attempt's (TxBroadcast, TxReplaced).
	Fees *Fees `json:"fees,omitempty"`
	// PreviousHash and PreviousFees are the replaced attempt's (TxReplaced).
	PreviousHash string `json:"previousHash,omitempty"`
	PreviousFees *Fees  `json:"previousFees,omitempty"`
	// Reason says why an attempt was replaced: bump, cancel or admin.
	Reason string `json:"reason,omitempty"`
	// Endpoint is the endpoint or route that took a broadcast, when known.
	Endpoint string `json:"endpoint,omitempty"`
	// Block and BlockHash are the block it was mined in (TxMined,
	// TxConfirmed, TxFailed when mined) or left (TxReorged).
	Block     *uint64 `json:"block,omitempty"`
	BlockHash string  `json:"blockHash,omitempty"`
	// RevertReason is a reverted transaction's reason, when known.
	RevertReason string `json:"revertReason,omitempty"`
}

// Fees are an attempt's fees in wei, as decimal strings: the EIP-1559
// pair, or GasPrice for a legacy transaction.
type Fees struct {
	MaxFeePerGas         string `json:"maxFeePerGas,omitempty"`
	MaxPriorityFeePerGas string `json:"maxPriorityFeePerGas,omitempty"`
	GasPrice             string `json:"gasPrice,omitempty"`
}

// The feed's event types. The outcomes are on every feed; the others only
// when asked for with EventsLifecycle.
const (
	EventAccepted        = "TxAccepted"        // allocated a nonce
	EventPendingApproval = "TxPendingApproval" // waits for an approver
	EventBroadcast       = "TxBroadcast"       // an attempt was sent
	EventReplaced        = "TxReplaced"        // an attempt replaced another
	EventMined           = "TxMined"           // in a block
	EventReorged         = "TxReorged"         // its block left the chain
	EventStuck           = "TxStuck"           // outcome: needs a hand
	EventConfirmed       = "TxConfirmed"       // outcome: final, succeeded
	EventFailed          = "TxFailed"          // outcome: final, failed
)

// Outcome says whether c is an outcome (on the default feed) rather than
// a lifecycle step.
func (c Completion) Outcome() bool {
	return c.Type == EventConfirmed || c.Type == EventFailed || c.Type == EventStuck
}

// Which events a feed read returns.
const (
	EventsOutcomes  = "outcomes"  // the default: TxConfirmed, TxFailed, TxStuck
	EventsLifecycle = "lifecycle" // every step of every transaction
)

// Cursor is a feed cursor as the API gives it: a seq with one database,
// "shard:seq,..." with several. The zero Cursor is the feed's start.
type Cursor string

// UnmarshalJSON reads either form (a JSON number or string).
func (c *Cursor) UnmarshalJSON(b []byte) error {
	var n json.Number
	if err := json.Unmarshal(b, &n); err == nil {
		*c = Cursor(n)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("txfence: feed cursor: %w", err)
	}
	*c = Cursor(s)
	return nil
}

// FeedPage is one answer of the feed.
type FeedPage struct {
	Items []Completion `json:"items"`
	// Next is the cursor to pass for the following page.
	Next Cursor `json:"next"`
	// UnavailableShards could not be read; their items come later.
	UnavailableShards []string `json:"unavailableShards,omitempty"`
}

// Completions reads one page of the feed after the cursor after (empty:
// the start; CursorLatest: now), of at most limit items (zero: the
// server's 100), holding an empty answer back up to wait (at most 30s).
// It is tried once: Follow and Wait retry it.
func (c *Client) Completions(ctx context.Context, after Cursor, limit int, wait time.Duration) (FeedPage, error) {
	return c.Feed(ctx, FeedQuery{After: after, Limit: limit, Wait: wait})
}

// FeedQuery is one read of the feed.
type FeedQuery struct {
	After Cursor        // empty: the start; CursorLatest: now
	Limit int           // zero: the server's 100
	Wait  time.Duration // how long an empty answer is held back, at most 30s
	// Events is EventsOutcomes (empty: the default) or EventsLifecycle.
	Events string
}

// Feed reads one page of the feed as q says. It is tried once: Follow and
// Wait retry it.
func (c *Client) Feed(ctx context.Context, q FeedQuery) (FeedPage, error) {
	v := url.Values{}
	if q.After != "" {
		v.Set("after", string(q.After))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Wait > 0 {
		v.Set("wait", q.Wait.String())
	}
	if q.Events != "" {
		v.Set("events", q.Events)
	}
	path := "/v1/completions"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var p FeedPage
	if _, err := c.do(ctx, call{method: http.MethodGet, path: path, once: true}, &p); err != nil {
		return FeedPage{}, fmt.Errorf("read completions: %w", err)
	}
	return p, nil
}

// FollowOptions shape Follow.
type FollowOptions struct {
	// Wait is each long poll's wait (default and at most 30s).
	Wait time.Duration
	// Limit is each page's size (default the server's 100).
	Limit int
	// Events is EventsOutcomes (empty: the default) or EventsLifecycle.
	Events string
}

// FeedItem is one outcome Follow yields, with the cursor to store once it
// is handled: resuming from it yields what follows, nothing before.
type FeedItem struct {
	Completion
	Cursor Cursor
}

// Follow yields the feed's events after cursor (outcomes, or every step
// with o.Events = EventsLifecycle), for as long as ctx lasts,
// each (shard, seq) once: a page that repeats what was yielded (a
// redelivery) is skipped. A failed poll that may be retried (no answer,
// 429, 5xx) is retried after a backoff, counted in Stats as any retry;
// the sequence ends with one error: ctx's, or an answer that may not be
// retried (a cursor the server refuses, a credential it refuses).
func (c *Client) Follow(ctx context.Context, cursor Cursor, o FollowOptions) iter.Seq2[FeedItem, error] {
	if o.Wait <= 0 || o.Wait > 30*time.Second {
		o.Wait = 30 * time.Second
	}
	return func(yield func(FeedItem, error) bool) {
		pos := parseCursor(cursor)
		fails := 0
		// The first page holds one item: its cursor is then the server's,
		// which names every shard, so that the cursor of every later item
		// can be said exactly (a caller's cursor may be latest, or leave
		// out shards).
		limit := 1
		for {
			if err := ctx.Err(); err != nil {
				yield(FeedItem{}, err)
				return
			}
			page, err := c.Feed(ctx, FeedQuery{After: cursor, Limit: limit, Wait: o.Wait, Events: o.Events})
			if err != nil {
				if ctx.Err() != nil {
					yield(FeedItem{}, ctx.Err())
					return
				}
				reason, retryAfter, ok := retryReason(err)
				if !ok {
					yield(FeedItem{}, err)
					return
				}
				fails++
				wait := c.retry.backoff(fails, retryAfter)
				c.noteRetry(RetryEvent{Method: http.MethodGet, Path: "/v1/completions", Attempt: fails, Reason: reason, Wait: wait, Err: err})
				if sleep(ctx, wait) != nil {
					yield(FeedItem{}, ctx.Err())
					return
				}
				continue
			}
			fails, limit = 0, o.Limit
			for i, it := range page.Items {
				if !pos.advance(it.Shard, it.Seq) {
					continue // at or below what was yielded: a redelivery
				}
				if i == len(page.Items)-1 {
					pos.merge(parseCursor(page.Next))
				}
				at := pos.format(cursor)
				if !yield(FeedItem{Completion: it, Cursor: at}, nil) {
					return
				}
			}
			// Never back: a page that repeats (a redelivery) carries a
			// cursor behind what was yielded.
			pos.merge(parseCursor(page.Next))
			cursor = pos.format(page.Next)
		}
	}
}

// position is each shard's last yielded seq; a bare number in a cursor is
// the home shard's, whose name the client does not know ("" here).
type position struct {
	order []string
	seq   map[string]int64
	bare  bool // the cursor it was read from named the home shard by a bare number
}

func parseCursor(c Cursor) *position {
	p := &position{seq: map[string]int64{}}
	s := strings.TrimSpace(string(c))
	if s == "" || s == CursorLatest {
		return p
	}
	for _, part := range strings.Split(s, ",") {
		name, seq, named := strings.Cut(part, ":")
		if !named {
			name, seq, p.bare = "", part, true
		}
		n, err := strconv.ParseInt(seq, 10, 64)
		if err != nil {
			continue // the server refuses it, and says why
		}
		p.set(name, n)
	}
	return p
}

func (p *position) set(name string, seq int64) {
	if _, ok := p.seq[name]; !ok {
		p.order = append(p.order, name)
	}
	p.seq[name] = seq
}

// advance records (shard, seq) and says whether it is new.
func (p *position) advance(shard string, seq int64) bool {
	if last, ok := p.seq[shard]; ok && seq <= last {
		return false
	}
	p.set(shard, seq)
	return true
}

// merge takes the server's cursor's positions that are ahead.
func (p *position) merge(q *position) {
	for _, name := range q.order {
		if last, ok := p.seq[name]; !ok || q.seq[name] > last {
			p.set(name, q.seq[name])
		}
	}
	p.bare = q.bare
}

// format is the cursor after what p records. A sharded feed read from a
// bare number cannot be said until the server names the home shard: then
// from, the cursor the page was asked with, is the safe answer (resuming
// from it repeats, never skips).
func (p *position) format(from Cursor) Cursor {
	named := false
	for _, n := range p.order {
		named = named || n != ""
	}
	if named && p.bare {
		return from
	}
	if !named {
		return Cursor(strconv.FormatInt(p.seq[""], 10))
	}
	parts := make([]string, 0, len(p.order))
	for _, n := range p.order {
		parts = append(parts, n+":"+strconv.FormatInt(p.seq[n], 10))
	}
	return Cursor(strings.Join(parts, ","))
}

// ErrNotOnFeed is a Wait for a state that is not a transaction's.
var ErrNotOnFeed = errors.New("txfence: not a state the feed reports")

// ErrEnded is a Wait whose transaction ended in a state other than those
// waited for.
var ErrEnded = errors.New("txfence: the transaction ended in another state")

// Wait waits until transaction id is in one of states (default: a final
// state, CONFIRMED or FAILED_FINAL) through the feed's long poll, and
// returns it as Get reads it then. CONFIRMED, FAILED_FINAL and STUCK are
// waited for on the outcomes feed; any other state (MINED, say) on the
// lifecycle feed, where an event that puts it in the state ends the wait
// even when it has moved on by the time it is read (a wait for MINED is
// also over once it is CONFIRMED). A transaction that
// ends in a final state not waited for is returned with ErrEnded.
func (c *Client) Wait(ctx context.Context, id string, states ...State) (Transaction, error) {
	if len(states) == 0 {
		states = []State{StateConfirmed, StateFailedFinal}
	}
	events := ""
	for _, s := range states {
		switch s {
		case StateConfirmed, StateFailedFinal, StateStuck:
		case StatePendingApproval, StateAllocated, StateTracking, StateMined:
			events = EventsLifecycle
		default:
			return Transaction{}, fmt.Errorf("wait for %s: %w", s, ErrNotOnFeed)
		}
	}
	// The cursor is taken before the transaction is read: an event is
	// numbered only after the write that makes it commits, so one the
	// read does not show comes after the cursor.
	var start Cursor
	for attempt := 1; ; attempt++ {
		p, err := c.Feed(ctx, FeedQuery{After: CursorLatest, Limit: 1, Events: events})
		if err == nil {
			start = p.Next
			break
		}
		reason, retryAfter, ok := retryReason(err)
		if !ok || ctx.Err() != nil || attempt >= c.retry.MaxAttempts {
			return Transaction{}, fmt.Errorf("wait %s: %w", id, err)
		}
		wait := c.retry.backoff(attempt, retryAfter)
		c.noteRetry(RetryEvent{Method: http.MethodGet, Path: "/v1/completions", Attempt: attempt, Reason: reason, Wait: wait, Err: err})
		if err := sleep(ctx, wait); err != nil {
			return Transaction{}, fmt.Errorf("wait %s: %w", id, err)
		}
	}
	t, err := c.Get(ctx, id)
	if err != nil {
		return Transaction{}, fmt.Errorf("wait: %w", err)
	}
	if done, err := reached(t, states); done {
		return t, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for it, err := range c.Follow(ctx, start, FollowOptions{Events: events}) {
		if err != nil {
			return Transaction{}, fmt.Errorf("wait %s: %w", id, err)
		}
		if !strings.EqualFold(it.TxID, id) {
			continue
		}
		if !slices.Contains(states, it.State) && !it.State.Final() {
			continue
		}
		t, err := c.Get(ctx, id)
		if err != nil {
			return Transaction{}, fmt.Errorf("wait: %w", err)
		}
		if events == EventsLifecycle && slices.Contains(states, it.State) {
			// It was in the state waited for (it may have moved on
			// since: a MINED one confirmed).
			return t, nil
		}
		if done, err := reached(t, states); done {
			return t, err
		}
		// Reopened since (a reorg): wait for its next outcome.
	}
	return Transaction{}, fmt.Errorf("wait %s: %w", id, ctx.Err())
}

// reached says whether t is in one of states, or ended in another (then
// with ErrEnded).
func reached(t Transaction, states []State) (bool, error) {
	if slices.Contains(states, t.State) {
		return true, nil
	}
	if t.State == StateConfirmed && slices.Contains(states, StateMined) {
		return true, nil // it was mined on the way
	}
	if t.State.Final() {
		return true, fmt.Errorf("wait %s: %s: %w", t.ID, t.State, ErrEnded)
	}
	return false, nil
}

func (c *Client) noteRetry(e RetryEvent) {
	c.mu.Lock()
	c.stats[e.Reason]++
	c.mu.Unlock()
	if c.onRetry != nil {
		c.onRetry(e)
	}
}
