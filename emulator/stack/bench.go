package stack

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txfence/txfence/shared/pgtest"
	"github.com/txfence/txfence/shared/postgres"
)

// BuildTempServer builds the function server into a new temporary
// directory, as the benchmarks run it, and returns its path and what removes
// the directory.
func BuildTempServer(ctx context.Context) (string, func(), error) {
	tmp, err := os.MkdirTemp("", "txfence-bench-")
	if err != nil {
		return "", nil, err
	}
	cleanup := func() { _ = os.RemoveAll(tmp) }
	server := filepath.Join(tmp, "server")
	fmt.Println("building the function server ...")
	if err := BuildServer(ctx, server); err != nil {
		cleanup()
		return "", nil, err
	}
	return server, cleanup, nil
}

// BuildServer builds the function server binary to path, as the benchmarks
// run it (stripped, like the image).
func BuildServer(ctx context.Context, path string) error {
	out, err := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", path, "./functions/server").CombinedOutput()
	if err != nil {
		return fmt.Errorf("build server: %v\n%s", err, out)
	}
	return nil
}

// BenchDatabase starts a PostgreSQL server (opts.Durable: fsync and
// synchronous commit on, as in production) with a migrated database
// txfence, and returns its URL, a pool on it and what stops both. With
// pg_stat_statements preloaded, the extension is created.
func BenchDatabase(ctx context.Context, opts pgtest.Options) (string, *pgxpool.Pool, func(), error) {
	pg, err := pgtest.Start(ctx, opts)
	if err != nil {
		return "", nil, nil, err
	}
	fail := func(err error) (string, *pgxpool.Pool, func(), error) {
		pg.Stop()
		return "", nil, nil, err
	}
	admin, err := pgxpool.New(ctx, pg.URL("postgres"))
	if err != nil {
		return fail(err)
	}
	_, err = admin.Exec(ctx, "CREATE DATABASE txfence")
	admin.Close()
	if err != nil {
		return fail(err)
	}
	url := pg.URL("txfence")
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return fail(err)
	}
	if err := postgres.MigrateUp(ctx, pool); err != nil {
		pool.Close()
		return fail(err)
	}
	if err := createStatements(ctx, pool, opts.Preload); err != nil {
		pool.Close()
		return fail(err)
	}
	return url, pool, func() { pool.Close(); pg.Stop() }, nil
}

// createStatements creates the pg_stat_statements extension when it is
// preloaded.
func createStatements(ctx context.Context, pool *pgxpool.Pool, preload []string) error {
	if !slices.Contains(preload, "pg_stat_statements") {
		return nil
	}
	_, err := pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`)
	return err
}

// ResetStatements empties pg_stat_statements and the database's table
// counters.
func ResetStatements(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, `SELECT pg_stat_statements_reset(), pg_stat_reset()`)
	return err
}

// PrintStatements prints the limit statements that took the most time
// since the last reset, nested ones (inside txfence_allocate) included,
// with their calls, mean and total time (lock waits included) and rows.
func PrintStatements(ctx context.Context, pool *pgxpool.Pool, limit int) error {
	rows, err := pool.Query(ctx, `
SELECT calls, total_exec_time / calls, total_exec_time, rows, left(regexp_replace(query, '\s+', ' ', 'g'), 90)
FROM pg_stat_statements WHERE calls > 10 ORDER BY total_exec_time DESC LIMIT $1`, limit)
	if err != nil {
		return err
	}
	defer rows.Close()
	fmt.Printf("  %8s %9s %9s %9s  %s\n", "calls", "mean ms", "total ms", "rows", "statement")
	for rows.Next() {
		var calls, n int64
		var mean, total float64
		var q string
		if err := rows.Scan(&calls, &mean, &total, &n, &q); err != nil {
			return err
		}
		fmt.Printf("  %8d %9.3f %9.0f %9d  %s\n", calls, mean, total, n, q)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return printWholeReads(ctx, pool)
}

// printWholeReads prints the tables read whole (sequential scans) since
// the last reset, with the rows those reads went through: a statement that
// finds rows by key should not be among them. A session reports its
// counters within a second of a transaction's end (10 s when idle), so
// the last second's may be missing.
func printWholeReads(ctx context.Context, pool *pgxpool.Pool) error {
	rows, err := pool.Query(ctx, `
SELECT relname, seq_scan, seq_tup_read, coalesce(idx_scan, 0), n_live_tup
FROM pg_stat_user_tables WHERE seq_scan > 0 ORDER BY seq_tup_read DESC, relname`)
	if err != nil {
		return err
	}
	defer rows.Close()
	fmt.Printf("  tables read whole: %-22s %9s %12s %9s %9s\n", "table", "reads", "rows read", "by key", "rows now")
	for rows.Next() {
		var name string
		var seq, tup, idx, live int64
		if err := rows.Scan(&name, &seq, &tup, &idx, &live); err != nil {
			return err
		}
		fmt.Printf("  %19s %-22s %9d %12d %9d %9d\n", "", name, seq, tup, idx, live)
	}
	return rows.Err()
}

// CheckContiguous fails when any signer's nonces in the database have a
// gap or a duplicate: the benchmarks run it after every scenario.
func CheckContiguous(ctx context.Context, pool *pgxpool.Pool) error {
	var bad int
	err := pool.QueryRow(ctx, `
SELECT count(*) FROM (
    SELECT signer, count(*) AS n, min(nonce) AS lo, max(nonce) AS hi, count(DISTINCT nonce) AS d
    FROM managed_tx GROUP BY chain_id, signer
) s WHERE hi - lo + 1 <> n OR d <> n`).Scan(&bad)
	if err != nil {
		return err
	}
	if bad > 0 {
		return fmt.Errorf("%d signers have gaps or duplicate nonces", bad)
	}
	return nil
}
