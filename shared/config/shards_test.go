package config

import (
	"errors"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	signerA1 = "0x00000000000000000000000000000000000000a1"
	signerUS = "0xdAC17F958D2ee523a2206206994597C13D831ec7"
)

func shardedEnv() map[string]string {
	e := validEnv()
	delete(e, EnvDatabaseURL)
	e[EnvDatabases] = "a=postgres://u@db-a/txfence|b@proj:europe-west1:txfence-b=user=txfence dbname=txfence sslmode=disable"
	e[EnvShardMap] = "v3:" + signerA1 + "=b,*=a"
	return e
}

func TestIssue12_ShardConfig(t *testing.T) {
	t.Run("one database is one unnamed shard holding every signer", func(t *testing.T) {
		c, err := Load(env(validEnv()))
		require.NoError(t, err)
		assert.False(t, c.Sharded())
		dbs := c.Databases()
		require.Len(t, dbs, 1)
		assert.Equal(t, "", dbs[0].Name)
		assert.Equal(t, c.Database, dbs[0].Database)
		s, ok := c.ShardFor(common.HexToAddress("0x1234"))
		assert.True(t, ok)
		assert.Equal(t, "", s)
	})

	t.Run("shards and a versioned map", func(t *testing.T) {
		e := shardedEnv()
		e[EnvDBMaxConns] = "7"
		e[EnvCloudSQLIAMAuth] = "true"
		c, err := Load(env(e))
		require.NoError(t, err)
		require.True(t, c.Sharded())
		dbs := c.Databases()
		require.Len(t, dbs, 2)
		assert.Equal(t, "a", dbs[0].Name)
		assert.Equal(t, "postgres://u@db-a/txfence", dbs[0].Database.URL)
		assert.Equal(t, "", dbs[0].Database.Instance)
		assert.Equal(t, "b", dbs[1].Name)
		assert.Equal(t, "proj:europe-west1:txfence-b", dbs[1].Database.Instance)
		assert.Equal(t, "user=txfence dbname=txfence sslmode=disable", dbs[1].Database.URL)
		for _, d := range dbs {
			assert.EqualValues(t, 7, d.Database.MaxConns, "shared settings apply to every shard")
			assert.True(t, d.Database.IAMAuth)
		}
		assert.EqualValues(t, 3, c.ShardMap.Version)
		s, _ := c.ShardFor(common.HexToAddress(signerA1))
		assert.Equal(t, "b", s)
		s, _ = c.ShardFor(common.HexToAddress(signerUS))
		assert.Equal(t, "a", s, "the default")
		assert.Equal(t, "v3:"+signerA1+"=b,*=a", c.ShardMap.String())
		require.NoError(t, c.Validate())
	})

	t.Run("one shard needs no map", func(t *testing.T) {
		e := validEnv()
		delete(e, EnvDatabaseURL)
		e[EnvDatabases] = "main=postgres://u@db/txfence"
		c, err := Load(env(e))
		require.NoError(t, err)
		assert.True(t, c.Sharded())
		s, ok := c.ShardFor(common.HexToAddress(signerUS))
		assert.True(t, ok)
		assert.Equal(t, "main", s)
	})

	bad := []struct {
		name string
		edit func(map[string]string)
		vars []string
		says string
	}{
		{"unknown shard in a rule", func(e map[string]string) { e[EnvShardMap] = "v1:" + signerA1 + "=c,*=a" }, []string{EnvShardMap}, `shard "c"`},
		{"unknown default shard", func(e map[string]string) { e[EnvShardMap] = "v1:*=z" }, []string{EnvShardMap}, `shard "z"`},
		{"a signer without a shard", func(e map[string]string) { e[EnvShardMap] = "v1:" + signerA1 + "=a" }, []string{EnvShardMap}, "has no shard"},
		{"a rule for an unconfigured signer", func(e map[string]string) {
			e[EnvShardMap] = "v1:0x00000000000000000000000000000000000000ff=a,*=b"
		}, []string{EnvShardMap}, "not in " + EnvSigners},
		{"a signer twice", func(e map[string]string) { e[EnvShardMap] = "v1:" + signerA1 + "=a," + signerA1 + "=b,*=a" }, []string{EnvShardMap}, "two rules"},
		{"two defaults", func(e map[string]string) { e[EnvShardMap] = "v1:*=a,*=b" }, []string{EnvShardMap}, "twice"},
		{"no version", func(e map[string]string) { e[EnvShardMap] = "*=a" }, []string{EnvShardMap}, "version"},
		{"version zero", func(e map[string]string) { e[EnvShardMap] = "v0:*=a" }, []string{EnvShardMap}, "version"},
		{"several shards without a map", func(e map[string]string) { delete(e, EnvShardMap) }, []string{EnvShardMap}, "required"},
		{"a map without shards", func(e map[string]string) {
			delete(e, EnvDatabases)
			e[EnvDatabaseURL] = "postgres://u@db/txfence"
		}, []string{EnvShardMap}, "needs " + EnvDatabases},
		{"both one database and shards", func(e map[string]string) { e[EnvDatabaseURL] = "postgres://u@db/txfence" }, []string{EnvDatabases}, "exclusive"},
		{"a global instance with shards", func(e map[string]string) { e[EnvCloudSQLInstance] = "p:r:i" }, []string{EnvCloudSQLInstance}, "each shard"},
		{"a shard named twice", func(e map[string]string) { e[EnvDatabases] = "a=postgres://x/a|a=postgres://y/a" }, []string{EnvDatabases}, "twice"},
		{"a bad shard name", func(e map[string]string) { e[EnvDatabases] = "A:1=postgres://x/a|b=postgres://y/b" }, []string{EnvDatabases}, "shard name"},
		{"a shard without a URL", func(e map[string]string) { e[EnvDatabases] = "a=|b=postgres://y/b" }, []string{EnvDatabases}, "NAME=URL"},
		{"a bad instance", func(e map[string]string) { e[EnvDatabases] = "a@nope=postgres://x/a|b=postgres://y/b" }, []string{EnvDatabases}, "instance"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			e := shardedEnv()
			tc.edit(e)
			_, err := Load(env(e))
			require.Error(t, err)
			var cerr *Error
			require.True(t, errors.As(err, &cerr))
			assert.Equal(t, tc.vars, cerr.Vars(), err.Error())
			assert.Contains(t, err.Error(), tc.says)
		})
	}
}

