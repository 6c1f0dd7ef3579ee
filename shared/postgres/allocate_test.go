package postgres

import (
	"context"
	"fmt"
	"math/big"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/pgtest"
	"github.com/txfence/txfence/shared/txm"
)

// testStore is a Store over pool with the default configuration and test
// topics.
func testStore(t *testing.T, pool *pgxpool.Pool) *Store {
	t.Helper()
	cfg := config.Defaults()
	cfg.TopicSubmit, cfg.TopicReceipt, cfg.TopicCompletion = "s", "r", "c"
	s, err := NewStoreFromConfig(pool, cfg, nil, logging.Discard())
	require.NoError(t, err)
	return s
}

func allocRequest(signer common.Address, principal, requestID string, value int64) *txm.Request {
	to := common.HexToAddress("0xdead")
	return &txm.Request{ChainID: 1, From: signer, To: &to, Value: big.NewInt(value), GasLimit: 21000,
		RequestID: requestID, Principal: principal}
}

// TestAllocate_RollingCapsInOrder: the caps are checked under the lease, in
// request order, against what the principal sent from the signer in the
// window (earlier minutes and earlier requests of the batch), in the order
// hourly count, hourly value, daily count, daily value; a refused request
// takes no nonce and adds nothing to the usage, so a later, smaller one may
// pass; usage is per signer.
func TestAllocate_RollingCapsInOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := testStore(t, db.Pool)
	a, b := common.HexToAddress("0xa1"), common.HexToAddress("0xb1")
	// Sent an hour and a half ago: counts for the day only.
	_, err := db.Pool.Exec(ctx, `INSERT INTO principal_usage (principal, chain_id, signer, minute, tx_count, value)
VALUES ('svc', 1, $1, date_trunc('minute', clock_timestamp() - interval '90 minutes'), 3, 300)`, txm.CanonicalAddress(a))
	require.NoError(t, err)
	pol := txm.Policy{Principal: "svc", Hourly: txm.Limit{Count: 3, Value: big.NewInt(100)}, Daily: txm.Limit{Count: 6, Value: big.NewInt(450)}}
	caps := map[string]txm.Policy{"svc": pol}
	reqs := []*txm.Request{
		allocRequest(a, "svc", "r1", 60),  // hour 60, day 360
		allocRequest(a, "svc", "r2", 50),  // hourly value: 110 > 100
		allocRequest(a, "svc", "r3", 40),  // hour 100, day 400
		allocRequest(a, "svc", "r4", 0),   // hour 100, count 3, day 400
		allocRequest(a, "svc", "r5", 0),   // hourly count: 4 > 3
		allocRequest(a, "other", "r6", 5), // uncapped principal
	}
	got, _, err := s.Allocate(ctx, []txm.AllocationBatch{
		{ChainID: 1, Signer: a, Owner: "o", Requests: reqs, Caps: caps},
		{ChainID: 1, Signer: b, Owner: "o", Requests: []*txm.Request{allocRequest(b, "svc", "b1", 100)}, Caps: caps},
	})
	require.NoError(t, err)
	want := []string{"", txm.RuleHourlyValue, "", "", txm.RuleHourlyCount, ""}
	nonce := uint64(0)
	for i, c := range got[0] {
		if want[i] == "" {
			require.Equal(t, txm.OutcomeCreated, c.Outcome, "request %d", i)
			assert.Equal(t, nonce, c.Tx.Nonce, "request %d: refusals take no nonce", i)
			nonce++
			continue
		}
		require.Equal(t, txm.OutcomeRefused, c.Outcome, "request %d", i)
		var ref *txm.Refusal
		require.ErrorAs(t, c.Refusal, &ref)
		assert.Equal(t, want[i], ref.Rule, "request %d", i)
		assert.NotEmpty(t, ref.Detail)
	}
	require.Equal(t, txm.OutcomeCreated, got[1][0].Outcome, "usage is per signer")

	// The next batch sees the usage written by this one: today 6
	// transactions and 400 wei of svc's from a.
	got, _, err = s.Allocate(ctx, []txm.AllocationBatch{{ChainID: 1, Signer: a, Owner: "o", Caps: map[string]txm.Policy{
		"svc": {Principal: "svc", Daily: txm.Limit{Count: 7, Value: big.NewInt(450)}}},
		Requests: []*txm.Request{allocRequest(a, "svc", "d1", 51), allocRequest(a, "svc", "d2", 50), allocRequest(a, "svc", "d3", 0)}}})
	require.NoError(t, err)
	var ref *txm.Refusal
	require.ErrorAs(t, got[0][0].Refusal, &ref)
	assert.Equal(t, txm.RuleDailyValue, ref.Rule)
	assert.Equal(t, txm.OutcomeCreated, got[0][1].Outcome)
	require.ErrorAs(t, got[0][2].Refusal, &ref)
	assert.Equal(t, txm.RuleDailyCount, ref.Rule, "6 + 1 sent today is the cap of 7")
}

