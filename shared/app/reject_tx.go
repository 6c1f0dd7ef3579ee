package app

import (
	"context"
	"errors"
	"log/slog"

	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/txm"
)

// RejectTx records an approver's rejection of a transaction that waits for
// approval, with its reason, and ends it FAILED_FINAL rejected (one
// statement: the decision, the end, its history and its reported outcome,
// then relayed). Who may decide is as for ApproveTx; a rejection needs a
// reason (a *txm.ValidationError without one).
type RejectTx struct {
	store    ApprovalStore
	policies *Policies
	relay    *Relay
	log      *slog.Logger
}

// NewRejectTx returns the use case. relay may be nil.
func NewRejectTx(store ApprovalStore, policies *Policies, relay *Relay, log *slog.Logger) (*RejectTx, error) {
	if store == nil || policies == nil || log == nil {
		return nil, errors.New("new reject tx: store, policies and logger are required")
	}
	return &RejectTx{store: store, policies: policies, relay: relay, log: log}, nil
}

// Execute rejects txID as who, whose policy is pol, for reason, and
// returns the transaction as it is then (FAILED_FINAL rejected).
func (u *RejectTx) Execute(ctx context.Context, who txm.Principal, pol txm.Policy, txID, reason string) (*txm.Tx, error) {
	t, err := decidable(ctx, u.store, u.policies, who, pol, txID, txm.DecisionReject, reason)
	if err != nil {
		return nil, err
	}
	outbox, err := u.store.Reject(ctx, t.ID, who.ID, reason)
	if err != nil {
		auditDecision(ctx, u.policies, who, txm.DecisionReject, t.ID, err, reason)
		return nil, err
	}
	auditDecision(ctx, u.policies, who, txm.DecisionReject, t.ID, nil, reason)
	u.relay.Publish(ctx, outbox)
	u.log.InfoContext(ctx, "rejected", slog.String(logging.KeyTxID, t.ID), slog.String(logging.KeyPrincipal, who.ID))
	return u.store.GetTx(ctx, t.ID)
}
