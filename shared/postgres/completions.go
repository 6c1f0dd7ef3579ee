package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/ethereum/go-ethereum/common"
	"github.com/jackc/pgx/v5"

	"github.com/txfence/txfence/shared/txm"
)

// completionLock serializes writers of tx_completion until they commit, so
// that seqs become visible in order and a feed reader that has seen seq N
// never later finds a smaller one appear. numberCompletions takes it.
const completionLock = `SELECT pg_advisory_xact_lock(7342001)`

// writeCompletions records one reported outcome per transaction in done,
// in the caller's transaction (the one that moved them), as pending: the
// message is built here, its seq and newFork when it is numbered
// (numberCompletions, after the commit), because numbering inside the
// moving transaction would hold the feed's lock through its COMMIT and
// queue every signer's confirmations on that one lock.
func (s *Store) writeCompletions(ctx context.Context, tx pgx.Tx, done []finalized) error {
	if len(done) == 0 {
		return nil
	}
	n := len(done)
	ids, chains, signers, states, forks := make([]string, n), make([]int64, n), make([]string, n), make([]string, n), make([]bool, n)
	subs, nonces, hashes, versions := make([]string, n), make([]int64, n), make([]*string, n), make([]int64, n)
	blocks, bhashes := make([]*int64, n), make([]*string, n)
	for i, f := range done {
		ids[i], chains[i], signers[i], states[i], forks[i] = f.id, f.chainID, f.signer, f.state, f.fork
		subs[i], nonces[i], hashes[i], versions[i] = f.subState, f.nonce, f.hash, f.version
		blocks[i], bhashes[i] = f.block, f.blockHash
	}
	tag, err := tx.Exec(ctx, `
WITH u AS (
    SELECT u.*, NULL::text AS type, false AS lifecycle,
        `+outcomeDetail("u.hash", "u.block", "u.block_hash")+` AS detail
    FROM unnest($1::uuid[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::text[], $8::bool[],
        $10::bigint[], $11::bigint[], $12::text[])
        WITH ORDINALITY AS u(id, chain_id, signer, state, sub_state, nonce, hash, fork, version, block, block_hash, ord)
)
`+pendingInsert("u", "ord", "$9::text"), ids, chains, signers, states, subs, nonces, hashes, forks, s.shard, versions, blocks, bhashes)
	if err != nil {
		return fmt.Errorf("write completions: %w", translate(err))
	}
	if tag.RowsAffected() != int64(n) {
		return fmt.Errorf("write completions: %d rows for %d outcomes", tag.RowsAffected(), n)
	}
	return nil
}

// outcomeDetail is the detail of an outcome (its row's state is column
// state) with receipt attempt hash, block and blockHash: a TxFailed event
// names its block by number only (schemas/completion-event.schema.json).
func outcomeDetail(hash, block, blockHash string) string {
	return `jsonb_build_object('hash', ` + hash + `, 'block', ` + block + `, 'blockHash', CASE WHEN state = '` +
		string(txm.StateConfirmed) + `' THEN ` + blockHash + ` END)`
}

// pendingInsert is the statement (or data-modifying CTE) that records, as
// pending, one event for each row of src, a relation with columns id,
// chain_id, signer, state (after the event), sub_state ("" or NULL for
// none), nonce (NULL for a transaction that never got one: the message has
// none), fork, type (the event type; NULL for an outcome, typed by its
// state), version (the transaction's, after the event), lifecycle (false
// for an outcome) and detail (the event's own fields, as JSON; nulls are
// dropped), in the order of order; shard is the text expression naming
// this database's shard ("" with one database). The message is
// txm.CompletionMessage as JSON (its seq and newFork are set when it is
// numbered) and the attributes are the completion topic's; both are built
// here, in SQL (migrations/functions/txfence_event_payload.sql), so that a
// statement that moves transactions can record their events without a
// round trip back to the process (see FinalizeBlocks).
func pendingInsert(src, order, shard string) string {
	return `INSERT INTO completion_pending (tx_id, chain_id, signer, state, new_fork, sub_state, type, version, lifecycle, detail,
    payload, attributes)
SELECT p.id, p.chain_id, p.signer, p.state, p.fork, nullif(p.sub_state, ''), p.type, p.version, p.lifecycle,
    jsonb_strip_nulls(p.detail),
    txfence_event_payload(p.type, p.id, p.chain_id, p.signer::text, p.state, p.sub_state, p.nonce, p.version, p.detail, ` + shard + `),
    txfence_event_attributes(p.type, p.chain_id, p.signer::text, p.state, p.sub_state, p.version, p.lifecycle, ` + shard + `)
FROM (SELECT src.id, src.chain_id, src.signer, src.state, src.sub_state, src.nonce, src.fork, src.version, src.lifecycle,
        src.detail, coalesce(src.type, ` + eventTypeSQL("src.state") + `) AS type, src.` + order + ` AS ord
    FROM ` + src + ` src) p
ORDER BY p.ord`
}

