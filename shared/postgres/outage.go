package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/txfence/txfence/shared/txm"
)

var _ txm.OutageStore = (*Store)(nil)

// OutageHeld implements txm.OutageStore (from managed_tx_outage, which
// holds only the rows backing off).
func (s *Store) OutageHeld(ctx context.Context) ([]uint64, error) {
	rows, err := s.pool.Query(ctx, `
SELECT DISTINCT chain_id FROM managed_tx
WHERE backoff_outage AND next_attempt_at IS NOT NULL AND next_attempt_at > clock_timestamp()
ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("outage held: %w", translate(err))
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("outage held: %w", translate(err))
	}
	out := make([]uint64, len(ids))
	for i, id := range ids {
		out[i] = uint64(id)
	}
	return out, nil
}

// ResumeAfterOutage implements txm.OutageStore in one statement: the
// backoffs ended, and a prompt for each signer that has ALLOCATED work
// (its TRACKING and STUCK rows are the resubmit sweep's own work, due now).
func (s *Store) ResumeAfterOutage(ctx context.Context, chainID uint64) (int, []int64, error) {
	var resumed int
	var ids []int64
	err := s.pool.QueryRow(ctx, `
WITH resumed AS (
    UPDATE managed_tx t SET next_attempt_at = NULL, backoff_outage = false, updated_at = clock_timestamp()
    WHERE t.chain_id = $1 AND t.backoff_outage AND t.next_attempt_at IS NOT NULL
    RETURNING t.chain_id, t.signer::text, t.state
), prompted AS (
    INSERT INTO outbox (topic, ordering_key, payload)
    SELECT $2, w.signer, json_build_object('chainId', w.chain_id, 'signer', w.signer)
    FROM (SELECT DISTINCT chain_id, signer FROM resumed WHERE state = 'ALLOCATED') w
    RETURNING id
)
SELECT (SELECT count(*) FROM resumed), coalesce((SELECT array_agg(id ORDER BY id) FROM prompted), '{}')`,
		int64(chainID), s.topics.Submit).Scan(&resumed, &ids)
	if err != nil {
		return 0, nil, fmt.Errorf("resume after outage: %w", translate(err))
	}
	return resumed, ids, nil
}
