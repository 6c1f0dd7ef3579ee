package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/pgtest"
	"github.com/txfence/txfence/shared/txm"
)

// TestCompletions_SeqsBecomeVisibleInOrder: two instances (own pools and
// owners) confirm many signers' transactions at once, a few per call, while
// a reader follows the feed with its cursor. Every outcome reaches the
// reader exactly once: no seq becomes visible after a larger one was read
// (the reader would skip it for good). Each outcome's outbox message
// carries the seq and newFork its completion row was given, and is
// returned, to be relayed, by exactly one of the calls (the one that
// numbered it: its own, or one that ran meanwhile).
func TestCompletions_SeqsBecomeVisibleInOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	const signers, perSigner, chunk = 16, 24, 3
	var stores []*Store
	for i := 0; i < 2; i++ {
		stores = append(stores, testStore(t, pgtest.Pool(t, db.URL)))
	}
	type work struct {
		store *Store
		lease txm.Lease
		ids   []string
	}
	var jobs []work
	for g := 0; g < signers; g++ {
		addr := common.HexToAddress(fmt.Sprintf("0x%040x", 0x1000+g))
		var ids []string
		for n := 0; n < perSigner; n++ {
			ids = append(ids, insertTx(t, db, addr, n, "MINED", 1, 10, common.HexToHash("0x"+strings.Repeat("a", 64))))
		}
		s := stores[g%2]
		l, _, err := s.Leases().Acquire(ctx, txm.LeaseKey{ChainID: 1, Signer: addr, Scope: txm.ScopeChain}, fmt.Sprintf("owner-%d", g%2))
		require.NoError(t, err)
		for i := 0; i < len(ids); i += chunk {
			jobs = append(jobs, work{s, l, ids[i:min(i+chunk, len(ids))]})
		}
	}

	total := signers * perSigner
	var seen []txm.Completion
	stop := make(chan struct{})
	readerDone := make(chan error, 1)
	go func() {
		var after int64
		for {
			// Stopped before the read: the read began after every write
			// and numbering, and when it finds nothing the reader is done.
			stopped := false
			select {
			case <-stop:
				stopped = true
			default:
			}
			got, err := stores[0].CompletionsAfter(ctx, after, 50, txm.CompletionFilter{})
			if err != nil {
				readerDone <- err
				return
			}
			for _, c := range got {
				seen = append(seen, c)
				after = c.Seq
			}
			if len(got) == 0 {
				if stopped {
					readerDone <- nil
					return
				}
				// sleep: the poll interval of a reader tailing the feed while the writers run; it reads until stopped
				time.Sleep(time.Millisecond)
			}
		}
	}()
	// Each signer's calls go in order (they share its lease); signers run
	// at once, eight at a time over the two instances.
	bySigner := map[string][]work{}
	var order []string
	for _, j := range jobs {
		k := txm.CanonicalAddress(j.lease.Key.Signer)
		if bySigner[k] == nil {
			order = append(order, k)
		}
		bySigner[k] = append(bySigner[k], j)
	}
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	var relayMu sync.Mutex
	relayed := map[int64]int{}
	for _, k := range order {
		wg.Add(1)
		sem <- struct{}{}
		go func(js []work) {
			defer wg.Done()
			defer func() { <-sem }()
			for _, j := range js {
				if !assert.NoError(t, j.store.Finalize(ctx, j.lease, j.ids)) {
					return
				}
				// Numbered after the write, as the finality sweep does,
				// concurrently with the other signers' writes and numbering.
				out, err := j.store.NumberCompletions(ctx)
				if !assert.NoError(t, err) {
					return
				}
				relayMu.Lock()
				for _, id := range out {
					relayed[id]++
				}
				relayMu.Unlock()
			}
		}(bySigner[k])
	}
	wg.Wait()
	// The reader catches up with what is committed, then stops.
	var last int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT coalesce(max(seq), 0) FROM tx_completion`).Scan(&last))
	close(stop)
	require.NoError(t, <-readerDone)

	require.Equal(t, total, len(seen), "every outcome read once: none appeared behind the cursor")
	ids := map[string]bool{}
	for i, c := range seen {
		assert.False(t, ids[c.TxID], "%s read twice", c.TxID)
		ids[c.TxID] = true
		if i > 0 {
			assert.Greater(t, c.Seq, seen[i-1].Seq)
		}
		assert.Equal(t, txm.StateConfirmed, c.State)
	}
	assert.Equal(t, last, seen[len(seen)-1].Seq)
	assert.Len(t, relayed, total, "one outbox row per outcome, returned by some call")
	for id, n := range relayed {
		assert.Equal(t, 1, n, "outbox row %d returned by %d calls", id, n)
	}
	var pending int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM completion_pending`).Scan(&pending))
	assert.Zero(t, pending, "every recorded outcome numbered")

	// The outbox messages carry the seqs and newFork of the rows.
	rows, err := db.Pool.Query(ctx, `
SELECT o.payload, o.attributes, c.seq, c.new_fork
FROM outbox o JOIN tx_completion c ON c.tx_id = (o.payload->>'txId')::uuid
WHERE o.topic = 'c'`)
	require.NoError(t, err)
	n := 0
	for rows.Next() {
		var payload, attrs []byte
		var seq int64
		var fork bool
		require.NoError(t, rows.Scan(&payload, &attrs, &seq, &fork))
		var msg txm.CompletionMessage
		require.NoError(t, json.Unmarshal(payload, &msg))
		var attr map[string]string
		require.NoError(t, json.Unmarshal(attrs, &attr))
		assert.Equal(t, seq, msg.Seq)
		assert.Equal(t, fork, msg.NewFork)
		assert.Equal(t, fmt.Sprint(seq), attr["seq"])
		assert.Equal(t, fmt.Sprint(fork), attr["newFork"])
		assert.Equal(t, txm.EventFor(txm.StateConfirmed), msg.Type)
		n++
	}
	require.NoError(t, rows.Err())
	assert.Equal(t, total, n)
}

