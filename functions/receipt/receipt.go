// Package receipt is the Receipt function: triggered by a Pub/Sub message on
// the `receipt` topic, it checks the signer's broadcast transactions for
// receipts and writes them fenced (MINED), following the head for a while
// (TXFENCE_RECEIPT_WAIT) for receipts still missing. A receipt not mined
// by then, or a signer whose chain lease another invocation holds, is not a
// failure: the prompt is acked (2xx) and the finality sweep checks the
// transactions whose receipt check went stale (TXFENCE_STALE_RECEIPT_TIMEOUT)
// itself. Answering errors for waiting made Pub/Sub push slow the whole
// subscription down under load, holding back the receipts of every signer.
// Only a failure (the database or the chain's endpoints unreachable) is
// answered 500 and redelivered, and ends in the dead-letter topic if it
// lasts (see fnevent.HandlePrompt).
package receipt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/GoogleCloudPlatform/functions-framework-go/functions"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/ethereum/go-ethereum/common"

	"github.com/txfence/txfence/functions/internal/deps"
	fnevent "github.com/txfence/txfence/functions/internal/event"
	"github.com/txfence/txfence/functions/internal/ready"
	"github.com/txfence/txfence/shared/app"
	"github.com/txfence/txfence/shared/metrics"
)

// Checker checks one signer's receipts: *app.ShardedReceipts, which sends
// the signer to its shard's *app.CheckReceipts (tests may give one).
type Checker interface {
	Execute(ctx context.Context, chainID uint64, signer common.Address) (int, error)
}

// Handler handles receipt prompts.
type Handler struct {
	check   Checker
	metrics *metrics.Metrics
	log     *slog.Logger
}

// NewHandler returns the handler.
func NewHandler(check Checker, m *metrics.Metrics, log *slog.Logger) (*Handler, error) {
	if check == nil || check == Checker((*app.CheckReceipts)(nil)) || log == nil {
		return nil, errors.New("new receipt handler: check and logger are required")
	}
	return &Handler{check: check, metrics: m, log: log}, nil
}

// Handle processes one prompt; waiting is left to the sweeps at once (a
// hand-off age of 0).
func (h *Handler) Handle(ctx context.Context, e event.Event) error {
	return fnevent.HandlePrompt(ctx, e, h.metrics, h.log, "receipt", 0, func(ctx context.Context, chainID uint64, signer common.Address) (string, error) {
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
// CheckReceipts per shard (the one database being the one shard), each
// signer's prompt routed to its shard's.
func Build(_ context.Context, p *deps.Process) (*Handler, error) {
	by, err := deps.PerShard(p, func(sh *deps.Shard) (*app.CheckReceipts, error) {
		return app.NewCheckReceipts(sh.Store, sh.Store.Leases(), p.ChainPorts(), sh.Relay, p.Config.Receipts(), p.Metrics, p.Log)
	})
	if err != nil {
		return nil, err
	}
	check, err := app.NewShardedReceipts(p.Router, by)
	if err != nil {
		return nil, err
	}
	return NewHandler(check, p.Metrics, p.Log)
}

func handle(ctx context.Context, e event.Event) error {
	h, err := lazy.Get(ctx)
	if err != nil {
		return err
	}
	return h.Handle(ctx, e)
}
