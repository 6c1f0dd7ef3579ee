// Package resubmit is the ResubmitSweep function: triggered by Cloud
// Scheduler, it re-prompts stranded ALLOCATED work, rebroadcasts the
// persisted bytes of transactions not seen mined for a resubmit interval,
// and moves those that stop progressing to STUCK.
package resubmit

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/GoogleCloudPlatform/functions-framework-go/functions"

	"github.com/txfence/txfence/functions/internal/deps"
	"github.com/txfence/txfence/functions/internal/scheduled"
	"github.com/txfence/txfence/shared/app"
)

// Handler runs one sweep per call.
type Handler struct {
	sweep *app.SweepResubmit
	log   *slog.Logger
}

// NewHandler returns the handler.
func NewHandler(sweep *app.SweepResubmit, log *slog.Logger) (*Handler, error) {
	if sweep == nil || log == nil {
		return nil, errors.New("new resubmit handler: sweep and logger are required")
	}
	return &Handler{sweep: sweep, log: log}, nil
}

// ServeHTTP sweeps once and reports what it did.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	scheduled.Serve(w, r, h.log, "resubmit sweep", func(ctx context.Context) (any, error) { return h.sweep.Pass(ctx) })
}

func init() { functions.HTTP("ResubmitSweep", serve) }

var lazy = deps.Lazy[*Handler]{Build: func(_ context.Context, p *deps.Process) (*Handler, error) {
	sweep, err := app.NewSweepResubmit(p.Store, p.Store.Leases(), p.ChainPorts(), p.Relay, p.Config, p.Metrics, p.Log)
	if err != nil {
		return nil, err
	}
	return NewHandler(sweep, p.Log)
}}

func serve(w http.ResponseWriter, r *http.Request) {
	h, err := lazy.Get(r.Context())
	if err != nil {
		http.Error(w, "resubmit sweep unavailable: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	h.ServeHTTP(w, r)
}
