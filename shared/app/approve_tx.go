package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/txm"
)

// ApproveTx records an approver's approval of a transaction that waits for
// approval, and at its last approval finishes it (FinishApproval):
// simulated and judged again, then allocated its signer's next nonce, or
// ended. The decision is written in its own statement before the
// allocation, so that a crash after it loses nothing: the approval sweep
// finishes what has its approvals and still waits. Who may not read the
// transaction is told it does not exist (ErrNotFound); the requester
// deciding on its own request is txm.ErrSelfApproval, a principal the rule
// does not name (nor grants its role) txm.ErrNotApprover, a second decision
// txm.ErrAlreadyDecided, a transaction that does not wait (or whose
// approval expired) txm.ErrNotPendingApproval. Each decision, and each
// refused one, is written to the audit log.
type ApproveTx struct {
	store    ApprovalStore
	finish   *FinishApproval
	policies *Policies
	log      *slog.Logger
}

// NewApproveTx returns the use case.
func NewApproveTx(store ApprovalStore, finish *FinishApproval, policies *Policies, log *slog.Logger) (*ApproveTx, error) {
	if store == nil || finish == nil || policies == nil || log == nil {
		return nil, errors.New("new approve tx: store, finish, policies and logger are required")
	}
	return &ApproveTx{store: store, finish: finish, policies: policies, log: log}, nil
}

// Execute approves txID as who, whose policy is pol, with an optional
// comment, and returns the transaction as it is then: still waiting, or
// ALLOCATED with its nonce, or FAILED_FINAL when its last approval found it
// failing. An allocation that could not be made now (the chain or the
// database unavailable) leaves it waiting with its approvals; it is
// answered all the same, and the sweep allocates it.
func (u *ApproveTx) Execute(ctx context.Context, who txm.Principal, pol txm.Policy, txID, comment string) (*txm.Tx, error) {
	t, err := decidable(ctx, u.store, u.policies, who, pol, txID, txm.DecisionApprove, comment)
	if err != nil {
		return nil, err
	}
	if err := u.store.Decide(ctx, t.ID, who.ID, comment); err != nil {
		auditDecision(ctx, u.policies, who, txm.DecisionApprove, t.ID, err, comment)
		return nil, err
	}
	auditDecision(ctx, u.policies, who, txm.DecisionApprove, t.ID, nil, comment)
	u.log.InfoContext(ctx, "approved", slog.String(logging.KeyTxID, t.ID), slog.String(logging.KeyPrincipal, who.ID))
	done, err := u.finish.Execute(ctx, t.ID)
	switch {
	case done == nil:
		return nil, err
	case err != nil:
		u.log.WarnContext(ctx, "approval recorded; the allocation it allows waits for the approval sweep",
			slog.String(logging.KeyTxID, t.ID), slog.Any("error", err))
	}
	return done, nil
}

// decidable reads txID for a decision by who and checks that who may make
// it (a refusal is audited), and that its text is fit to keep.
func decidable(ctx context.Context, store ApprovalStore, policies *Policies, who txm.Principal, pol txm.Policy, txID string,
	d txm.Decision, text string) (*txm.Tx, error) {
	t, err := store.GetTx(ctx, txID)
	if err != nil {
		return nil, err
	}
	if !pol.CanRead(who.ID, t) {
		return nil, fmt.Errorf("%s %s: %w", d, txID, txm.ErrNotFound)
	}
	if err := t.CheckDecider(who.ID, pol); err != nil {
		auditDecision(ctx, policies, who, d, t.ID, err, text)
		return nil, err
	}
	if err := txm.CheckDecisionText(d, text); err != nil {
		return nil, err
	}
	return t, nil
}

// auditDecision writes a decision, or its refusal (err), to the audit log.
func auditDecision(ctx context.Context, policies *Policies, who txm.Principal, d txm.Decision, txID string, err error, text string) {
	outcome := "ok"
	switch {
	case err == nil:
	case errors.Is(err, txm.ErrSelfApproval):
		outcome = "refused:self_approval"
	case errors.Is(err, txm.ErrNotApprover):
		outcome = "refused:not_approver"
	case errors.Is(err, txm.ErrAlreadyDecided):
		outcome = "conflict:already_decided"
	case errors.Is(err, txm.ErrNotPendingApproval):
		outcome = "conflict:not_pending_approval"
	default:
		return // not a decision: the store failed
	}
	policies.Audit(ctx, txm.AuditEntry{Principal: who.ID, Action: string(d), Target: txID, Outcome: outcome, Detail: text})
}