// TestFinalizeBlocks_EndsOnlyWhatIsMinedInThoseBlocks: FinalizeBlocks ends
// the signer's MINED transactions whose receipt is in one of the given
// blocks (number and hash), each with its completion, and leaves alone a
// transaction mined at the same height in another block (a reorg), one in
// a block not given, one not MINED, and another signer's in the same
// block. A lease that was taken over moves nothing; nothing in the blocks
// is no error.
func TestFinalizeBlocks_EndsOnlyWhatIsMinedInThoseBlocks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := testStore(t, db.Pool)
	signer, other := common.HexToAddress("0xa1"), common.HexToAddress("0xa2")
	hashA, hashB := common.HexToHash("0xaa"), common.HexToHash("0xbb")
	ok := insertTx(t, db, signer, 0, "MINED", 1, 10, hashA)
	reverted := insertTx(t, db, signer, 1, "MINED", 0, 10, hashA)
	forked := insertTx(t, db, signer, 2, "MINED", 1, 11, hashB) // block 11 is given with hash A below
	later := insertTx(t, db, signer, 3, "MINED", 1, 12, hashA)
	tracking := insertTx(t, db, signer, 4, "TRACKING", 1, 10, hashA)
	others := insertTx(t, db, other, 0, "MINED", 1, 10, hashA)
	states := func() map[string]string {
		got := map[string]string{}
		rows, err := db.Pool.Query(ctx, `SELECT id::text, state FROM managed_tx`)
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			var id, st string
			require.NoError(t, rows.Scan(&id, &st))
			got[id] = st
		}
		return got
	}
	key := txm.LeaseKey{ChainID: 1, Signer: signer, Scope: txm.ScopeChain}
	l, _, err := s.Leases().Acquire(ctx, key, "finality")
	require.NoError(t, err)

	blocks := []txm.Header{{Number: 10, Hash: hashA}, {Number: 11, Hash: hashA}}
	final, err := s.FinalizeBlocks(ctx, l, blocks)
	require.NoError(t, err)
	require.Len(t, final, 2)
	assert.Equal(t, ok, final[0].TxID)
	assert.Equal(t, txm.StateConfirmed, final[0].State)
	assert.Equal(t, reverted, final[1].TxID)
	assert.Equal(t, txm.StateFailedFinal, final[1].State)
	assert.False(t, final[0].CreatedAt.IsZero())
	assert.Equal(t, map[string]string{ok: "CONFIRMED", reverted: "FAILED_FINAL", forked: "MINED", later: "MINED",
		tracking: "TRACKING", others: "MINED"}, states())
	completions, err := s.CompletionsAfter(ctx, 0, 10, txm.CompletionFilter{})
	require.NoError(t, err)
	assert.Empty(t, completions, "recorded pending: in the feed once numbered")
	outbox, err := s.NumberCompletions(ctx)
	require.NoError(t, err)
	assert.Len(t, outbox, 2, "one completion message each")
	completions, err = s.CompletionsAfter(ctx, 0, 10, txm.CompletionFilter{})
	require.NoError(t, err)
	require.Len(t, completions, 2)

	final, err = s.FinalizeBlocks(ctx, l, blocks)
	require.NoError(t, err, "nothing left in those blocks")
	assert.Empty(t, final)
	outbox, err = s.NumberCompletions(ctx)
	require.NoError(t, err)
	assert.Empty(t, outbox)

	// Taken over: the old holder moves nothing.
	_, err = db.Pool.Exec(ctx, `UPDATE signer_lease SET expires_at = clock_timestamp() - interval '1 minute'`)
	require.NoError(t, err)
	_, _, err = s.Leases().Acquire(ctx, key, "another")
	require.NoError(t, err)
	_, err = s.FinalizeBlocks(ctx, l, []txm.Header{{Number: 12, Hash: hashA}})
	require.ErrorIs(t, err, txm.ErrFenced)
	assert.Equal(t, "MINED", states()[later])
}

