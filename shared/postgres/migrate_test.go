package postgres

import (
	"context"
	"fmt"
	"io/fs"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/migrations"
	"github.com/txfence/txfence/shared/pgtest"
	"github.com/txfence/txfence/shared/txm"
)

var schemaTables = []string{"signer_lease", "signer_nonce_cursor", "managed_tx", "tx_attempt", "tx_history", "outbox", "tx_completion", "tx_action", "api_key", "principal_policy", "principal_usage", "audit_log", "shard_identity", "shard_map", "completion_pending", "reported_block", "tx_simulation", "window_usage", "window_watch", "tx_approval", "tx_approval_decision"}

func TestIssue2_Migrations(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, false)
	pool := pgtest.Pool(t, url)
	ctx := context.Background()
	m, err := NewMigrator(pool)
	require.NoError(t, err)
	defer m.Close()

	tables := func() []string {
		rows, err := pool.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'goose_db_version' ORDER BY tablename`)
		require.NoError(t, err)
		var out []string
		for rows.Next() {
			var s string
			require.NoError(t, rows.Scan(&s))
			out = append(out, s)
		}
		require.NoError(t, rows.Err())
		return out
	}

	for round := 1; round <= 2; round++ {
		require.NoError(t, m.Up(ctx), "up, round %d", round)
		v, err := m.Version(ctx)
		require.NoError(t, err)
		assert.Positive(t, v)
		assert.ElementsMatch(t, schemaTables, tables(), "round %d", round)
		if round == 2 {
			break
		}
		require.NoError(t, m.DownTo(ctx, 0))
		v, err = m.Version(ctx)
		require.NoError(t, err)
		assert.Zero(t, v)
		assert.Empty(t, tables(), "down to zero leaves no table")
		var domains int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_type WHERE typname LIKE 'txfence_%'`).Scan(&domains))
		assert.Zero(t, domains, "down to zero leaves no domain")
	}
}

// migratedDatabase is a new database migrated up, with its migrator (to
// go down and up again), for tests of what a migration does.
func migratedDatabase(t *testing.T) (*pgxpool.Pool, *Migrator) {
	t.Helper()
	pool := pgtest.Pool(t, pgtest.NewDatabase(t, false))
	m, err := NewMigrator(pool)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	require.NoError(t, m.Up(context.Background()))
	return pool, m
}

// TestSchemaConstraints pins the schema's own guards: canonical addresses,
// one transaction per nonce and per request id.
func TestSchemaConstraints(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	signer := txm.CanonicalAddress(testSigner)
	insert := func(nonce int64, requestID any, signer string) error {
		_, err := db.Pool.Exec(ctx, `
INSERT INTO managed_tx (id, chain_id, signer, nonce, request_id, payload_fingerprint, state, fencing_token)
VALUES (gen_random_uuid(), 1, $1, $2, $3, decode(repeat('ab', 32), 'hex'), 'ALLOCATED', 1)`, signer, nonce, requestID)
		return translate(err)
	}
	require.NoError(t, insert(0, "r0", signer))
	require.NoError(t, insert(1, nil, signer))
	require.NoError(t, insert(2, nil, signer), "many transactions without a request id")
	assert.ErrorIs(t, insert(0, "other", signer), txm.ErrConflict, "a nonce is allocated once")
	assert.ErrorIs(t, insert(3, "r0", signer), txm.ErrConflict, "a request id maps to one transaction")
	assert.ErrorIs(t, insert(4, nil, "0x00000000000000000000000000000000000000A1"), txm.ErrInvalid, "addresses are stored lower-case")
	assert.ErrorIs(t, insert(-1, nil, signer), txm.ErrInvalid)
}

// TestCreationHistory_Derived: a created transaction has no tx_history row
// for its creation; its history still starts with it (reason created, the
// allocating owner and token, the row's created_at), before the later
// changes. Migrating down to 9 writes the row it would have had, so the
// older readers see the same history; back up, nothing shows twice.
func TestCreationHistory_Derived(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, m := migratedDatabase(t)
	s := testStore(t, pool)
	a := common.HexToAddress("0xa7")
	got, _, err := s.Allocate(ctx, []txm.AllocationBatch{{ChainID: 1, Signer: a, Owner: "alloc-owner",
		Requests: []*txm.Request{allocRequest(a, "", "h1", 1)}}})
	require.NoError(t, err)
	tx := got[0][0].Tx
	var written int
	var allocToken int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM tx_history WHERE tx_id = $1), fencing_token FROM managed_tx WHERE id = $1`,
		tx.ID).Scan(&written, &allocToken))
	assert.Zero(t, written, "the creation is not written to tx_history")

	_, err = pool.Exec(ctx, `INSERT INTO tx_history (tx_id, from_state, to_state, reason, owner, fencing_token)
VALUES ($1, 'ALLOCATED', 'TRACKING', 'broadcast', 'submit-owner', 99)`, tx.ID)
	require.NoError(t, err)
	check := func(label string) {
		t.Helper()
		hs, err := s.TxHistory(ctx, tx.ID)
		require.NoError(t, err, label)
		require.Len(t, hs, 2, label)
		assert.Equal(t, txm.HistoryEntry{To: txm.StateAllocated, Reason: "created", Owner: "alloc-owner", Token: allocToken,
			CreatedAt: hs[0].CreatedAt}, hs[0], label)
		assert.WithinDuration(t, tx.CreatedAt, hs[0].CreatedAt, time.Millisecond, label)
		assert.Equal(t, txm.StateTracking, hs[1].To, label)
		assert.Equal(t, "submit-owner", hs[1].Owner, label)
	}
	check("derived")

	require.NoError(t, m.DownTo(ctx, 9))
	var owner string
	var token int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT owner, fencing_token FROM tx_history WHERE tx_id = $1 AND reason = 'created'`, tx.ID).
		Scan(&owner, &token), "down writes the creation's history row")
	assert.Equal(t, "alloc-owner", owner)
	assert.Equal(t, allocToken, token)
	require.NoError(t, m.Up(ctx))
	check("up again: the row written by the down, once")
}