// TestAllocate_ReplaysInBatch: a request id given twice in one batch takes
// one nonce and the second is its replay (or a conflict, with another
// payload); one that exists already takes none.
func TestAllocate_ReplaysInBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := testStore(t, db.Pool)
	a := common.HexToAddress("0xa2")
	got, outbox, err := s.Allocate(ctx, []txm.AllocationBatch{{ChainID: 1, Signer: a, Owner: "o",
		Requests: []*txm.Request{allocRequest(a, "", "x", 1)}}})
	require.NoError(t, err)
	require.Len(t, outbox, 1)
	first := got[0][0].Tx
	got, outbox, err = s.Allocate(ctx, []txm.AllocationBatch{{ChainID: 1, Signer: a, Owner: "o", Requests: []*txm.Request{
		allocRequest(a, "", "y", 1), allocRequest(a, "", "x", 1), allocRequest(a, "", "y", 1), allocRequest(a, "", "y", 2),
		allocRequest(a, "", "x", 9)}}})
	require.NoError(t, err)
	require.Len(t, outbox, 1)
	assert.Equal(t, txm.OutcomeCreated, got[0][0].Outcome)
	assert.EqualValues(t, 1, got[0][0].Tx.Nonce)
	assert.Equal(t, txm.OutcomeReplayed, got[0][1].Outcome)
	assert.Equal(t, first.ID, got[0][1].Tx.ID)
	assert.Equal(t, txm.OutcomeReplayed, got[0][2].Outcome)
	assert.Equal(t, got[0][0].Tx.ID, got[0][2].Tx.ID)
	assert.Equal(t, txm.OutcomeConflict, got[0][3].Outcome)
	assert.Equal(t, txm.OutcomeConflict, got[0][4].Outcome)
	var rows, cursor int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM managed_tx), (SELECT next_nonce FROM signer_nonce_cursor)`).Scan(&rows, &cursor))
	assert.Equal(t, 2, rows)
	assert.Equal(t, 2, cursor)

	// Nothing new: no prompt, the cursor stays.
	_, outbox, err = s.Allocate(ctx, []txm.AllocationBatch{{ChainID: 1, Signer: a, Owner: "o", Requests: []*txm.Request{allocRequest(a, "", "x", 1)}}})
	require.NoError(t, err)
	assert.Empty(t, outbox)
}

// TestAllocate_ManySignersManyOwners: owners in separate pools allocate
// batches over overlapping, randomly chosen sets of signers at once. Every
// call locks its signers' lease rows in one order, so none deadlocks (a
// deadlock would fail a batch), and every signer's nonces come out
// contiguous, each signer's cursor one past its last, one submit prompt per
// signer and batch.
func TestAllocate_ManySignersManyOwners(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	signers := make([]common.Address, 12)
	for i := range signers {
		signers[i] = common.BigToAddress(big.NewInt(int64(0xc00 + i)))
	}
	const owners, rounds = 4, 40
	var wg sync.WaitGroup
	var mu sync.Mutex
	prompts, created := 0, 0
	for o := 0; o < owners; o++ {
		s := testStore(t, pgtest.Pool(t, db.URL))
		wg.Add(1)
		go func(o int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(o), 7))
			for r := 0; r < rounds; r++ {
				var batches []txm.AllocationBatch
				for _, i := range rng.Perm(len(signers))[:1+rng.IntN(len(signers))] {
					var reqs []*txm.Request
					for k := 0; k <= rng.IntN(3); k++ {
						reqs = append(reqs, allocRequest(signers[i], "", fmt.Sprintf("%d-%d-%d-%d", o, r, i, k), 1))
					}
					batches = append(batches, txm.AllocationBatch{ChainID: 1, Signer: signers[i], Owner: fmt.Sprintf("owner-%d", o), Requests: reqs})
				}
				got, outbox, err := s.Allocate(ctx, batches)
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				prompts += len(outbox)
				for _, g := range got {
					created += len(g)
				}
				mu.Unlock()
				assert.Len(t, outbox, len(batches))
			}
		}(o)
	}
	wg.Wait()
	var bad, rows, outbox int
	require.NoError(t, db.Pool.QueryRow(ctx, `
