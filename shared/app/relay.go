package app

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/txfence/txfence/shared/txm"
)

// Relay publishes outbox rows. Every invocation relays the rows it wrote
// right after its commit; the outbox sweep relays whatever was left behind
// (a crash between commit and publish, a Pub/Sub outage). A nil *Relay
// publishes nothing, which leaves every row for the sweep.
type Relay struct {
	store txm.OutboxStore
	pub   txm.Publisher
	log   *slog.Logger

	mu       sync.Mutex
	gathered []int64 // published rows that PublishDeleteLater left to delete
	armed    bool    // a delete of the gathered rows is due within RelayDeleteEvery
}

// NewRelay returns a relay.
func NewRelay(store txm.OutboxStore, pub txm.Publisher, log *slog.Logger) (*Relay, error) {
	if store == nil || pub == nil || log == nil {
		return nil, errors.New("new relay: store, publisher and logger are required")
	}
	return &Relay{store: store, pub: pub, log: log}, nil
}

// PublishTimeout bounds an invocation's own relay: a Pub/Sub outage must
// not hold up the request (or the callers batched behind it); the sweep
// publishes what is left. The sweep leaves rows younger than more than
// this to their invocations, which relay them without a claim.
const PublishTimeout = 3 * time.Second

// Publish relays the given rows. Failures are logged, not returned: the rows
// stay unsent and the sweep picks them up.
func (r *Relay) Publish(ctx context.Context, ids []int64) {
	if r == nil || len(ids) == 0 {
		return
	}
	// What the invocation committed is relayed even when its own context
	// ends with it (a sweep at the end of its budget): left for the outbox
	// sweep, the rows waited seconds.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), PublishTimeout)
	defer cancel()
	if _, err := r.store.Relay(ctx, ids, 0, len(ids), r.pub.PublishAll); err != nil {
		r.log.WarnContext(ctx, "relay outbox", slog.Any("ids", ids), slog.Any("error", err))
	}
}

// RelayDeleteEvery is at most how long PublishDeleteLater's published rows
// wait to be deleted together with those of the relays after them;
// deleteMax rows are deleted at once. The create path relays its prompts
// after every allocation call, and a delete after each publish (a round
// trip and a commit) costs an API instance a noticeable share of its
// creates. The sweep leaves rows this young alone.
const (
	RelayDeleteEvery = 50 * time.Millisecond
	deleteMax        = 1024
)

// PublishDeleteLater relays the given rows like Publish, and deletes the
// published ones within RelayDeleteEvery, in one statement with the other
// rows relayed meanwhile. A crash before that leaves them to be published
// again by the sweep, and so may an instance whose CPU is throttled
// between requests (Cloud Run's cpu_idle), whose delete can then come
// after the sweep's minimum age: a prompt published twice costs a read,
// never a step.
func (r *Relay) PublishDeleteLater(ctx context.Context, ids []int64) {
	if r == nil || len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), PublishTimeout)
	defer cancel()
	done, err := r.store.PublishOutbox(ctx, ids, r.pub.PublishAll)
	if err != nil {
		r.log.WarnContext(ctx, "relay outbox", slog.Any("ids", ids), slog.Any("error", err))
	}
	if len(done) == 0 {
		return
	}
	r.mu.Lock()
	r.gathered = append(r.gathered, done...)
	now, arm := len(r.gathered) >= deleteMax, !r.armed
	r.armed = true
	r.mu.Unlock()
	switch {
	case now:
		r.Flush(ctx)
	case arm:
		time.AfterFunc(RelayDeleteEvery, func() {
			ctx, cancel := context.WithTimeout(context.Background(), PublishTimeout)
			defer cancel()
			r.Flush(ctx)
		})
	}
}

// Flush deletes the published rows that PublishDeleteLater gathered (at
// shutdown, say). A failed delete is logged: the rows are published again
// by the sweep.
func (r *Relay) Flush(ctx context.Context) {
	if r == nil {
		return
	}
	r.mu.Lock()
	ids := r.gathered
	r.gathered, r.armed = nil, false
	r.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	if err := r.store.DeleteOutbox(ctx, ids); err != nil {
		r.log.WarnContext(ctx, "delete relayed outbox rows", slog.Int("rows", len(ids)), slog.Any("error", err))
	}
}

// Sweep relays up to limit unsent rows older than olderThan.
func (r *Relay) Sweep(ctx context.Context, olderThan time.Duration, limit int) (int, error) {
	if r == nil {
		return 0, errors.New("sweep outbox: no publisher configured")
	}
	return r.store.Relay(ctx, nil, olderThan, limit, r.pub.PublishAll)
}

// Backlogs says what waits in the outbox to be published, by shard: ""
// for a relay's one database.
func (r *Relay) Backlogs(ctx context.Context) (map[string]txm.OutboxBacklog, error) {
	if r == nil {
		return nil, errors.New("outbox backlog: no publisher configured")
	}
	b, err := r.store.OutboxBacklog(ctx)
	if err != nil {
		return nil, err
	}
	return map[string]txm.OutboxBacklog{"": b}, nil
}
