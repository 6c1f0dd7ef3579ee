package postgres

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/ethereum/go-ethereum/common"
	"github.com/jackc/pgx/v5"

	"github.com/txfence/txfence/shared/txm"
)

// NextToSubmit implements txm.SubmitStore.
func (s *Store) NextToSubmit(ctx context.Context, chainID uint64, signer common.Address, limit int) ([]txm.SubmitItem, error) {
	txs, err := s.trackedTxs(ctx, `t.chain_id = $1 AND t.signer = $2 AND t.state = 'ALLOCATED'`, limit,
		int64(chainID), txm.CanonicalAddress(signer))
	if err != nil {
		return nil, fmt.Errorf("next to submit: %w", err)
	}
	out := make([]txm.SubmitItem, len(txs))
	for i, t := range txs {
		out[i].Tx = t.Tx
		if n := len(t.Attempts); n > 0 {
			out[i].Attempt = &t.Attempts[n-1]
		}
	}
	return out, nil
}

// InFlight implements txm.SubmitStore.
func (s *Store) InFlight(ctx context.Context, chainID uint64, signer common.Address) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM managed_tx WHERE chain_id = $1 AND signer = $2 AND state = 'TRACKING'`,
		int64(chainID), txm.CanonicalAddress(signer)).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count in flight: %w", translate(err))
	}
	return n, nil
}

// SaveAttempts implements txm.SubmitStore.
func (s *Store) SaveAttempts(ctx context.Context, l txm.Lease, attempts []txm.Attempt) error {
	if len(attempts) == 0 {
		return nil
	}
	n := len(attempts)
	ids, nos, kinds, hashes := make([]string, n), make([]int32, n), make([]string, n), make([]string, n)
	raws, nonces, gas := make([][]byte, n), make([]int64, n), make([]int64, n)
	maxFees, maxPrios, gasPrices := make([]*string, n), make([]*string, n), make([]*string, n)
	for i, a := range attempts {
		ids[i], nos[i], kinds[i], hashes[i] = a.TxID, int32(a.No), string(a.Kind), a.Hash.Hex()
		raws[i], nonces[i], gas[i] = a.Raw, int64(a.Nonce), int64(a.GasLimit)
		maxFees[i], maxPrios[i], gasPrices[i] = bigText(a.MaxFeePerGas), bigText(a.MaxPriorityFeePerGas), bigText(a.GasPrice)
	}
	return WithTx(ctx, s.pool, func(tx pgx.Tx) error {
		got, err := s.leases.fencedExec(ctx, tx, l, "save_attempts", attempts[0].TxID, `
INSERT INTO tx_attempt (tx_id, attempt_no, kind, tx_hash, raw_tx, nonce, gas_limit, max_fee_per_gas,
    max_priority_fee_per_gas, gas_price, fencing_token)
SELECT u.id, u.no, u.kind, u.hash, u.raw, u.nonce, u.gas, u.max_fee::numeric, u.max_prio::numeric,
    u.gas_price::numeric, $5::bigint
FROM unnest($6::uuid[], $7::int[], $8::text[], $9::text[], $10::bytea[], $11::bigint[], $12::bigint[],
    $13::text[], $14::text[], $15::text[]) AS u(id, no, kind, hash, raw, nonce, gas, max_fee, max_prio, gas_price)
WHERE `+fenceHeld, ids, nos, kinds, hashes, raws, nonces, gas, maxFees, maxPrios, gasPrices)
		if err != nil {
			return err
		}
		if got != int64(n) {
			return fmt.Errorf("save attempts: %d of %d written", got, n)
		}
		return nil
	})
}

// MarkTracking implements txm.SubmitStore.
func (s *Store) MarkTracking(ctx context.Context, l txm.Lease, done []txm.Broadcasted) ([]int64, error) {
	if len(done) == 0 {
		return nil, nil
	}
	ids, nos, outcomes := make([]string, len(done)), make([]int32, len(done)), make([]*string, len(done))
	for i, d := range done {
		ids[i], nos[i] = d.TxID, int32(d.AttemptNo)
		if d.Outcome != "" {
			o := "broadcast_" + string(d.Outcome)
			outcomes[i] = &o
		}
	}
	var outbox []int64
	err := WithTx(ctx, s.pool, func(tx pgx.Tx) error {
		got, err := s.leases.fencedExec(ctx, tx, l, "mark_tracking", ids[0], `
