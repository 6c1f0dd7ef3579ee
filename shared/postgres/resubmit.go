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
// decides from the database), so this write is not fenced. Work that Submit
// would not send (held behind a backoff or an unsent STUCK transaction) is
// not prompted for: its prompt comes when the hold ends.
func (s *Store) PromptStranded(ctx context.Context, olderThan time.Duration) ([]int64, error) {
	rows, err := s.pool.Query(ctx, `
INSERT INTO outbox (topic, ordering_key, payload)
SELECT $1, w.signer, json_build_object('chainId', w.chain_id, 'signer', w.signer)
FROM (SELECT DISTINCT t.chain_id, t.signer::text FROM managed_tx t
      WHERE t.state = 'ALLOCATED'
        AND (t.next_attempt_at <= clock_timestamp()
          OR (t.next_attempt_at IS NULL AND t.updated_at <= clock_timestamp() - $2::interval))
        AND `+notHeld+`) w
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

// SignersToTend implements txm.ResubmitStore.
func (s *Store) SignersToTend(ctx context.Context, olderThan, headOlderThan time.Duration) ([]txm.SignerRef, error) {
	rows, err := s.pool.Query(ctx, `
SELECT DISTINCT t.chain_id, t.signer::text FROM managed_tx t
WHERE (t.state = 'TRACKING' AND t.last_broadcast_at <= clock_timestamp() - $1::interval)
   OR (t.state = 'STUCK' AND (t.next_attempt_at IS NULL OR t.next_attempt_at <= clock_timestamp()))
UNION
SELECT h.chain_id, h.signer FROM (
    SELECT DISTINCT ON (t.chain_id, t.signer) t.chain_id, t.signer::text, t.last_broadcast_at FROM managed_tx t
    WHERE t.state = 'TRACKING' ORDER BY t.chain_id, t.signer, t.nonce) h
WHERE h.last_broadcast_at <= clock_timestamp() - $2::interval
UNION
SELECT DISTINCT t.chain_id, t.signer::text FROM tx_action a JOIN managed_tx t ON t.id = a.tx_id
WHERE a.status = 'pending'
ORDER BY 1, 2`, olderThan, headOlderThan)
	if err != nil {
		return nil, fmt.Errorf("signers to tend: %w", translate(err))
	}
	return scanSignerRefs(rows)
}

// OpenTxs implements txm.ResubmitStore.
func (s *Store) OpenTxs(ctx context.Context, chainID uint64, signer common.Address) (time.Time, []txm.Tracked, error) {
	var now time.Time
	if err := s.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		return now, nil, fmt.Errorf("open txs: %w", translate(err))
	}
	txs, err := s.trackedTxs(ctx, `t.chain_id = $1 AND t.signer = $2 AND t.state IN ('TRACKING', 'STUCK')`, 0,
		int64(chainID), txm.CanonicalAddress(signer))
	return now, txs, err
}

// OldestPending implements txm.ResubmitStore.
func (s *Store) OldestPending(ctx context.Context) ([]txm.SignerAge, error) {
	rows, err := s.pool.Query(ctx, `
SELECT chain_id, signer, extract(epoch FROM clock_timestamp() - min(created_at))::float8 FROM managed_tx
WHERE state IN ('ALLOCATED', 'TRACKING', 'MINED', 'STUCK')
GROUP BY chain_id, signer`)
	if err != nil {
		return nil, fmt.Errorf("oldest pending: %w", translate(err))
	}
	defer rows.Close()
	var out []txm.SignerAge
	for rows.Next() {
		var chainID int64
		var signer string
		var secs float64
		if err := rows.Scan(&chainID, &signer, &secs); err != nil {
			return nil, fmt.Errorf("oldest pending: %w", translate(err))
		}
		out = append(out, txm.SignerAge{SignerRef: txm.SignerRef{ChainID: uint64(chainID), Signer: common.HexToAddress(signer)},
			Age: time.Duration(secs * float64(time.Second))})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("oldest pending: %w", translate(err))
	}
	return out, nil
}
