package auth_test

import (
	"context"
	"crypto/sha256"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/auth"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/pgtest"
	"github.com/txfence/txfence/shared/postgres"
	"github.com/txfence/txfence/shared/txm"
)

func TestAPIKeyFormat(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 200 {
		key, id, hash := auth.NewAPIKey()
		require.Len(t, key, 67)
		assert.True(t, strings.HasPrefix(key, "txfk_"+id+"_"))
		assert.Regexp(t, `^k_[0-9a-f]{16}$`, id, "the id is what the api_key table accepts")
		assert.Regexp(t, `^[A-Za-z0-9_-]{43}$`, key[len("txfk_"+id+"_"):])
		sum := sha256.Sum256([]byte(key))
		assert.Equal(t, sum[:], hash)
		assert.Equal(t, hash, auth.HashAPIKey(key))
		got, ok := auth.ParseAPIKey(key)
		require.True(t, ok, key)
		assert.Equal(t, id, got)
		assert.False(t, seen[key])
		seen[key] = true
	}
	for _, bad := range []string{"", "txfk_", "txfk_k_0123456789abcdef_", "txfk_k_0123456789ABCDEF_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
		"txfk_k_0123456789abcdef_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAB", // bits past the 32 bytes
		"txfk_k_0123456789abcdef-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
		"txfk_k_0123456789abcdef_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
		"txfk_k_0123456789abcdef_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA+",
		"txfx_k_0123456789abcdef_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
	} {
		_, ok := auth.ParseAPIKey(bad)
		assert.False(t, ok, bad)
	}
}

func FuzzParseAPIKey(f *testing.F) {
	key, _, _ := auth.NewAPIKey()
	f.Add(key)
	f.Fuzz(func(t *testing.T, key string) {
		id, ok := auth.ParseAPIKey(key)
		if !ok {
			if id != "" {
				t.Fatalf("refused key with id %q", id)
			}
			return
		}
		if len(key) != 67 || !strings.HasPrefix(key, "txfk_"+id+"_") || !auth.ValidAPIKeyID(id) {
			t.Fatalf("accepted %q with id %q", key, id)
		}
	})
}

// keyFixture is an API-key authenticator over a real database with one key
// of each kind.
type keyFixture struct {
	db                  *pgtest.DB
	store               *postgres.APIKeys
	auth                txm.Authenticator
	valid, revoked, new string // new is well formed but never stored
}

func newKeyFixture(t *testing.T, methods ...string) keyFixture {
	t.Helper()
	ctx := context.Background()
	db := pgtest.New(t)
	store, err := postgres.NewAPIKeys(db.Pool)
	require.NoError(t, err)
	f := keyFixture{db: db, store: store}
	for _, k := range []*string{&f.valid, &f.revoked} {
		key, id, hash := auth.NewAPIKey()
		require.NoError(t, store.CreateAPIKey(ctx, txm.APIKey{ID: id, Principal: "partner@example.com", Hash: hash, CreatedBy: "test"}))
		*k = key
	}
	revokedID, _ := auth.ParseAPIKey(f.revoked)
	require.NoError(t, store.RevokeAPIKey(ctx, revokedID, "test"))
	f.new, _, _ = auth.NewAPIKey()
	f.auth, err = auth.New(config.Auth{Methods: methods}, store)
	require.NoError(t, err)
	return f
}

// snapshot is every row a call could have changed.
func snapshot(t *testing.T, db *pgtest.DB) string {
	t.Helper()
	var s string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT
  (SELECT coalesce(string_agg(id || principal || encode(hash, 'hex') || coalesce(revoked_at::text, '-'), ',' ORDER BY id), '') FROM api_key) || '|' ||
  (SELECT count(*) FROM audit_log)::text || '|' || (SELECT count(*) FROM principal_policy)::text`).Scan(&s))
	return s
}

func TestIssue11_AuthAPIKeyValidIsItsPrincipal(t *testing.T) {
	t.Parallel()
	f := newKeyFixture(t, "apikey")
	p, err := f.auth.Authenticate(context.Background(), txm.Credential{Bearer: f.valid})
	require.NoError(t, err)
	assert.Equal(t, txm.Principal{ID: "partner@example.com", Via: "apikey"}, p)
}

func TestIssue11_AuthAPIKeyRefusalsAre401AndChangeNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newKeyFixture(t, "apikey")
	before := snapshot(t, f.db)

	validID, _ := auth.ParseAPIKey(f.valid)
	secret := f.valid[len("txfk_"+validID+"_"):]
	// The valid key's id with another well-formed secret.
	other, _, _ := auth.NewAPIKey()
	otherID, _ := auth.ParseAPIKey(other)
	wrongSecret := strings.Replace(other, otherID, validID, 1)

	for _, tc := range []struct {
		name, key, reason string
	}{
		{"wrong secret", wrongSecret, "wrong secret"},
		{"unknown id", f.new, "unknown key id"},
		{"revoked", f.revoked, "revoked"},
		{"malformed", "txfk_" + secret, "malformed"},
		{"truncated", f.valid[:len(f.valid)-1], "malformed"},
		{"no credential", "", "no credential"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.auth.Authenticate(ctx, txm.Credential{Bearer: tc.key})
			require.ErrorIs(t, err, txm.ErrUnauthenticated)
			assert.Contains(t, err.Error(), tc.reason)
			if tc.key != "" {
				assert.NotContains(t, err.Error(), tc.key, "the key is never in an error")
				assert.NotContains(t, err.Error(), tc.key[len(tc.key)-20:], "nor its secret")
			}
			assert.NotContains(t, err.Error(), secret)
		})
	}
	assert.Equal(t, before, snapshot(t, f.db), "a refusal writes nothing")
}

func TestIssue11_AuthAPIKeyRevocationTakesEffectAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newKeyFixture(t, "apikey")
	_, err := f.auth.Authenticate(ctx, txm.Credential{Bearer: f.valid})
	require.NoError(t, err)
	id, _ := auth.ParseAPIKey(f.valid)
	require.NoError(t, f.store.RevokeAPIKey(ctx, id, "cli:admin"))
	_, err = f.auth.Authenticate(ctx, txm.Credential{Bearer: f.valid})
	require.ErrorIs(t, err, txm.ErrUnauthenticated)
	assert.NotContains(t, err.Error(), f.valid)
}

func TestIssue11_AuthAPIKeysRefusedWhenNotEnabled(t *testing.T) {
	t.Parallel()
	f := newKeyFixture(t, "apikey")
	a, err := auth.New(config.Auth{Methods: []string{"oidc"}, Audience: "https://txfence.example"}, f.store)
	require.NoError(t, err)
	_, err = a.Authenticate(context.Background(), txm.Credential{Bearer: f.valid})
	require.ErrorIs(t, err, txm.ErrUnauthenticated)
	assert.Contains(t, err.Error(), "not enabled")
	assert.NotContains(t, err.Error(), f.valid)
}
