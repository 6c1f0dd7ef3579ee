package app

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/txm"
)

// NoopPolicy is the default stuck-resolution policy: keep working.
type NoopPolicy struct{}

// Resolve implements txm.StuckResolutionHook.
func (NoopPolicy) Resolve(context.Context, txm.StuckTx) (txm.Resolution, error) {
	return txm.Resolution{Action: txm.ActionNoop, By: "default"}, nil
}

// resolveStuck runs one round of work on a STUCK transaction whose backoff
// has run out: it asks the policy (unless a cancel or placeholder is already
// under way), carries out its decision, and when the round did not move the
// transaction, backs off before the next one. STUCK is never a dead end:
// the default (noop) rebroadcasts, and re-signs with fresh fees where the
// fault was fees or funds, so that a top-up, a fee drop or a raised cap lets
// the transaction and the nonces behind it go on with no hand on it.
func (s *SweepResubmit) resolveStuck(ctx context.Context, l txm.Lease, chain txm.Chain, sig txm.Signer, t txm.Tracked,
	view signerView, st *ResubmitStats) error {
	latest := txm.Latest(t.Attempts)
	res := txm.Resolution{Action: txm.ActionNoop, By: "default"}
	if latest == nil || latest.Kind == txm.AttemptOriginal || latest.Kind == txm.AttemptReplace {
		decided, err := s.hook.Resolve(ctx, s.stuckTx(t, view))
		switch {
		case err != nil:
			s.metrics.Resubmit(ctx, "policy_error")
			s.log.WarnContext(ctx, "stuck-resolution policy gave no decision; keeping to the default", slog.String(logging.KeyTxID, t.Tx.ID),
				slog.Any("error", err))
		default:
			res = decided
		}
	}
	actor := "policy:" + res.By
	var (
		r   round
		err error
	)
	switch res.Action {
	case txm.ActionCancel:
		r, err = s.work.replace(ctx, l, chain, sig, t, replacement{kind: txm.AttemptCancel,
			audit: txm.Audit{Action: string(res.Action), Actor: actor, Reason: res.Reason}})
	case txm.ActionPlaceholder:
		r, err = s.work.replace(ctx, l, chain, sig, t, replacement{kind: txm.AttemptPlaceholder, refresh: true,
			audit: txm.Audit{Action: string(res.Action), Actor: actor, Reason: res.Reason}})
	case txm.ActionBump:
		r, err = s.work.replace(ctx, l, chain, sig, t, replacement{
			audit: txm.Audit{Action: "bump", Actor: actor, Reason: res.Reason}})
	default:
		r, err = s.defaultStuck(ctx, l, chain, sig, t)
	}
	if err != nil {
		return err
	}
	if r.refused != nil {
		// At the cap: the best attempt stays in the pools.
		if best := txm.BestAccepted(t.Attempts); best != nil {
			if r, err = s.work.rebroadcast(ctx, l, chain, t, best); err != nil {
				return err
			}
		}
	}
	if r.progress {
		st.Recovered++
		return nil // TRACKING again
	}
	if r.err != nil {
		return nil // the failure was recorded with its backoff
	}
	detail := t.Tx.LastError
	if r.refused != nil {
		detail = r.refused.Error()
	}
	_, err = s.store.NoteFailure(ctx, l, txm.Failure{TxID: t.Tx.ID, Detail: detail}, s.work.fees.backoff)
	return err
}

