// Package resubmit is the ResubmitSweep function: triggered by Cloud
// Scheduler, it keeps sweeping for most of the scheduler's period
// (TXFENCE_RESUBMIT_BUDGET, passes TXFENCE_RESUBMIT_PASS_INTERVAL apart):
// re-prompts ALLOCATED work whose backoff ran out, bumps the fees of
// transactions not mined in time, rebroadcasts, reports STUCK, works STUCK
// transactions through the stuck-resolution policy, and carries out pending
// admin actions. It signs, so it needs the signers' keys.
package resubmit

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

// Sweeper sweeps for a budget: *app.ShardedResubmit, which sweeps every
// shard's *app.SweepResubmit at once (tests may give one).
type Sweeper interface {
	Run(ctx context.Context, budget, interval time.Duration) (app.ResubmitStats, error)
}

// Handler runs one sweep per call.
type Handler struct {
	sweep    Sweeper
	log      *slog.Logger
	budget   time.Duration
	interval time.Duration
}

// NewHandler returns the handler.
func NewHandler(sweep Sweeper, budget, interval time.Duration, log *slog.Logger) (*Handler, error) {
	if sweep == nil || sweep == Sweeper((*app.SweepResubmit)(nil)) || log == nil || budget <= 0 || interval <= 0 {
		return nil, errors.New("new resubmit handler: sweep, logger and a positive budget and interval are required")
	}
	return &Handler{sweep: sweep, log: log, budget: budget, interval: interval}, nil
}

// ServeHTTP sweeps for the budget and reports what it did.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	scheduled.Serve(w, r, h.log, "resubmit sweep", func(ctx context.Context) (any, error) {
		return h.sweep.Run(ctx, h.budget, h.interval)
	})
}

func init() { functions.HTTP("ResubmitSweep", serve) }

var lazy = deps.Lazy[*Handler]{Build: Build}

// Build is the ResubmitSweep handler over the process's dependencies: one
// sweep per shard (the one database being the one shard), all run at once.
func Build(ctx context.Context, p *deps.Process) (*Handler, error) {
	signers, err := p.Signers(ctx)
	if err != nil {
		return nil, err
	}
	hook, err := p.StuckPolicy()
	if err != nil {
		return nil, err
	}
	by, err := deps.PerShard(p, func(sh *deps.Shard) (*app.SweepResubmit, error) {
		return app.NewSweepResubmit(sh.Store, sh.Store.Leases(), p.ChainPorts(), signers, hook, sh.Relay, p.Config.Resubmit(), p.Metrics, p.Log)
	})
	if err != nil {
		return nil, err
	}
	sweep, err := app.NewShardedResubmit(p.Router, by)
	if err != nil {
		return nil, err
	}
	return NewHandler(sweep, p.Config.ResubmitBudget, p.Config.ResubmitPass, p.Log)
}

func serve(w http.ResponseWriter, r *http.Request) {
	h, err := lazy.Get(r.Context())
	if err != nil {
		http.Error(w, "resubmit sweep unavailable: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	h.ServeHTTP(w, r)
}