// insertTx writes a transaction of who on chain 1 in state with a receipt
// (status, block) and its one attempt, and returns its id.
func insertTx(t *testing.T, db *pgtest.DB, who common.Address, nonce int, state string, status int, block int64, hash common.Hash) string {
	t.Helper()
	var id string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `
WITH t AS (
    INSERT INTO managed_tx (id, chain_id, signer, nonce, payload_fingerprint, state, fencing_token,
                            receipt_attempt_no, receipt_status, receipt_block_number, receipt_block_hash)
    VALUES (gen_random_uuid(), 1, $1::text, $2::bigint, sha256(($1::text || $2::bigint::text)::bytea), $3, 1,
            1, $4, $5, $6)
    RETURNING id)
INSERT INTO tx_attempt (tx_id, attempt_no, tx_hash, raw_tx, nonce, gas_limit, fencing_token)
SELECT id, 1, '0x' || encode(sha256(($1::text || $2::bigint::text)::bytea), 'hex'), '\x01', $2::bigint, 21000, 1 FROM t
RETURNING tx_id::text`, txm.CanonicalAddress(who), nonce, state, status, block, hash.Hex()).Scan(&id))
	return id
}

// TestWriteCompletions_MessagesAreTheFeedsOwn: the pending outcomes'
// messages and attributes, built in SQL, are txm.CompletionMessage as JSON
// and the completion topic's attributes, as the process would build them:
// with and without a shard name, with and without a hash and a
// sub-state.
func TestWriteCompletions_MessagesAreTheFeedsOwn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := testStore(t, db.Pool)
	signer := common.HexToAddress("0xa1")
	hash := "0x" + strings.Repeat("ab", 32)
	confirmed := insertTx(t, db, signer, 0, "CONFIRMED", 1, 10, common.HexToHash("0xaa"))
	reverted := insertTx(t, db, signer, 1, "FAILED_FINAL", 0, 10, common.HexToHash("0xaa"))
	stuck := insertTx(t, db, signer, 2, "STUCK", 0, 0, common.Hash{})
	done := []finalized{
		{id: confirmed, chainID: 1, signer: txm.CanonicalAddress(signer), state: "CONFIRMED", nonce: 0, hash: &hash},
		{id: reverted, chainID: 1, signer: txm.CanonicalAddress(signer), state: "FAILED_FINAL", subState: "reverted", nonce: 1, hash: &hash},
		{id: stuck, chainID: 1, signer: txm.CanonicalAddress(signer), state: "STUCK", subState: "too_many_rebroadcasts", nonce: 2, fork: true},
	}
	for _, shard := range []string{"", "eu"} {
		s.SetShard(shard)
		_, err := db.Pool.Exec(ctx, `DELETE FROM completion_pending`)
		require.NoError(t, err)
		require.NoError(t, WithTx(ctx, db.Pool, func(tx pgx.Tx) error { return s.writeCompletions(ctx, tx, done) }))
		rows, err := db.Pool.Query(ctx, `SELECT tx_id::text, new_fork, coalesce(sub_state, ''), payload, attributes FROM completion_pending ORDER BY id`)
		require.NoError(t, err)
		type pending struct {
			id, sub          string
			fork             bool
			payload, attribs []byte
		}
		got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (pending, error) {
			var p pending
			return p, r.Scan(&p.id, &p.fork, &p.sub, &p.payload, &p.attribs)
		})
		require.NoError(t, err)
		require.Len(t, got, len(done), "in the order given")
		for i, f := range done {
			want := txm.CompletionMessage{Type: txm.EventFor(txm.State(f.state)), TxID: f.id, ChainID: uint64(f.chainID),
				Signer: f.signer, State: txm.State(f.state), SubState: f.subState, Nonce: new(uint64), Shard: shard}
			*want.Nonce = uint64(f.nonce)
			if f.hash != nil {
				want.Hash = *f.hash
			}
			wantAttrs := map[string]string{"chain": "1", "signer": f.signer, "state": f.state, "type": string(want.Type),
				"subState": f.subState, "version": fmt.Sprint(f.version)}
			if shard != "" {
				wantAttrs["shard"] = shard
			}
			wantJSON, err := json.Marshal(want)
			require.NoError(t, err)
			wantAttrsJSON, err := json.Marshal(wantAttrs)
			require.NoError(t, err)
			assert.Equal(t, f.id, got[i].id)
			assert.Equal(t, f.fork, got[i].fork)
			assert.Equal(t, f.subState, got[i].sub)
			assert.JSONEq(t, string(wantJSON), string(got[i].payload), "shard %q, %s", shard, f.state)
			assert.JSONEq(t, string(wantAttrsJSON), string(got[i].attribs), "shard %q, %s", shard, f.state)
		}
	}
}

