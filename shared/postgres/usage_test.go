package postgres

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/pgtest"
)

// TestIssue11_UsagePruned: the usage behind the rolling caps is kept for
// the day window (and an hour of slack) and forgotten after it, so the
// table stays the size of one day's minutes.
func TestIssue11_UsagePruned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := testStore(t, db.Pool)
	for _, age := range []string{"1 minute", "23 hours", "24 hours 59 minutes", "25 hours 1 minute", "3 days"} {
		_, err := db.Pool.Exec(ctx, `INSERT INTO principal_usage (principal, chain_id, signer, minute, tx_count, value)
VALUES ('svc', 1, '0x0000000000000000000000000000000000000001', date_trunc('minute', clock_timestamp() - $1::interval), 1, '5')`, age)
		require.NoError(t, err)
	}
	require.NoError(t, s.PruneUsage(ctx))
	var kept int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM principal_usage`).Scan(&kept))
	assert.Equal(t, 3, kept, "usage inside the day window (plus slack) is kept, older usage is gone")
}
