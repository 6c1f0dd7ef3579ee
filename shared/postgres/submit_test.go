package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/pgtest"
	"github.com/txfence/txfence/shared/txm"
)

// hotSigner is the signer whose many rows the plan tests write.
var hotSigner = common.HexToAddress("0x66a207cc338c4b654f440a6e2d784ae372f71eee")

// hotSignerStore is a store over a fresh database.
func hotSignerStore(t *testing.T) (*pgtest.DB, *Store) {
	t.Helper()
	db := pgtest.New(t)
	s := testStore(t, db.Pool)
	return db, s
}

// TestNextToSubmit_FindsHoldsByIndex: a hot signer with tens of thousands
// of rows gets its next ALLOCATED transactions, up to the first one held,
// without the hold check reading the signer's every row once per
// candidate (it took 215ms per batch of 64 at 26,000 rows, and the drain
// spent most of its time there; managed_tx_held keeps the holds apart).
func TestNextToSubmit_FindsHoldsByIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, s := hotSignerStore(t)
	_, err := db.Pool.Exec(ctx, `
INSERT INTO managed_tx (id, chain_id, signer, nonce, payload_fingerprint, state, fencing_token)
SELECT gen_random_uuid(), 1337, $1, n, sha256(n::text::bytea),
       CASE WHEN n < 20000 THEN 'CONFIRMED' WHEN n < 22000 THEN 'TRACKING' ELSE 'ALLOCATED' END, 1
FROM generate_series(0, 25999) n`, strings.ToLower(hotSigner.Hex()))
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `ANALYZE managed_tx`)
	require.NoError(t, err)

	items, inflight, err := s.NextToSubmit(ctx, 1337, hotSigner, 4096, 64)
	require.NoError(t, err)
	require.Len(t, items, 64)
	assert.Equal(t, 2000, inflight)
	assert.EqualValues(t, 22000, items[0].Tx.Nonce)
	assert.EqualValues(t, 22063, items[63].Tx.Nonce)
	items, inflight, err = s.NextToSubmit(ctx, 1337, hotSigner, 2010, 64)
	require.NoError(t, err)
	assert.Len(t, items, 10, "as many as maxInFlight leaves room for")
	assert.Equal(t, 2000, inflight)
	items, inflight, err = s.NextToSubmit(ctx, 1337, hotSigner, 1500, 64)
	require.NoError(t, err)
	assert.Empty(t, items, "no room")
	assert.Equal(t, 2000, inflight)

	var plan []struct {
		Plan struct {
			SharedHitBlocks int `json:"Shared Hit Blocks"`
		}
	}
	var raw []byte
	require.NoError(t, db.Pool.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) `+nextToSubmitSQL,
		1337, strings.ToLower(hotSigner.Hex()), 64, 4096).Scan(&raw))
	require.NoError(t, json.Unmarshal(raw, &plan))
	require.Len(t, plan, 1)
	assert.False(t, strings.Contains(string(raw), `"Seq Scan"`), "no scan of the table")
	assert.Less(t, plan[0].Plan.SharedHitBlocks, 1000, "the hold check reads the few holds, not every row (it read 41,609 blocks)")

	// A hold: the one backing off at 22010 and everything after it wait.
	_, err = db.Pool.Exec(ctx, `UPDATE managed_tx SET next_attempt_at = clock_timestamp() + interval '1 hour' WHERE nonce = 22010`)
	require.NoError(t, err)
	items, _, err = s.NextToSubmit(ctx, 1337, hotSigner, 4096, 64)
	require.NoError(t, err)
	require.Len(t, items, 10)
	assert.EqualValues(t, 22009, items[9].Tx.Nonce)
}

// TestReorgWatch_ReadsOnlyTheWindow: the finality sweep's look at recently
// reported outcomes (which signers have some, and a signer's blocks) reads
// the watch window, not every finished transaction the table holds.
func TestReorgWatch_ReadsOnlyTheWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, s := hotSignerStore(t)
	// 30,000 outcomes, the last 100 within the watch, two to a block.
	_, err := db.Pool.Exec(ctx, `
INSERT INTO managed_tx (id, chain_id, signer, nonce, payload_fingerprint, state, fencing_token,
                        receipt_block_number, receipt_block_hash, finalized_at)
