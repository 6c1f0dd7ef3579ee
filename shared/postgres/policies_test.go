package postgres

import (
	"context"
	"encoding/json"
	"math/big"
	"sort"
	"sync"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/pgtest"
	"github.com/txfence/txfence/shared/txm"
)

func newPolicies(t *testing.T) (*Policies, *AuditLog, *pgtest.DB) {
	t.Helper()
	db := pgtest.New(t)
	ps, err := NewPolicies(db.Pool)
	require.NoError(t, err)
	a, err := NewAuditLog(db.Pool)
	require.NoError(t, err)
	return ps, a, db
}

func TestPoliciesAreVersionedAndRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ps, audit, db := newPolicies(t)

	_, err := ps.Policy(ctx, "svc@example.com")
	assert.ErrorIs(t, err, txm.ErrNotFound, "no policy: closed by default")

	to := common.HexToAddress("0x00000000000000000000000000000000000000aa")
	p := txm.Policy{
		Principal: "svc@example.com", Roles: []txm.Role{txm.RoleSender},
		Signers:  []common.Address{common.HexToAddress("0x0000000000000000000000000000000000000001")},
		MaxValue: big.NewInt(1000), Hourly: txm.Limit{Value: big.NewInt(5000), Count: 10}, Daily: txm.Limit{Count: 100},
		Allowlist: []common.Address{to}, RatePerSecond: 2.5, Burst: 5, MaxWaits: 3,
		Version: 99, CreatedBy: "ignored",
	}
	v1, err := ps.PutPolicy(ctx, p, "cli:alice")
	require.NoError(t, err)
	assert.Equal(t, 1, v1.Version)
	assert.Equal(t, "cli:alice", v1.CreatedBy)
	assert.False(t, v1.CreatedAt.IsZero())

	got, err := ps.Policy(ctx, "svc@example.com")
	require.NoError(t, err)
	assert.Equal(t, 1, got.Version)
	assert.Equal(t, "cli:alice", got.CreatedBy)
	assert.True(t, got.CreatedAt.Equal(v1.CreatedAt))
	want := p
	want.Version, want.CreatedBy, want.CreatedAt = got.Version, got.CreatedBy, got.CreatedAt
	wantJSON, _ := json.Marshal(want)
	gotJSON, _ := json.Marshal(got)
	assert.JSONEq(t, string(wantJSON), string(gotJSON))

	// The row holds the wire form; version and author are columns only.
	var raw []byte
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT policy FROM principal_policy WHERE principal = $1`, p.Principal).Scan(&raw))
	var stored map[string]any
	require.NoError(t, json.Unmarshal(raw, &stored))
	assert.Equal(t, "1000", stored["maxValue"])
	assert.NotContains(t, stored, "version")
	assert.NotContains(t, stored, "createdBy")

	p2 := txm.Policy{Principal: "svc@example.com", Roles: []txm.Role{txm.RoleReader}, AllSigners: true}
	v2, err := ps.PutPolicy(ctx, p2, "cli:bob")
	require.NoError(t, err)
	assert.Equal(t, 2, v2.Version)
	got, err = ps.Policy(ctx, "svc@example.com")
	require.NoError(t, err)
	assert.Equal(t, 2, got.Version, "the latest version is in force")
	assert.True(t, got.AllSigners)
	assert.Equal(t, []txm.Role{txm.RoleReader}, got.Roles)

	// A bad policy writes nothing.
	_, err = ps.PutPolicy(ctx, txm.Policy{Principal: "svc@example.com", Roles: []txm.Role{"root"}}, "cli:mallory")
	assert.ErrorIs(t, err, txm.ErrInvalid)
	_, err = ps.PutPolicy(ctx, p2, "")
	assert.ErrorIs(t, err, txm.ErrInvalid)
	got, err = ps.Policy(ctx, "svc@example.com")
	require.NoError(t, err)
	assert.Equal(t, 2, got.Version)

	rows, err := audit.ListAudit(ctx, "", 10)
	require.NoError(t, err)
	require.Len(t, rows, 2)
	assert.Equal(t, txm.AuditEntry{Principal: "cli:bob", Action: AuditPolicyPut, Target: "svc@example.com", Outcome: "ok", Detail: "version 2"}, rows[0].AuditEntry)
	assert.Equal(t, txm.AuditEntry{Principal: "cli:alice", Action: AuditPolicyPut, Target: "svc@example.com", Outcome: "ok", Detail: "version 1"}, rows[1].AuditEntry)
}

func TestConcurrentPutPolicyGetsConsecutiveVersions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ps, audit, db := newPolicies(t)
	// Writers on separate pools, as separate instances would be.
	other, err := NewPolicies(pgtest.Pool(t, db.URL))
	require.NoError(t, err)

	const n = 16
	versions := make([]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			store := ps
			if i%2 == 1 {
				store = other
			}
			<-start
			got, err := store.PutPolicy(ctx, txm.Policy{Principal: "hot@example.com", Roles: []txm.Role{txm.RoleReader}, Burst: i + 1}, "cli:race")
			versions[i], errs[i] = got.Version, err
		}()
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	sort.Ints(versions)
	for i, v := range versions {
		assert.Equal(t, i+1, v, "versions are distinct and consecutive")
	}
	got, err := ps.Policy(ctx, "hot@example.com")
	require.NoError(t, err)
	assert.Equal(t, n, got.Version)
	rows, err := audit.ListAudit(ctx, "cli:race", 100)
	require.NoError(t, err)
	assert.Len(t, rows, n, "one audit row per version")
}

func TestSeedPoliciesWritesVersionOneOnlyWhereNone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ps, audit, _ := newPolicies(t)

	_, err := ps.PutPolicy(ctx, txm.Policy{Principal: "kept@example.com", Roles: []txm.Role{txm.RoleReader}}, "cli:alice")
	require.NoError(t, err)

	seed := []txm.Policy{
		{Principal: "new@example.com", Roles: []txm.Role{txm.RoleSender}, AllSigners: true},
		{Principal: "kept@example.com", Roles: []txm.Role{txm.RoleAdmin}},
		{Principal: "new@example.com", Roles: []txm.Role{txm.RoleAdmin}}, // listed twice: the first wins
	}
	// Seeding twice, and from two callers at once, changes nothing more.
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			assert.NoError(t, ps.SeedPolicies(ctx, seed))
		}()
	}
	wg.Wait()
	require.NoError(t, ps.SeedPolicies(ctx, seed))

	got, err := ps.Policy(ctx, "new@example.com")
	require.NoError(t, err)
	assert.Equal(t, 1, got.Version)
	assert.Equal(t, PolicySeedAuthor, got.CreatedBy)
	assert.Equal(t, []txm.Role{txm.RoleSender}, got.Roles)
	assert.True(t, got.AllSigners)

	got, err = ps.Policy(ctx, "kept@example.com")
	require.NoError(t, err)
	assert.Equal(t, 1, got.Version)
	assert.Equal(t, []txm.Role{txm.RoleReader}, got.Roles, "an existing policy is left alone")
	assert.Equal(t, "cli:alice", got.CreatedBy)

	rows, err := audit.ListAudit(ctx, PolicySeedAuthor, 10)
	require.NoError(t, err)
	require.Len(t, rows, 1, "one seed audit row, for the one policy written")
	assert.Equal(t, "new@example.com", rows[0].Target)

	// One bad policy in the seed writes nothing.
	err = ps.SeedPolicies(ctx, []txm.Policy{{Principal: "fine@example.com", Roles: []txm.Role{txm.RoleReader}}, {Principal: "", Roles: []txm.Role{txm.RoleReader}}})
	assert.ErrorIs(t, err, txm.ErrInvalid)
	_, err = ps.Policy(ctx, "fine@example.com")
	assert.ErrorIs(t, err, txm.ErrNotFound)
}