WITH u AS (
    SELECT * FROM unnest($6::uuid[], $7::int[], $8::text[]) AS u(id, no, outcome)
), moved AS (
    UPDATE managed_tx t SET state = 'TRACKING', sub_state = u.outcome, last_error = NULL,
        broadcast_count = t.broadcast_count + 1, last_broadcast_at = clock_timestamp(),
        fencing_token = $5::bigint, updated_at = clock_timestamp()
    FROM u WHERE t.id = u.id AND `+moveBroadcast.guard()+` AND `+fenceHeld+`
    RETURNING t.id, u.no, u.outcome, (SELECT o.state FROM managed_tx o WHERE o.id = t.id) AS from_state
), stamped AS (
    UPDATE tx_attempt at SET broadcast_at = coalesce(at.broadcast_at, clock_timestamp()),
        broadcast_count = at.broadcast_count + 1
    FROM moved WHERE at.tx_id = moved.id AND at.attempt_no = moved.no
)
INSERT INTO tx_history (tx_id, from_state, to_state, sub_state, reason, owner, fencing_token)
SELECT id, from_state, 'TRACKING', outcome, 'broadcast', $4::text, $5::bigint FROM moved`,
			ids, nos, outcomes)
		if err != nil {
			return err
		}
		if got != int64(len(done)) {
			return fmt.Errorf("mark tracking: %d of %d moved", got, len(done))
		}
		id, err := s.writeOutbox(ctx, tx, s.topics.Receipt, l.Key)
		outbox = append(outbox, id)
		return err
	})
	if err != nil {
		return nil, err
	}
	return outbox, nil
}

// writeOutbox writes one prompt for the signer of key on topic.
func (s *Store) writeOutbox(ctx context.Context, tx pgx.Tx, topic string, key txm.LeaseKey) (int64, error) {
	payload, _ := json.Marshal(txm.PromptMessage{ChainID: key.ChainID, Signer: txm.CanonicalAddress(key.Signer)})
	var id int64
	err := tx.QueryRow(ctx, `INSERT INTO outbox (topic, ordering_key, payload) VALUES ($1, $2, $3) RETURNING id`,
		topic, txm.CanonicalAddress(key.Signer), payload).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("write %s outbox: %w", topic, translate(err))
	}
	return id, nil
}

// MarkStuck implements txm.SubmitStore. Entering STUCK is a reported
// outcome (TxStuck); a transaction already STUCK only records the new reason.
func (s *Store) MarkStuck(ctx context.Context, l txm.Lease, txID string, subState string, detail string) ([]int64, error) {
	var outbox []int64
	err := WithTx(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, completionLock); err != nil {
			return fmt.Errorf("lock completions: %w", translate(err))
		}
		var f finalized
		var from string
		err := tx.QueryRow(ctx, `
WITH moved AS (
    UPDATE managed_tx t SET state = 'STUCK', sub_state = $7, last_error = $8,
        fencing_token = $5::bigint, updated_at = clock_timestamp()
    WHERE t.id = $6::uuid AND `+moveStuck.guard()+` AND `+fenceHeld+`
    RETURNING t.id, t.chain_id, t.signer::text, t.nonce,
        (SELECT o.state FROM managed_tx o WHERE o.id = t.id) AS from_state,
        (SELECT o.fork_pending FROM managed_tx o WHERE o.id = t.id) AS fork
), hist AS (
    INSERT INTO tx_history (tx_id, from_state, to_state, sub_state, reason, owner, fencing_token)
    SELECT id, from_state, 'STUCK', $7, $8, $4::text, $5::bigint FROM moved
)
SELECT id::text, chain_id, signer, nonce, from_state, fork FROM moved`,
			append(fenceArgs(l), txID, subState, detail)...).Scan(&f.id, &f.chainID, &f.signer, &f.nonce, &from, &f.fork)
		if err == pgx.ErrNoRows {
			if err := s.leases.check(ctx, tx, l, "mark_stuck", txID); err != nil {
				return err
			}
			return fmt.Errorf("mark stuck %s: %w", txID, txm.ErrIllegalTransition)
		}
		if err != nil {
			return fmt.Errorf("mark stuck %s: %w", txID, translate(err))
		}
		if from == string(txm.StateStuck) {
			return nil
		}
		f.state = string(txm.StateStuck)
		outbox, err = s.writeCompletions(ctx, tx, []finalized{f})
		return err
	})
	if err != nil {
		return nil, err
	}
	s.metrics.Stuck(ctx, subState)
	return outbox, nil
}

// NoteBroadcastError implements txm.SubmitStore.
func (s *Store) NoteBroadcastError(ctx context.Context, l txm.Lease, txID string, reason txm.BroadcastReason, detail string) error {
	_, err := s.leases.fencedExec(ctx, s.pool, l, "note_broadcast_error", txID, `
UPDATE managed_tx t SET sub_state = $7, last_error = $8, updated_at = clock_timestamp()
WHERE t.id = $6::uuid AND `+fenceHeld, txID, "broadcast_"+string(reason), detail)
	return err
}
