package app

import (
	"context"
	"log/slog"

	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/txm"
)

// heldForApproval is what judging a create's simulation answers when the
// create passed every check and a rule of its creator's policy requires
// approval: the create leaves its allocation batch, and its own request
// holds it (hold).
type heldForApproval struct{ rule txm.ApprovalRule }

func (h *heldForApproval) Error() string { return "held for approval" }

// approvalFor is the rule r must wait for, nil when none does, or when r
// has its approvals already.
func approvalFor(pol txm.Policy, r *txm.Request) *txm.ApprovalRule {
	if r.Approved {
		return nil
	}
	return pol.ApprovalFor(r)
}

// hold writes r as a transaction waiting for approval under rule, without
// a nonce, and answers with it (202), or with the transaction its request
// id names already (a replay, or a conflict). The rolling caps are not
// counted: a held transaction sends nothing until its allocation, which
// counts them as any create's.
func (c *CreateTx) hold(ctx context.Context, who txm.Principal, r *txm.Request, txID string, rule txm.ApprovalRule) (txm.Created, error) {
	a := txm.Approval{Asset: rule.Asset(), Above: rule.Above, Required: rule.Required, Approvers: rule.Approvers,
		ApproverRole: rule.ApproverRole, GasEstimated: r.GasLimit == 0, ErrorABI: r.ErrorABI}
	t, created, err := c.store.Hold(ctx, txm.Hold{ID: txID, Request: r, Approval: a, ExpiresIn: rule.Expiry(), Owner: c.cfg.InstanceID})
	if err != nil {
		return txm.Created{}, err
	}
	if !created {
		return resolveFor(who, t, r.Fingerprint()), nil
	}
	c.log.InfoContext(ctx, "held for approval", slog.String(logging.KeyTxID, t.ID), slog.String(logging.KeySigner, txm.CanonicalAddress(r.From)),
		slog.String(logging.KeyPrincipal, who.ID), slog.String("asset", a.Asset), slog.Int("required", a.Required))
	return txm.Created{Outcome: txm.OutcomeCreated, Tx: t}, nil
}

// approvedRequest is the request of t, a transaction held for approval,
// as its creator gave it, flagged approved: its gas is estimated again when
// it was estimated at create.
func approvedRequest(t *txm.Tx) *txm.Request {
	r := t.Request
	r.Approved, r.MadeUpID = true, false
	r.GasEstimate, r.Cost, r.ExecutionFee, r.DataFee = 0, nil, nil, nil
	r.Simulation, r.Effects, r.SimulationRevert = "", nil, ""
	if t.Approval != nil {
		r.ErrorABI = t.Approval.ErrorABI
		if t.Approval.GasEstimated {
			r.GasLimit = 0
		}
	}
	return &r
}

// AllocateApproved allocates the signer's next nonce to r, the request of
// the transaction txID that waited for approval and has its approvals
// (approvedRequest), as a create of it now would be: simulated again (the
// state may have moved), judged by its creator's policy pol as it is now
// (the caps, the rules on effects, the rolling caps), and allocated under
// the nonce lease, which numbers the held row. A call that fails now is a
// *txm.RevertedError or *txm.ExecutionError, a refusal a *txm.Refusal, a
// value that no longer passes a *txm.ValidationError; any other error
// leaves the transaction waiting, to be allocated again.
func (c *CreateTx) AllocateApproved(ctx context.Context, pol txm.Policy, r *txm.Request, txID string) (txm.Created, error) {
	if err := ValidateRequest(r, c.cfg); err != nil {
		return txm.Created{}, err
	}
	if err := pol.CheckSend(r); err != nil {
		return txm.Created{}, err
	}
	r.FeeCeiling = pol.MaxFeePerGas
	return c.judgeAndQueue(ctx, txm.Principal{ID: r.Principal}, pol, r, txID)
}
