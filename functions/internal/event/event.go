// Package event decodes the Pub/Sub push CloudEvents that trigger txfence's
// event functions (google.cloud.pubsub.topic.v1.messagePublished).
package event

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/ethereum/go-ethereum/common"
	"go.opentelemetry.io/otel/attribute"

	"github.com/txfence/txfence/shared/app"
	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/metrics"
	"github.com/txfence/txfence/shared/txm"
)

// MessagePublished is the CloudEvent data of a Pub/Sub message.
type MessagePublished struct {
	Message struct {
		Data        []byte            `json:"data"` // base64 in JSON
		Attributes  map[string]string `json:"attributes"`
		MessageID   string            `json:"messageId"`
		OrderingKey string            `json:"orderingKey"`
	} `json:"message"`
	Subscription string `json:"subscription"`
}

// Prompt decodes a submit or receipt prompt: which signer on which chain has
// work. A malformed message is an error the caller should ack (a redelivery
// cannot fix it), so it is returned as *Malformed.
func Prompt(e event.Event) (uint64, common.Address, error) {
	var m MessagePublished
	if err := json.Unmarshal(e.Data(), &m); err != nil {
		return 0, common.Address{}, &Malformed{Reason: fmt.Sprintf("event data: %v", err)}
	}
	var p txm.PromptMessage
	if err := json.Unmarshal(m.Message.Data, &p); err != nil {
		return 0, common.Address{}, &Malformed{Reason: fmt.Sprintf("message data: %v", err)}
	}
	signer, err := txm.ParseAddress(p.Signer)
	if err != nil || p.ChainID == 0 {
		return 0, common.Address{}, &Malformed{Reason: fmt.Sprintf("prompt %q: chain id and a valid signer are required", m.Message.Data)}
	}
	return p.ChainID, signer, nil
}

// Malformed is a message no retry can make valid.
type Malformed struct{ Reason string }

func (e *Malformed) Error() string { return "malformed message: " + e.Reason }

// HandlePrompt decodes e and runs work for its signer. It acks (returns nil)
// malformed prompts and those for signers this deployment does not serve,
// logging them. Any other error from work is returned so that Pub/Sub
// redelivers with backoff, with one exception that decides what a dead
// letter means.
//
// A dead letter is a prompt an operator must look at: its work failed on
// every delivery (the database, the chain's RPC endpoints or the function
// itself broken for as long as the subscription retries). Waiting is not
// failing: a receipt not mined yet (app.ErrNotMined) or a signer whose
// chain lease another invocation holds (app.ErrNoLease) is normal under
// load. Such a prompt is retried while it is younger than handOff, the age
// from which a sweep finds the same work by itself (stale TRACKING
// transactions for the finality sweep, stranded ALLOCATED ones for the
// resubmit sweep), and acked from then on, so waiting never exhausts the
// subscription's deliveries; a handOff of 0 acks it at once. The age is the CloudEvent's time, which the
// Functions Framework and Eventarc set to the message's publish time and
// which stays the same on every redelivery; a prompt without one is
// retried as before.
//
// Each prompt is the root span of its own trace, named name, whose log
// lines carry it: a prompt says a signer has work, whichever requests made
// it (PostgreSQL decides what the work is), so continuing the trace of the
// request that published it would file one drain under one create among
// many. The span records the prompt's event id, chain and signer, and how
// it ended (done, dropped, left_to_sweeps, retry).
func HandlePrompt(ctx context.Context, e event.Event, m *metrics.Metrics, log *slog.Logger, name string, handOff time.Duration,
	work func(ctx context.Context, chainID uint64, signer common.Address) (string, error)) error {
	ctx, span := m.StartRoot(ctx, name)
	defer span.End()
	chainID, signer, err := Prompt(e)
	var bad *Malformed
	if errors.As(err, &bad) {
		metrics.SetResult(span, "malformed", false)
		log.ErrorContext(ctx, "dropping malformed "+name+" prompt", slog.String(logging.KeyEventID, e.ID()), slog.Any("error", err))
		return nil
	}
	if span.IsRecording() {
		span.SetAttributes(attribute.String("txfence.event_id", e.ID()), attribute.Int64("txfence.chain_id", int64(chainID)),
			attribute.String("txfence.signer", txm.CanonicalAddress(signer)))
	}
	start := time.Now()
	summary, err := work(ctx, chainID, signer)
	// took is the work's own time; waited, the time from the publish to the
	// delivery (a backlog in the subscription, or retries).
	attrs := []any{slog.String(logging.KeyEventID, e.ID()), slog.String(logging.KeySigner, txm.CanonicalAddress(signer)), slog.String("result", summary),
		slog.Duration("took", time.Since(start))}
	if !e.Time().IsZero() {
		attrs = append(attrs, slog.Duration("waited", max(start.Sub(e.Time()), 0)))
	}
	switch {
	case errors.Is(err, app.ErrNotServed):
		metrics.SetResult(span, "dropped", false)
		log.ErrorContext(ctx, "dropping "+name+" prompt", append(attrs, slog.Any("error", err))...)
		return nil
	case Waiting(err) && (handOff <= 0 || !e.Time().IsZero() && time.Since(e.Time()) >= handOff):
		metrics.SetResult(span, "left_to_sweeps", false)
		log.InfoContext(ctx, name+" left to the sweeps", append(attrs, slog.Any("error", err),
			slog.Duration("age", time.Since(e.Time())))...)
		return nil
	case err != nil:
		metrics.SetResult(span, "retry", !Waiting(err))
		log.WarnContext(ctx, name+" will be retried", append(attrs, slog.Any("error", err))...)
		return err
	}
	metrics.SetResult(span, "done", false)
	log.InfoContext(ctx, name+" done", attrs...)
	return nil
}

// Waiting reports whether err only says the work is not done yet (nothing
// failed): a receipt not mined yet, or the signer's chain lease held by
// another invocation.
func Waiting(err error) bool {
	return errors.Is(err, app.ErrNotMined) || errors.Is(err, app.ErrNoLease)
}
