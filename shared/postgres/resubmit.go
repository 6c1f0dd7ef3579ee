package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/jackc/pgx/v5"

	"github.com/txfence/txfence/shared/txm"
)

var _ txm.ResubmitStore = (*Store)(nil)

// PromptStranded implements txm.ResubmitStore. A prompt is harmless (Submit
// decides from the database), so this write is not fenced.
func (s *Store) PromptStranded(ctx context.Context, olderThan time.Duration) ([]int64, error) {
	rows, err := s.pool.Query(ctx, `
INSERT INTO outbox (topic, ordering_key, payload)
SELECT $1, w.signer, json_build_object('chainId', w.chain_id, 'signer', w.signer)
FROM (SELECT DISTINCT chain_id, signer::text FROM managed_tx
      WHERE state = 'ALLOCATED' AND updated_at <= clock_timestamp() - $2::interval) w
RETURNING id`, s.topics.Submit, olderThan)
	if err != nil {
		return nil, fmt.Errorf("prompt stranded: %w", translate(err))
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("prompt stranded: %w", translate(err))
	}
	return ids, nil
}

// staleBroadcast selects TRACKING transactions last broadcast long ago.
const staleBroadcast = `t.state = 'TRACKING' AND t.last_broadcast_at <= clock_timestamp() - $%d::interval`

// SignersWithStaleBroadcasts implements txm.ResubmitStore.
func (s *Store) SignersWithStaleBroadcasts(ctx context.Context, olderThan time.Duration) ([]txm.SignerRef, error) {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT t.chain_id, t.signer::text FROM managed_tx t WHERE `+
		fmt.Sprintf(staleBroadcast, 1)+` ORDER BY 1, 2`, olderThan)
	if err != nil {
		return nil, fmt.Errorf("signers with stale broadcasts: %w", translate(err))
	}
	return scanSignerRefs(rows)
}

// StaleBroadcasts implements txm.ResubmitStore.
func (s *Store) StaleBroadcasts(ctx context.Context, chainID uint64, signer common.Address, olderThan time.Duration) ([]txm.Tracked, error) {
	return s.trackedTxs(ctx, `t.chain_id = $1 AND t.signer = $2 AND `+fmt.Sprintf(staleBroadcast, 3), 0,
		int64(chainID), txm.CanonicalAddress(signer), olderThan)
}

// NoteRebroadcast implements txm.ResubmitStore.
func (s *Store) NoteRebroadcast(ctx context.Context, l txm.Lease, txIDs []string) error {
	if len(txIDs) == 0 {
		return nil
	}
	return WithTx(ctx, s.pool, func(tx pgx.Tx) error {
		got, err := s.leases.fencedExec(ctx, tx, l, "note_rebroadcast", txIDs[0], `
WITH moved AS (
    UPDATE managed_tx t SET broadcast_count = t.broadcast_count + 1, last_broadcast_at = clock_timestamp(),
        fencing_token = $5::bigint, updated_at = clock_timestamp()
    WHERE t.id = ANY($6::uuid[]) AND t.state = 'TRACKING' AND `+fenceHeld+`
    RETURNING t.id
)
UPDATE tx_attempt a SET broadcast_count = a.broadcast_count + 1
FROM moved WHERE a.tx_id = moved.id
  AND a.attempt_no = (SELECT max(attempt_no) FROM tx_attempt x WHERE x.tx_id = moved.id)`, txIDs)
		if err != nil {
			return err
		}
		if got != int64(len(txIDs)) {
			return fmt.Errorf("note rebroadcast: %d of %d", got, len(txIDs))
		}
		return nil
	})
}

// OldestPending implements txm.ResubmitStore.
func (s *Store) OldestPending(ctx context.Context) (time.Duration, error) {
	var secs *float64
	err := s.pool.QueryRow(ctx, `
SELECT extract(epoch FROM clock_timestamp() - min(created_at))::float8 FROM managed_tx
WHERE state IN ('ALLOCATED', 'TRACKING', 'MINED', 'STUCK')`).Scan(&secs)
	if err != nil {
		return 0, fmt.Errorf("oldest pending: %w", translate(err))
	}
	if secs == nil {
		return 0, nil
	}
	return time.Duration(*secs * float64(time.Second)), nil
}
