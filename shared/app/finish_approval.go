package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/txm"
)

// ApprovalStore is the storage the approval use cases need.
type ApprovalStore interface {
	txm.ApprovalStore
	GetTx(ctx context.Context, id string) (*txm.Tx, error)
}

// FinishApproval takes a transaction that waited for approval and has its
// approvals on to what its approvals allow: simulated again and judged by
// its creator's policy as it is now (CreateTx.AllocateApproved), it is
// allocated its signer's next nonce and flows as any other transaction;
// when the call reverts now it ends FAILED_FINAL reverted_at_approval
// (the revert recorded with its simulation), when the policy or its values
// refuse it now FAILED_FINAL refused_at_approval (the last error names the
// rule), each with its outcome reported. Anything else (the chain or the
// database unavailable) leaves it waiting; the approval sweep, or the next
// approval, tries again. Concurrent finishes of one transaction allocate it
// once: the allocation numbers the held row under the nonce lease only
// while it waits, and an end moves it only while it waits.
type FinishApproval struct {
	store    ApprovalStore
	create   *CreateTx
	policies *Policies
	relay    *Relay
	log      *slog.Logger
}

// NewFinishApproval returns the use case. relay may be nil.
func NewFinishApproval(store ApprovalStore, create *CreateTx, policies *Policies, relay *Relay, log *slog.Logger) (*FinishApproval, error) {
	if store == nil || create == nil || policies == nil || log == nil {
		return nil, errors.New("new finish approval: store, create, policies and logger are required")
	}
	return &FinishApproval{store: store, create: create, policies: policies, relay: relay, log: log}, nil
}

// Execute finishes txID if it waits for approval and has its approvals,
// and returns it as it is then. An error with a transaction says that it
// is still waiting and why.
func (u *FinishApproval) Execute(ctx context.Context, txID string) (*txm.Tx, error) {
	t, err := u.store.GetTx(ctx, txID)
	if err != nil {
		return nil, err
	}
	if t.State != txm.StatePendingApproval || t.Approval == nil || !t.Approval.Complete() {
		return t, nil
	}
	pol, err := u.policies.For(ctx, txm.Principal{ID: t.Principal})
	if err != nil {
		return t, fmt.Errorf("finish approval of %s: %w", txID, err)
	}
	r := approvedRequest(t)
	_, err = u.create.AllocateApproved(ctx, pol, r, txID)
	if err != nil {
		sub, detail, sim := failedAtApproval(err, r)
		if sub == "" {
			u.log.WarnContext(ctx, "allocation of an approved transaction failed; it waits to be allocated again",
				slog.String(logging.KeyTxID, txID), slog.Any("error", err))
			return t, fmt.Errorf("finish approval of %s: %w", txID, err)
		}
		outbox, err := u.store.EndApproval(ctx, txID, sub, detail, sim)
		if err != nil {
			return t, err
		}
		u.relay.Publish(ctx, outbox)
		u.log.InfoContext(ctx, "approved transaction ended at approval", slog.String(logging.KeyTxID, txID),
			slog.String("sub_state", sub), slog.String("detail", detail))
	}
	return u.store.GetTx(ctx, txID)
}

// failedAtApproval says how an approved transaction whose allocation failed
// with err ends: its sub-state, last error and simulation to record; no
// sub-state for a failure that may pass (the chain or the database
// unavailable).
func failedAtApproval(err error, r *txm.Request) (string, string, *txm.SimRecord) {
	var rev *txm.RevertedError
	var failed *txm.ExecutionError
	var refusal *txm.Refusal
	var invalid *txm.ValidationError
	switch {
	case errors.As(err, &rev):
		reason := rev.Revert.String()
		return txm.SubStateRevertedAtApproval, "simulated again at approval, the call reverts: " + reason,
			&txm.SimRecord{Method: r.Simulation, Revert: reason}
	case errors.As(err, &failed):
		return txm.SubStateRevertedAtApproval, "simulated again at approval, the call fails: " + failed.Error(), nil
	case errors.As(err, &refusal):
		return txm.SubStateRefusedAtApproval, "checked again at approval, " + refusal.Error(), nil
	case errors.As(err, &invalid):
		msgs := make([]string, len(invalid.Fields))
		for i, f := range invalid.Fields {
			msgs[i] = strings.TrimSpace(f.Field + " " + f.Message)
		}
		return txm.SubStateRefusedAtApproval, "checked again at approval: " + strings.Join(msgs, "; "), nil
	case errors.Is(err, txm.ErrInvalid):
		return txm.SubStateRefusedAtApproval, "checked again at approval, its values were refused", nil
	}
	return "", "", nil
}
