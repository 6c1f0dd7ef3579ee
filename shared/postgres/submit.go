package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/jackc/pgx/v5"

	"github.com/txfence/txfence/shared/txm"
)

// notHeld is true for an ALLOCATED transaction t that Submit may send now:
// no transaction at or below its nonce is backing off, and no STUCK one
// below it was never accepted by a node (the later nonces could not be
// mined before it).
const notHeld = `NOT EXISTS (
    SELECT 1 FROM managed_tx b
    WHERE b.chain_id = t.chain_id AND b.signer = t.signer AND b.nonce <= t.nonce
      AND ((b.state = 'ALLOCATED' AND b.next_attempt_at > clock_timestamp())
        OR (b.state = 'STUCK' AND b.broadcast_count = 0 AND b.nonce < t.nonce)))`

// inFlightSQL counts signer $2's (chain $1) broadcast-but-unmined
// transactions, STUCK ones included.
const inFlightSQL = `SELECT count(*) FROM managed_tx WHERE chain_id = $1 AND signer = $2 AND state IN ('TRACKING', 'STUCK')`

// nextToSubmitSQL reads signer $2's (chain $1) next ALLOCATED transactions
// that may be sent, in nonce order: at most $3, and no more than $4
// (maxInFlight) leaves room for.
const nextToSubmitSQL = `SELECT ` + txColumns + ` FROM ` + txFrom + `
WHERE t.chain_id = $1 AND t.signer = $2 AND t.state = 'ALLOCATED' AND ` + notHeld + `
ORDER BY t.nonce
LIMIT greatest(0, least($3::int, $4::int - (` + inFlightSQL + `)))`

// NextToSubmit implements txm.SubmitStore: the count and the rows in one
// round trip (a batch), the attempts in a second only when some have one.
// A drain asks before each batch, under the signer's chain lease, and each
// round trip under load is tens of milliseconds of that lease.
func (s *Store) NextToSubmit(ctx context.Context, chainID uint64, signer common.Address, maxInFlight, limit int) ([]txm.SubmitItem, int, error) {
	args := []any{int64(chainID), txm.CanonicalAddress(signer), limit, maxInFlight}
	b := &pgx.Batch{}
	b.Queue(inFlightSQL, args[:2]...)
	b.Queue(nextToSubmitSQL, args...)
	br := s.pool.SendBatch(ctx, b)
	txs, inflight, err := nextRows(br)
	if cerr := br.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("next to submit: %w", translate(cerr))
	}
	if err == nil {
		err = s.attachAttempts(ctx, txs)
	}
	if err != nil {
		return nil, 0, err
	}
	out := make([]txm.SubmitItem, len(txs))
	for i, t := range txs {
		out[i].Tx = t.Tx
		if n := len(t.Attempts); n > 0 {
			out[i].Attempt = &t.Attempts[n-1]
		}
	}
	return out, inflight, nil
}

// nextRows reads NextToSubmit's batch: the count, then the rows.
func nextRows(br pgx.BatchResults) ([]txm.Tracked, int, error) {
	var inflight int
	if err := br.QueryRow().Scan(&inflight); err != nil {
		return nil, 0, fmt.Errorf("count in flight: %w", translate(err))
	}
	rows, err := br.Query()
	if err != nil {
		return nil, 0, fmt.Errorf("next to submit: %w", translate(err))
	}
	txs, err := scanTracked(rows)
	return txs, inflight, err
}

