package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/jackc/pgx/v5"

	"github.com/txfence/txfence/shared/txm"
)

var (
	_ txm.ReceiptStore   = (*Store)(nil)
	_ txm.CompletionFeed = (*Store)(nil)
)

// attemptColumns is the column list trackedTxs reads for attempts (alias at).
const attemptColumns = `at.tx_id::text, at.attempt_no, at.kind, at.tx_hash, at.raw_tx, at.nonce, at.gas_limit,
    at.max_fee_per_gas::text, at.max_priority_fee_per_gas::text, at.gas_price::text, at.created_at,
    at.broadcast_at, at.broadcast_count, at.outcome`

func scanAttemptInto(a *txm.Attempt, hash string, maxFee, maxPrio, gasPrice *string, nonce, gas int64, kind string) {
	a.Hash = common.HexToHash(hash)
	a.Nonce, a.GasLimit, a.Kind = uint64(nonce), uint64(gas), txm.AttemptKind(kind)
	a.MaxFeePerGas, a.MaxPriorityFeePerGas, a.GasPrice = parseBig(maxFee), parseBig(maxPrio), parseBig(gasPrice)
}

// trackedTxs loads up to limit (0: all) transactions matching where (over
// alias t, parameters from $1) with all their attempts, in nonce order; the
// attempts in a second query, only for transactions that have some.
func (s *Store) trackedTxs(ctx context.Context, where string, limit int, args ...any) ([]txm.Tracked, error) {
	q := `SELECT ` + txColumns + ` FROM ` + txFrom + ` WHERE ` + where + ` ORDER BY t.nonce`
	if limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", limit)
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("load tracked: %w", translate(err))
	}
	out, err := scanTracked(rows)
	if err != nil {
		return nil, err
	}
	return out, s.attachAttempts(ctx, out)
}

// scanTracked reads the transactions of rows (txColumns), and closes rows.
func scanTracked(rows pgx.Rows) ([]txm.Tracked, error) {
	defer rows.Close()
	var out []txm.Tracked
	for rows.Next() {
		t, err := scanTx(rows)
		if err != nil {
			return nil, fmt.Errorf("load tracked: %w", translate(err))
		}
		out = append(out, txm.Tracked{Tx: t})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load tracked: %w", translate(err))
	}
	return out, nil
}

