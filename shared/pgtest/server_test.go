package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

func TestServer_RestartKeepsData(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL server")
	}
	t.Parallel()
	ctx := context.Background()
	srv, err := Start(ctx, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Stop() })

	pool, err := pgxpool.New(ctx, srv.URL("postgres"))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(ctx, `CREATE TABLE kept (n int); INSERT INTO kept VALUES (42)`)
	require.NoError(t, err)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)

	require.NoError(t, srv.Restart(ctx))

	// The session that was open is cut; the pool's next ones work.
	_, err = conn.Exec(ctx, `SELECT 1`)
	require.Error(t, err, "a session survived the restart")
	conn.Release()
	var n int
	require.Eventually(t, func() bool {
		return pool.QueryRow(ctx, `SELECT n FROM kept`).Scan(&n) == nil
	}, 10*time.Second, 50*time.Millisecond)
	require.Equal(t, 42, n)

	require.NoError(t, srv.Stop())
	_, err = pool.Exec(ctx, `SELECT 1`)
	require.Error(t, err, "stopped")
}
