package app

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/txfence/txfence/shared/txm"
)

// FollowCompletions serves the completions feed, long polls included, at a
// cost that does not grow with the number of waiting callers: while anyone
// waits, one listener per instance hears every write of completions
// (LISTEN/NOTIFY), reads the new ones once, and keeps the newest in memory;
// callers waiting at the head of the feed are answered from there. Only a
// caller behind the memory reads the database itself. The listener runs
// exactly as long as some caller waits (no goroutine outlives the requests),
// and reads once every refresh even without a notification, so that a lost
// notification delays nobody for long. Each principal may hold at most
// maxWaits waits at once.
type FollowCompletions struct {
	feed     txm.CompletionFeed
	listener txm.CompletionListener
	maxWaits int
	log      *slog.Logger

	mu      sync.Mutex
	waiting int            // callers waiting now
	byWho   map[string]int // per principal
	stop    context.CancelFunc
	gen     int // the running listener's generation; an ended one's reads are dropped
	// Memory: every completion with base < seq <= head is in recent, in
	// seq order; known says base and head are set (a listener runs).
	base, head int64
	known      bool
	recent     []txm.Completion
	changed    chan struct{} // closed and replaced when head moves
}

// recentKept is how many of the newest completions are kept in memory.
const recentKept = 4096

// refreshEvery is how often the listener reads without a notification.
const refreshEvery = 5 * time.Second

// NewFollowCompletions returns the use case. maxWaits is the default cap of
// a principal's concurrent waits (its policy may say otherwise).
func NewFollowCompletions(feed txm.CompletionFeed, listener txm.CompletionListener, maxWaits int, log *slog.Logger) (*FollowCompletions, error) {
	if feed == nil || listener == nil || log == nil || maxWaits < 1 {
		return nil, errors.New("new follow completions: feed, listener, logger and a positive wait cap are required")
	}
	return &FollowCompletions{feed: feed, listener: listener, maxWaits: maxWaits, log: log, byWho: map[string]int{},
		changed: make(chan struct{})}, nil
}

// Page returns up to limit completions after the seq after that who may
// read (FeedFilter), the outcomes only or with lifecycle every event,
// waiting up to wait for the first one. A principal over its cap of
// concurrent waits gets a *txm.RateLimitError.
func (f *FollowCompletions) Page(ctx context.Context, who txm.Principal, pol txm.Policy, after int64, limit int,
	wait time.Duration, lifecycle bool) ([]txm.Completion, error) {
	only := FeedFilter(who, pol)
	only.Lifecycle = lifecycle
	if wait <= 0 {
		return f.feed.CompletionsAfter(ctx, after, limit, only)
	}
	maxWaits := f.maxWaits
	if pol.MaxWaits > 0 {
		maxWaits = pol.MaxWaits
	}
	if err := f.enter(who.ID, maxWaits); err != nil {
		return nil, err
	}
	defer f.leave(who.ID)
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		items, changed, err := f.read(ctx, after, limit, only)
		if err != nil || len(items) > 0 {
			return items, err
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-deadline.C:
			return nil, nil
		case <-changed:
		}
	}
}

// FeedFilter is what who may read of the feed: the outcomes of its
// policy's signers (none when it names none), and of a sender without the
// reader role only those of the transactions it created.
func FeedFilter(who txm.Principal, pol txm.Policy) txm.CompletionFilter {
	var only txm.CompletionFilter
	if !pol.AllSigners {
		only.Signers = append([]common.Address{}, pol.Signers...)
	}
	if pol.ReadsOwnOnly() {
		only.Principal = who.ID
	}
	return only
}

