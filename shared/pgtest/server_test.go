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

// A durable server starts with max_wal_size of WAL segments made ahead, so
// that filling one does not make the next while commits wait; a new cluster
// has one or two.
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
	require.GreaterOrEqual(t, ahead, want*3/4, "segments made ahead of the one being written")

	// The priming's own max_wal_size is gone again.
	var set int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_file_settings WHERE name = 'max_wal_size' AND sourcefile LIKE '%postgresql.auto.conf'`).Scan(&set))
	require.Zero(t, set, "max_wal_size left in postgresql.auto.conf")
	require.Eventually(t, func() bool {
		var now, boot string
		return conn.QueryRow(ctx, `SELECT setting, boot_val FROM pg_settings WHERE name = 'max_wal_size'`).Scan(&now, &boot) == nil && now == boot
	}, 5*time.Second, 20*time.Millisecond, "max_wal_size back to its default")
}
