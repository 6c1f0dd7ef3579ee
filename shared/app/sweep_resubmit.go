package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/metrics"
	"github.com/txfence/txfence/shared/txm"
)

// SubStateTooManyRebroadcasts and SubStatePendingTooLong say why the
// resubmit sweep moved a transaction to STUCK.
const (
	SubStateTooManyRebroadcasts = "too_many_rebroadcasts"
	SubStatePendingTooLong      = "pending_too_long"
)

// SweepResubmit is the ResubmitSweep function's use case. Each pass
// re-prompts Submit for signers whose ALLOCATED work has waited a
// resubmit interval (its prompt was lost or given up on), and, under each
// signer's chain lease, rebroadcasts the persisted bytes of TRACKING
// transactions not broadcast for a resubmit interval. A transaction
// rebroadcast more than maxRebroadcasts times, or pending longer than
// stuckAfter, goes to STUCK (reported as TxStuck) and is left to the
// stuck-resolution policy and operators; a STUCK transaction that gets mined
// still confirms (the finality sweep checks their receipts).
type SweepResubmit struct {
	store   txm.ResubmitStore
	leases  txm.LeaseStore
	chains  map[uint64]txm.Chain
	relay   *Relay
	cfg     config.Config
	metrics *metrics.Metrics
	log     *slog.Logger
}

// NewSweepResubmit returns the use case. relay may be nil.
func NewSweepResubmit(store txm.ResubmitStore, leases txm.LeaseStore, chains map[uint64]txm.Chain, relay *Relay,
	cfg config.Config, m *metrics.Metrics, log *slog.Logger) (*SweepResubmit, error) {
	if store == nil || leases == nil || log == nil {
		return nil, errors.New("new sweep resubmit: store, leases and logger are required")
	}
	return &SweepResubmit{store: store, leases: leases, chains: chains, relay: relay, cfg: cfg, metrics: m, log: log}, nil
}

// ResubmitStats says what one pass did.
type ResubmitStats struct {
	Prompted, Rebroadcast, Stuck, Skipped int
}

// Pass runs the sweep once.
func (s *SweepResubmit) Pass(ctx context.Context) (ResubmitStats, error) {
	var st ResubmitStats
	age, err := s.store.OldestPending(ctx)
	if err != nil {
		return st, err
	}
	s.metrics.PendingOldest(ctx, age.Seconds())
	ids, err := s.store.PromptStranded(ctx, s.cfg.ResubmitInterval)
	if err != nil {
		return st, err
	}
	st.Prompted = len(ids)
	for range ids {
		s.metrics.Resubmit(ctx, "prompted")
	}
	s.relay.Publish(ctx, ids)

	refs, err := s.store.SignersWithStaleBroadcasts(ctx, s.cfg.ResubmitInterval)
	if err != nil {
		return st, err
	}
	var errs []error
	for _, ref := range refs {
		chain, ok := s.chains[ref.ChainID]
		if !ok {
			continue
		}
		key := txm.LeaseKey{ChainID: ref.ChainID, Signer: ref.Signer, Scope: txm.ScopeChain}
		err := withChainLease(ctx, s.leases, key, s.cfg.InstanceID+"/resubmit/"+uuid.NewString(), s.cfg.Lease.RenewEvery, s.log,
			func(l txm.Lease, _ *leaseKeeper) error { return s.sweepSigner(ctx, l, chain, ref, &st) })
		switch {
		case errors.Is(err, ErrNoLease):
			st.Skipped++
		case err != nil:
			errs = append(errs, fmt.Errorf("signer %s: %w", txm.CanonicalAddress(ref.Signer), err))
		}
	}
	return st, errors.Join(errs...)
}

func (s *SweepResubmit) sweepSigner(ctx context.Context, l txm.Lease, chain txm.Chain, ref txm.SignerRef, st *ResubmitStats) error {
	stale, err := s.store.StaleBroadcasts(ctx, ref.ChainID, ref.Signer, s.cfg.ResubmitInterval)
	if err != nil {
		return err
	}
	var again []string
	for _, t := range stale {
		if len(t.Attempts) == 0 {
			continue
		}
		switch {
		case t.Tx.BroadcastCount > s.cfg.MaxRebroadcasts:
			if err := s.stuck(ctx, l, t.Tx, SubStateTooManyRebroadcasts,
				fmt.Sprintf("broadcast %d times without a receipt", t.Tx.BroadcastCount)); err != nil {
				return err
			}
			st.Stuck++
			continue
		case time.Since(t.Tx.CreatedAt) > s.cfg.StuckAfter:
			if err := s.stuck(ctx, l, t.Tx, SubStatePendingTooLong,
				fmt.Sprintf("pending since %s", t.Tx.CreatedAt.UTC().Format(time.RFC3339))); err != nil {
				return err
			}
			st.Stuck++
			continue
		}
		a := t.Attempts[len(t.Attempts)-1]
		err := chain.SendRawTransaction(ctx, a.Raw)
		reason := txm.ReasonOf(err)
		switch {
		case err == nil || reason == txm.ReasonKnown || reason == txm.ReasonNonceTooLow:
			again = append(again, t.Tx.ID)
			s.metrics.Resubmit(ctx, "rebroadcast")
		case reason.Deterministic():
			if err := s.stuck(ctx, l, t.Tx, string(reason), err.Error()); err != nil {
				return err
			}
			st.Stuck++
		default:
			s.metrics.Resubmit(ctx, string(reason))
			s.log.WarnContext(ctx, "rebroadcast failed", slog.String(logging.KeyTxID, t.Tx.ID), slog.Uint64(logging.KeyNonce, t.Tx.Nonce),
				slog.String("reason", string(reason)), slog.Any("error", err))
		}
	}
	if err := s.store.NoteRebroadcast(ctx, l, again); err != nil {
		return err
	}
	st.Rebroadcast += len(again)
	return nil
}

func (s *SweepResubmit) stuck(ctx context.Context, l txm.Lease, t *txm.Tx, subState, detail string) error {
	ids, err := s.store.MarkStuck(ctx, l, t.ID, subState, detail)
	if err != nil {
		return err
	}
	s.log.WarnContext(ctx, "transaction stuck", slog.String(logging.KeyTxID, t.ID), slog.String(logging.KeySigner, txm.CanonicalAddress(t.From)),
		slog.Uint64(logging.KeyNonce, t.Nonce), slog.String("sub_state", subState), slog.Int64(logging.KeyToken, l.Token))
	s.relay.Publish(ctx, ids)
	return nil
}
