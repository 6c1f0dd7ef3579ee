// Package outbox is the OutboxSweep function: triggered by Cloud Scheduler,
// it publishes outbox rows that the invocations which wrote them did not
// (a crash between commit and publish, a Pub/Sub outage). Publishing is
// at-least-once; consumers deduplicate.
package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/GoogleCloudPlatform/functions-framework-go/functions"

	"github.com/txfence/txfence/functions/internal/deps"
	"github.com/txfence/txfence/functions/internal/scheduled"
	"github.com/txfence/txfence/shared/app"
	"github.com/txfence/txfence/shared/metrics"
	"github.com/txfence/txfence/shared/txm"
)

func init() { functions.HTTP("OutboxSweep", serve) }

// Relayer publishes left-behind rows: *app.ShardedRelay, which sweeps every
// shard's outbox with its *app.Relay (tests may give one).
type Relayer interface {
	Sweep(ctx context.Context, olderThan time.Duration, limit int) (int, error)
	// Backlogs says what waits in each shard's outbox ("" for the one
	// database).
	Backlogs(ctx context.Context) (map[string]txm.OutboxBacklog, error)
}

// Sweeper relays left-behind rows.
type Sweeper struct {
	relay   Relayer
	metrics *metrics.Metrics
	log     *slog.Logger
	// MinAge leaves fresh rows to the invocations that wrote them, which
	// relay them without claiming them (app.PublishTimeout bounds each
	// such relay): more than PublishTimeout, or a row could be published
	// by both.
	MinAge time.Duration
	// Budget bounds one sweep.
	Budget time.Duration
}

// NewSweeper returns a sweeper; m may be nil (nothing is measured).
func NewSweeper(relay Relayer, m *metrics.Metrics, log *slog.Logger) (*Sweeper, error) {
	if relay == nil || relay == Relayer((*app.Relay)(nil)) || log == nil {
		return nil, errors.New("new outbox sweeper: relay and logger are required")
	}
	return &Sweeper{relay: relay, metrics: m, log: log, MinAge: 5 * time.Second, Budget: 50 * time.Second}, nil
}

// Stats is what one run of the sweep did and left.
type Stats struct {
	Sent int `json:"sent"`
	// Backlog is what waits in each shard's outbox after the sweep, by
	// shard name; a shard that did not answer is missing.
	Backlog []Backlog `json:"backlog"`
}

// Backlog is what waits in one shard's outbox.
type Backlog struct {
	Shard         string  `json:"shard,omitempty"` // empty without TXFENCE_DATABASES
	Rows          int64   `json:"rows"`
	Failing       int64   `json:"failing"` // rows whose publish failed at least once
	OldestSeconds float64 `json:"oldestSeconds"`
}

// Run sweeps, then measures what is left in every shard's outbox: the
// outbox_backlog_rows, outbox_failing_rows and outbox_oldest_age_seconds
// gauges, which the outbox alert reads. A sweep that fails still measures
// (an outbox that cannot be published is what the gauges are for).
func (s *Sweeper) Run(ctx context.Context) (Stats, error) {
	var st Stats
	var err error
	st.Sent, err = s.Sweep(ctx)
	backlogs, berr := s.relay.Backlogs(ctx)
	for shard, b := range backlogs {
		st.Backlog = append(st.Backlog, Backlog{Shard: shard, Rows: b.Rows, Failing: b.Failing, OldestSeconds: b.OldestAge.Seconds()})
		s.metrics.OutboxBacklog(ctx, shard, b.Rows, b.Failing, b.OldestAge.Seconds())
	}
	slices.SortFunc(st.Backlog, func(a, b Backlog) int { return strings.Compare(a.Shard, b.Shard) })
	return st, errors.Join(err, berr)
}

// Sweep publishes unsent rows in pages until none is left or the budget is
// spent, and returns how many it sent.
func (s *Sweeper) Sweep(ctx context.Context) (int, error) {
	const page = 200
	total := 0
	start := time.Now()
	for time.Since(start) < s.Budget {
		n, err := s.relay.Sweep(ctx, s.MinAge, page)
		total += n
		if err != nil {
			return total, err
		}
		if n < page {
			break
		}
	}
	return total, nil
}

// ServeHTTP runs one sweep.
func (s *Sweeper) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	scheduled.Serve(w, r, s.log, "outbox sweep", func(ctx context.Context) (any, error) {
		return s.Run(ctx)
	})
}

var lazy = deps.Lazy[*Sweeper]{Build: Build}

// Build is the OutboxSweep over the process's dependencies: every shard's
// outbox (the one database's being the one shard's).
func Build(_ context.Context, p *deps.Process) (*Sweeper, error) {
	by := map[string]*app.Relay{}
	for _, sh := range p.Shards {
		if sh.Relay == nil {
			return nil, errors.New("outbox sweep: no Pub/Sub project is configured to publish to")
		}
		by[sh.Name] = sh.Relay
	}
	relay, err := app.NewShardedRelay(p.Router, by)
	if err != nil {
		return nil, fmt.Errorf("outbox sweep: %w", err)
	}
	return NewSweeper(relay, p.Metrics, p.Log)
}

func serve(w http.ResponseWriter, r *http.Request) {
	s, err := lazy.Get(r.Context())
	if err != nil {
		http.Error(w, "outbox sweep unavailable: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	s.ServeHTTP(w, r)
}