// TestSchemaConstraints_AddressAndHashForms: the address and hash domains
// accept 0x and exactly 40 (64) lower-case hex digits, and nothing else,
// whatever the bytes add up to (migration 00016 wrote the checks anew).
func TestSchemaConstraints_AddressAndHashForms(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	hex40, hex64 := strings.Repeat("0123456789abcdef", 3)[:40], strings.Repeat("0123456789abcdef", 4)
	for _, c := range []struct {
		domain string
		digits string // the valid value's digits
	}{{"txfence_address", hex40}, {"txfence_hash", hex64}} {
		n := len(c.digits)
		cases := map[string]bool{
			"0x" + c.digits:                  true,
			"0x" + strings.ToUpper(c.digits): false,
			"0X" + c.digits:                  false,
			c.digits[:2] + c.digits:          false, // 00 instead of 0x
			"0x" + c.digits[:n-1]:            false,
			"0x" + c.digits + "0":            false,
			"0x" + c.digits[:n-1] + "\n":     false,
			"0x" + c.digits[:n-1] + "g":      false,
			"0x" + c.digits[:n-2] + "é":      false, // two bytes: 42 (66) bytes in all
			" 0x" + c.digits[:n-1]:           false,
			"":                               false,
			"0x":                             false,
			"0x" + c.digits[:n/2] + "-" + c.digits[n/2+1:]: false,
		}
		for v, ok := range cases {
			_, err := db.Pool.Exec(ctx, `SELECT $1::text::`+c.domain, v)
			if ok {
				assert.NoError(t, err, "%s %q", c.domain, v)
				continue
			}
			var pgErr *pgconn.PgError
			if assert.ErrorAs(t, err, &pgErr, "%s %q", c.domain, v) {
				assert.Equal(t, "23514", pgErr.Code, "%s %q: a check violation", c.domain, v)
			}
		}
	}
}

// TestIssue45_MigrateConcurrently: migrations started at once from four
// processes (deploys close together, each with its migrate job) run one
// after the other under goose's session lock: all succeed, and the schema
// is migrated once. Without the lock, about one run in two fails (a
// migration applied twice, or the version table written at once).
func TestIssue45_MigrateConcurrently(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, false)
	ctx := context.Background()
	const migrators = 4
	errs := make(chan error, migrators)
	for range migrators {
		pool := pgtest.Pool(t, url)
		m, err := NewMigrator(pool)
		require.NoError(t, err)
		t.Cleanup(func() { _ = m.Close() })
		go func() { errs <- m.Up(ctx) }()
	}
	for range migrators {
		require.NoError(t, <-errs)
	}
	pool := pgtest.Pool(t, url)
	var applied int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM goose_db_version WHERE version_id > 0 AND is_applied`).Scan(&applied))
	entries, err := migrations.FS.ReadDir(".")
	require.NoError(t, err)
	sqlFiles := 0
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".sql") {
			sqlFiles++
		}
	}
	assert.Equal(t, sqlFiles, applied, "each migration applied once")
}

// lastMigrationWithFunctions is the last migration that holds a function
// body; from the next one on, every function lives in migrations/functions
// alone.
const lastMigrationWithFunctions = 21

// TestIssue46_FunctionSources: each SQL function in a migrated database is
// exactly its source file's (migrations/functions), and no migration after
// the functions moved there holds a function body, so that a reader who
// looks for a function finds its one current source.
func TestIssue46_FunctionSources(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	names, err := fs.Glob(migrations.Functions, "functions/*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, names)
	header := regexp.MustCompile(`(?m)^CREATE OR REPLACE FUNCTION (\w+)\(`)
	for _, name := range names {
		b, err := migrations.Functions.ReadFile(name)
		require.NoError(t, err)
		src := string(b)
		m := header.FindStringSubmatch(src)
		require.NotNil(t, m, "%s: one CREATE OR REPLACE FUNCTION", name)
		require.Len(t, header.FindAllString(src, -1), 1, "%s: one function a file", name)
		assert.Equal(t, "functions/"+m[1]+".sql", name, "the file is named after its function")
		start := strings.Index(src, "AS $$\n")
		end := strings.LastIndex(src, "\n$$;")
		require.True(t, start > 0 && end > start, "%s: a $$-quoted body", name)
		body := src[start+len("AS $$") : end+1]
		rows, err := db.Pool.Query(ctx, `SELECT prosrc FROM pg_proc WHERE proname = $1 AND pronamespace = 'public'::regnamespace`, m[1])
		require.NoError(t, err)
		var found bool
		for rows.Next() {
			var got string
			require.NoError(t, rows.Scan(&got))
			found = found || got == body
		}
		require.NoError(t, rows.Err())
		assert.True(t, found, "%s: the database's %s is the file's", name, m[1])
	}

	entries, err := migrations.FS.ReadDir(".")
	require.NoError(t, err)
	body := regexp.MustCompile(`(?i)CREATE\s+(OR\s+REPLACE\s+)?FUNCTION`)
	for _, e := range entries {
		var n int
		if _, err := fmt.Sscanf(e.Name(), "%05d_", &n); err != nil || n <= lastMigrationWithFunctions {
			continue
		}
		b, err := migrations.FS.ReadFile(e.Name())
		require.NoError(t, err)
		assert.False(t, body.Match(b), "%s holds a function body: it belongs in migrations/functions", e.Name())
	}
}
