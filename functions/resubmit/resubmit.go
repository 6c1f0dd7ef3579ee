// Package resubmit is the ResubmitSweep function: triggered by Cloud
// Scheduler, it keeps sweeping for most of the scheduler's period
// (TXFENCE_RESUBMIT_BUDGET, passes TXFENCE_RESUBMIT_PASS_INTERVAL apart):
// re-prompts ALLOCATED work whose backoff ran out, bumps the fees of
// transactions not mined in time, rebroadcasts, reports STUCK, works STUCK
// transactions through the stuck-resolution policy, carries out pending
// admin actions, and expires the transactions whose approval expired (or
// allocates those that have their approvals and still wait). It signs, so
// it needs the signers' keys.
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
	_, policies, err := p.Auth(ctx)
	if err != nil {
		return nil, err
	}
	readers := map[uint64]app.ChainReader{}
	for id, c := range p.Chains {
		readers[id] = c
	}
	by, err := deps.PerShard(p, func(sh *deps.Shard) (*app.SweepResubmit, error) {
		sweep, err := app.NewSweepResubmit(sh.Store, sh.Store.Leases(), p.ChainPorts(), signers, hook, sh.Relay, p.Config.Resubmit(), p.Metrics, p.Log)
		if err != nil {
			return nil, err
		}
		// What waits for approval is expired, or allocated once it has its
		// approvals, by each pass: the allocation is a create's.
		create, err := app.NewCreateTx(sh.Store, readers, sh.Relay, policies, p.Config.Create(), p.Metrics, p.Log)
		if err != nil {
			return nil, err
		}
		finish, err := app.NewFinishApproval(sh.Store, create, policies, sh.Relay, p.Log)
		if err != nil {
			return nil, err
		}
		approvals, err := app.NewSweepApprovals(sh.Store, finish, sh.Relay, p.Log)
		if err != nil {
			return nil, err
		}
		sweep.SetApprovals(approvals)
		return sweep, nil
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
