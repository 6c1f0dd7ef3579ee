// Package finality is the FinalitySweep function: triggered by Cloud
// Scheduler every minute, it keeps sweeping a little past the minute
// (TXFENCE_FINALITY_BUDGET, passes TXFENCE_FINALITY_INTERVAL apart), so that
// the next minute's invocation has begun before it stops:
// confirmations, reorgs, final outcomes, and receipts the Receipt function
// missed.
package finality

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/GoogleCloudPlatform/functions-framework-go/functions"

	"github.com/txfence/txfence/functions/internal/deps"
	"github.com/txfence/txfence/functions/internal/scheduled"
	"github.com/txfence/txfence/shared/app"
)

// Sweeper sweeps for a budget: *app.ShardedFinality, which sweeps every
// shard's *app.SweepFinality at once (tests may give one).
type Sweeper interface {
	Run(ctx context.Context, budget, interval time.Duration) (app.PassStats, error)
}

// Handler runs sweeps.
type Handler struct {
	sweep    Sweeper
	log      *slog.Logger
	budget   time.Duration
	interval time.Duration
}

// NewHandler returns the handler.
func NewHandler(sweep Sweeper, budget, interval time.Duration, log *slog.Logger) (*Handler, error) {
	if sweep == nil || sweep == Sweeper((*app.SweepFinality)(nil)) || log == nil || budget <= 0 || interval <= 0 {
		return nil, errors.New("new finality handler: sweep, logger and a positive budget and interval are required")
	}
	return &Handler{sweep: sweep, log: log, budget: budget, interval: interval}, nil
}

// ServeHTTP sweeps for the budget and reports what it did.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	scheduled.Serve(w, r, h.log, "finality sweep", func(ctx context.Context) (any, error) {
		return h.sweep.Run(ctx, h.budget, h.interval)
	})
}

func init() { functions.HTTP("FinalitySweep", serve) }

var lazy = deps.Lazy[*Handler]{Build: Build}

// Build is the FinalitySweep handler over the process's dependencies: one
// sweep per shard (the one database being the one shard), all run at once.
func Build(_ context.Context, p *deps.Process) (*Handler, error) {
	by, err := deps.PerShard(p, func(sh *deps.Shard) (*app.SweepFinality, error) {
		return app.NewSweepFinality(sh.Store, sh.Store.Leases(), p.ChainPorts(), sh.Relay, p.Config.Finality(), p.Metrics, p.Log)
	})
	if err != nil {
		return nil, err
	}
	sweep, err := app.NewShardedFinality(p.Router, by)
	if err != nil {
		return nil, err
	}
	return NewHandler(sweep, p.Config.FinalityBudget, p.Config.FinalityInterval, p.Log)
}

func serve(w http.ResponseWriter, r *http.Request) {
	h, err := lazy.Get(r.Context())
	if err != nil {
		http.Error(w, "finality sweep unavailable: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	h.ServeHTTP(w, r)
}