SELECT (SELECT count(*) FROM (
            SELECT t.signer FROM managed_tx t JOIN signer_nonce_cursor c USING (chain_id, signer)
            GROUP BY t.signer, c.next_nonce
            HAVING min(t.nonce) <> 0 OR max(t.nonce) <> count(*) - 1 OR count(DISTINCT t.nonce) <> count(*)
                OR c.next_nonce <> count(*)) x),
       (SELECT count(*) FROM managed_tx), (SELECT count(*) FROM outbox)`).Scan(&bad, &rows, &outbox))
	assert.Zero(t, bad, "signers whose nonces have a gap, a duplicate or a cursor not one past the last")
	assert.Equal(t, created, rows)
	assert.Equal(t, prompts, outbox)
}

// TestAllocate_LeavesEachLeaseReleasedUnderItsToken: a call takes every
// signer's nonce lease (a new token when the owner changes) and leaves it
// released under that token, no longer wanted, its rows written with it;
// the same owner's next call takes a new token too (the lease it left is
// released). A lease another owner holds live refuses the call and
// changes nothing.
func TestAllocate_LeavesEachLeaseReleasedUnderItsToken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := testStore(t, db.Pool)
	a, b := common.HexToAddress("0xa1"), common.HexToAddress("0xb1")
	call := func(owner string, n int) {
		t.Helper()
		var reqs []txm.AllocationBatch
		for _, signer := range []common.Address{a, b} {
			var rs []*txm.Request
			for i := 0; i < n; i++ {
				rs = append(rs, allocRequest(signer, "", "", 1))
			}
			reqs = append(reqs, txm.AllocationBatch{ChainID: 1, Signer: signer, Owner: owner, Requests: rs})
		}
		_, _, err := s.Allocate(ctx, reqs)
		require.NoError(t, err)
	}
	leases := func() map[string]string {
		t.Helper()
		rows, err := db.Pool.Query(ctx, `
SELECT signer, owner || ' ' || fencing_token || ' ' || (expires_at = '-infinity') || ' ' || (wanted_at IS NULL)
FROM signer_lease WHERE scope = 'nonce'`)
		require.NoError(t, err)
		got := map[string]string{}
		for rows.Next() {
			var k, v string
			require.NoError(t, rows.Scan(&k, &v))
			got[k] = v
		}
		require.NoError(t, rows.Err())
		return got
	}
	ka, kb := txm.CanonicalAddress(a), txm.CanonicalAddress(b)
	call("x", 2)
	assert.Equal(t, map[string]string{ka: "x 2 true true", kb: "x 2 true true"}, leases())
	_, err := db.Pool.Exec(ctx, `UPDATE signer_lease SET wanted_at = clock_timestamp() WHERE signer = $1`, kb)
	require.NoError(t, err)
	call("x", 1)
	call("y", 1)
	assert.Equal(t, map[string]string{ka: "y 4 true true", kb: "y 4 true true"}, leases())
	var tokens []int64
	require.NoError(t, db.Pool.QueryRow(ctx, `
