package postgres

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/pgtest"
	"github.com/txfence/txfence/shared/txm"
)

// TestWithTx_EndedContextReleasesLocksBeforeReturning: a transaction whose
// context ends after its work and before its COMMIT (an invocation's
// deadline, a dying request) is rolled back, and its row locks are free,
// by the time WithTx returns, so that the next sweep finds the rows at
// once (a claim with SKIP LOCKED skipped them while the server session of
// a closed connection was still ending). Its error is the context's, not
// an unknown outcome: nothing was sent to commit.
func TestWithTx_EndedContextReleasesLocksBeforeReturning(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `CREATE TABLE withtx_probe (id int PRIMARY KEY); INSERT INTO withtx_probe SELECT generate_series(1, 10)`)
	require.NoError(t, err)
	for i := 0; i < 50; i++ {
		tctx, cancel := context.WithCancel(ctx)
		err := WithTx(tctx, db.Pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(tctx, `DELETE FROM withtx_probe`); err != nil {
				return err
			}
			cancel() // ends before the commit
			return nil
		})
		require.ErrorIs(t, err, context.Canceled)
		assert.NotErrorIs(t, err, txm.ErrOutcomeUnknown, "nothing was sent to commit")
		var free int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT id FROM withtx_probe FOR UPDATE SKIP LOCKED) f`).Scan(&free))
		require.Equal(t, 10, free, "round %d: every row unlocked and undeleted once WithTx returned", i)
	}
}
