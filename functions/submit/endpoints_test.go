package submit

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/functions/internal/stacktest"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/evm/rpcproxy"
	"github.com/txfence/txfence/shared/redact"
	"github.com/txfence/txfence/shared/txm"
)

// TestIssue48_Endpoints (acceptance 2): the chain has three endpoints
// through the fault proxy, in order of preference: one that falls behind,
// one healthy, one dead (every connection dropped); and a send-only
// endpoint with public fallback, a recorder in front of the chain. The
// pipeline runs (drain, receipts, finality, resubmit) while the preferred
// endpoint lags twelve blocks behind, more than the five allowed, for
// sixty blocks: a minute of a one-second chain, compressed to a block
// every 100ms, the head readings every 50ms instead of 2s and a dead
// endpoint's backoff at most 2s instead of 30s. Every transaction
// confirms; while the endpoint lags (from when the client knows it: the
// window opens once its head reading says so) it is asked for nothing but
// its head: no nonce, receipt, block, fee or broadcast; each broadcast
// reached the healthy endpoint and the send-only one; the dead one is
// passed over, tried again only now and then. The API and the logs show
// the endpoints by name, never the send-only URL's key. Once the lagging
// endpoint catches up it is read from again.
func TestIssue48_Endpoints(t *testing.T) {
	t.Parallel()
	const lagBlocks, behind, window = 5, 12, 60
	w := stacktest.NewWorld(t, 2, stacktest.Lively)
	lagging := rpcproxy.Start(t, w.Chain.URL)
	dead := rpcproxy.Start(t, w.Chain.URL)
	dead.FailAll(rpcproxy.Fault{Drop: true})
	recorder := rpcproxy.Start(t, w.Chain.URL)
	w.Cfg.Chains[0].RPCURLs = []string{lagging.URL, w.Proxy.URL, dead.URL}
	// A provider's key in the send-only URL's path (the proxy forwards any
	// path): it shows nowhere.
	const key = "SECRETKEY0123456789"
	w.Cfg.SendOnly = []config.SendOnly{{ChainID: stacktest.ChainID().Uint64(), Name: "recorder", URL: recorder.URL + "/v3/" + key,
		PublicFallback: true}}
	logs := &stacktest.LogBuffer{}
	w.LogTo = logs
	require.NoError(t, w.Cfg.Validate())
	// The chain's profile says how far behind an endpoint may be, and its
	// block time how often heads are read.
	w.Cfg.ChainProfiles = map[uint64]config.ProfileSpec{stacktest.ChainID().Uint64(): {
		LagBlocks: ptrTo[uint64](lagBlocks), BlockTime: ptrTo(config.Duration(50 * time.Millisecond))}}
	w.EVM.DeadBackoffMax = 2 * time.Second // 30s compressed as the rest
	n := w.Node(t, "n")
	ctx := context.Background()

	run := func(count int) []string {
		var ids []string
		for _, k := range w.Keys {
			ids = append(ids, n.Allocate(t, k.Address, count)...)
		}
		stop := w.Run(t, []*stacktest.Node{n}, stacktest.RunOptions{})
		for _, id := range ids {
			w.WaitState(t, id, txm.StateConfirmed, 30*time.Second)
		}
		stop()
		return ids
	}
	run(2)
	assert.Positive(t, lagging.Count("eth_getTransactionCount")+lagging.Count("eth_getTransactionReceipt"),
		"while it follows the chain, the preferred endpoint is read from")

	w.Mine(2 * behind) // a chain tall enough to lag behind
	lagging.Lag(behind)
	stacktest.WaitFor(t, "the client to see the endpoint lagging", func() bool {
		_, _ = n.Client.Head(ctx) // a call reads the heads that are due
		return n.Client.EndpointHealth()[0].State == txm.EndpointLagging
	})
	for _, p := range []*rpcproxy.Proxy{lagging, w.Proxy, dead, recorder} {
		p.Reset()
	}
	start := w.Chain.Backend.Client()
	from, err := start.BlockNumber(ctx)
	require.NoError(t, err)
	var ids []string
	stop := w.Run(t, []*stacktest.Node{n}, stacktest.RunOptions{})
	for round := range 5 {
		for _, k := range w.Keys {
			ids = append(ids, n.Allocate(t, k.Address, 4)...)
		}
		stacktest.WaitFor(t, "a few blocks between rounds", func() bool {
			at, err := start.BlockNumber(ctx)
			return err == nil && at >= from+uint64(round+1)*4
		})
	}
	for _, id := range ids {
		w.WaitState(t, id, txm.StateConfirmed, 30*time.Second)
	}
	stacktest.WaitFor(t, "sixty blocks of lag", func() bool {
		at, err := start.BlockNumber(ctx)
		return err == nil && at >= from+window
	})
	stop()
	health := n.Client.EndpointHealth()
	require.Equal(t, txm.EndpointLagging, health[0].State, "the endpoint lagged the whole window")
	assert.Greater(t, health[0].Lag, uint64(lagBlocks), "more than the allowed lag (a block sealed between two head readings may make it 11 of 12)")

	asked := map[string]int{}
	for _, c := range lagging.Calls() {
		asked[c.Method]++
	}
	t.Logf("the lagging endpoint was asked %v; the healthy one %d calls", asked, len(w.Proxy.Calls()))
	for method := range asked {
		assert.Contains(t, []string{"eth_blockNumber", "eth_chainId"}, method, "the lagging endpoint is only asked for its head")
	}
	for _, m := range []string{"eth_getTransactionCount", "eth_getTransactionReceipt", "eth_getBlockReceipts", "eth_getBlockByNumber",
		"eth_sendRawTransaction"} {
		assert.Zero(t, asked[m], m)
		assert.Positive(t, w.Proxy.Count(m)+boolInt(m == "eth_getBlockReceipts"), "the healthy endpoint is asked %s", m)
	}
	assert.Positive(t, asked["eth_blockNumber"], "its head is followed")

	sentTo := func(p *rpcproxy.Proxy) map[common.Hash]bool {
		out := map[common.Hash]bool{}
		for _, c := range p.Calls() {
			if c.Method == "eth_sendRawTransaction" {
				h, err := rpcproxy.TxHashOf(c.Params)
				require.NoError(t, err)
				out[h] = true
			}
		}
		return out
	}
	healthy, relay := sentTo(w.Proxy), sentTo(recorder)
	rows, err := w.DB.Pool.Query(ctx, `SELECT a.tx_hash FROM tx_attempt a WHERE a.tx_id = ANY($1::uuid[])`, ids)
	require.NoError(t, err)
	var hashes int
	for rows.Next() {
		var h string
		require.NoError(t, rows.Scan(&h))
		hashes++
		assert.True(t, healthy[common.HexToHash(h)], "attempt %s reached the healthy endpoint", h)
		assert.True(t, relay[common.HexToHash(h)], "attempt %s reached the send-only endpoint", h)
	}
	require.NoError(t, rows.Err())
	require.GreaterOrEqual(t, hashes, len(ids))
	for _, c := range recorder.Calls() {
		assert.Equal(t, "eth_sendRawTransaction", c.Method, "the send-only endpoint is never read from")
	}

	assert.Equal(t, txm.EndpointDead, health[2].State)
	assert.Equal(t, "connection", health[2].LastError)
	assert.Less(t, len(dead.Calls()), 20, "the dead endpoint is tried again only after its backoff, which doubles")
	assert.Positive(t, len(dead.Calls()), "the dead endpoint is tried again")
	assert.Equal(t, "endpoint 0 ("+redact.URL(lagging.URL)+")", health[0].Name, "an endpoint is named by scheme and host only")
	assert.Equal(t, "recorder", health[3].Name)

	// The API shows the same, by name.
	resp, err := http.Get(n.APIURL + "/v1/chains")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	var page struct {
		Items []struct {
			ChainID   uint64 `json:"chainId"`
			Endpoints []struct {
				Name      string            `json:"name"`
				SendOnly  bool              `json:"sendOnly"`
				State     txm.EndpointState `json:"state"`
				Lag       uint64            `json:"lag"`
				LastError string            `json:"lastError"`
			} `json:"endpoints"`
		} `json:"items"`
	}
	require.NoError(t, json.Unmarshal(body, &page))
	require.Len(t, page.Items, 1)
	eps := page.Items[0].Endpoints
	require.Len(t, eps, 4)
	assert.Equal(t, []txm.EndpointState{txm.EndpointLagging, txm.EndpointHealthy, txm.EndpointDead, txm.EndpointHealthy},
		[]txm.EndpointState{eps[0].State, eps[1].State, eps[2].State, eps[3].State})
	assert.Greater(t, eps[0].Lag, uint64(lagBlocks))
	assert.Equal(t, "connection", eps[2].LastError)
	assert.True(t, eps[3].SendOnly)
	assert.NotContains(t, string(body), key)
	assert.NotContains(t, logs.String(), key)
	assert.Contains(t, logs.String(), "endpoint lagging: not read from until it catches up")

	lagging.Lag(0)
	stacktest.WaitFor(t, "the lagging endpoint to catch up", func() bool {
		_, _ = n.Client.Head(ctx)
		return n.Client.EndpointHealth()[0].State == txm.EndpointHealthy
	})
	lagging.Reset()
	run(2)
	assert.Positive(t, lagging.Count("eth_getTransactionCount")+lagging.Count("eth_getTransactionReceipt"),
		"caught up, the preferred endpoint is read from again")
	assert.Positive(t, lagging.Count("eth_sendRawTransaction"), "and broadcast to")
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
