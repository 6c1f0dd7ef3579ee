// Package submit is the Submit function: triggered by a Pub/Sub message on
// the `submit` topic (a signer has work), it drains the signer's ALLOCATED
// transactions under the signer's chain lease. It returns an error, so that
// Pub/Sub retries with backoff, when the lease is held elsewhere or a
// broadcast failed for a reason that may pass; it acks malformed messages
// and prompts for signers this deployment has no key for, and a prompt
// that found the lease held elsewhere once it is as old as the resubmit
// interval, from which the resubmit sweep re-prompts stranded work itself
// (see fnevent.HandlePrompt).
package submit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/ethereum/go-ethereum/common"

	fnevent "github.com/txfence/txfence/functions/internal/event"
	"github.com/txfence/txfence/shared/app"
	"github.com/txfence/txfence/shared/metrics"
)

// Drainer drains one signer: *app.DrainSigner, or *app.ShardedDrain,
// which sends the signer to its shard's.
type Drainer interface {
	Execute(ctx context.Context, chainID uint64, signer common.Address) (app.DrainResult, error)
}

// Handler handles submit prompts.
type Handler struct {
	drain   Drainer
	handOff time.Duration
	metrics *metrics.Metrics
	log     *slog.Logger
}

// NewHandler returns the handler. handOff is the prompt age from which a
// signer busy elsewhere is left to the resubmit sweep (the configured
// ResubmitInterval: it re-prompts ALLOCATED work untouched that long).
func NewHandler(drain Drainer, handOff time.Duration, m *metrics.Metrics, log *slog.Logger) (*Handler, error) {
	if drain == nil || drain == Drainer((*app.DrainSigner)(nil)) || log == nil {
		return nil, errors.New("new submit handler: drain and logger are required")
	}
	return &Handler{drain: drain, handOff: handOff, metrics: m, log: log}, nil
}

// Handle processes one CloudEvent.
func (h *Handler) Handle(ctx context.Context, e event.Event) error {
	return fnevent.HandlePrompt(ctx, e, h.metrics, h.log, "submit", h.handOff, func(ctx context.Context, chainID uint64, signer common.Address) (string, error) {
		res, err := h.drain.Execute(ctx, chainID, signer)
		return fmt.Sprintf("broadcast %d, stuck %d, full %t, handed over %d, yielded %t, coalesced %t", res.Broadcast, res.Stuck, res.Full,
			res.HandedOver, res.Yielded, res.Coalesced), err
	})
}