SELECT gen_random_uuid(), 1337, $1, n, sha256(n::text::bytea), 'CONFIRMED', 1,
       n / 2, '0x' || lpad(to_hex(n / 2), 64, '0'),
       clock_timestamp() - CASE WHEN n >= 29900 THEN interval '1 minute' ELSE interval '1 day' END
FROM generate_series(0, 29999) n`, strings.ToLower(hotSigner.Hex()))
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `ANALYZE managed_tx; ANALYZE reported_block`)
	require.NoError(t, err)

	found, err := s.SignersWithWork(ctx, time.Minute, 10*time.Minute)
	require.NoError(t, err)
	assert.Empty(t, found.Signers, "nothing MINED or stale")
	assert.Len(t, found.Reported[1337], 50, "the chain's reported blocks within the watch")
	in, err := s.ReportedIn(ctx, 1337, found.Reported[1337][:2], 10*time.Minute)
	require.NoError(t, err)
	require.Len(t, in, 1)
	assert.Equal(t, found.Reported[1337][:2], in[0].ReportedBlocks, "the signer with outcomes in them")

	for name, q := range map[string]struct {
		sql  string
		args []any
	}{
		"signers with work": {signersWithWorkSQL, []any{time.Minute, 10 * time.Minute}},
		"reported in":       {reportedInSQL, []any{1337, []int64{14999}, []string{"0x" + strings.Repeat("0", 60) + "3a97"}, 10 * time.Minute}},
	} {
		var raw []byte
		require.NoError(t, db.Pool.QueryRow(ctx, `EXPLAIN (FORMAT JSON) `+q.sql, q.args...).Scan(&raw))
		assert.False(t, strings.Contains(string(raw), `"Seq Scan"`), "%s: no scan of the table", name)
	}
}

// TestSignersWithWork_CarriesTheBlocks: the finality sweep's one query gives
// each signer's MINED transactions' receipt blocks (distinct, with how many
// in each) and each chain's reported blocks (distinct), and marks stale signers,
// so that a pass looks at a hundred signers without a query per signer.
func TestSignersWithWork_CarriesTheBlocks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, s := hotSignerStore(t)
	other := common.HexToAddress("0xb0b")
	hash := func(n int) string { return fmt.Sprintf("0x%064x", n) }
	insert := func(signer common.Address, nonce int, state string, block any, finalized bool, updatedAgo time.Duration) {
		t.Helper()
		var fin any
		if finalized {
			fin = time.Now()
		}
		var h any
		if block != nil {
			h = hash(block.(int))
		}
		_, err := db.Pool.Exec(ctx, `
INSERT INTO managed_tx (id, chain_id, signer, nonce, payload_fingerprint, state, fencing_token,
                        receipt_block_number, receipt_block_hash, finalized_at, updated_at)
