// Package receipt is the Receipt function: triggered by a Pub/Sub message on
// the `receipt` topic, it checks the signer's broadcast transactions for
// receipts and writes them fenced (MINED). While some have none it returns
// an error, so the subscription's retry policy backs off; nothing spins.
package receipt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/GoogleCloudPlatform/functions-framework-go/functions"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/ethereum/go-ethereum/common"

	"github.com/txfence/txfence/functions/internal/deps"
	fnevent "github.com/txfence/txfence/functions/internal/event"
	"github.com/txfence/txfence/shared/app"
)

// Handler handles receipt prompts.
type Handler struct {
	check *app.CheckReceipts
	log   *slog.Logger
}

// NewHandler returns the handler.
func NewHandler(check *app.CheckReceipts, log *slog.Logger) (*Handler, error) {
	if check == nil || log == nil {
		return nil, errors.New("new receipt handler: check and logger are required")
	}
	return &Handler{check: check, log: log}, nil
}

// Handle processes one CloudEvent.
func (h *Handler) Handle(ctx context.Context, e event.Event) error {
	return fnevent.HandlePrompt(ctx, e, h.log, "receipt", func(ctx context.Context, chainID uint64, signer common.Address) (string, error) {
		n, err := h.check.Execute(ctx, chainID, signer)
		return fmt.Sprintf("mined %d", n), err
	})
}

func init() { functions.CloudEvent("Receipt", handle) }

var lazy = deps.Lazy[*Handler]{Build: func(_ context.Context, p *deps.Process) (*Handler, error) {
	check, err := app.NewCheckReceipts(p.Store, p.Store.Leases(), p.ChainPorts(), p.Relay, p.Config, p.Metrics, p.Log)
	if err != nil {
		return nil, err
	}
	return NewHandler(check, p.Log)
}}

func handle(ctx context.Context, e event.Event) error {
	h, err := lazy.Get(ctx)
	if err != nil {
		return err
	}
	return h.Handle(ctx, e)
}
