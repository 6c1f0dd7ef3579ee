package postgres

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/pgtest"
	"github.com/txfence/txfence/shared/txm"
)

var schemaTables = []string{"signer_lease", "signer_nonce_cursor", "managed_tx", "tx_attempt", "tx_history", "outbox", "tx_completion", "tx_action", "api_key", "principal_policy", "principal_usage", "audit_log", "shard_identity", "shard_map"}

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