// defaultStuck is the noop policy's round: re-sign where the fault was fees
// or funds (silence is not a fee fault on a chain without a public pool),
// otherwise rebroadcast the best attempt.
func (s *SweepResubmit) defaultStuck(ctx context.Context, l txm.Lease, chain txm.Chain, sig txm.Signer, t txm.Tracked) (round, error) {
	latest := txm.Latest(t.Attempts)
	switch {
	case latest == nil:
		// Never signed (the signer kept failing): sign it now.
		return s.work.replace(ctx, l, chain, sig, t, replacement{
			audit: txm.Audit{Action: "sign", Actor: "txfence", Reason: "signing failed before"}})
	case feesFault(t.Tx.SubState) && (chain.PublicMempool() || !silence(t.Tx.SubState)):
		return s.work.replace(ctx, l, chain, sig, t, replacement{
			audit: txm.Audit{Action: "bump", Actor: "txfence", Reason: "stuck: " + t.Tx.SubState}})
	case t.Tx.SubState == string(txm.ReasonInsufficientFunds) && !anyAccepted(t.Attempts):
		// A cheaper attempt may fit the balance; an equal one is just sent.
		return s.work.replace(ctx, l, chain, sig, t, replacement{refresh: true,
			audit: txm.Audit{Action: "resign", Actor: "txfence", Reason: "stuck: insufficient funds"}})
	}
	return s.work.rebroadcast(ctx, l, chain, t, txm.BestAccepted(t.Attempts))
}

// silence reports whether a STUCK sub-state says only that the transaction
// went unmined: on a chain without a public pool a higher fee does not
// answer that, so the default policy sends it again rather than bump it.
func silence(sub string) bool {
	return sub == txm.SubStateTooManyRebroadcasts || sub == txm.SubStatePendingTooLong
}

// feesFault reports whether a STUCK sub-state says the fees were too low.
func feesFault(sub string) bool {
	switch sub {
	case txm.SubStateFeeCapReached, txm.SubStateTooManyRebroadcasts, txm.SubStatePendingTooLong,
		string(txm.ReasonUnderpriced), string(txm.ReasonReplacementUnderpriced),
		"broadcast_" + string(txm.ReasonUnderpriced), "broadcast_" + string(txm.ReasonReplacementUnderpriced):
		return true
	}
	return false
}

// stuckTx is what the policy is told.
func (s *SweepResubmit) stuckTx(t txm.Tracked, view signerView) txm.StuckTx {
	st := txm.StuckTx{TxID: t.Tx.ID, ChainID: t.Tx.ChainID, Signer: t.Tx.From, Nonce: t.Tx.Nonce, To: t.Tx.To, Value: t.Tx.Value,
		RequestID: t.Tx.RequestID, SubState: t.Tx.SubState, LastError: t.Tx.LastError, Attempts: len(t.Attempts),
		Failures: t.Tx.Failures, CreatedAt: t.Tx.CreatedAt, ChainNonce: view.latest,
		FeeCapsLeft: s.work.fees.caps(t.Tx.ChainID).AllowBump(len(t.Attempts)-1) == nil}
	if a := txm.Latest(t.Attempts); a != nil {
		st.LatestFees = txm.FeesOf(*a)
	}
	if t.Tx.StuckSince != nil {
		st.StuckSince = *t.Tx.StuckSince
	}
	if view.fresh != nil {
		st.BaseFee = view.fresh.BaseFee
	}
	return st
}

// signerView is what one sweep of a signer knows of its chain.
type signerView struct {
	now    time.Time // database time
	latest uint64    // the signer's latest nonce: every lower nonce is mined
	fresh  *txm.Fees // a fee suggestion, once asked
	chain  txm.Chain // for the suggestion
	err    error     // of the suggestion
	asked  bool
	// lost: the node did not know the next nonce's attempt, or it is sent
	// again instead of bumped, so the signer's TRACKING transactions from
	// it on are rebroadcast together (resends) at the end of the signer's
	// sweep (recheckHead, sendAgain).
	lost    bool
	resends []resend
}

// suggestion asks the chain for fees once per signer sweep.
func (v *signerView) suggestion(ctx context.Context) (*txm.Fees, error) {
	if !v.asked {
		v.asked = true
		f, err := v.chain.SuggestFees(ctx)
		if err != nil {
			v.err = fmt.Errorf("suggest fees: %w", err)
		} else {
			v.fresh = &f
		}
	}
	return v.fresh, v.err
}