// eventTypeSQL is txm.EventFor of the state expression state, in SQL.
func eventTypeSQL(state string) string {
	return fmt.Sprintf("CASE %s WHEN '%s' THEN '%s' WHEN '%s' THEN '%s' ELSE '%s' END", state,
		txm.StateConfirmed, txm.EventFor(txm.StateConfirmed), txm.StateFailedFinal, txm.EventFor(txm.StateFailedFinal),
		txm.EventFor(txm.StateStuck))
}

// numberCompletionsSQL numbers every pending event, in the order they
// were recorded (an event recorded without its message, as the allocation
// functions record TxAccepted, gets it built here): each becomes a tx_completion row and, unless it is a
// lifecycle event and $2 (TXFENCE_TOPIC_LIFECYCLE) is off, a
// completion-topic outbox row, carrying its seq and newFork. An outcome's
// newFork is set when the transaction was reorged since its last report,
// or was reported before, here or earlier in the same numbering; a
// lifecycle event's is false. It runs under completionLock, so seqs become
// visible in order. Whether a transaction was reported before is one
// index probe per outcome, a subquery the planner cannot turn into a hash
// of the whole feed: as an EXISTS it does, since the queue's estimate is
// its emptied pages' (thousands of rows for a few dozen), and then reads
// every tx_completion row on every numbering.
var numberCompletionsSQL = `
WITH p AS (
    DELETE FROM completion_pending RETURNING *
), q AS (
    SELECT p.*, row_number() OVER (PARTITION BY p.tx_id, p.lifecycle ORDER BY p.id) AS k FROM p ORDER BY p.id
), n AS (
    SELECT q.*, nextval(pg_get_serial_sequence('tx_completion', 'seq')) AS seq,
        NOT q.lifecycle AND (q.new_fork OR q.k > 1
            OR (SELECT true FROM tx_completion c WHERE c.tx_id = q.tx_id AND NOT c.lifecycle LIMIT 1) IS NOT NULL) AS fork
    FROM q
), c AS (
    INSERT INTO tx_completion (seq, tx_id, chain_id, signer, state, new_fork, sub_state, created_at, type, version, lifecycle, detail)
    OVERRIDING SYSTEM VALUE
    SELECT n.seq, n.tx_id, n.chain_id, n.signer, n.state, n.fork, n.sub_state, n.created_at,
        coalesce(n.type, ` + eventTypeSQL("n.state") + `), n.version, n.lifecycle, n.detail
    FROM n ORDER BY n.seq
), o AS (
    INSERT INTO outbox (topic, ordering_key, payload, attributes)
    SELECT $1, n.signer,
        coalesce(n.payload, txfence_event_payload(n.type, n.tx_id, n.chain_id, n.signer::text, n.state, n.sub_state, n.nonce,
            n.version, n.detail, $3::text)) || jsonb_build_object('seq', n.seq, 'newFork', n.fork),
        coalesce(n.attributes, txfence_event_attributes(n.type, n.chain_id, n.signer::text, n.state, n.sub_state, n.version,
            n.lifecycle, $3::text)) || jsonb_build_object('seq', n.seq::text, 'newFork', n.fork::text)
            || CASE WHEN $3::text <> '' THEN jsonb_build_object('shard', $3::text) ELSE '{}' END
    FROM n WHERE NOT n.lifecycle OR $2::bool ORDER BY n.seq
    RETURNING id
), wake AS (
    SELECT pg_notify('` + completionChannel + `', '') FROM (SELECT 1 FROM n LIMIT 1) x
)
SELECT coalesce((SELECT array_agg(id ORDER BY id) FROM o), '{}'), (SELECT count(*) FROM wake)`

// numberCompletions numbers every pending outcome (numberCompletionsSQL)
// in one round trip: the lock and the statement in one implicit
// transaction, whose commit wakes waiting feed readers (see Listen) when it
// numbered any. Writers that commit while one numbering runs are numbered
// by the next: each waits for the lock and finds its own outcomes numbered
// already or numbers them, with everyone else's. It returns the outbox rows
// it wrote, for the caller to relay.
func (s *Store) numberCompletions(ctx context.Context) ([]int64, error) {
	var outbox []int64
	var woke int64
	b := &pgx.Batch{}
	b.Queue(completionLock)
	b.Queue(numberCompletionsSQL, s.topics.Completion, s.topics.Lifecycle, s.shard).QueryRow(func(row pgx.Row) error { return row.Scan(&outbox, &woke) })
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("number completions: %w", translate(err))
	}
	return outbox, nil
}

