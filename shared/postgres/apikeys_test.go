package postgres

import (
	"context"
	"crypto/sha256"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/pgtest"
	"github.com/txfence/txfence/shared/txm"
)

func newKey(id, principal string) txm.APIKey {
	h := sha256.Sum256([]byte("txfk_" + id + "_secret"))
	return txm.APIKey{ID: id, Principal: principal, Hash: h[:], CreatedBy: "cli:alice"}
}

func TestAPIKeysStoreOnlyHashesAndAuditEveryChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	keys, err := NewAPIKeys(db.Pool)
	require.NoError(t, err)
	audit, err := NewAuditLog(db.Pool)
	require.NoError(t, err)

	k := newKey("k_0123456789abcdef", "svc@example.com")
	require.NoError(t, keys.CreateAPIKey(ctx, k))
	require.NoError(t, keys.CreateAPIKey(ctx, newKey("k_fedcba9876543210", "other@example.com")))

	got, err := keys.APIKey(ctx, k.ID)
	require.NoError(t, err)
	assert.Equal(t, k.ID, got.ID)
	assert.Equal(t, k.Principal, got.Principal)
	assert.Equal(t, k.Hash, got.Hash)
	assert.Equal(t, "cli:alice", got.CreatedBy)
	assert.False(t, got.CreatedAt.IsZero())
	assert.Nil(t, got.RevokedAt)

	_, err = keys.APIKey(ctx, "k_0000000000000000")
	assert.ErrorIs(t, err, txm.ErrNotFound)

	// The same id twice is a conflict; a malformed id or hash is invalid;
	// neither writes anything.
	assert.ErrorIs(t, keys.CreateAPIKey(ctx, k), txm.ErrConflict)
	bad := newKey("k_NOTHEX", "svc@example.com")
	assert.ErrorIs(t, keys.CreateAPIKey(ctx, bad), txm.ErrInvalid)
	short := newKey("k_1111111111111111", "svc@example.com")
	short.Hash = short.Hash[:16]
	assert.ErrorIs(t, keys.CreateAPIKey(ctx, short), txm.ErrInvalid)

	list, err := keys.ListAPIKeys(ctx, "svc@example.com")
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, k.ID, list[0].ID)
	assert.Nil(t, list[0].Hash, "a listing carries no hash")
	all, err := keys.ListAPIKeys(ctx, "")
	require.NoError(t, err)
	assert.Len(t, all, 2)

	require.NoError(t, keys.RevokeAPIKey(ctx, k.ID, "cli:bob"))
	got, err = keys.APIKey(ctx, k.ID)
	require.NoError(t, err)
	require.NotNil(t, got.RevokedAt)
	first := *got.RevokedAt
	require.NoError(t, keys.RevokeAPIKey(ctx, k.ID, "cli:carol"), "revoking twice is harmless")
	got, err = keys.APIKey(ctx, k.ID)
	require.NoError(t, err)
	assert.True(t, got.RevokedAt.Equal(first), "the first revocation stands")
	assert.ErrorIs(t, keys.RevokeAPIKey(ctx, "k_0000000000000000", "cli:bob"), txm.ErrNotFound)

	var revokedBy string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT revoked_by FROM api_key WHERE id = $1`, k.ID).Scan(&revokedBy))
	assert.Equal(t, "cli:bob", revokedBy)

	rows, err := audit.ListAudit(ctx, "", 100)
	require.NoError(t, err)
	var seen []string
	for _, r := range rows {
		seen = append(seen, r.Principal+" "+r.Action+" "+r.Target+" "+r.Outcome+" "+r.Detail)
	}
	assert.Equal(t, []string{
		"cli:carol apikey.revoke k_0123456789abcdef ok already revoked",
		"cli:bob apikey.revoke k_0123456789abcdef ok ",
		"cli:alice apikey.create k_fedcba9876543210 ok for principal other@example.com",
		"cli:alice apikey.create k_0123456789abcdef ok for principal svc@example.com",
	}, seen, "one audit row per change, none for refused writes")
}

func TestAuditLogWritesAndLists(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	audit, err := NewAuditLog(db.Pool)
	require.NoError(t, err)
	require.NoError(t, audit.Audit(ctx, txm.AuditEntry{Principal: "a@x", Action: "create", Target: "tx1", Outcome: "refused:signer", Detail: "d"}))
	require.NoError(t, audit.Audit(ctx, txm.AuditEntry{Principal: "b@x", Action: "cancel", Target: "tx2", Outcome: "ok"}))
	assert.ErrorIs(t, audit.Audit(ctx, txm.AuditEntry{Action: "create", Outcome: "ok"}), txm.ErrInvalid)

	rows, err := audit.ListAudit(ctx, "a@x", 10)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	assert.Equal(t, txm.AuditEntry{Principal: "a@x", Action: "create", Target: "tx1", Outcome: "refused:signer", Detail: "d"}, rows[0].AuditEntry)
	assert.False(t, rows[0].At.IsZero())
	rows, err = audit.ListAudit(ctx, "", 1)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	assert.Equal(t, "b@x", rows[0].Principal, "newest first")
	_, err = audit.ListAudit(ctx, "", 0)
	assert.True(t, errors.Is(err, txm.ErrInvalid))
}
