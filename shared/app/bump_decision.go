package app

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/txm"
)

// What the resubmit sweep does with the next nonce's transaction once its
// accepted attempt went unmined for BumpAfter, counted by
// bump_decision_total under these names. A higher fee only helps a
// transaction that waits in the pools and pays less than what blocks
// include: one the node lost is sent again as it is, one priced like what
// is being included waits (for a while), and on a chain without a public
// pool silence is never answered with a higher fee.
const (
	// decisionNotInPool: the node does not know the attempt; its bytes,
	// and the signer's later transactions', are sent again.
	decisionNotInPool = "rebroadcast_not_in_pool"
	// decisionNoMempool: a chain without a public pool; the bytes are
	// sent again.
	decisionNoMempool = "rebroadcast_no_mempool"
	// decisionUnderpriced: in the pool, and below what recent blocks
	// included (or below the next base fee): bumped.
	decisionUnderpriced = "bumped_underpriced"
	// decisionPricedOK: in the pool and priced like what recent blocks
	// included: neither bumped nor sent again out of turn.
	decisionPricedOK = "waited_priced_ok"
	// decisionAfterWait: priced like what is included, but unmined for
	// pricedOKPatience × BumpAfter: bumped after all.
	decisionAfterWait = "bumped_after_wait"
	// decisionUnchecked: the node could not say (the read failed, or it
	// has no fee history): bumped, as without the check.
	decisionUnchecked = "bumped_unchecked"
)

// pricedOKPatience is how many BumpAfter periods an attempt priced like
// what recent blocks included may go unmined before it is bumped after all:
// the price read is a sample, and a transaction waiting for ever on one is
// worse than one bump too many.
const pricedOKPatience = 4

// bumpMove is what tendTracking does with a transaction due for a bump.
type bumpMove int

const (
	moveBump    bumpMove = iota // replace it at a higher fee
	moveResend                  // send its bytes again, no new attempt
	moveWait                    // neither: the usual rebroadcast schedule goes on
	moveNothing                 // nothing this pass (mined meanwhile, or just sent)
)

// decideBump decides what to do with t, the next nonce to be mined, whose
// latest attempt a was accepted BumpAfter ago or more and is not mined. A
// same-bytes send comes at most once per min(BumpAfter, RecheckAfter): a
// node that keeps losing the transaction is not flooded, and its
// broadcast count takes it to STUCK too_many_rebroadcasts (sendAgain).
func (s *SweepResubmit) decideBump(ctx context.Context, chain txm.Chain, t txm.Tracked, a *txm.Attempt, view *signerView) bumpMove {
	quiet := t.Tx.LastBroadcastAt == nil || view.now.Sub(*t.Tx.LastBroadcastAt) >= min(s.cfg.BumpAfter, s.cfg.RecheckAfter)
	log := s.log.With(slog.String(logging.KeyTxID, t.Tx.ID), slog.String(logging.KeySigner, txm.CanonicalAddress(t.Tx.From)),
		slog.Uint64(logging.KeyNonce, t.Tx.Nonce), slog.Int("attempt", a.No))
	decided := func(decision string, move bumpMove, args ...any) bumpMove {
		s.metrics.BumpDecision(ctx, decision)
		log.InfoContext(ctx, "bump decision", append([]any{slog.String("decision", decision)}, args...)...)
		return move
	}
	if !chain.PublicMempool() {
		// A sequencer takes a transaction that can pay the base fee in
		// the order it arrives; a higher tip buys nothing.
		if fresh, err := view.suggestion(ctx); err == nil && !txm.FeesOf(*a).CanMine(fresh.BaseFee) {
			return decided(decisionUnderpriced, moveBump, slog.String("base_fee", fresh.BaseFee.String()))
		}
		if !quiet {
			return moveWait
		}
		return decided(decisionNoMempool, moveResend)
	}
	inc, err := chain.Inclusion(ctx, a.Hash)
	if err != nil {
		return decided(decisionUnchecked, moveBump, slog.Any("error", err))
	}
	switch {
	case inc.Pool == txm.PoolMined:
		return moveNothing // the receipt check takes it from here
	case inc.Pool == txm.PoolAbsent && !quiet:
		return moveNothing
	case inc.Pool == txm.PoolAbsent:
		return decided(decisionNotInPool, moveResend)
	case inc.Price == nil:
		return decided(decisionUnchecked, moveBump)
	}
	price := []any{slog.String("next_base_fee", inc.Price.NextBaseFee.String()), slog.String("inclusion_tip", inc.Price.Tip.String()),
		slog.Int("blocks", inc.Price.Blocks)}
	switch {
	case !inc.Price.Admits(txm.FeesOf(*a)):
		return decided(decisionUnderpriced, moveBump, price...)
	case view.now.Sub(*a.BroadcastAt) >= pricedOKPatience*s.cfg.BumpAfter:
		return decided(decisionAfterWait, moveBump, price...)
	}
	return decided(decisionPricedOK, moveWait, price...)
}

// sendAgain sends the next nonce's bytes again, with every later TRACKING
// transaction of the signer after it (at the end of the signer's sweep, in
// one batch, in nonce order: the node holds the later nonces back behind a
// missing one, and a sequencer takes them in the order they arrive), or
// reports it STUCK when it was sent too often or waits too long.
func (s *SweepResubmit) sendAgain(ctx context.Context, l txm.Lease, t txm.Tracked, a *txm.Attempt, view *signerView,
	st *ResubmitStats) error {
	if sub, detail := s.overdue(t, view.now); sub != "" {
		return s.stuck(ctx, l, t.Tx, sub, detail, st)
	}
	view.lost = true
	view.resends = append(view.resends, resend{t: t, a: a})
	return nil
}

// overdue names the reason the next nonce's transaction is STUCK, if it
// is: sent more than MaxRebroadcasts times, or pending longer than
// StuckAfter, without a receipt.
func (s *SweepResubmit) overdue(t txm.Tracked, now time.Time) (subState, detail string) {
	switch {
	case t.Tx.BroadcastCount > s.cfg.MaxRebroadcasts:
		return txm.SubStateTooManyRebroadcasts, fmt.Sprintf("broadcast %d times without a receipt", t.Tx.BroadcastCount)
	case now.Sub(t.Tx.CreatedAt) > s.cfg.StuckAfter:
		return txm.SubStatePendingTooLong, fmt.Sprintf("pending since %s", t.Tx.CreatedAt.UTC().Format(time.RFC3339))
	}
	return "", ""
}