// read answers from memory when it covers after, else from the database;
// changed is closed when there may be more.
func (f *FollowCompletions) read(ctx context.Context, after int64, limit int, only txm.CompletionFilter) ([]txm.Completion, <-chan struct{}, error) {
	f.mu.Lock()
	changed := f.changed
	covered := f.known && after >= f.base
	var items []txm.Completion
	if covered {
		for _, c := range f.recent {
			if c.Seq > after && only.Selects(c) {
				items = append(items, c)
				if len(items) == limit {
					break
				}
			}
		}
	}
	f.mu.Unlock()
	if covered {
		return items, changed, nil
	}
	items, err := f.feed.CompletionsAfter(ctx, after, limit, only)
	return items, changed, err
}

// enter counts a wait, starting the listener for the first.
func (f *FollowCompletions) enter(who string, maxWaits int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.byWho[who] >= maxWaits {
		return &txm.RateLimitError{Scope: "waits", RetryAfter: time.Second}
	}
	f.byWho[who]++
	f.waiting++
	if f.waiting == 1 {
		ctx, cancel := context.WithCancel(context.Background())
		f.gen++
		f.stop = cancel
		go f.listen(ctx, f.gen)
	}
	return nil
}

// leave uncounts a wait, stopping the listener after the last.
func (f *FollowCompletions) leave(who string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.byWho[who]--; f.byWho[who] == 0 {
		delete(f.byWho, who)
	}
	if f.waiting--; f.waiting == 0 {
		f.stop()
		f.gen++ // what the ending listener still reads is dropped
		f.known = false
		f.recent = nil
	}
}

// listen keeps the memory current while callers wait: a read after every
// notification and every refreshEvery, a new connection after a failure.
func (f *FollowCompletions) listen(ctx context.Context, gen int) {
	wake := make(chan struct{}, 1)
	go func() {
		for ctx.Err() == nil {
			if err := f.listener.Listen(ctx, func() {
				select {
				case wake <- struct{}{}:
				default:
				}
			}); err != nil {
				f.log.WarnContext(ctx, "completions listener", slog.Any("error", err))
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		}
	}()
	tick := time.NewTicker(refreshEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-tick.C:
		}
		if err := f.refresh(ctx, gen); err != nil && ctx.Err() == nil {
			f.log.WarnContext(ctx, "completions refresh", slog.Any("error", err))
		}
	}
}

// refresh reads what was written since head, once for every waiter.
func (f *FollowCompletions) refresh(ctx context.Context, gen int) error {
	f.mu.Lock()
	head, known := f.head, f.known
	f.mu.Unlock()
	if !known {
		// Start from the newest: whoever waits for older ones reads the
		// database.
		newest, err := f.feed.LatestCompletion(ctx)
		if err != nil {
			return err
		}
		f.mu.Lock()
		if f.gen == gen {
			f.base, f.head, f.known, f.recent = newest, newest, true, nil
			// A waiter that found nothing before this read may have missed
			// what committed since, now behind base: it reads again (from
			// the database). Without this it waited out its whole wait.
			close(f.changed)
			f.changed = make(chan struct{})
		}
		f.mu.Unlock()
		return nil
	}
	var fresh []txm.Completion
	for {
		items, err := f.feed.CompletionsAfter(ctx, head, 1000, txm.CompletionFilter{Lifecycle: true})
		if err != nil {
			return err
		}
		fresh = append(fresh, items...)
		if len(items) < 1000 {
			break
		}
		head = items[len(items)-1].Seq
	}
	if len(fresh) == 0 {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gen != gen || !f.known {
		return nil
	}
	f.recent = append(f.recent, fresh...)
	if over := len(f.recent) - recentKept; over > 0 {
		f.base = f.recent[over-1].Seq
		f.recent = append([]txm.Completion(nil), f.recent[over:]...)
	}
	f.head = fresh[len(fresh)-1].Seq
	close(f.changed)
	f.changed = make(chan struct{})
	return nil
}

// Latest is the newest seq of the feed (0 when empty): where a caller that
// wants only what happens from now on starts (after=latest).
func (f *FollowCompletions) Latest(ctx context.Context) (int64, error) {
	return f.feed.LatestCompletion(ctx)
}