// HasSubmitWork implements txm.SubmitStore.
func (s *Store) HasSubmitWork(ctx context.Context, chainID uint64, signer common.Address) (txm.SubmitWork, error) {
	var w txm.SubmitWork
	err := s.pool.QueryRow(ctx, `
SELECT EXISTS (SELECT 1 FROM managed_tx t WHERE t.chain_id = $1 AND t.signer = $2 AND t.state = 'ALLOCATED' AND `+notHeld+`),
    EXISTS (SELECT 1 FROM tx_action a JOIN managed_tx t ON t.id = a.tx_id
            WHERE a.status = 'pending' AND t.chain_id = $1 AND t.signer = $2)`,
		int64(chainID), txm.CanonicalAddress(signer)).Scan(&w.Rows, &w.Actions)
	if err != nil {
		return w, fmt.Errorf("submit work: %w", translate(err))
	}
	return w, nil
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
	// One statement, so no transaction of its own: the fence is all or
	// nothing (a BEGIN and a COMMIT were two more round trips per batch).
	got, err := s.leases.fencedExec(ctx, s.pool, l, "save_attempts", attempts[0].TxID, `
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
	// One statement, so no transaction of its own (a BEGIN and a COMMIT were
	// two more round trips per batch): the move, its history, the receipt
	// prompt when anything moved, and, when a STUCK transaction no node
	// had accepted was among them (it held the later nonces back), a submit
	// prompt if the signer has ALLOCATED work. Fenced, it moves nothing
	// and writes no prompt.
	payload := promptPayload(l.Key)
	var moved int
	var receipt, submit *int64
	err := s.pool.QueryRow(ctx, `
WITH u AS (
    SELECT * FROM unnest($6::uuid[], $7::int[], $8::text[]) AS u(id, no, outcome)
), moved AS (
    UPDATE managed_tx t SET state = `+moveBroadcast.state(txm.StateTracking)+`, sub_state = coalesce(t.refusal, u.outcome), last_error = NULL,
        broadcast_count = t.broadcast_count + 1, last_broadcast_at = clock_timestamp(),
        failures = 0, failing_since = NULL, next_attempt_at = NULL, stuck_since = NULL,
        version = t.version + (t.state <> `+moveBroadcast.state(txm.StateTracking)+`)::int,
        fencing_token = $5::bigint, updated_at = clock_timestamp()
    FROM u WHERE t.id = u.id AND `+moveBroadcast.guard()+` AND `+fenceHeld+`
    RETURNING t.id, u.no, u.outcome, t.sub_state, (SELECT o.state FROM managed_tx o WHERE o.id = t.id) AS from_state,
        t.chain_id, t.signer, t.state, t.nonce, t.version, t.send_via
), event AS (
`+pendingInsert(`(SELECT m.id, m.chain_id, m.signer, m.state, NULL::text AS sub_state, m.nonce, false AS fork,
        '`+string(txm.EventBroadcast)+`' AS type, m.version, true AS lifecycle,
        `+attemptDetail("x", "'endpoint', m.send_via")+` AS detail
    FROM moved m LEFT JOIN tx_attempt x ON x.tx_id = m.id AND x.attempt_no = m.no
    WHERE m.from_state <> `+moveBroadcast.state(txm.StateTracking)+`)`, "nonce", "$12::text")+`
), stamped AS (
    UPDATE tx_attempt at SET broadcast_at = coalesce(at.broadcast_at, clock_timestamp()),
        broadcast_count = at.broadcast_count + 1
    FROM moved WHERE at.tx_id = moved.id AND at.attempt_no = moved.no
), hist AS (
    INSERT INTO tx_history (tx_id, from_state, to_state, sub_state, reason, owner, fencing_token)
    SELECT id, from_state, `+moveBroadcast.state(txm.StateTracking)+`, sub_state, 'broadcast', $4::text, $5::bigint FROM moved
    WHERE from_state <> `+moveBroadcast.state(txm.StateTracking)+`
), receipt AS (
    INSERT INTO outbox (topic, ordering_key, payload)
    SELECT $9, $2, $11 WHERE EXISTS (SELECT 1 FROM moved)
    RETURNING id
), submit AS (
    INSERT INTO outbox (topic, ordering_key, payload)
    SELECT $10, $2, $11
    WHERE EXISTS (SELECT 1 FROM moved WHERE from_state = 'STUCK')
      AND EXISTS (SELECT 1 FROM managed_tx w WHERE w.chain_id = $1 AND w.signer = $2 AND w.state = 'ALLOCATED')
    RETURNING id
)
SELECT (SELECT count(*) FROM moved), (SELECT id FROM receipt), (SELECT id FROM submit)`,
		append(fenceArgs(l), ids, nos, outcomes, s.topics.Receipt, s.topics.Submit, payload, s.shard)...).Scan(&moved, &receipt, &submit)
	if err != nil {
		return nil, fmt.Errorf("mark tracking: %w", translate(err))
	}
	if moved != len(done) {
		// Fenced (nothing moved, nothing written), or a transaction that
		// could not move: what moved was broadcast and stays TRACKING;
		// its prompt is left to the outbox sweep.
		if err := s.leases.check(ctx, s.pool, l, "mark_tracking", ids[0]); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("mark tracking: %d of %d moved", moved, len(done))
	}
	var outbox []int64
	for _, id := range []*int64{receipt, submit} {
		if id != nil {
			outbox = append(outbox, *id)
		}
	}
	return outbox, nil
}

// attemptDetail is the JSON object of an attempt's fields in an event
// (tx_attempt alias x): its hash, number and fees, and the further
// key/value pairs of more.
func attemptDetail(x, more string) string {
	return `jsonb_build_object('hash', ` + x + `.tx_hash, 'attempt', ` + x + `.attempt_no, 'fees', ` + feesJSON(x) + `, ` + more + `)`
}

// feesJSON is the fees object of an event: EIP-1559's two caps, or a
// legacy transaction's gas price, as decimal strings (tx_attempt alias x).
func feesJSON(x string) string {
	return `jsonb_build_object('maxFeePerGas', ` + x + `.max_fee_per_gas::text, 'maxPriorityFeePerGas', ` +
		x + `.max_priority_fee_per_gas::text, 'gasPrice', ` + x + `.gas_price::text)`
}

// promptSubmitIfWaiting writes a `submit` prompt for the signer of key when
// it has ALLOCATED work.
// PromptSubmit implements txm.SubmitStore.
func (s *Store) PromptSubmit(ctx context.Context, key txm.LeaseKey) ([]int64, error) {
	var ids []int64
	err := WithTx(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		ids, err = s.promptSubmitIfWaiting(ctx, tx, key)
		return err
	})
	return ids, err
}

func (s *Store) promptSubmitIfWaiting(ctx context.Context, tx pgx.Tx, key txm.LeaseKey) ([]int64, error) {
	var id int64
	err := tx.QueryRow(ctx, `
INSERT INTO outbox (topic, ordering_key, payload)
SELECT $1, $2, $3 WHERE EXISTS (
    SELECT 1 FROM managed_tx WHERE chain_id = $4 AND signer = $2 AND state = 'ALLOCATED')
RETURNING id`, s.topics.Submit, txm.CanonicalAddress(key.Signer), promptPayload(key), int64(key.ChainID)).Scan(&id)
	switch {
	case err == nil:
		return []int64{id}, nil
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	default:
		return nil, fmt.Errorf("prompt submit: %w", translate(err))
	}
}

// writeOutbox writes one prompt for the signer of key on topic.
func (s *Store) writeOutbox(ctx context.Context, tx pgx.Tx, topic string, key txm.LeaseKey) (int64, error) {
	var id int64
	err := tx.QueryRow(ctx, `INSERT INTO outbox (topic, ordering_key, payload) VALUES ($1, $2, $3) RETURNING id`,
		topic, txm.CanonicalAddress(key.Signer), promptPayload(key)).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("write %s outbox: %w", topic, translate(err))
	}
	return id, nil
}

// MarkStuck implements txm.SubmitStore. Entering STUCK is a reported
// outcome (TxStuck); a transaction already STUCK only records the new reason.
func (s *Store) MarkStuck(ctx context.Context, l txm.Lease, txID string, subState string, detail string) ([]int64, error) {
	var outbox []int64
	var reported bool
	err := WithTx(ctx, s.pool, func(tx pgx.Tx) error {
		var f finalized
		var from string
		err := tx.QueryRow(ctx, `
WITH moved AS (
    UPDATE managed_tx t SET state = `+moveStuck.state(txm.StateStuck)+`, sub_state = $7, last_error = $8,
        stuck_since = coalesce(t.stuck_since, clock_timestamp()),
        version = t.version + (t.state <> `+moveStuck.state(txm.StateStuck)+`)::int,
        fencing_token = $5::bigint, updated_at = clock_timestamp()
    WHERE t.id = $6::uuid AND `+moveStuck.guard()+` AND `+fenceHeld+`
    RETURNING t.id, t.chain_id, t.signer::text, t.nonce, t.version,
        (SELECT o.state FROM managed_tx o WHERE o.id = t.id) AS from_state,
        (SELECT o.fork_pending FROM managed_tx o WHERE o.id = t.id) AS fork
), hist AS (
    INSERT INTO tx_history (tx_id, from_state, to_state, sub_state, reason, owner, fencing_token)
    SELECT id, from_state, `+moveStuck.state(txm.StateStuck)+`, $7, $8, $4::text, $5::bigint FROM moved
)
SELECT id::text, chain_id, signer, nonce, from_state, fork, version FROM moved`,
			append(fenceArgs(l), txID, subState, detail)...).Scan(&f.id, &f.chainID, &f.signer, &f.nonce, &from, &f.fork, &f.version)
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
		f.state, f.subState = string(txm.StateStuck), subState
		reported = true
		return s.writeCompletions(ctx, tx, []finalized{f})
	})
	if err != nil {
		return nil, err
	}
	if reported {
		outbox = s.numberAfter(ctx, "mark_stuck")
	}
	s.metrics.Stuck(ctx, subState)
	return outbox, nil
}

// NoteFailure implements txm.AttemptStore. The next attempt waits
// b.Min × 2^(failures so far), at most b.Max, or, after an outage of the
// chain's endpoints (f.Outage), until they answer again if that is sooner
// (ResumeAfterOutage).
func (s *Store) NoteFailure(ctx context.Context, l txm.Lease, f txm.Failure, b txm.BackoffPolicy) (txm.Failing, error) {
	var out txm.Failing
	var secs float64
	err := s.pool.QueryRow(ctx, `
UPDATE managed_tx t SET sub_state = coalesce(nullif($7, ''), t.sub_state), last_error = $8,
    failures = t.failures + 1, failing_since = coalesce(t.failing_since, clock_timestamp()),
    next_attempt_at = clock_timestamp() + least($10::interval, $9::interval * power(2, least(t.failures, 30))),
    backoff_outage = $11, fencing_token = $5::bigint, updated_at = clock_timestamp()
WHERE t.id = $6::uuid AND `+moveOpen.guard()+` AND `+fenceHeld+`
RETURNING t.failures, extract(epoch FROM clock_timestamp() - t.failing_since)::float8`,
		append(fenceArgs(l), f.TxID, f.SubState, f.Detail, b.Min, b.Max, f.Outage)...).Scan(&out.Failures, &secs)
	if errors.Is(err, pgx.ErrNoRows) {
		if err := s.leases.check(ctx, s.pool, l, "note_failure", f.TxID); err != nil {
			return out, err
		}
		return out, fmt.Errorf("note failure %s: %w", f.TxID, txm.ErrIllegalTransition)
	}
	if err != nil {
		return out, fmt.Errorf("note failure %s: %w", f.TxID, translate(err))
	}
	out.For = time.Duration(secs * float64(time.Second))
	return out, nil
}

// SaveReplacement implements txm.AttemptStore: the attempt, the audit row
// and, for an admin action, the action marked done, in one transaction.
func (s *Store) SaveReplacement(ctx context.Context, l txm.Lease, a txm.Attempt, audit txm.Audit) error {
	return WithTx(ctx, s.pool, func(tx pgx.Tx) error {
		got, err := s.leases.fencedExec(ctx, tx, l, "save_replacement", a.TxID, `
WITH ins AS (
    INSERT INTO tx_attempt (tx_id, attempt_no, kind, tx_hash, raw_tx, nonce, gas_limit, max_fee_per_gas,
        max_priority_fee_per_gas, gas_price, fencing_token)
    SELECT t.id, $7, $8, $9, $10, $11, $12, $13::numeric, $14::numeric, $15::numeric, $5::bigint
    FROM managed_tx t WHERE t.id = $6::uuid AND t.nonce = $11 AND `+moveOpen.guard()+` AND `+fenceHeld+`
    RETURNING tx_id
), touched AS (
    UPDATE managed_tx t SET fencing_token = $5::bigint, updated_at = clock_timestamp(),
        refusal = coalesce($19, t.refusal), sub_state = coalesce($19, t.sub_state),
        version = t.version + (p.attempt_no IS NOT NULL)::int
    FROM ins LEFT JOIN LATERAL (
        SELECT x.attempt_no FROM tx_attempt x WHERE x.tx_id = ins.tx_id AND x.attempt_no < $7 ORDER BY x.attempt_no DESC LIMIT 1
    ) p ON true
    WHERE t.id = ins.tx_id
    RETURNING t.id, t.state, t.sub_state, t.chain_id, t.signer, t.nonce, t.version, p.attempt_no AS previous
), event AS (
`+pendingInsert(`(SELECT m.id, m.chain_id, m.signer, m.state, NULL::text AS sub_state, m.nonce, false AS fork,
        '`+string(txm.EventReplaced)+`' AS type, m.version, true AS lifecycle,
        jsonb_build_object('hash', $9::text, 'attempt', $7::int, 'fees', jsonb_build_object('maxFeePerGas', $13::text,
            'maxPriorityFeePerGas', $14::text, 'gasPrice', $15::text), 'previousHash', x.tx_hash, 'previousFees', `+feesJSON("x")+`,
            'reason', $20::text) AS detail
    FROM touched m JOIN tx_attempt x ON x.tx_id = m.id AND x.attempt_no = m.previous)`, "nonce", "$21::text")+`
)
INSERT INTO tx_history (tx_id, from_state, to_state, sub_state, reason, owner, fencing_token, action, actor)
SELECT id, state, state, sub_state, $16, $4::text, $5::bigint, $17, $18 FROM touched`,
			a.TxID, int32(a.No), string(a.Kind), a.Hash.Hex(), a.Raw, int64(a.Nonce), int64(a.GasLimit),
			bigText(a.MaxFeePerGas), bigText(a.MaxPriorityFeePerGas), bigText(a.GasPrice),
			audit.Reason, audit.Action, audit.Actor, optional(string(audit.Refused)), replacedReason(a, audit), s.shard)
		if err != nil {
			return err
		}
		if got != 1 {
			return fmt.Errorf("save replacement %s: %w", a.TxID, txm.ErrIllegalTransition)
		}
		if audit.ActionID == "" {
			return nil
		}
		return s.finishAction(ctx, tx, l, a.TxID, audit.ActionID, txm.ActionDone,
			fmt.Sprintf("signed attempt %d (%s)", a.No, a.Kind), false)
	})
}

// replacedReason is why a replacement attempt replaced the one before, as
// its TxReplaced event says: an admin's action, a cancel (a placeholder
// that fills a refused payload's nonce cancels it too), or a fee bump.
func replacedReason(a txm.Attempt, audit txm.Audit) string {
	switch {
	case audit.ActionID != "":
		return "admin"
	case a.Kind == txm.AttemptCancel || a.Kind == txm.AttemptPlaceholder:
		return "cancel"
	default:
		return "bump"
	}
}

// NoteRebroadcast implements txm.AttemptStore.
func (s *Store) NoteRebroadcast(ctx context.Context, l txm.Lease, sent []txm.Broadcasted) error {
	if len(sent) == 0 {
		return nil
	}
	ids, nos := make([]string, len(sent)), make([]int32, len(sent))
	for i, b := range sent {
		ids[i], nos[i] = b.TxID, int32(b.AttemptNo)
	}
	return WithTx(ctx, s.pool, func(tx pgx.Tx) error {
		got, err := s.leases.fencedExec(ctx, tx, l, "note_rebroadcast", ids[0], `
WITH u AS (
    SELECT * FROM unnest($6::uuid[], $7::int[]) AS u(id, no)
), moved AS (
    UPDATE managed_tx t SET broadcast_count = t.broadcast_count + 1, last_broadcast_at = clock_timestamp(),
        fencing_token = $5::bigint, updated_at = clock_timestamp()
    FROM u WHERE t.id = u.id AND t.state IN ('TRACKING', 'STUCK') AND `+fenceHeld+`
    RETURNING t.id, u.no
)
UPDATE tx_attempt a SET broadcast_count = a.broadcast_count + 1,
    broadcast_at = coalesce(a.broadcast_at, clock_timestamp())
FROM moved WHERE a.tx_id = moved.id AND a.attempt_no = moved.no`, ids, nos)
		if err != nil {
			return err
		}
		if got != int64(len(sent)) {
			return fmt.Errorf("note rebroadcast: %d of %d", got, len(sent))
		}
		return nil
	})
}