func TestIssue12_LoadDatabases(t *testing.T) {
	dbs, err := LoadDatabases(env(map[string]string{EnvDatabaseURL: "postgres://u@db/x", EnvCloudSQLInstance: "p:r:i"}))
	require.NoError(t, err)
	require.Len(t, dbs, 1)
	assert.Equal(t, "", dbs[0].Name)
	assert.Equal(t, "p:r:i", dbs[0].Database.Instance)

	dbs, err = LoadDatabases(env(map[string]string{EnvDatabases: "a=postgres://u@a/x|b@p:r:b=user=u dbname=x"}))
	require.NoError(t, err)
	require.Len(t, dbs, 2)
	assert.Equal(t, "a", dbs[0].Name, "the home shard first")
	assert.Equal(t, "p:r:b", dbs[1].Database.Instance)

	_, err = LoadDatabases(env(map[string]string{}))
	require.ErrorIs(t, err, ErrConfig)
	assert.Contains(t, err.Error(), EnvDatabaseURL)
	_, err = LoadDatabases(env(map[string]string{EnvDatabases: "a=x|b=y", EnvDatabaseURL: "z"}))
	require.ErrorIs(t, err, ErrConfig)
	assert.Contains(t, err.Error(), "exclusive")
}

// TestShardLookupIsShardFor: the routing lookup answers as ShardFor for
// one database, a single shard without a map, and a map with a default
// and without one.
func TestShardLookupIsShardFor(t *testing.T) {
	noDefault := shardedEnv()
	noDefault[EnvShardMap] = "v3:" + signerA1 + "=b," + signerUS + "=a"
	single := validEnv()
	delete(single, EnvDatabaseURL)
	single[EnvDatabases] = "main=postgres://u@db/txfence"
	for name, e := range map[string]map[string]string{"one database": validEnv(), "one shard": single, "sharded": shardedEnv(),
		"no default": noDefault} {
		c, err := Load(env(e))
		require.NoError(t, err, name)
		lookup := c.ShardLookup()
		for _, a := range []string{signerA1, signerUS, "0x1234"} {
			s, ok := c.ShardFor(common.HexToAddress(a))
			ls, lok := lookup(common.HexToAddress(a))
			assert.Equal(t, []any{s, ok}, []any{ls, lok}, "%s: %s", name, a)
		}
	}
}
