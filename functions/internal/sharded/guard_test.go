package sharded

import (
	"net/http"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/config"
)

// TestIssue12_MapGuard: the signer → shard map cannot silently put a
// signer's nonces in two databases. Swapped URLs, a map that moves a
// signer, a changed map under the same version and a stale revision's
// older map are each refused (503 for every signer, nothing written),
// while a new version that only renumbers is accepted.
func TestIssue12_MapGuard(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a second PostgreSQL server")
	}
	w := newWorld(t, 2)
	inA, inB := w.Keys[0].Address, w.Keys[1].Address
	_, url := w.apiServer(t, "api0")
	status := func(url string, signer common.Address, rid string) int {
		return call(t, http.MethodPost, url+"/v1/transactions", create(signer, rid, 1), nil).StatusCode
	}
	require.Equal(t, http.StatusAccepted, status(url, inA, "a0"))
	require.Equal(t, http.StatusAccepted, status(url, inB, "b0"))
	refused := func(name string, cfg config.Config) {
		t.Helper()
		_, u := w.apiServerWith(t, name, cfg)
		for _, s := range []common.Address{inA, inB} {
			require.Equal(t, http.StatusServiceUnavailable, status(u, s, name), "%s: %s", name, s.Hex())
		}
	}
	withMap := func(version int64, b string) config.Config {
		cfg := w.Cfg
		cfg.ShardMap = config.ShardMap{Version: version, Default: "a", Signers: map[common.Address]string{inB: b}}
		return cfg
	}

	swapped := w.Cfg
	swapped.Shards = []config.Shard{{Name: "a", URL: w.Cfg.Shards[1].URL}, {Name: "b", URL: w.Cfg.Shards[0].URL}}
	refused("swapped", swapped)
	refused("moved", withMap(2, "a"))
	refused("changed", withMap(1, "a"))

	_, u2 := w.apiServerWith(t, "renumbered", withMap(2, "b"))
	require.Equal(t, http.StatusAccepted, status(u2, inA, "a1"), "a new version that moves nobody")
	require.Equal(t, http.StatusAccepted, status(u2, inB, "b1"))
	refused("stale", w.Cfg) // v1, now older than the v2 in use

	for name, pool := range w.pools {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM managed_tx`).Scan(&n))
		require.Equal(t, 2, n, "shard %s: only the accepted creates wrote", name)
	}
}
