package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/pgtest"
	"github.com/txfence/txfence/shared/txm"
)

// reportedBlocks is what SignersWithWork lists as chain 1's reported
// blocks within watch.
func reportedBlocks(t *testing.T, s *Store, watch time.Duration) []txm.Header {
	t.Helper()
	found, err := s.SignersWithWork(context.Background(), time.Hour, watch)
	require.NoError(t, err)
	return found.Reported[1]
}

// TestReportedBlocks_ListedFromTheirOutcomes: finalizing writes record the
// blocks of their outcomes (one row for a block and minute, however many
// signers report in it), which the finality sweep lists while the watch
// runs from the minute of the last report, and forgets after.
func TestReportedBlocks_ListedFromTheirOutcomes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := testStore(t, db.Pool)
	signer, other := common.HexToAddress("0xa1"), common.HexToAddress("0xa2")
	hashA, hashB := common.HexToHash("0xaa"), common.HexToHash("0xbb")
	insertTx(t, db, signer, 0, "MINED", 1, 10, hashA)
	insertTx(t, db, signer, 1, "MINED", 0, 11, hashB)
	insertTx(t, db, other, 0, "MINED", 1, 10, hashA)
	rows := func() int {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM reported_block`).Scan(&n))
		return n
	}
	finalize := func(who common.Address, blocks ...txm.Header) {
		l, _, err := s.Leases().Acquire(ctx, txm.LeaseKey{ChainID: 1, Signer: who, Scope: txm.ScopeChain}, "finality")
		require.NoError(t, err)
		final, err := s.FinalizeBlocks(ctx, l, blocks)
		require.NoError(t, err)
		require.NotEmpty(t, final)
	}
	assert.Empty(t, reportedBlocks(t, s, 10*time.Minute), "nothing reported yet")

	finalize(signer, txm.Header{Number: 10, Hash: hashA}, txm.Header{Number: 11, Hash: hashB})
	finalize(other, txm.Header{Number: 10, Hash: hashA})
	assert.Equal(t, 2, rows(), "a row for each block, whoever reports in it")
	assert.Equal(t, []txm.Header{{Number: 10, Hash: hashA}, {Number: 11, Hash: hashB}}, reportedBlocks(t, s, 10*time.Minute))
	assert.Empty(t, reportedBlocks(t, s, 0), "no watch, no blocks")

	// Block 11's last report 11 minutes ago, block 10's 10.
	_, err := db.Pool.Exec(ctx, `UPDATE reported_block SET minute = minute - CASE block_number WHEN 11 THEN interval '11 minutes' ELSE interval '10 minutes' END`)
	require.NoError(t, err)
	assert.Equal(t, []txm.Header{{Number: 10, Hash: hashA}}, reportedBlocks(t, s, 10*time.Minute), "watched for at least the watch")
	require.NoError(t, s.PruneReported(ctx, 10*time.Minute))
	assert.Equal(t, 1, rows(), "the block out of the watch is forgotten")
	require.NoError(t, s.PruneReported(ctx, time.Minute))
	assert.Zero(t, rows())
}

// TestReportedBlocks_TwoWritersOfOneBlock: two transactions reporting in
// one block at once both commit, and the block has its row whether the
// first of them commits or rolls back.
func TestReportedBlocks_TwoWritersOfOneBlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, firstCommits := range []bool{true, false} {
		db := pgtest.New(t)
		hash := common.HexToHash("0xaa")
		first := insertTx(t, db, common.HexToAddress("0xa1"), 0, "MINED", 1, 10, hash)
		second := insertTx(t, db, common.HexToAddress("0xa2"), 0, "MINED", 1, 10, hash)
		report := `UPDATE managed_tx SET state = 'CONFIRMED', finalized_at = clock_timestamp() WHERE id = $1`
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, report, first)
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() {
			_, err := db.Pool.Exec(ctx, report, second)
			done <- err
		}()
		select {
		case err := <-done:
			t.Fatalf("the second writer did not wait for the first's row: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
		if firstCommits {
			require.NoError(t, tx.Commit(ctx))
		} else {
			require.NoError(t, tx.Rollback(ctx))
		}
		require.NoError(t, <-done)
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM reported_block WHERE block_number = 10`).Scan(&n))
		assert.Equal(t, 1, n, "first commits: %v", firstCommits)
	}
}

// TestReportedBlocks_Migration20Backfills: the outcomes reported before
// migration 00020 have their blocks recorded by it.
func TestReportedBlocks_Migration20Backfills(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, m := migratedDatabase(t)
	require.NoError(t, m.DownTo(ctx, 19))
	db := &pgtest.DB{Pool: pool}
	recent := insertTx(t, db, common.HexToAddress("0xa1"), 0, "CONFIRMED", 1, 10, common.HexToHash("0xaa"))
	old := insertTx(t, db, common.HexToAddress("0xa1"), 1, "FAILED_FINAL", 0, 9, common.HexToHash("0x99"))
	insertTx(t, db, common.HexToAddress("0xa1"), 2, "MINED", 1, 11, common.HexToHash("0xbb"))
	_, err := pool.Exec(ctx, `UPDATE managed_tx SET finalized_at = clock_timestamp() - CASE id WHEN $1::uuid THEN interval '1 minute' ELSE interval '1 day' END
WHERE id IN ($1::uuid, $2::uuid)`, recent, old)
	require.NoError(t, err)
	require.NoError(t, m.Up(ctx))

	s := testStore(t, pool)
	assert.Equal(t, []txm.Header{{Number: 10, Hash: common.HexToHash("0xaa")}}, reportedBlocks(t, s, 10*time.Minute))
	assert.Equal(t, []txm.Header{{Number: 9, Hash: common.HexToHash("0x99")}, {Number: 10, Hash: common.HexToHash("0xaa")}},
		reportedBlocks(t, s, 48*time.Hour), "the older outcome too, in its own minute")
}
