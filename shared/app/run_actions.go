package app

import (
	"context"
	"fmt"

	"github.com/txfence/txfence/shared/txm"
)

// runActions carries out a signer's pending admin actions, oldest first,
// under the chain lease l: each writes its attempt and its audit fenced
// before the chain sees anything. An action that cannot be carried out (the
// transaction was mined meanwhile, the fees are too low) is marked failed
// with the reason and changes nothing else; one that fails for a reason that
// may pass (the signer or the node) stays pending for the next prompt.
func (w *attempter) runActions(ctx context.Context, q txm.ActionQueue, l txm.Lease, chain txm.Chain, sig txm.Signer) error {
	pending, err := q.PendingActions(ctx, l.Key.ChainID, l.Key.Signer)
	if err != nil {
		return err
	}
	for _, p := range pending {
		if p.Tx == nil {
			continue
		}
		finish := func(status txm.ActionStatus, result string) error {
			a := p.Action
			a.Status, a.Result = status, result
			w.metrics.Resubmit(ctx, "action_"+string(status))
			return q.FinishAction(ctx, l, a)
		}
		if !p.Kind.AllowedIn(p.Tx.State) {
			if err := finish(txm.ActionFailed, fmt.Sprintf("the transaction is %s now", p.Tx.State)); err != nil {
				return err
			}
			continue
		}
		audit := txm.Audit{Action: string(p.Kind), Actor: p.Actor, Reason: p.Reason, ActionID: p.ActionID}
		var r round
		switch p.Kind {
		case txm.ActionResubmit:
			a := txm.BestAccepted(p.Attempts)
			if a == nil {
				// Nothing signed yet: the drain that follows sends it.
				if err := finish(txm.ActionDone, "not signed yet; submitted with the signer's queue"); err != nil {
					return err
				}
				continue
			}
			if r, err = w.rebroadcast(ctx, l, chain, p.Tracked, a); err != nil {
				return err
			}
			result := fmt.Sprintf("attempt %d broadcast again", a.No)
			if !r.sent {
				result = fmt.Sprintf("attempt %d was refused (%s); the transaction keeps being worked with backoff", a.No, r.reason)
			}
			if err := finish(txm.ActionDone, result); err != nil {
				return err
			}
			continue
		case txm.ActionReplace:
			r, err = w.replace(ctx, l, chain, sig, p.Tracked, replacement{fees: p.Fees, audit: audit})
		case txm.ActionCancelTx:
			r, err = w.replace(ctx, l, chain, sig, p.Tracked, replacement{kind: txm.AttemptCancel, audit: audit})
		}
		if err != nil {
			return err
		}
		switch {
		case r.refused != nil:
			err = finish(txm.ActionFailed, r.refused.Error())
		case !r.saved && r.sent:
			err = finish(txm.ActionDone, "an identical earlier attempt was broadcast again")
		}
		if err != nil {
			return err
		}
	}
	return nil
}
