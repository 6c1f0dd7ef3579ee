package app

import (
	"context"
	"errors"
	"log/slog"
	"math/big"
	"unicode/utf8"

	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/txm"
)

// RequestAction records an admin action on one transaction — resubmit,
// replace (optionally with the admin's fees), cancel — idempotently under the
// caller's action id, and prompts the signer's Submit function, which
// carries it out under the signer's chain lease with the key (the API never
// signs). A state where the action makes no sense is ErrActionNotAllowed;
// bad input a *txm.ValidationError; nothing is written for either.
type RequestAction struct {
	store   txm.ActionStore
	relay   *Relay
	ceiling *big.Int // largest fee an admin may choose (TXFENCE_MAX_FEE_CAP_WEI)
	log     *slog.Logger
}

// NewRequestAction returns the use case. relay may be nil.
func NewRequestAction(store txm.ActionStore, relay *Relay, feeCeiling *big.Int, log *slog.Logger) (*RequestAction, error) {
	if store == nil || log == nil {
		return nil, errors.New("new request action: store and logger are required")
	}
	return &RequestAction{store: store, relay: relay, ceiling: feeCeiling, log: log}, nil
}

// Execute validates and records r. It returns the action and whether it
// was created (false: a replay of the same action id and payload); a replay
// with another payload returns the existing action and ErrConflict.
func (u *RequestAction) Execute(ctx context.Context, r txm.ActionRequest) (txm.Action, bool, error) {
	if err := u.validate(r); err != nil {
		return txm.Action{}, false, err
	}
	a, created, outbox, err := u.store.RecordAction(ctx, r)
	if err != nil {
		return a, false, err
	}
	if created {
		u.log.InfoContext(ctx, "admin action recorded", slog.String(logging.KeyTxID, r.TxID), slog.String("action", string(r.Kind)),
			slog.String("action_id", r.ActionID), slog.String("actor", r.Actor))
		u.relay.Publish(ctx, outbox)
	}
	return a, created, nil
}

func (u *RequestAction) validate(r txm.ActionRequest) error {
	v := &txm.ValidationError{}
	switch r.Kind {
	case txm.ActionResubmit, txm.ActionReplace, txm.ActionCancelTx:
	default:
		v.Add("action", "must be resubmit, replace or cancel")
	}
	if r.ActionID == "" || len(r.ActionID) > 200 || !utf8.ValidString(r.ActionID) {
		v.Add("actionId", "is required (or the Idempotency-Key header): 1 to 200 characters")
	}
	if r.Reason == "" || len(r.Reason) > 1000 || !utf8.ValidString(r.Reason) {
		v.Add("reason", "is required: why, in 1 to 1000 characters, for the audit trail")
	}
	if r.Actor == "" {
		v.Add("actor", "is required")
	}
	if f := r.Fees; f != nil {
		if r.Kind != txm.ActionReplace {
			v.Add("maxFeePerGas", "fees can only be given to replace")
		}
		legacy := f.GasPrice != nil
		switch {
		case legacy && (f.MaxFeePerGas != nil || f.MaxPriorityFeePerGas != nil):
			v.Add("gasPrice", "give either gasPrice (legacy) or maxFeePerGas and maxPriorityFeePerGas, not both")
		case !legacy && (f.MaxFeePerGas == nil || f.MaxPriorityFeePerGas == nil):
			v.Add("maxFeePerGas", "give both maxFeePerGas and maxPriorityFeePerGas (or gasPrice)")
		case !legacy && f.MaxPriorityFeePerGas.Cmp(f.MaxFeePerGas) > 0:
			v.Add("maxPriorityFeePerGas", "must not exceed maxFeePerGas")
		}
		for _, fv := range []struct {
			name string
			v    *big.Int
		}{{"maxFeePerGas", f.MaxFeePerGas}, {"maxPriorityFeePerGas", f.MaxPriorityFeePerGas}, {"gasPrice", f.GasPrice}} {
			if fv.v != nil && u.ceiling != nil && fv.v.Cmp(u.ceiling) > 0 {
				v.Add(fv.name, "%s wei exceeds the cap of %s wei", fv.v, u.ceiling)
			}
		}
	}
	return v.Err()
}