// NumberCompletions implements txm.ReceiptStore: it numbers the outcomes
// recorded as pending (the finality writes leave theirs to it; a stuck
// mark that crashed or lost the database after its commit leaves its). One
// read when there are none.
func (s *Store) NumberCompletions(ctx context.Context) ([]int64, error) {
	var pending bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM completion_pending)`).Scan(&pending); err != nil {
		return nil, fmt.Errorf("pending completions: %w", translate(err))
	}
	if !pending {
		return nil, nil
	}
	return s.numberCompletions(ctx)
}

// numberAfter numbers the outcomes a committed write recorded. Its
// failure is logged, not returned: the write is done, and the next
// finality pass numbers what it left.
func (s *Store) numberAfter(ctx context.Context, op string) []int64 {
	outbox, err := s.numberCompletions(ctx)
	if err != nil {
		s.log.WarnContext(ctx, "outcomes recorded but not numbered yet; the next finality pass numbers them",
			slog.String("op", op), slog.Any("error", err))
	}
	return outbox
}

// completionsAfterSQL reads the feed after a seq ($1), at most $2 rows,
// of the signers $3 (NULL: all) and the principal $4 ("": any); which
// selects the events: the outcomes only (over tx_completion_outcomes) or
// every one. An outcome whose event has no hash of its own (one written
// before events had details, a TxStuck) reads its transaction's receipt
// (else latest) attempt's hash, as the feed always did.
func completionsAfterSQL(which string) string {
	return `
SELECT c.seq, c.tx_id::text, c.chain_id, c.signer::text, c.state, c.new_fork, coalesce(c.sub_state, ''), t.nonce,
    coalesce(c.detail->>'hash', a.tx_hash), c.created_at, coalesce(t.principal, ''),
    coalesce(c.type, ` + eventTypeSQL("c.state") + `), coalesce(c.version, 0), c.lifecycle, coalesce(c.detail, '{}')
FROM tx_completion c
JOIN managed_tx t ON t.id = c.tx_id
LEFT JOIN LATERAL (
    SELECT tx_hash FROM tx_attempt WHERE tx_id = c.tx_id AND NOT c.lifecycle AND c.detail->>'hash' IS NULL
    ORDER BY (attempt_no = t.receipt_attempt_no) DESC, attempt_no DESC LIMIT 1
) a ON true
WHERE c.seq > $1 AND ` + which + ` AND ($3::text[] IS NULL OR c.signer = ANY($3::text[])) AND ($4 = '' OR t.principal = $4)
ORDER BY c.seq LIMIT $2`
}

var (
	outcomesAfterSQL = completionsAfterSQL("NOT c.lifecycle")
	eventsAfterSQL   = completionsAfterSQL("true")
)

// CompletionsAfter implements txm.CompletionFeed.
func (s *Store) CompletionsAfter(ctx context.Context, after int64, limit int, f txm.CompletionFilter) ([]txm.Completion, error) {
	var only []string
	if f.Signers != nil {
		only = make([]string, len(f.Signers))
		for i, a := range f.Signers {
			only[i] = txm.CanonicalAddress(a)
		}
	}
	q := outcomesAfterSQL
	if f.Lifecycle {
		q = eventsAfterSQL
	}
	rows, err := s.pool.Query(ctx, q, after, limit, only, f.Principal)
	if err != nil {
		return nil, fmt.Errorf("completions after %d: %w", after, translate(err))
	}
	defer rows.Close()
	var out []txm.Completion
	for rows.Next() {
		var c txm.Completion
		var chainID int64
		var nonce *int64 // NULL: it ended before it got one
		var signer, state, typ string
		var hash *string
		var detail []byte
		if err := rows.Scan(&c.Seq, &c.TxID, &chainID, &signer, &state, &c.NewFork, &c.SubState, &nonce, &hash, &c.CreatedAt,
			&c.Principal, &typ, &c.Version, &c.Lifecycle, &detail); err != nil {
			return nil, fmt.Errorf("completions: %w", translate(err))
		}
		c.ChainID, c.Signer, c.State, c.Type = uint64(chainID), common.HexToAddress(signer), txm.State(state), txm.EventType(typ)
		if nonce != nil && c.Type != txm.EventPendingApproval { // it had none then
			n := uint64(*nonce)
			c.Nonce = &n
		}
		if hash != nil {
			h := common.HexToHash(*hash)
			c.Hash = &h
		}
		if err := json.Unmarshal(detail, &c.Detail); err != nil {
			return nil, fmt.Errorf("completions: detail of %d: %w", c.Seq, err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

var _ txm.CompletionListener = (*Store)(nil)

// completionChannel is the LISTEN/NOTIFY channel completion writers notify
// when they commit.
const completionChannel = "txfence_completions"

// Listen implements txm.CompletionListener on one pool connection held for
// as long as ctx lasts.
func (s *Store) Listen(ctx context.Context, wake func()) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("listen: %w", translate(err))
	}
	defer func() {
		// The connection is left listening; a fresh one is better than
		// one with a stale LISTEN.
		_ = conn.Hijack().Close(context.WithoutCancel(ctx))
	}()
	if _, err := conn.Exec(ctx, `LISTEN `+completionChannel); err != nil {
		return fmt.Errorf("listen: %w", translate(err))
	}
	wake()
	for {
		if _, err := conn.Conn().WaitForNotification(ctx); err != nil {
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				return nil
			}
			return fmt.Errorf("wait for notification: %w", translate(err))
		}
		wake()
	}
}

// LatestCompletion implements txm.CompletionFeed.
func (s *Store) LatestCompletion(ctx context.Context) (int64, error) {
	var seq int64
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(max(seq), 0) FROM tx_completion`).Scan(&seq); err != nil {
		return 0, fmt.Errorf("latest completion: %w", translate(err))
	}
	return seq, nil
}
