// Package submit is the Submit function: triggered by a Pub/Sub message on
// the `submit` topic (a signer has work), it drains the signer's ALLOCATED
// transactions under the signer's chain lease. It returns an error, so that
// Pub/Sub retries with backoff, when the lease is held elsewhere or a
// broadcast failed for a reason that may pass; it acks malformed messages
// and prompts for signers this deployment has no key for.
package submit

import (
	"context"
	"errors"
	"log/slog"

	"github.com/cloudevents/sdk-go/v2/event"

	fnevent "github.com/txfence/txfence/functions/internal/event"
	"github.com/txfence/txfence/shared/app"
	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/txm"
)

// Handler handles submit prompts.
type Handler struct {
	drain *app.DrainSigner
	log   *slog.Logger
}

// NewHandler returns the handler.
func NewHandler(drain *app.DrainSigner, log *slog.Logger) (*Handler, error) {
	if drain == nil || log == nil {
		return nil, errors.New("new submit handler: drain and logger are required")
	}
	return &Handler{drain: drain, log: log}, nil
}

// Handle processes one CloudEvent.
func (h *Handler) Handle(ctx context.Context, e event.Event) error {
	chainID, signer, err := fnevent.Prompt(e)
	var bad *fnevent.Malformed
	if errors.As(err, &bad) {
		h.log.ErrorContext(ctx, "dropping malformed submit prompt", slog.String(logging.KeyEventID, e.ID()), slog.Any("error", err))
		return nil
	}
	res, err := h.drain.Execute(ctx, chainID, signer)
	attrs := []any{slog.String(logging.KeyEventID, e.ID()), slog.String(logging.KeySigner, txm.CanonicalAddress(signer)),
		slog.Int("broadcast", res.Broadcast), slog.Int("stuck", res.Stuck), slog.Bool("full", res.Full)}
	if errors.Is(err, app.ErrNotServed) {
		h.log.ErrorContext(ctx, "dropping submit prompt", append(attrs, slog.Any("error", err))...)
		return nil
	}
	if err != nil {
		h.log.WarnContext(ctx, "submit will be retried", append(attrs, slog.Any("error", err))...)
		return err
	}
	h.log.InfoContext(ctx, "submit drained", attrs...)
	return nil
}