SELECT array_agg(fencing_token ORDER BY signer, nonce) FROM managed_tx`).Scan(&tokens))
	assert.Equal(t, []int64{2, 2, 3, 4, 2, 2, 3, 4}, tokens, "each row carries its call's token")

	// Held live by another owner: refused, nothing written.
	_, err = db.Pool.Exec(ctx, `UPDATE signer_lease SET owner = 'z', expires_at = clock_timestamp() + interval '1 minute' WHERE signer = $1`, kb)
	require.NoError(t, err)
	_, _, err = s.Allocate(ctx, []txm.AllocationBatch{
		{ChainID: 1, Signer: a, Owner: "x", Requests: []*txm.Request{allocRequest(a, "", "", 1)}},
		{ChainID: 1, Signer: b, Owner: "x", Requests: []*txm.Request{allocRequest(b, "", "", 1)}},
	})
	require.ErrorIs(t, err, txm.ErrLeaseHeld)
	got := leases()
	assert.Equal(t, "y 4 true true", got[ka], "the other signer's lease is untouched")
	var rowsNow int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM managed_tx`).Scan(&rowsNow))
	assert.Equal(t, 8, rowsNow)
}

// TestAllocate_ContendedWhenItWaited: an allocation says its signer was
// contended when the signer's lease row was released by another
// allocation while it waited for it, and only then: not alone, not for
// the batch's other signers, not for a row held and let go unchanged.
func TestAllocate_ContendedWhenItWaited(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := testStore(t, db.Pool)
	hot, calm := common.HexToAddress("0xc1"), common.HexToAddress("0xc2")
	batch := func(id string) []txm.AllocationBatch {
		return []txm.AllocationBatch{
			{ChainID: 1, Signer: hot, Owner: "i1/w0", Requests: []*txm.Request{allocRequest(hot, "p", "h"+id, 1)}},
			{ChainID: 1, Signer: calm, Owner: "i1/w0", Requests: []*txm.Request{allocRequest(calm, "p", "c"+id, 1)}},
		}
	}
	got, _, err := s.Allocate(ctx, batch("1"))
	require.NoError(t, err)
	assert.False(t, got[0][0].Contended, "alone")
	assert.False(t, got[1][0].Contended, "alone")

	// waitBehind runs an allocation while another transaction holds the
	// hot signer's lease row, and lets it go after the allocation began
	// waiting: as another allocation (it writes the row) or unchanged.
	waitBehind := func(id string, write bool) [][]txm.Created {
		hold, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = hold.Rollback(ctx) }()
		_, err = hold.Exec(ctx, `SELECT 1 FROM signer_lease WHERE chain_id = 1 AND signer = $1 AND scope = 'nonce' FOR UPDATE`,
			txm.CanonicalAddress(hot))
		require.NoError(t, err)
		done := make(chan [][]txm.Created)
		go func() {
			got, _, err := s.Allocate(ctx, batch(id))
			assert.NoError(t, err)
			done <- got
		}()
		require.Eventually(t, func() bool {
			var waiting bool
			_ = db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock'
                AND datname = current_database() AND query LIKE '%txfence_allocate(%')`).Scan(&waiting)
			return waiting
		}, 5*time.Second, 10*time.Millisecond, "the allocation waits for the lease row")
		if write {
			_, err = hold.Exec(ctx, `UPDATE signer_lease SET owner = 'i2/w0', updated_at = clock_timestamp()
WHERE chain_id = 1 AND signer = $1 AND scope = 'nonce'`, txm.CanonicalAddress(hot))
			require.NoError(t, err)
			require.NoError(t, hold.Commit(ctx))
		} else {
			require.NoError(t, hold.Rollback(ctx))
		}
		return <-done
	}
	got = waitBehind("2", true)
	assert.True(t, got[0][0].Contended, "another allocation released the row while this one waited")
	assert.False(t, got[1][0].Contended, "the other signer of the batch did not wait")
	got = waitBehind("3", false)
	assert.False(t, got[0][0].Contended, "held and let go unchanged: nobody allocated meanwhile")
	got, _, err = s.Allocate(ctx, batch("4"))
	require.NoError(t, err)
	assert.False(t, got[0][0].Contended, "alone again")
}

// TestAllocate_FindsSignersByKey: a call reads the lease rows and nonce
// cursors of its batch's signers by their keys, however many signers the
// database holds, and however many it held when the session made its
// plans. The planner read both tables whole for 1,000 signers (twice a
// call for the leases), and the whole lease index for 100, so that every
// call cost more the more signers the database knew; with whole-table
// reads priced out, plans made while the tables were young put the lease
// index on the outside (migration 00015).
func TestAllocate_FindsSignersByKey(t *testing.T) {
	t.Parallel()
	const signers = 12
	seed := func(t *testing.T, pool *pgxpool.Pool, from, to int, analyze bool) {
		t.Helper()
		q := fmt.Sprintf(`
INSERT INTO signer_lease (chain_id, signer, scope, owner, fencing_token, expires_at)
SELECT 1, '0x' || lpad(to_hex(i), 40, '0'), 'nonce', 'x', 1, '-infinity' FROM generate_series(%[1]d, %[2]d) i
ON CONFLICT DO NOTHING;
INSERT INTO signer_nonce_cursor (chain_id, signer, next_nonce, fencing_token)
SELECT 1, '0x' || lpad(to_hex(i), 40, '0'), 0, 1 FROM generate_series(%[1]d, %[2]d) i
ON CONFLICT DO NOTHING`, from, to)
		if analyze {
			q += `;
ANALYZE signer_lease, signer_nonce_cursor`
		}
		_, err := pool.Exec(context.Background(), q)
		require.NoError(t, err)
	}
	// call allocates once for the signers 1..signers (times step) on conn,
	// in a transaction whose own table counters tell how each table was read.
	call := func(t *testing.T, s *Store, conn *pgxpool.Conn, step int) {
		t.Helper()
		ctx := context.Background()
		var batches []txm.AllocationBatch
		for i := 1; i <= signers; i++ {
			signer := common.BigToAddress(big.NewInt(int64(i * step)))
			batches = append(batches, txm.AllocationBatch{ChainID: 1, Signer: signer, Owner: "o",
				Requests: []*txm.Request{allocRequest(signer, "", "", 1)}})
		}
		a := newAllocationArgs(batches)
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		// The session's counters not yet reported (earlier transactions'
		// too), before and after the call.
		tables := []string{"signer_lease", "signer_nonce_cursor"}
		counters := func() (whole, read []int64) {
			for _, table := range tables {
				var w, r int64
				require.NoError(t, tx.QueryRow(ctx, `
SELECT coalesce(sum(seq_scan), 0), coalesce(sum(seq_tup_read + coalesce(idx_tup_fetch, 0)), 0)
FROM pg_stat_xact_user_tables WHERE relname = $1`, table).Scan(&w, &r))
				whole, read = append(whole, w), append(read, r)
			}
			return whole, read
		}
		whole0, read0 := counters()
		rows, err := tx.Query(ctx, allocateSQL, a.args("o", s.leases.cfg, s.topics.Submit)...)
		require.NoError(t, err)
		got := 0
		for rows.Next() {
			got++
		}
		require.NoError(t, rows.Err())
		require.Equal(t, signers, got)
		whole, read := counters()
		for i, table := range tables {
			assert.Zero(t, whole[i]-whole0[i], "%s read whole", table)
			// The lease rows are found once (locked; the release writes them
			// by address), the cursors twice (read, then written).
			assert.LessOrEqual(t, read[i]-read0[i], int64(2*signers), "rows of %s read for %d signers", table, signers)
		}
	}
	for _, n := range []int{100, 1000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			db := pgtest.New(t)
			seed(t, db.Pool, 1, n, true)
			// A new session: the function's plans are made there, against
			// the tables as they are now.
			conn, err := pgtest.Pool(t, db.URL).Acquire(context.Background())
			require.NoError(t, err)
			defer conn.Release()
			call(t, testStore(t, db.Pool), conn, n/signers)
		})
	}
	t.Run("young", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		s := testStore(t, db.Pool)
		conn, err := pgtest.Pool(t, db.URL).Acquire(context.Background())
		require.NoError(t, err)
		defer conn.Release()
		// The session's plans are made while the tables hold the batch's
		// signers only; then the database grows to 1,000 signers, not yet
		// analyzed (autovacuum looks once a minute), so the plans stay.
		seed(t, db.Pool, 1, signers, true)
		call(t, s, conn, 1)
		seed(t, db.Pool, signers+1, 1000, false)
		call(t, s, conn, 1)
	})
}
