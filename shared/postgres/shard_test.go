package postgres

import (
	"context"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/pgtest"
	"github.com/txfence/txfence/shared/txm"
)

// TestIssue12_ClaimShard: a database records which shard it is and the
// newest map that used it; swapped URLs, stale or silently changed maps,
// and a map that moves a signer away from its nonces are refused (503).
func TestIssue12_ClaimShard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	x, y := common.HexToAddress("0x0a"), common.HexToAddress("0x0b")
	mapOf := func(m map[common.Address]string) func(common.Address) (string, bool) {
		return func(a common.Address) (string, bool) { s, ok := m[a]; return s, ok }
	}
	claim := func(name string, v int64, text string, m map[common.Address]string) error {
		return ClaimShard(ctx, db.Pool, ShardClaim{Name: name, MapVersion: v, Map: text, ShardOf: mapOf(m)})
	}
	v1 := map[common.Address]string{x: "a", y: "b"}
	require.NoError(t, claim("a", 1, "v1:x=a,y=b", v1), "the first use records the name")
	require.NoError(t, claim("a", 1, "v1:x=a,y=b", v1), "and again")

	err := claim("b", 1, "v1:x=a,y=b", v1)
	require.ErrorIs(t, err, ErrShardRefused, "another name: swapped URLs")
	assert.ErrorIs(t, err, txm.ErrUnavailable)
	assert.Contains(t, err.Error(), `is shard "a"`)

	require.ErrorIs(t, claim("a", 1, "v1:x=a,y=a", v1), ErrShardRefused, "same version, other map")
	require.NoError(t, claim("a", 2, "v2:x=a,y=b,z=a", v1), "a newer map is recorded")
	err = claim("a", 1, "v1:x=a,y=b", v1)
	require.ErrorIs(t, err, ErrShardRefused, "a stale revision's older map")
	assert.Contains(t, err.Error(), "older")

	_, err = db.Pool.Exec(ctx, `INSERT INTO signer_nonce_cursor (chain_id, signer, next_nonce, fencing_token) VALUES (1, $1, 5, 1)`, txm.CanonicalAddress(x))
	require.NoError(t, err)
	require.NoError(t, claim("a", 3, "v3:x=a", map[common.Address]string{x: "a"}), "x is where its nonces are")
	err = claim("a", 4, "v4:x=b", map[common.Address]string{x: "b"})
	require.ErrorIs(t, err, ErrShardRefused, "the map moves x away from its nonces")
	assert.Contains(t, err.Error(), txm.CanonicalAddress(x))
	var version int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT map_version FROM shard_identity`).Scan(&version))
	assert.EqualValues(t, 3, version, "a refused claim records nothing")
}

// TestIssue12_RecordShardMap: the home shard keeps every map; a newer one
// may add signers but not move one, an older one or a changed one under
// the same version is refused, and the first one must pass the check of
// every shard.
func TestIssue12_RecordShardMap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	x, y, z := common.HexToAddress("0x0a"), common.HexToAddress("0x0b"), common.HexToAddress("0x0c")
	firsts := 0
	first := func(context.Context) error { firsts++; return nil }
	rec := func(v int64, digest string, m map[common.Address]string) error {
		return RecordShardMap(ctx, db.Pool, MapRecord{Version: v, Digest: digest, Assignments: m}, first)
	}

	failing := func(context.Context) error { return txm.ErrUnavailable }
	require.ErrorIs(t, RecordShardMap(ctx, db.Pool, MapRecord{Version: 1, Digest: "d1", Assignments: map[common.Address]string{x: "a"}}, failing),
		txm.ErrUnavailable, "the first map needs every shard's check")
	require.NoError(t, rec(1, "d1", map[common.Address]string{x: "a", y: "b"}))
	require.NoError(t, rec(1, "d1", map[common.Address]string{x: "a", y: "b"}), "the same map again")
	require.ErrorIs(t, rec(1, "other", map[common.Address]string{x: "a", y: "a"}), ErrShardRefused, "changed without a new version")
	require.NoError(t, rec(2, "d2", map[common.Address]string{x: "a", y: "b", z: "c"}), "a new signer in a new shard")
	require.ErrorIs(t, rec(1, "d1", map[common.Address]string{x: "a", y: "b"}), ErrShardRefused, "a stale revision")
	err := rec(3, "d3", map[common.Address]string{x: "a", y: "a", z: "c"})
	require.ErrorIs(t, err, ErrShardRefused, "y moves from b to a")
	assert.Contains(t, err.Error(), txm.CanonicalAddress(y)+" (b → a)")
	require.NoError(t, rec(3, "d3", map[common.Address]string{x: "a", z: "c"}), "a signer may leave the configuration")
	require.ErrorIs(t, rec(4, "d4", map[common.Address]string{x: "a", y: "c", z: "c"}), ErrShardRefused,
		"nor come back elsewhere: its nonces stayed in b")
	assert.Equal(t, 1, firsts, "only the first map ran the check of every shard")
	var versions int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM shard_map`).Scan(&versions))
	assert.Equal(t, 3, versions)
}
