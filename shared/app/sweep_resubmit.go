package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"

	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/txm"
)

// SweepResubmit is the ResubmitSweep function's use case: it keeps every
// signer moving. Each pass re-prompts Submit for ALLOCATED work whose
// backoff ran out or whose prompt was lost, and, under each signer's chain
// lease, for signers with work:
//   - carries out pending admin actions;
//   - replaces the attempt of the next nonce to be mined (or of one whose
//     max fee is below the base fee) that was not mined within bumpAfter
//     with higher fees, up to the chain's caps; at the cap the transaction
//     is reported STUCK `fee_cap_reached` and its best attempt kept in the
//     pools. Before it pays more for the next nonce it asks the node
//     (decideBump): an attempt the node lost is sent again as it is, one
//     priced like what recent blocks included waits a while longer, and on
//     a chain without a public pool it is only ever sent again;
//   - rebroadcasts the persisted bytes of transactions unseen for a
//     resubmit interval, and reports STUCK the next nonce to be mined when it
//     was rebroadcast too often or is pending too long;
//   - works every STUCK transaction whose backoff ran out through the
//     stuck-resolution policy (resolveStuck);
//   - with SetApprovals, expires the transactions whose approval expired
//     and allocates those that have their approvals and still wait
//     (SweepApprovals).
//
// Transactions below the chain's latest nonce are mined (or their nonce was
// taken by another transaction): receipts and the finality sweep decide.
type SweepResubmit struct {
	store   txm.ResubmitStore
	leases  txm.LeaseStore
	chains  map[uint64]txm.Chain
	signers map[common.Address]txm.Signer
	hook    txm.StuckResolutionHook
	work    *attempter
	relay   *Relay
	cfg     config.Resubmit
	metrics txm.Recorder
	log     *slog.Logger

	// pendingMu guards pending: the signers whose oldest pending age the
	// last pass reported, so that a signer with nothing pending any more is
	// reported 0 rather than left at its last age.
	pendingMu sync.Mutex
	pending   map[txm.SignerRef]bool

	approvals *SweepApprovals // nil: approvals are swept elsewhere
	resume    *ResumeAfterOutage
}

// SetApprovals makes every pass sweep the transactions that wait for
// approval too.
func (s *SweepResubmit) SetApprovals(a *SweepApprovals) { s.approvals = a }

// NewSweepResubmit returns the use case. relay may be nil; a nil hook is the
// default (noop) policy.
func NewSweepResubmit(store txm.ResubmitStore, leases txm.LeaseStore, chains map[uint64]txm.Chain, signers map[common.Address]txm.Signer,
	hook txm.StuckResolutionHook, relay *Relay, cfg config.Resubmit, m txm.Recorder, log *slog.Logger) (*SweepResubmit, error) {
	if store == nil || leases == nil || log == nil {
		return nil, errors.New("new sweep resubmit: store, leases and logger are required")
	}
	if hook == nil {
		hook = NoopPolicy{}
	}
	resume, err := NewResumeAfterOutage(store, chains, relay, log)
	if err != nil {
		return nil, err
	}
	return &SweepResubmit{store: store, leases: leases, chains: chains, signers: signers, hook: hook, relay: relay, cfg: cfg,
		metrics: recorderOr(m), log: log, resume: resume,
		work: &attempter{store: store, leases: leases, relay: relay, fees: feeSettingsOf(cfg.Attempts), metrics: recorderOr(m), log: log}}, nil
}

// ResubmitHooks let tests stop a sweep at a chosen point. Production
// leaves them nil.
type ResubmitHooks struct {
	// BeforeReplace runs after a replacement was signed and before it is
	// persisted.
	BeforeReplace func()
}

// SetHooks installs test hooks.
func (s *SweepResubmit) SetHooks(h ResubmitHooks) { s.work.beforeSave = h.BeforeReplace }

// ResubmitStats says what one pass did.
type ResubmitStats struct {
	Prompted    int // signers re-prompted for ALLOCATED work
	Signers     int // signers tended
	Skipped     int // signers whose lease was held elsewhere
	Rebroadcast int // attempts sent again
	Replaced    int // replacement attempts accepted by a node
	Stuck       int // transactions that entered STUCK
	Recovered   int // STUCK transactions TRACKING again
	Resumed     int // transactions whose backoff after an outage of their chain's endpoints ended

	ApprovalsFinished int // approved transactions allocated, or ended at approval
	ApprovalsExpired  int // transactions whose approval expired
}

func (st *ResubmitStats) add(o ResubmitStats) {
	st.Prompted += o.Prompted
	st.Signers += o.Signers
	st.Skipped += o.Skipped
	st.Rebroadcast += o.Rebroadcast
	st.Replaced += o.Replaced
	st.Stuck += o.Stuck
	st.Recovered += o.Recovered
	st.Resumed += o.Resumed
	st.ApprovalsFinished += o.ApprovalsFinished
	st.ApprovalsExpired += o.ApprovalsExpired
}