// TestNumberCompletions_ProbesEarlierReports: numbering a few outcomes
// looks up, per outcome, whether its transaction was reported before, and
// does not read the whole feed. The queue's emptied pages make the planner
// expect thousands of pending outcomes; as an EXISTS, the look-up became a
// hash of every tx_completion row, built on every numbering.
func TestNumberCompletions_ProbesEarlierReports(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	const reported = 20000
	_, err := db.Pool.Exec(ctx, fmt.Sprintf(`
INSERT INTO managed_tx (id, chain_id, signer, nonce, payload_fingerprint, state, fencing_token)
SELECT gen_random_uuid(), 1, '0x' || lpad('a1', 40, '0'), i, sha256(i::text::bytea), 'CONFIRMED', 1
FROM generate_series(0, %[1]d) i;
INSERT INTO tx_completion (tx_id, chain_id, signer, state, type)
SELECT id, 1, signer, 'CONFIRMED', 'TxConfirmed' FROM managed_tx WHERE nonce < %[1]d;
INSERT INTO completion_pending (tx_id, chain_id, signer, state, new_fork, payload, attributes)
SELECT id, 1, signer, 'CONFIRMED', false, '{}', '{}' FROM managed_tx;
DELETE FROM completion_pending;
ANALYZE managed_tx, tx_completion;
INSERT INTO completion_pending (tx_id, chain_id, signer, state, new_fork, payload, attributes)
SELECT id, 1, signer, 'CONFIRMED', false, '{}', '{}' FROM managed_tx WHERE nonce >= %[1]d - 2 ORDER BY nonce`, reported))
	require.NoError(t, err)

	// One connection: its counters are reported when it is told to.
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.MaxConns = 1
	one, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer one.Close()
	reads := func() (whole, rows int64) {
		t.Helper()
		_, err := one.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
		require.NoError(t, err)
		require.NoError(t, db.Pool.QueryRow(ctx, `
SELECT coalesce(seq_scan, 0), coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)
FROM pg_stat_user_tables WHERE relname = 'tx_completion'`).Scan(&whole, &rows))
		return whole, rows
	}
	whole0, rows0 := reads()
	s := testStore(t, one)
	ids, err := s.NumberCompletions(ctx)
	require.NoError(t, err)
	require.Len(t, ids, 3)
	whole, rows := reads()
	assert.Zero(t, whole-whole0, "tx_completion read whole")
	assert.LessOrEqual(t, rows-rows0, int64(3), "tx_completion rows read for 3 outcomes")

	var forks []bool
	require.NoError(t, db.Pool.QueryRow(ctx, `
SELECT array_agg(c.new_fork ORDER BY t.nonce, c.seq) FROM tx_completion c JOIN managed_tx t ON t.id = c.tx_id
WHERE t.nonce >= $1 - 2`, reported).Scan(&forks))
	assert.Equal(t, []bool{false, true, false, true, false}, forks,
		"reported before (two rows each, the second a new fork) or not")
}

