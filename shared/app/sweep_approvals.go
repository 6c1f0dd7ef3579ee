package app

import (
	"context"
	"errors"
	"log/slog"

	"github.com/txfence/txfence/shared/txm"
)

// SweepApprovals ends what waits for approval for longer than its rule
// allows, and finishes what has its approvals but still waits. It runs in
// every pass of the resubmit sweep (SweepResubmit.SetApprovals), which the
// scheduler runs: an expired transaction ends FAILED_FINAL
// approval_expired with its outcome reported; one whose last approval's
// allocation failed (the chain or the database unavailable) or was cut
// short by a crash is allocated (FinishApproval).
type SweepApprovals struct {
	store  ApprovalStore
	finish *FinishApproval
	relay  *Relay
	log    *slog.Logger
}

// NewSweepApprovals returns the use case. relay may be nil.
func NewSweepApprovals(store ApprovalStore, finish *FinishApproval, relay *Relay, log *slog.Logger) (*SweepApprovals, error) {
	if store == nil || finish == nil || log == nil {
		return nil, errors.New("new sweep approvals: store, finish and logger are required")
	}
	return &SweepApprovals{store: store, finish: finish, relay: relay, log: log}, nil
}

// approvalSweepBatch bounds what one sweep finishes, and expires.
const approvalSweepBatch = 100

// Execute sweeps once: it returns how many transactions it finished
// (allocated or ended at approval) and how many it expired.
func (s *SweepApprovals) Execute(ctx context.Context) (finished, expired int, err error) {
	ids, err := s.store.ApprovedPending(ctx, approvalSweepBatch)
	if err != nil {
		return 0, 0, err
	}
	var errs []error
	for _, id := range ids {
		t, err := s.finish.Execute(ctx, id)
		switch {
		case err != nil:
			errs = append(errs, err)
		case t.State != txm.StatePendingApproval:
			finished++
		}
	}
	n, outbox, err := s.store.ExpireApprovals(ctx, approvalSweepBatch)
	if err != nil {
		errs = append(errs, err)
	}
	s.relay.Publish(ctx, outbox)
	if n > 0 {
		s.log.InfoContext(ctx, "approvals expired", slog.Int("count", n))
	}
	return finished, n, errors.Join(errs...)
}