// Run sweeps pass after pass for budget, pausing interval between passes,
// so that backoffs shorter than the scheduler's period are honoured.
func (s *SweepResubmit) Run(ctx context.Context, budget, interval time.Duration) (ResubmitStats, error) {
	var total ResubmitStats
	// Once an invocation: the usage behind rolling caps outlives its window
	// by an hour at most, the usage behind the policies' windows by a day.
	if err := s.store.PruneUsage(ctx); err != nil {
		s.log.WarnContext(ctx, "prune usage", "err", err)
	}
	err := runPasses(ctx, budget, interval, s.Pass, total.add, sleep(interval))
	return total, err
}

// Pass runs the sweep once. A signer whose lease is held elsewhere is
// skipped this pass; a failure on one signer is returned after the others
// were swept.
func (s *SweepResubmit) Pass(ctx context.Context) (ResubmitStats, error) {
	var st ResubmitStats
	var errs []error
	if s.approvals != nil {
		var err error
		st.ApprovalsFinished, st.ApprovalsExpired, err = s.approvals.Execute(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("approvals: %w", err))
		}
	}
	resumed, err := s.resume.Execute(ctx)
	st.Resumed = resumed
	for range resumed {
		s.metrics.Resubmit(ctx, "resumed")
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("resume after outage: %w", err))
	}
	ages, err := s.store.OldestPending(ctx)
	if err != nil {
		return st, err
	}
	s.reportPending(ctx, ages)
	ids, err := s.store.PromptStranded(ctx, s.cfg.ResubmitInterval)
	if err != nil {
		return st, err
	}
	st.Prompted = len(ids)
	for range ids {
		s.metrics.Resubmit(ctx, "prompted")
	}
	s.relay.Publish(ctx, ids)

	refs, err := s.store.SignersToTend(ctx, min(s.cfg.ResubmitInterval, s.cfg.ShortestBumpAfter()), s.cfg.RecheckAfter)
	if err != nil {
		return st, err
	}
	for _, ref := range refs {
		chain, ok := s.chains[ref.ChainID]
		sig := s.signers[ref.Signer]
		if !ok || sig == nil {
			continue // not served by this deployment
		}
		key := txm.LeaseKey{ChainID: ref.ChainID, Signer: ref.Signer, Scope: txm.ScopeChain}
		err := withChainLease(ctx, s.leases, key, s.cfg.InstanceID+"/resubmit/"+uuid.NewString(), wantIt, s.cfg.RenewEvery, s.log,
			func(l txm.Lease, k *leaseKeeper) error { return s.tendSigner(ctx, l, k, chain, sig, &st) })
		switch {
		case errors.Is(err, ErrNoLease):
			st.Skipped++
		case err != nil:
			errs = append(errs, fmt.Errorf("signer %s: %w", txm.CanonicalAddress(ref.Signer), err))
		default:
			st.Signers++
		}
	}
	return st, errors.Join(errs...)
}

// reportPending sets pending_oldest_age_seconds for every signer with
// pending transactions, and to 0 for those the last pass reported that have
// none left.
func (s *SweepResubmit) reportPending(ctx context.Context, ages []txm.SignerAge) {
	s.pendingMu.Lock()
	defer s.pendingMu.Unlock()
	now := make(map[txm.SignerRef]bool, len(ages))
	for _, a := range ages {
		now[a.SignerRef] = true
		s.metrics.PendingOldest(ctx, a.ChainID, txm.CanonicalAddress(a.Signer), a.Age.Seconds())
	}
	for ref := range s.pending {
		if !now[ref] {
			s.metrics.PendingOldest(ctx, ref.ChainID, txm.CanonicalAddress(ref.Signer), 0)
		}
	}
	s.pending = now
}

// tendSigner works one signer's open transactions in nonce order.
func (s *SweepResubmit) tendSigner(ctx context.Context, l txm.Lease, k *leaseKeeper, chain txm.Chain, sig txm.Signer, st *ResubmitStats) error {
	if err := s.work.runActions(ctx, s.store, l, chain, sig); err != nil {
		return err
	}
	now, open, err := s.store.OpenTxs(ctx, l.Key.ChainID, l.Key.Signer)
	if err != nil || len(open) == 0 {
		return err
	}
	latest, err := chain.LatestNonce(ctx, l.Key.Signer)
	if err != nil {
		return fmt.Errorf("latest nonce: %w", err)
	}
	view := signerView{now: now, latest: latest, chain: chain}
	for _, t := range open {
		if err := k.Lost(); err != nil {
			return err
		}
		if t.Tx.Nonce < latest || !t.Tx.Due(now) {
			continue
		}
		if t.Tx.State == txm.StateStuck {
			err = s.resolveStuck(ctx, l, chain, sig, t, view, st)
		} else {
			err = s.tendTracking(ctx, l, chain, sig, t, &view, st)
		}
		if err != nil {
			return err
		}
	}
	n, err := s.work.rebroadcastAll(ctx, l, chain, view.resends)
	st.Rebroadcast += n
	return err
}

