package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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

// A durable server starts with its WAL segments made ahead, so that filling
// one does not make the next while commits wait; a new cluster has one or
// two. A checkpoint starts once about half of max_wal_size was written since
// the last (checkpoint_completion_target 0.9), and the priming's own
// checkpoints leave that many ahead, as a steady load's do.
func TestServer_DurableStartsWithWALMadeAhead(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL server")
	}
	t.Parallel()
	ctx := context.Background()
	srv, err := Start(ctx, Options{Durable: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Stop() })
	conn, err := pgx.Connect(ctx, srv.URL("postgres"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(ctx) })

	var ahead int
	require.NoError(t, conn.QueryRow(ctx, `
SELECT count(*) FILTER (WHERE name > pg_walfile_name(pg_current_wal_insert_lsn()))
FROM pg_ls_waldir() WHERE name ~ '^[0-9A-F]{24}$'`).Scan(&ahead))
	want, err := maxWALSegments(ctx, conn)
	require.NoError(t, err)
	require.GreaterOrEqual(t, ahead, want/2, "segments made ahead of the one being written")
}