// attachAttempts loads the attempts of the transactions in out that have
// some, in one query (none when none has: a drain's fresh rows).
func (s *Store) attachAttempts(ctx context.Context, out []txm.Tracked) error {
	byID := map[string]int{}
	var ids []string
	for i, t := range out {
		if t.Tx.Attempts > 0 { // the number of its latest attempt
			byID[t.Tx.ID] = i
			ids = append(ids, t.Tx.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	arows, err := s.pool.Query(ctx, `SELECT `+attemptColumns+` FROM tx_attempt at WHERE at.tx_id = ANY($1::uuid[]) ORDER BY at.tx_id, at.attempt_no`, ids)
	if err != nil {
		return fmt.Errorf("load attempts: %w", translate(err))
	}
	defer arows.Close()
	for arows.Next() {
		var (
			a                         txm.Attempt
			no, bcount                int32
			kind, hash                string
			nonce, gas                int64
			maxFee, maxPrio, gasPrice *string
			outcome                   *string
		)
		if err := arows.Scan(&a.TxID, &no, &kind, &hash, &a.Raw, &nonce, &gas, &maxFee, &maxPrio, &gasPrice,
			&a.CreatedAt, &a.BroadcastAt, &bcount, &outcome); err != nil {
			return fmt.Errorf("load attempts: %w", translate(err))
		}
		a.No, a.BroadcastCount, a.Outcome = int(no), int(bcount), deref(outcome)
		scanAttemptInto(&a, hash, maxFee, maxPrio, gasPrice, nonce, gas, kind)
		i := byID[a.TxID]
		out[i].Attempts = append(out[i].Attempts, a)
	}
	if err := arows.Err(); err != nil {
		return fmt.Errorf("load attempts: %w", translate(err))
	}
	return nil
}

// TrackingBelow implements txm.ReceiptStore. A hot signer may have
// thousands in flight and only the few in the last block mined: loading
// every one of them, attempts and raw bytes included, on each receipt
// prompt took most of a second, under the signer's chain lease then.
func (s *Store) TrackingBelow(ctx context.Context, chainID uint64, signer common.Address, nonce uint64,
	olderThan time.Duration) ([]txm.Tracked, int, error) {
	const open = `t.chain_id = $1 AND t.signer = $2 AND t.state IN ('TRACKING', 'STUCK')
    AND EXISTS (SELECT 1 FROM tx_attempt x WHERE x.tx_id = t.id)
    AND t.updated_at <= clock_timestamp() - $4::interval`
	args := []any{int64(chainID), txm.CanonicalAddress(signer), clampNonce(nonce), olderThan}
	var waiting int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM managed_tx t WHERE `+open+` AND t.nonce >= $3`, args...).Scan(&waiting); err != nil {
		return nil, 0, fmt.Errorf("count tracked: %w", translate(err))
	}
	below, err := s.trackedTxs(ctx, open+` AND t.nonce < $3`, 0, args...)
	return below, waiting, err
}

// clampNonce is nonce as a bigint parameter: nonces past its range (which
// no chain reaches) compare as its maximum.
func clampNonce(nonce uint64) int64 {
	return int64(min(nonce, math.MaxInt64))
}

// StillUnmined implements txm.ReceiptStore.
func (s *Store) StillUnmined(ctx context.Context, txIDs []string) (map[string]bool, error) {
	rows, err := s.pool.Query(ctx, `SELECT t.id::text FROM managed_tx t WHERE t.id = ANY($1::uuid[]) AND `+moveMined.guard(), txIDs)
	if err != nil {
		return nil, fmt.Errorf("still unmined: %w", translate(err))
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("still unmined: %w", translate(err))
	}
	out := make(map[string]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out, nil
}

// MinedTxs implements txm.ReceiptStore.
func (s *Store) MinedTxs(ctx context.Context, chainID uint64, signer common.Address) ([]txm.Tracked, error) {
	return s.trackedTxs(ctx, `t.chain_id = $1 AND t.signer = $2 AND t.state = 'MINED'`, 0, int64(chainID), txm.CanonicalAddress(signer))
}

// MarkMined implements txm.ReceiptStore.
func (s *Store) MarkMined(ctx context.Context, l txm.Lease, mined []txm.Mined) ([]int64, error) {
	if len(mined) == 0 {
		return nil, nil
	}
	n := len(mined)
	ids, nos, bnums := make([]string, n), make([]int32, n), make([]int64, n)
	bhashes, statuses, used, prices := make([]string, n), make([]int16, n), make([]int64, n), make([]*string, n)
	for i, m := range mined {
		ids[i], nos[i], bnums[i] = m.TxID, int32(m.AttemptNo), int64(m.Receipt.BlockNumber)
		bhashes[i], statuses[i], used[i] = m.Receipt.BlockHash.Hex(), int16(m.Receipt.Status), int64(m.Receipt.GasUsed)
		prices[i] = bigText(m.Receipt.EffectiveGasPrice)
	}
	// One statement, so no transaction of its own (a BEGIN, the prompt and
	// a COMMIT were three more round trips under the signer's chain
	// lease): the move, the attempts' outcomes, the history and, when
	// anything moved (room was freed under maxInFlight), a submit prompt if
	// the signer has ALLOCATED work. Fenced, it moves nothing and writes no
	// prompt.
	var moved int
	var prompt *int64
	err := s.pool.QueryRow(ctx, `
WITH u AS (
    SELECT * FROM unnest($6::uuid[], $7::int[], $8::bigint[], $9::text[], $10::smallint[], $11::bigint[], $12::text[])
        AS u(id, no, bnum, bhash, status, used, price)
), moved AS (
    UPDATE managed_tx t SET state = `+moveMined.state(txm.StateMined)+`, sub_state = NULL, receipt_attempt_no = u.no,
        receipt_block_number = u.bnum, receipt_block_hash = u.bhash, receipt_status = u.status,
        receipt_gas_used = u.used, receipt_effective_gas_price = u.price::numeric,
        failures = 0, failing_since = NULL, next_attempt_at = NULL, stuck_since = NULL,
        mined_at = clock_timestamp(), version = t.version + 1, fencing_token = $5::bigint, updated_at = clock_timestamp()
    FROM u WHERE t.id = u.id AND `+moveMined.guard()+` AND `+fenceHeld+`
    RETURNING t.id, u.no, u.bnum, (SELECT o.state FROM managed_tx o WHERE o.id = t.id) AS from_state,
        t.chain_id, t.signer, t.state, t.nonce, t.version, u.bhash,
        (SELECT x.tx_hash FROM tx_attempt x WHERE x.tx_id = t.id AND x.attempt_no = u.no) AS hash
), event AS (
`+pendingInsert(`(SELECT id, chain_id, signer, state, NULL::text AS sub_state, nonce, false AS fork, '`+string(txm.EventMined)+`' AS type,
        version, true AS lifecycle, jsonb_build_object('hash', hash, 'block', bnum, 'blockHash', bhash) AS detail FROM moved)`,
		"nonce", "$15::text")+`
), outcomes AS (
    -- whichever attempt was mined wins; the others at its nonce were replaced
    UPDATE tx_attempt a SET outcome = CASE WHEN a.attempt_no = moved.no THEN 'mined' ELSE 'replaced' END
    FROM moved WHERE a.tx_id = moved.id
), hist AS (
    INSERT INTO tx_history (tx_id, from_state, to_state, reason, owner, fencing_token)
    SELECT id, from_state, `+moveMined.state(txm.StateMined)+`, 'receipt in block ' || bnum, $4::text, $5::bigint FROM moved
), prompt AS (
    INSERT INTO outbox (topic, ordering_key, payload)
    SELECT $13, $2, $14
    WHERE EXISTS (SELECT 1 FROM moved)
      AND EXISTS (SELECT 1 FROM managed_tx w WHERE w.chain_id = $1 AND w.signer = $2 AND w.state = 'ALLOCATED')
    RETURNING id
)
SELECT (SELECT count(*) FROM moved), (SELECT id FROM prompt)`,
		append(fenceArgs(l), ids, nos, bnums, bhashes, statuses, used, prices, s.topics.Submit, promptPayload(l.Key), s.shard)...).Scan(&moved, &prompt)
	if err != nil {
		return nil, fmt.Errorf("mark_mined: %w", translate(err))
	}
	if moved == 0 {
		// Fenced, or none of them is TRACKING any more (another check
		// marked them, or they were settled): the state guard left them.
		return nil, s.leases.check(ctx, s.pool, l, "mark_mined", ids[0])
	}
	// Fewer than n moved: the others left TRACKING since they were looked
	// up; the state guard leaves them as they are.
	if prompt == nil {
		return nil, nil
	}
	return []int64{*prompt}, nil
}

func promptPayload(k txm.LeaseKey) []byte {
	b, _ := json.Marshal(txm.PromptMessage{ChainID: k.ChainID, Signer: txm.CanonicalAddress(k.Signer)})
	return b
}

// finalized is a transaction that reached a reported outcome.
type finalized struct {
	id        string
	chainID   int64
	signer    string
	state     string
	subState  string
	nonce     int64
	fork      bool
	hash      *string
	createdAt time.Time
	version   int64   // the transaction's, after the move
	block     *int64  // its receipt block, when it has one
	blockHash *string //
}

// Finalize implements txm.ReceiptStore.
func (s *Store) Finalize(ctx context.Context, l txm.Lease, txIDs []string) error {
	return s.report(ctx, l, "finalize", "MINED", txIDs, `
WITH moved AS (`+finalSet+`
    FROM tx_attempt a
    WHERE t.id = ANY($6::uuid[]) AND a.tx_id = t.id AND a.attempt_no = t.receipt_attempt_no
      AND `+moveFinal.guard()+` AND `+fenceHeld+`
    `+finalizeMoved)
}

// finalizeMoved ends a finalizing statement: its moved rows go to
// history, and are returned as report reads them.
var finalizeMoved = finalReturning + `
), ` + finalHist + `
SELECT m.id::text, m.chain_id, m.signer, m.state, coalesce(m.sub_state, ''), m.nonce, m.fork, m.tx_hash, m.created_at,
    m.version, m.receipt_block_number, m.receipt_block_hash::text
FROM moved m ORDER BY m.nonce`

// finalReturning is what a finalizing move (moved) returns.
const finalReturning = `
    RETURNING t.id, t.chain_id, t.signer::text, t.state, t.sub_state, t.nonce, a.tx_hash, t.created_at,
        t.version, t.receipt_block_number, t.receipt_block_hash,
        (SELECT o.fork_pending FROM managed_tx o WHERE o.id = t.id) AS fork`

// finalHist writes the history of a finalizing move (moved), by the lease
// of fenceArgs.
var finalHist = `hist AS (
    INSERT INTO tx_history (tx_id, from_state, to_state, sub_state, reason, owner, fencing_token)
    SELECT id, ` + moveFinal.source() + `, state, sub_state, 'final', $4::text, $5::bigint FROM moved
)`

// finalSet is what Finalize and FinalizeBlocks set on a transaction whose
// receipt block is final (a mined cancel or placeholder took the nonce
// instead of the payload; a placeholder that filled the nonce of a payload
// the node refused for good ends with that refusal).
var finalSet = `
    UPDATE managed_tx t SET
        state = CASE WHEN t.receipt_status = 1 AND a.kind IN ('original', 'replace') THEN ` + moveFinal.state(txm.StateConfirmed) + `
            ELSE ` + moveFinal.state(txm.StateFailedFinal) + ` END,
        sub_state = CASE a.kind WHEN 'cancel' THEN 'cancelled' WHEN 'placeholder' THEN coalesce(t.refusal, 'placeholder')
            ELSE CASE WHEN t.receipt_status = 1 THEN NULL ELSE 'reverted' END END,
        finalized_at = clock_timestamp(), fork_pending = false, version = t.version + 1,
        fencing_token = $5::bigint, updated_at = clock_timestamp()`

// FinalizeBlocks implements txm.ReceiptStore. It is one statement, so no
// transaction of its own: the move, its history and its pending outcomes
// (built in SQL: pendingInsert). A hot signer's finality write holds its
// chain lease, which its drains and receipt checks wait for, and as a
// transaction (BEGIN, the move, the outcomes, COMMIT) it was four round
// trips, each tens of milliseconds on a busy machine.
func (s *Store) FinalizeBlocks(ctx context.Context, l txm.Lease, blocks []txm.Header) ([]txm.Final, error) {
	if len(blocks) == 0 {
		return nil, nil
	}
	numbers, hashes := make([]int64, len(blocks)), make([]string, len(blocks))
	for i, b := range blocks {
		numbers[i], hashes[i] = int64(b.Number), b.Hash.Hex()
	}
	rows, err := s.pool.Query(ctx, `
WITH moved AS (`+finalSet+`
    FROM tx_attempt a, unnest($6::bigint[], $7::text[]) AS b(number, hash)
    WHERE t.chain_id = $1::bigint AND t.signer = $2::text
      AND t.receipt_block_number = b.number AND t.receipt_block_hash = b.hash
      AND a.tx_id = t.id AND a.attempt_no = t.receipt_attempt_no
      AND `+moveFinal.guard()+` AND `+fenceHeld+finalReturning+`
), `+finalHist+`, pending AS (
`+pendingInsert(`(SELECT id, chain_id, signer, state, sub_state, nonce, fork, NULL::text AS type, version, false AS lifecycle,
        `+outcomeDetail("tx_hash", "receipt_block_number", "receipt_block_hash")+` AS detail FROM moved)`,
		"nonce", "$8::text")+`
)
SELECT m.id::text, m.state, m.created_at FROM moved m ORDER BY m.nonce`, append(fenceArgs(l), numbers, hashes, s.shard)...)
	if err != nil {
		return nil, fmt.Errorf("finalize: %w", translate(err))
	}
	final, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (txm.Final, error) {
		var f txm.Final
		var state string
		err := r.Scan(&f.TxID, &state, &f.CreatedAt)
		f.State = txm.State(state)
		return f, err
	})
	if err != nil {
		return nil, fmt.Errorf("finalize: %w", translate(err))
	}
	if len(final) == 0 {
		// Nothing moved: nothing was MINED in those blocks, or the lease
		// was lost.
		return nil, s.leases.check(ctx, s.pool, l, "finalize", "")
	}
	return final, nil
}

// report runs a statement that moves the transactions txIDs to a reported
// outcome (its parameters: the lease, then the ids as $6, then args; its
// rows: id, chain id, signer, state, sub-state, nonce, fork, hash) and
// records their outcomes as pending, in one transaction. All of txIDs must
// move (they were in state from); otherwise nothing is written. The
// outcomes reach the feed when NumberCompletions numbers them.
func (s *Store) report(ctx context.Context, l txm.Lease, op, from string, txIDs []string, sql string, args ...any) error {
	if len(txIDs) == 0 {
		return nil
	}
	_, err := s.reportMoved(ctx, l, op, from, len(txIDs), txIDs[0], sql, append([]any{txIDs}, args...)...)
	return err
}

// reportMoved is report for a statement that moves what its own predicate
// finds (its parameters from $6 are args): want is how many must move, or
// -1 for any number (none moved is then fine unless the lease was lost).
// It returns what moved.
//
// It does not number the outcomes: the caller holds the signer's chain
// lease, and numbering after the commit (the feed's lock, queued behind
// every other signer's numbering) would hold the lease and the sweep's
// worker that much longer, while the signer's drain and its next
// confirmations wait. The
// finality sweep numbers beside its signers' sweeps (NumberCompletions).
func (s *Store) reportMoved(ctx context.Context, l txm.Lease, op, from string, want int, txID, sql string, args ...any) ([]finalized, error) {
	var done []finalized
	err := WithTx(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, sql, append(fenceArgs(l), args...)...)
		if err != nil {
			return fmt.Errorf("%s: %w", op, translate(err))
		}
		for rows.Next() {
			var f finalized
			if err := rows.Scan(&f.id, &f.chainID, &f.signer, &f.state, &f.subState, &f.nonce, &f.fork, &f.hash, &f.createdAt,
				&f.version, &f.block, &f.blockHash); err != nil {
				rows.Close()
				return fmt.Errorf("%s: %w", op, translate(err))
			}
			done = append(done, f)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("%s: %w", op, translate(err))
		}
		if len(done) != want && (want >= 0 || len(done) == 0) {
			if err := s.leases.check(ctx, tx, l, op, txID); err != nil {
				return err
			}
			if want < 0 {
				return nil
			}
			return fmt.Errorf("%s: %d of %d were %s", op, len(done), want, from)
		}
		return s.writeCompletions(ctx, tx, done)
	})
	if err != nil {
		return nil, err
	}
	return done, nil
}

// reorgReturning is what a move back to TRACKING (Reorged, ReopenBlock)
// returns for its TxReorged event: the receipt it leaves is read from the
// row as it was before the move.
const reorgReturning = `t.chain_id, t.signer, t.state, t.nonce, t.version,
        (SELECT o.receipt_block_number FROM managed_tx o WHERE o.id = t.id) AS left_block,
        (SELECT o.receipt_block_hash FROM managed_tx o WHERE o.id = t.id) AS left_block_hash,
        (SELECT x.tx_hash FROM managed_tx o JOIN tx_attempt x ON x.tx_id = o.id AND x.attempt_no = o.receipt_attempt_no
         WHERE o.id = t.id) AS left_hash`

// reorgEvent records the TxReorged event of each row of moved
// (reorgReturning); $8 is the shard.
var reorgEvent = pendingInsert(`(SELECT id, chain_id, signer, state, NULL::text AS sub_state, nonce, false AS fork,
        '`+string(txm.EventReorged)+`' AS type, version, true AS lifecycle,
        jsonb_build_object('hash', left_hash, 'block', left_block, 'blockHash', left_block_hash) AS detail FROM moved)`,
	"nonce", "$8::text")

// Reorged implements txm.ReceiptStore.
func (s *Store) Reorged(ctx context.Context, l txm.Lease, txID string, detail string) error {
	return WithTx(ctx, s.pool, func(tx pgx.Tx) error {
		got, err := s.leases.fencedExec(ctx, tx, l, "reorged", txID, `
WITH moved AS (
    UPDATE managed_tx t SET state = `+moveReorg.state(txm.StateTracking)+`, sub_state = 'reorged', reorg_count = t.reorg_count + 1,
        fork_pending = true, receipt_attempt_no = NULL, receipt_block_number = NULL, receipt_block_hash = NULL,
        receipt_status = NULL, receipt_gas_used = NULL, receipt_effective_gas_price = NULL, mined_at = NULL,
        version = t.version + 1, fencing_token = $5::bigint, updated_at = clock_timestamp()
    WHERE t.id = $6::uuid AND `+moveReorg.guard()+` AND `+fenceHeld+`
    RETURNING t.id, `+reorgReturning+`
), event AS (
`+reorgEvent+`
), outcomes AS (
    UPDATE tx_attempt a SET outcome = NULL FROM moved WHERE a.tx_id = moved.id
)
INSERT INTO tx_history (tx_id, from_state, to_state, sub_state, reason, owner, fencing_token)
SELECT id, `+moveReorg.source()+`, `+moveReorg.state(txm.StateTracking)+`, 'reorged', $7, $4::text, $5::bigint FROM moved`,
			txID, detail, s.shard)
		if err != nil {
			return err
		}
		if got != 1 {
			return fmt.Errorf("reorged %s: %w", txID, txm.ErrIllegalTransition)
		}
		_, err = s.writeOutbox(ctx, tx, s.topics.Receipt, l.Key)
		return err
	})
}

// signersWithWorkSQL finds the signers with MINED or stale TRACKING/STUCK
// transactions ($1 staleness), with the distinct receipt blocks of the
// MINED ones and how many each holds: one row per block ('m') or per stale
// signer ('s'), grouped by signer; and the distinct blocks of the outcomes
// reported within the watch ($2) on each chain ('r', no signer), from
// reported_block (migration 00020: the minute of a block's last outcome
// counts, so the watch is at least $2), because one row per MINED
// transaction and per signer's reported block is thousands of rows a pass
// under load, read before any signer's sweep can start. The watch
// window's start is a subquery so that it is computed once and bounds
// managed_tx_finalized (clock_timestamp() itself is volatile: compared row
// by row, it read every finished transaction).
const signersWithWorkSQL = `
SELECT chain_id, signer, k, block, hash, n FROM (
    SELECT chain_id, signer, 'm' AS k, receipt_block_number AS block, receipt_block_hash::text AS hash, count(*) AS n
    FROM managed_tx WHERE state = 'MINED'
    GROUP BY chain_id, signer, receipt_block_number, receipt_block_hash
    UNION ALL
    SELECT DISTINCT chain_id, signer, 's', 0::bigint, ''::text, 0::bigint FROM managed_tx
    WHERE state IN ('TRACKING', 'STUCK') AND updated_at <= clock_timestamp() - $1::interval
    UNION ALL
    SELECT DISTINCT chain_id, ''::text, 'r', block_number, block_hash::text, 0::bigint FROM reported_block
    WHERE $2::interval > '0s' AND minute >= (SELECT date_trunc('minute', clock_timestamp() - $2::interval))
) w
ORDER BY chain_id, signer, k, block`

// PruneReported implements txm.ReceiptStore.
func (s *Store) PruneReported(ctx context.Context, watch time.Duration) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM reported_block WHERE minute < date_trunc('minute', clock_timestamp() - $1::interval)`, watch)
	if err != nil {
		return fmt.Errorf("prune reported blocks: %w", translate(err))
	}
	return nil
}

// SignersWithWork implements txm.ReceiptStore.
func (s *Store) SignersWithWork(ctx context.Context, staleAfter, watch time.Duration) (txm.FinalityWork, error) {
	out := txm.FinalityWork{Reported: map[uint64][]txm.Header{}}
	rows, err := s.pool.Query(ctx, signersWithWorkSQL, staleAfter, watch)
	if err != nil {
		return out, fmt.Errorf("signers with work: %w", translate(err))
	}
	defer rows.Close()
	for rows.Next() {
		var chainID, block, n int64
		var signer, kind, hash string
		if err := rows.Scan(&chainID, &signer, &kind, &block, &hash, &n); err != nil {
			return out, fmt.Errorf("signers with work: %w", translate(err))
		}
		h := txm.Header{Number: uint64(block), Hash: common.HexToHash(hash)}
		if kind == "r" {
			out.Reported[uint64(chainID)] = append(out.Reported[uint64(chainID)], h)
			continue
		}
		w := lastWork(&out.Signers, txm.SignerRef{ChainID: uint64(chainID), Signer: common.HexToAddress(signer)})
		switch kind {
		case "m":
			w.Mined, w.MinedBlocks, w.MinedCounts = true, append(w.MinedBlocks, h), append(w.MinedCounts, int(n))
		case "s":
			w.Stale = true
		}
	}
	if err := rows.Err(); err != nil {
		return out, fmt.Errorf("signers with work: %w", translate(err))
	}
	return out, nil
}

// lastWork returns the last of work when it is ref's, else a new one for
// ref appended to work (rows come grouped by signer).
func lastWork(work *[]txm.SignerWork, ref txm.SignerRef) *txm.SignerWork {
	if n := len(*work); n == 0 || (*work)[n-1].SignerRef != ref {
		*work = append(*work, txm.SignerWork{SignerRef: ref})
	}
	return &(*work)[len(*work)-1]
}

// reportedInSQL finds the signers with outcomes reported within the watch
// ($4) in the blocks ($2 numbers, $3 hashes) of chain $1, and which.
const reportedInSQL = `
SELECT DISTINCT t.signer, t.receipt_block_number, t.receipt_block_hash::text
FROM managed_tx t, unnest($2::bigint[], $3::text[]) AS b(number, hash)
WHERE t.chain_id = $1 AND t.state IN ('CONFIRMED', 'FAILED_FINAL')
  AND t.receipt_block_number = b.number AND t.receipt_block_hash = b.hash
  AND t.finalized_at >= (SELECT clock_timestamp() - $4::interval)
ORDER BY 1, 2`

// ReportedIn implements txm.ReceiptStore.
func (s *Store) ReportedIn(ctx context.Context, chainID uint64, blocks []txm.Header, watch time.Duration) ([]txm.SignerWork, error) {
	if len(blocks) == 0 {
		return nil, nil
	}
	numbers, hashes := make([]int64, len(blocks)), make([]string, len(blocks))
	for i, b := range blocks {
		numbers[i], hashes[i] = int64(b.Number), b.Hash.Hex()
	}
	rows, err := s.pool.Query(ctx, reportedInSQL, int64(chainID), numbers, hashes, watch)
	if err != nil {
		return nil, fmt.Errorf("reported in blocks: %w", translate(err))
	}
	defer rows.Close()
	var work []txm.SignerWork
	for rows.Next() {
		var signer, hash string
		var block int64
		if err := rows.Scan(&signer, &block, &hash); err != nil {
			return nil, fmt.Errorf("reported in blocks: %w", translate(err))
		}
		w := lastWork(&work, txm.SignerRef{ChainID: chainID, Signer: common.HexToAddress(signer)})
		w.Reported, w.ReportedBlocks = true, append(w.ReportedBlocks, txm.Header{Number: uint64(block), Hash: common.HexToHash(hash)})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reported in blocks: %w", translate(err))
	}
	return work, nil
}

// scanSignerRefs reads (chain_id, signer) rows.
func scanSignerRefs(rows pgx.Rows) ([]txm.SignerRef, error) {
	refs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (txm.SignerRef, error) {
		var chainID int64
		var signer string
		err := r.Scan(&chainID, &signer)
		return txm.SignerRef{ChainID: uint64(chainID), Signer: common.HexToAddress(signer)}, err
	})
	if err != nil {
		return nil, fmt.Errorf("read signers: %w", translate(err))
	}
	return refs, nil
}

// ReopenBlock implements txm.ReceiptStore.
func (s *Store) ReopenBlock(ctx context.Context, l txm.Lease, block txm.Header, detail string) ([]txm.Tracked, error) {
	var ids []string
	err := WithTx(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
WITH moved AS (
    UPDATE managed_tx t SET state = `+moveReopen.state(txm.StateTracking)+`, sub_state = 'reorged', reorg_count = t.reorg_count + 1,
        fork_pending = true, receipt_attempt_no = NULL, receipt_block_number = NULL, receipt_block_hash = NULL,
        receipt_status = NULL, receipt_gas_used = NULL, receipt_effective_gas_price = NULL, mined_at = NULL,
        finalized_at = NULL, version = t.version + 1, fencing_token = $5::bigint, updated_at = clock_timestamp()
    WHERE t.chain_id = $1::bigint AND t.signer = $2::text AND `+moveReopen.guard()+`
      AND t.receipt_block_number = $6 AND t.receipt_block_hash = $7 AND `+fenceHeld+`
    RETURNING t.id, (SELECT o.state FROM managed_tx o WHERE o.id = t.id) AS from_state, `+reorgReturning+`
), event AS (
`+strings.Replace(reorgEvent, "$8::text", "$9::text", 1)+`
), outcomes AS (
    UPDATE tx_attempt a SET outcome = NULL FROM moved WHERE a.tx_id = moved.id
), hist AS (
    INSERT INTO tx_history (tx_id, from_state, to_state, sub_state, reason, owner, fencing_token)
    SELECT id, from_state, `+moveReopen.state(txm.StateTracking)+`, 'reorged', $8, $4::text, $5::bigint FROM moved
)
SELECT id::text FROM moved`, append(fenceArgs(l), int64(block.Number), block.Hash.Hex(), detail, s.shard)...)
		if err != nil {
			return fmt.Errorf("reopen block %d: %w", block.Number, translate(err))
		}
		if ids, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return fmt.Errorf("reopen block %d: %w", block.Number, translate(err))
		}
		if len(ids) == 0 {
			return s.leases.check(ctx, tx, l, "reopen_block", "")
		}
		_, err = s.writeOutbox(ctx, tx, s.topics.Receipt, l.Key)
		return err
	})
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	return s.trackedTxs(ctx, `t.id = ANY($1::uuid[])`, 0, ids)
}

// ConsumedSince implements txm.ReceiptStore. The window's start is a
// subquery, computed once, so that it bounds the finalized_at index.
func (s *Store) ConsumedSince(ctx context.Context, since time.Duration) ([]txm.Tracked, error) {
	return s.trackedTxs(ctx, `t.finalized_at >= (SELECT clock_timestamp() - $1::interval)
    AND t.state = 'FAILED_FINAL' AND t.sub_state = $2`, 0, since, txm.SubStateNonceConsumedExternally)
}

// ConsumedExternally implements txm.ReceiptStore.
func (s *Store) ConsumedExternally(ctx context.Context, l txm.Lease, txIDs []string, detail string) error {
	return s.report(ctx, l, "consumed_externally", "open", txIDs, `
WITH moved AS (
    UPDATE managed_tx t SET state = `+moveConsumed.state(txm.StateFailedFinal)+`, sub_state = 'nonce_consumed_externally', last_error = $7,
        finalized_at = clock_timestamp(), fork_pending = false, next_attempt_at = NULL, stuck_since = NULL,
        version = t.version + 1, fencing_token = $5::bigint, updated_at = clock_timestamp()
    WHERE t.id = ANY($6::uuid[]) AND `+moveConsumed.guard()+` AND `+fenceHeld+`
    RETURNING t.id, t.chain_id, t.signer::text, t.nonce, t.created_at, t.version,
        (SELECT o.state FROM managed_tx o WHERE o.id = t.id) AS from_state,
        (SELECT o.fork_pending FROM managed_tx o WHERE o.id = t.id) AS fork
), outcomes AS (
    UPDATE tx_attempt a SET outcome = 'replaced' FROM moved WHERE a.tx_id = moved.id
), hist AS (
    INSERT INTO tx_history (tx_id, from_state, to_state, sub_state, reason, owner, fencing_token)
    SELECT id, from_state, `+moveConsumed.state(txm.StateFailedFinal)+`, 'nonce_consumed_externally', $7, $4::text, $5::bigint FROM moved
)
SELECT id::text, chain_id, signer, `+moveConsumed.state(txm.StateFailedFinal)+`, 'nonce_consumed_externally', nonce, fork, NULL::text,
    created_at, version, NULL::bigint, NULL::text FROM moved ORDER BY nonce`, detail)
}