// tendTracking bumps, rebroadcasts or reports STUCK one TRACKING
// transaction.
func (s *SweepResubmit) tendTracking(ctx context.Context, l txm.Lease, chain txm.Chain, sig txm.Signer, t txm.Tracked,
	view *signerView, st *ResubmitStats) error {
	latest := txm.Latest(t.Attempts)
	if latest == nil {
		return nil
	}
	rebroadcast := func(a *txm.Attempt) error {
		r, err := s.work.rebroadcast(ctx, l, chain, t, a)
		if r.sent {
			st.Rebroadcast++
		}
		return err
	}
	if latest.BroadcastAt == nil && !feesFault(t.Tx.SubState) {
		// A replacement whose broadcast failed for a reason other than its
		// fees: send it again rather than pay more.
		return rebroadcast(latest)
	}
	head := t.Tx.Nonce == view.latest
	bumpAfter := s.cfg.BumpAfterFor(t.Tx.ChainID)
	bumpDue := latest.BroadcastAt == nil || view.now.Sub(*latest.BroadcastAt) >= bumpAfter
	if bumpDue && !head {
		// Behind the next nonce it would be mined right after it, unless its
		// max fee is below the base fee.
		fresh, err := view.suggestion(ctx)
		bumpDue = err == nil && !txm.FeesOf(*latest).CanMine(fresh.BaseFee)
	}
	if bumpDue && head && latest.BroadcastAt != nil && !feesFault(t.Tx.SubState) {
		// Accepted and unmined, with no node saying its fees are too low:
		// a higher fee may not be what it needs.
		switch s.decideBump(ctx, chain, t, latest, view) {
		case moveResend:
			return s.sendAgain(ctx, l, t, latest, view, st)
		case moveWait:
			bumpDue = false
		case moveNothing:
			return nil
		}
	}
	if bumpDue {
		r, err := s.work.replace(ctx, l, chain, sig, t, replacement{audit: txm.Audit{Action: "bump", Actor: "txfence",
			Reason: fmt.Sprintf("not mined %s after broadcast", bumpAfter)}})
		if r.sent {
			st.Replaced++
		}
		if err != nil || r.refused == nil {
			return err
		}
		if err := s.stuck(ctx, l, t.Tx, txm.SubStateFeeCapReached, r.refused.Error(), st); err != nil {
			return err
		}
		return rebroadcast(txm.BestAccepted(t.Attempts))
	}
	if head {
		if err := s.recheckHead(ctx, chain, t, view); err != nil {
			return err
		}
	}
	if view.lost {
		view.resends = append(view.resends, resend{t: t, a: txm.BestAccepted(t.Attempts)})
		return nil
	}
	if t.Tx.LastBroadcastAt != nil && view.now.Sub(*t.Tx.LastBroadcastAt) < s.cfg.ResubmitInterval {
		return nil
	}
	if sub, detail := s.overdue(t, view.now); head && sub != "" {
		return s.stuck(ctx, l, t.Tx, sub, detail, st)
	}
	return rebroadcast(txm.BestAccepted(t.Attempts))
}

// recheckHead asks the node about the next nonce's attempt once it has
// gone unmined for RecheckAfter (and is not due for a rebroadcast anyway).
// A node that does not know it holds every later nonce back, and keeps only
// some of them (geth: 64 queued per account; a block that lands while more
// wait for promotion drops the rest), so the sweep rebroadcasts the signer's
// TRACKING transactions from the head on, in nonce order, at once, since
// waiting ResubmitInterval stalls a hot signer for that long.
func (s *SweepResubmit) recheckHead(ctx context.Context, chain txm.Chain, t txm.Tracked, view *signerView) error {
	best := txm.BestAccepted(t.Attempts)
	if best == nil || t.Tx.LastBroadcastAt == nil {
		return nil
	}
	unseen := view.now.Sub(*t.Tx.LastBroadcastAt)
	if unseen < s.cfg.RecheckAfter || unseen >= s.cfg.ResubmitInterval {
		return nil
	}
	known, err := chain.HasTransaction(ctx, best.Hash)
	if err != nil {
		return fmt.Errorf("has transaction: %w", err)
	}
	if !known {
		view.lost = true
		s.log.WarnContext(ctx, "the node does not know the next nonce's transaction; rebroadcasting from it on",
			slog.String(logging.KeyTxID, t.Tx.ID), slog.String(logging.KeySigner, txm.CanonicalAddress(t.Tx.From)),
			slog.Uint64(logging.KeyNonce, t.Tx.Nonce), slog.Duration("unseen", unseen))
	}
	return nil
}

func (s *SweepResubmit) stuck(ctx context.Context, l txm.Lease, t *txm.Tx, subState, detail string, st *ResubmitStats) error {
	ids, err := s.store.MarkStuck(ctx, l, t.ID, subState, detail)
	if err != nil {
		return err
	}
	st.Stuck++
	s.log.WarnContext(ctx, "transaction stuck", slog.String(logging.KeyTxID, t.ID), slog.String(logging.KeySigner, txm.CanonicalAddress(t.From)),
		slog.Uint64(logging.KeyNonce, t.Nonce), slog.String("sub_state", subState), slog.Int64(logging.KeyToken, l.Token))
	s.relay.Publish(ctx, ids)
	return nil
}