// preEventsNumbering is how a revision from before lifecycle events
// numbered pending outcomes: it knows no type, version or lifecycle.
const preEventsNumbering = `
WITH p AS (
    DELETE FROM completion_pending RETURNING *
), n AS (
    SELECT p.*, nextval(pg_get_serial_sequence('tx_completion', 'seq')) AS seq FROM p
), c AS (
    INSERT INTO tx_completion (seq, tx_id, chain_id, signer, state, new_fork, sub_state, created_at)
    OVERRIDING SYSTEM VALUE
    SELECT n.seq, n.tx_id, n.chain_id, n.signer, n.state, n.new_fork, n.sub_state, n.created_at FROM n ORDER BY n.seq
), o AS (
    INSERT INTO outbox (topic, ordering_key, payload, attributes)
    SELECT 'c', n.signer, n.payload || jsonb_build_object('seq', n.seq), n.attributes FROM n ORDER BY n.seq
    RETURNING id
)
SELECT count(*) FROM o`

// TestIssue49_PreEventsRevisionCannotNumber: while a deploy rolls out, a
// revision from before lifecycle events may still number. It would take a
// lifecycle event for an outcome (on the default feed and topic); instead
// its numbering fails whole, deleting nothing, and the new revision
// numbers the event as a lifecycle event, and an outcome the old revision
// recorded (with no type) as the outcome its state says.
func TestIssue49_PreEventsRevisionCannotNumber(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	_, err := db.Pool.Exec(ctx, `
INSERT INTO managed_tx (id, chain_id, signer, nonce, payload_fingerprint, state, fencing_token)
VALUES (gen_random_uuid(), 1, '0x' || lpad('a1', 40, '0'), 0, sha256('a'::bytea), 'TRACKING', 1),
       (gen_random_uuid(), 1, '0x' || lpad('a1', 40, '0'), 1, sha256('b'::bytea), 'CONFIRMED', 1)`)
	require.NoError(t, err)
	var broadcast, confirmed string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT (SELECT id::text FROM managed_tx WHERE nonce = 0), (SELECT id::text FROM managed_tx WHERE nonce = 1)`).
		Scan(&broadcast, &confirmed))
	_, err = db.Pool.Exec(ctx, `
INSERT INTO completion_pending (tx_id, chain_id, signer, state, new_fork, type, version, lifecycle, payload, attributes)
SELECT id, 1, signer, 'TRACKING', false, 'TxBroadcast', 2, true, '{"type":"TxBroadcast"}', '{"lifecycle":"true"}'
FROM managed_tx WHERE nonce = 0`)
	require.NoError(t, err)

	_, err = db.Pool.Exec(ctx, preEventsNumbering)
	require.Error(t, err, "the old numbering is refused")
	var pending, numbered int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM completion_pending), (SELECT count(*) FROM tx_completion)`).Scan(&pending, &numbered))
	assert.Equal(t, 1, pending, "nothing deleted")
	assert.Zero(t, numbered, "nothing numbered")

	// An outcome the old revision recorded: no type, no version.
	_, err = db.Pool.Exec(ctx, `
INSERT INTO completion_pending (tx_id, chain_id, signer, state, new_fork, payload, attributes)
SELECT id, 1, signer, 'CONFIRMED', false, '{"type":"TxConfirmed"}', '{"type":"TxConfirmed"}' FROM managed_tx WHERE nonce = 1`)
	require.NoError(t, err)
	ids, err := testStore(t, db.Pool).NumberCompletions(ctx)
	require.NoError(t, err)
	assert.Len(t, ids, 1, "the topic takes the outcome only (lifecycle events are not published here)")
	rows, err := db.Pool.Query(ctx, `SELECT tx_id::text, type, lifecycle FROM tx_completion ORDER BY seq`)
	require.NoError(t, err)
	type row struct {
		id, typ   string
		lifecycle bool
	}
	var got []row
	for rows.Next() {
		var r row
		require.NoError(t, rows.Scan(&r.id, &r.typ, &r.lifecycle))
		got = append(got, r)
	}
	require.NoError(t, rows.Err())
	assert.Equal(t, []row{{broadcast, "TxBroadcast", true}, {confirmed, "TxConfirmed", false}}, got)
}