VALUES (gen_random_uuid(), 1337, $1, $2::bigint, sha256($2::bigint::text::bytea), $3, 1, $4, $5, $6, clock_timestamp() - $7::interval)`,
			txm.CanonicalAddress(signer), nonce, state, block, h, fin, updatedAgo)
		require.NoError(t, err)
	}
	insert(hotSigner, 2, "MINED", 11, false, 0)
	insert(hotSigner, 0, "MINED", 10, false, 0)
	insert(hotSigner, 1, "MINED", 10, false, 0)
	insert(hotSigner, 3, "TRACKING", nil, false, time.Hour)
	insert(other, 0, "CONFIRMED", 7, true, 0)
	insert(other, 1, "CONFIRMED", 7, true, 0)
	insert(other, 2, "FAILED_FINAL", 8, true, 0)
	insert(other, 3, "TRACKING", nil, false, 0) // fresh: not stale

	found, err := s.SignersWithWork(ctx, time.Minute, 10*time.Minute)
	require.NoError(t, err)
	require.Len(t, found.Signers, 1, "the other signer has only outcomes reported")
	hot := found.Signers[0]
	assert.Equal(t, hotSigner, hot.Signer)
	assert.True(t, hot.Mined && hot.Stale && !hot.Reported)
	assert.Equal(t, []txm.Header{{Number: 10, Hash: common.HexToHash(hash(10))}, {Number: 11, Hash: common.HexToHash(hash(11))}},
		hot.MinedBlocks, "distinct, in block order")
	assert.Equal(t, []int{2, 1}, hot.MinedCounts, "how many MINED in each")
	reported := []txm.Header{{Number: 7, Hash: common.HexToHash(hash(7))}, {Number: 8, Hash: common.HexToHash(hash(8))}}
	assert.Equal(t, map[uint64][]txm.Header{1337: reported}, found.Reported, "the chain's distinct reported blocks")

	in, err := s.ReportedIn(ctx, 1337, reported[1:], 10*time.Minute)
	require.NoError(t, err)
	require.Len(t, in, 1)
	assert.Equal(t, other, in[0].Signer)
	assert.True(t, in[0].Reported && !in[0].Mined && !in[0].Stale)
	assert.Equal(t, reported[1:], in[0].ReportedBlocks, "only the blocks asked about")
	in, err = s.ReportedIn(ctx, 1337, []txm.Header{{Number: 7, Hash: common.HexToHash(hash(9))}}, 10*time.Minute)
	require.NoError(t, err)
	assert.Empty(t, in, "another hash at that height: none")
}

// TestMarkTracking_FencedWritesNoPrompt: MarkTracking moves the batch and
// writes one receipt prompt in the same transaction; under a lease that
// was taken over it moves nothing and leaves no prompt behind.
func TestMarkTracking_FencedWritesNoPrompt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := testStore(t, db.Pool)
	signer := common.HexToAddress("0xa1")
	first := insertTx(t, db, signer, 0, "ALLOCATED", 1, 1, common.Hash{})
	second := insertTx(t, db, signer, 1, "ALLOCATED", 1, 1, common.Hash{})
	key := txm.LeaseKey{ChainID: 1, Signer: signer, Scope: txm.ScopeChain}
	prompts := func() int {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE topic = 'r'`).Scan(&n))
		return n
	}
	state := func(id string) string {
		var st string
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT state FROM managed_tx WHERE id = $1`, id).Scan(&st))
		return st
	}

	l, _, err := s.Leases().Acquire(ctx, key, "drain")
	require.NoError(t, err)
	outbox, err := s.MarkTracking(ctx, l, []txm.Broadcasted{{TxID: first, AttemptNo: 1}})
	require.NoError(t, err)
	assert.Len(t, outbox, 1)
	assert.Equal(t, 1, prompts())
	assert.Equal(t, "TRACKING", state(first))

	_, err = db.Pool.Exec(ctx, `UPDATE signer_lease SET expires_at = clock_timestamp() - interval '1 minute'`)
	require.NoError(t, err)
	_, _, err = s.Leases().Acquire(ctx, key, "another")
	require.NoError(t, err)
	_, err = s.MarkTracking(ctx, l, []txm.Broadcasted{{TxID: second, AttemptNo: 1}})
	require.ErrorIs(t, err, txm.ErrFenced)
	assert.Equal(t, 1, prompts(), "the fenced move left no prompt")
	assert.Equal(t, "ALLOCATED", state(second))
}

// TestMarkTracking_AcceptedStuckPromptsSubmit: a STUCK transaction no node
// had accepted held the later nonces back; once it moves to TRACKING the
// same statement writes a submit prompt beside the receipt prompt, when the
// signer has ALLOCATED work, and only then.
func TestMarkTracking_AcceptedStuckPromptsSubmit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := testStore(t, db.Pool)
	topics := func(ids []int64) []string {
		t.Helper()
		var out []string
		for _, id := range ids {
			var topic string
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT topic FROM outbox WHERE id = $1`, id).Scan(&topic))
			out = append(out, topic)
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		allocated bool
		want      []string
	}{{"with work behind it", true, []string{"r", "s"}}, {"with none", false, []string{"r"}}} {
		signer := common.HexToAddress("0xa1")
		if !tc.allocated {
			signer = common.HexToAddress("0xb1")
		}
		stuck := insertTx(t, db, signer, 0, "STUCK", 1, 1, common.Hash{})
		_, err := db.Pool.Exec(ctx, `UPDATE managed_tx SET broadcast_count = 0 WHERE id = $1`, stuck)
		require.NoError(t, err)
		if tc.allocated {
			insertTx(t, db, signer, 1, "ALLOCATED", 1, 1, common.Hash{})
		}
		l, _, err := s.Leases().Acquire(ctx, txm.LeaseKey{ChainID: 1, Signer: signer, Scope: txm.ScopeChain}, "drain")
		require.NoError(t, err)
		ids, err := s.MarkTracking(ctx, l, []txm.Broadcasted{{TxID: stuck, AttemptNo: 1}})
		require.NoError(t, err)
		assert.Equal(t, tc.want, topics(ids), tc.name)
	}
}
