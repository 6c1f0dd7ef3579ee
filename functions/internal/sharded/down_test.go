package sharded

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/functions/internal/stacktest"
	"github.com/txfence/txfence/shared/txm"
)

// TestIssue12_ShardDown: while shard b's server is unreachable, its
// signers get 503 with Retry-After (creates, reads, status) and their
// prompts are retried, while shard a's signers keep working, on a process
// that was running and on one started during the outage. When b is back,
// both serve its signers again and its nonces stay contiguous.
func TestIssue12_ShardDown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a second PostgreSQL server")
	}
	w := newWorld(t, 4)
	inA, inB := w.Keys[0].Address, w.Keys[1].Address
	require.Equal(t, "a", w.shard[inA])
	require.Equal(t, "b", w.shard[inB])
	_, url := w.apiServer(t, "api0")
	wk := w.worker(t, "worker")

	createOK := func(url string, signer common.Address, rid string) txView {
		t.Helper()
		var v txView
		resp := call(t, http.MethodPost, url+"/v1/transactions", create(signer, rid, 1), &v)
		require.Contains(t, []int{http.StatusAccepted, http.StatusOK}, resp.StatusCode, "create %s for %s", rid, signer.Hex())
		return v
	}
	unavailable := func(resp *http.Response, what string) {
		t.Helper()
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, what)
		s, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		require.NoError(t, err, "%s: Retry-After", what)
		assert.Positive(t, s)
		assert.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	}
	txA := createOK(url, inA, "before-a")
	txB := createOK(url, inB, "before-b")

	w.proxyB.Down()

	start := time.Now()
	unavailable(call(t, http.MethodPost, url+"/v1/transactions", create(inB, "during-b", 1), nil), "create on the down shard")
	t.Logf("a create on the down shard was refused in %s", time.Since(start).Round(time.Millisecond))
	createOK(url, inA, "during-a")
	resp := call(t, http.MethodGet, url+"/v1/transactions/"+txA.ID, nil, nil)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "a transaction of shard a, though b cannot say it lacks it")
	unavailable(call(t, http.MethodGet, url+"/v1/transactions/"+txB.ID, nil, nil), "a transaction only b has")
	resp = call(t, http.MethodGet, url+"/v1/transactions?signer="+inA.Hex(), nil, nil)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "a list of shard a's signer")
	unavailable(call(t, http.MethodGet, url+"/v1/transactions", nil, nil), "a list over every shard")
	resp = call(t, http.MethodGet, url+"/v1/signers/"+inA.Hex(), nil, nil)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	unavailable(call(t, http.MethodGet, url+"/v1/signers/"+inB.Hex(), nil, nil), "the status of b's signer")
	var page feedPage
	resp = call(t, http.MethodGet, url+"/v1/completions", nil, &page)
	require.Equal(t, http.StatusOK, resp.StatusCode, "the feed serves the shards it can read")
	assert.Equal(t, []string{"b"}, page.UnavailableShards)
	assert.Equal(t, "a:0,b:0", page.Next)

	require.NoError(t, wk.submit.Handle(ctx, stacktest.Prompt(t, inA)), "shard a's prompts are worked")
	require.Error(t, wk.submit.Handle(ctx, stacktest.Prompt(t, inB)), "shard b's prompts are nacked, to be redelivered")
	require.Equal(t, http.StatusInternalServerError, wk.sweep(), "the sweep reports the shard it could not sweep")

	// A process that starts during the outage serves shard a.
	_, cold := w.apiServer(t, "api-cold")
	createOK(cold, inA, "cold-a")
	unavailable(call(t, http.MethodPost, cold+"/v1/transactions", create(inB, "cold-b", 1), nil), "create on the down shard, cold")

	w.proxyB.Up()
	for rid, u := range map[string]string{"after-b": url, "after-cold-b": cold} { // the cold one claims b now
		stacktest.WaitFor(t, "shard b serves again", func() bool {
			resp := call(t, http.MethodPost, u+"/v1/transactions", create(inB, rid, 1), nil)
			return resp.StatusCode == http.StatusAccepted || resp.StatusCode == http.StatusOK
		})
	}
	require.NoError(t, wk.submit.Handle(ctx, stacktest.Prompt(t, inB)))

	for signer, want := range map[common.Address][]int64{inA: {0, 1, 2}, inB: {0, 1, 2}} {
		rows, err := w.pools[w.shard[signer]].Query(ctx, `SELECT nonce FROM managed_tx WHERE signer = $1 ORDER BY nonce`, txm.CanonicalAddress(signer))
		require.NoError(t, err)
		var got []int64
		for rows.Next() {
			var n int64
			require.NoError(t, rows.Scan(&n))
			got = append(got, n)
		}
		require.NoError(t, rows.Err())
		assert.Equal(t, want, got, "nonces of %s", signer.Hex())
	}
}
