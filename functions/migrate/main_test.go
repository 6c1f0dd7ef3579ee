package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestIssue12_MigratesEveryShard: with TXFENCE_DATABASES, migrate brings
// every shard to the same schema version.
func TestIssue12_MigratesEveryShard(t *testing.T) {
	a, b := pgtest.NewDatabase(t, false), pgtest.NewDatabase(t, false)
	t.Setenv(config.EnvDatabases, "a="+a+"|b="+b)
	require.NoError(t, run(nil))
	var versions []int64
	for _, url := range []string{a, b} {
		var v int64
		require.NoError(t, pgtest.Pool(t, url).QueryRow(context.Background(), `SELECT max(version_id) FROM goose_db_version`).Scan(&v))
		versions = append(versions, v)
	}
	require.Positive(t, versions[0])
	require.Equal(t, versions[0], versions[1])
}
