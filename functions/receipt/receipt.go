// Package receipt is the Receipt function: triggered by a Pub/Sub message on
// the `receipt` topic, it checks the signer's broadcast transactions for
// receipts and writes them fenced (MINED). While some have none it returns
// an error, so the subscription's retry policy backs off and nothing spins,
// until the prompt is as old as the stale-receipt timeout: from then on the
// finality sweep checks those transactions itself and the prompt is acked,
// so a transaction that takes long to be mined never sends its prompt to
// the dead-letter topic (see fnevent.HandlePrompt).
package receipt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/GoogleCloudPlatform/functions-framework-go/functions"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/ethereum/go-ethereum/common"

	"github.com/txfence/txfence/functions/internal/deps"
	fnevent "github.com/txfence/txfence/functions/internal/event"
	"github.com/txfence/txfence/functions/internal/ready"
	"github.com/txfence/txfence/shared/app"
	"github.com/txfence/txfence/shared/metrics"
)

// Checker checks one signer's receipts: *app.CheckReceipts, or
// *app.ShardedReceipts, which sends the signer to its shard's.
type Checker interface {
	Execute(ctx context.Context, chainID uint64, signer common.Address) (int, error)
}

// Handler handles receipt prompts.
type Handler struct {
	check   Checker
	handOff time.Duration
	metrics *metrics.Metrics
	log     *slog.Logger
}

// NewHandler returns the handler. handOff is the prompt age from which a
// receipt not mined yet is left to the finality sweep (the configured
// StaleReceiptTimeout: the sweep checks TRACKING transactions untouched
// that long).
func NewHandler(check Checker, handOff time.Duration, m *metrics.Metrics, log *slog.Logger) (*Handler, error) {
	if check == nil || check == Checker((*app.CheckReceipts)(nil)) || log == nil {
		return nil, errors.New("new receipt handler: check and logger are required")
	}
	return &Handler{check: check, handOff: handOff, metrics: m, log: log}, nil
}

// Handle processes one CloudEvent.
func (h *Handler) Handle(ctx context.Context, e event.Event) error {
	return fnevent.HandlePrompt(ctx, e, h.metrics, h.log, "receipt", h.handOff, func(ctx context.Context, chainID uint64, signer common.Address) (string, error) {
		n, err := h.check.Execute(ctx, chainID, signer)
		return fmt.Sprintf("mined %d", n), err
	})
}

// The Functions Framework's own CloudEvent serving can wedge under concurrent
// pushes (see fnevent.Handler). GET /ready is Cloud Run's startup probe.
func init() {
	functions.HTTP("Receipt", ready.Probe(ready.Databases(os.LookupEnv), fnevent.Handler(handle)))
}

var lazy = deps.Lazy[*Handler]{Build: Build}

// Build is the Receipt handler over the process's dependencies: one
// CheckReceipts per shard, each signer's prompt routed to its shard's.
func Build(_ context.Context, p *deps.Process) (*Handler, error) {
	by, err := deps.PerShard(p, func(sh *deps.Shard) (*app.CheckReceipts, error) {
		return app.NewCheckReceipts(sh.Store, sh.Store.Leases(), p.ChainPorts(), sh.Relay, p.Config, p.Metrics, p.Log)
	})
	if err != nil {
		return nil, err
	}
	if !p.Config.Sharded() {
		return NewHandler(by[""], p.Config.StaleReceiptTimeout, p.Metrics, p.Log)
	}
	check, err := app.NewShardedReceipts(p.Router, by)
	if err != nil {
		return nil, err
	}
	return NewHandler(check, p.Config.StaleReceiptTimeout, p.Metrics, p.Log)
}

func handle(ctx context.Context, e event.Event) error {
	h, err := lazy.Get(ctx)
	if err != nil {
		return err
	}
	return h.Handle(ctx, e)
}
