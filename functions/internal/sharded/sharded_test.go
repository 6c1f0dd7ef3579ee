package sharded

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/functions/internal/stacktest"
	"github.com/txfence/txfence/shared/txm"
)

// TestIssue12_TwoShards: 200 signers spread over two PostgreSQL servers,
// three API instances (each its own pools and owner ids) creating
// concurrently with replays and conflicts. Nonces are contiguous per
// signer, every row of both databases belongs to a signer of that shard,
// leases are fenced per shard, lookups by id and lists span the shards,
// and once everything is confirmed the feed delivers every outcome exactly
// once across shards under its per-shard cursor.
func TestIssue12_TwoShards(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a second PostgreSQL server")
	}
	const nsigners, perSigner = 200, 3
	w := newWorld(t, nsigners)
	var urls []string
	var procs = map[string]bool{}
	for i := 0; i < 3; i++ {
		p, u := w.apiServer(t, fmt.Sprintf("api%d", i))
		urls = append(urls, u)
		procs[p.Config.InstanceID] = true
	}
	require.Len(t, procs, 3, "three instances, three owner ids")

	// Every signer: three requests, a replay of the first and a conflict
	// (same request id, another value) on the second, in random order
	// through random instances.
	type job struct {
		signer common.Address
		rid    string
		value  int
		kind   string // "new", "replay", "conflict"
	}
	var jobs []job
	for _, k := range w.Keys {
		for r := 0; r < perSigner; r++ {
			jobs = append(jobs, job{k.Address, fmt.Sprintf("req-%d", r), r + 1, "new"})
		}
		jobs = append(jobs, job{k.Address, "req-0", 1, "replay"}, job{k.Address, "req-1", 99, "conflict"})
	}
	rand.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
	type key struct {
		signer common.Address
		rid    string
	}
	var mu sync.Mutex
	statuses := map[key][]int{}
	ids := map[key][]string{}
	work := make(chan job)
	var wg sync.WaitGroup
	for c := 0; c < 48; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range work {
				var v txView
				resp := call(t, http.MethodPost, urls[rand.IntN(len(urls))]+"/v1/transactions", create(j.signer, j.rid, j.value), &v)
				mu.Lock()
				k := key{j.signer, j.rid}
				statuses[k] = append(statuses[k], resp.StatusCode)
				if resp.StatusCode < 300 {
					ids[k] = append(ids[k], v.ID)
				}
				mu.Unlock()
			}
		}()
	}
	for _, j := range jobs {
		work <- j
	}
	close(work)
	wg.Wait()

	counts := map[int]int{}
	for k, ss := range statuses {
		sort.Ints(ss)
		switch k.rid {
		case "req-0":
			require.Equal(t, []int{200, 202}, ss, "a first create and its replay: %v", k)
		case "req-1":
			require.Equal(t, []int{202, 409}, ss, "a create and a conflict: %v", k)
		default:
			require.Equal(t, []int{202}, ss, "%v", k)
		}
		for _, s := range ss {
			counts[s]++
		}
		for _, id := range ids[k] {
			require.Equal(t, ids[k][0], id, "a replay answers the original")
		}
	}
	require.Equal(t, map[int]int{202: nsigners * perSigner, 200: nsigners, 409: nsigners}, counts)

	// Every row of both databases: in its signer's shard, nonces
	// contiguous from 0 per signer, cursors at 3.
	created := map[string]string{} // tx id → shard
	for name, pool := range w.pools {
		nonces := map[common.Address][]uint64{}
		rows, err := pool.Query(ctx, `SELECT id::text, signer::text, nonce FROM managed_tx`)
		require.NoError(t, err)
		for rows.Next() {
			var id, signer string
			var nonce int64
			require.NoError(t, rows.Scan(&id, &signer, &nonce))
			a := common.HexToAddress(signer)
			require.Equal(t, name, w.shard[a], "tx %s of %s is in shard %s", id, signer, name)
			nonces[a] = append(nonces[a], uint64(nonce))
			created[id] = name
		}
		require.NoError(t, rows.Err())
		require.Len(t, nonces, nsigners/2, "half the signers in shard %s", name)
		for a, ns := range nonces {
			sort.Slice(ns, func(i, j int) bool { return ns[i] < ns[j] })
			require.Equal(t, []uint64{0, 1, 2}, ns, "nonces of %s", a.Hex())
		}
		for _, table := range []string{"signer_nonce_cursor", "signer_lease", "tx_completion", "completion_pending", "principal_usage"} {
			rows, err := pool.Query(ctx, `SELECT DISTINCT signer::text FROM `+table)
			require.NoError(t, err)
			for rows.Next() {
				var signer string
				require.NoError(t, rows.Scan(&signer))
				require.Equal(t, name, w.shard[common.HexToAddress(signer)], "%s row of %s in shard %s", table, signer, name)
			}
			require.NoError(t, rows.Err())
		}
		var badCursors int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM signer_nonce_cursor WHERE next_nonce <> 3`).Scan(&badCursors))
		require.Zero(t, badCursors)
		var orphans int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM tx_history h WHERE NOT EXISTS (SELECT 1 FROM managed_tx t WHERE t.id = h.tx_id)`).Scan(&orphans))
		require.Zero(t, orphans)
	}
	require.Len(t, created, nsigners*perSigner)

	t.Run("leases are fenced per shard", func(t *testing.T) {
		p1, p2 := w.process(t, "lease1"), w.process(t, "lease2")
		for i, name := range []string{"a", "b"} {
			signer := w.Keys[i].Address // key 0 is in a, key 1 in b
			require.Equal(t, name, w.shard[signer])
			k := txm.LeaseKey{ChainID: w.Cfg.Chains[0].ID, Signer: signer, Scope: txm.ScopeChain}
			require.NoError(t, p1.Router.Ready(ctx, name))
			require.NoError(t, p2.Router.Ready(ctx, name))
			l1, _, err := p1.Shard(name).Store.Leases().Acquire(ctx, k, "lease1")
			require.NoError(t, err)
			_, _, err = p2.Shard(name).Store.Leases().Acquire(ctx, k, "lease2")
			require.ErrorIs(t, err, txm.ErrLeaseHeld)
			_, err = w.pools[name].Exec(ctx, `UPDATE signer_lease SET expires_at = now() - interval '1 minute' WHERE signer = $1 AND scope = 'chain'`,
				txm.CanonicalAddress(signer))
			require.NoError(t, err)
			l2, res, err := p2.Shard(name).Store.Leases().Acquire(ctx, k, "lease2")
			require.NoError(t, err)
			require.Equal(t, txm.AcquireTakenOver, res)
			require.Equal(t, l1.Token+1, l2.Token)
			_, err = p1.Shard(name).Store.Leases().Renew(ctx, l1)
			require.ErrorIs(t, err, txm.ErrFenced, "the old holder is fenced in shard %s", name)
			require.NoError(t, p2.Shard(name).Store.Leases().Release(ctx, l2))
			other := map[string]string{"a": "b", "b": "a"}[name]
			var n int
			require.NoError(t, w.pools[other].QueryRow(ctx, `SELECT count(*) FROM signer_lease WHERE signer = $1`, txm.CanonicalAddress(signer)).Scan(&n))
			require.Zero(t, n, "no lease of %s in shard %s", signer.Hex(), other)
		}
	})

	t.Run("reads span the shards", func(t *testing.T) {
		for id, name := range created {
			if id[len(id)-1] != '0' {
				continue // a sample
			}
			var v txView
			resp := call(t, http.MethodGet, urls[2]+"/v1/transactions/"+id, nil, &v)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.Equal(t, name, w.shard[common.HexToAddress(v.From)])
		}
		resp := call(t, http.MethodGet, urls[1]+"/v1/transactions/0190aaaa-0000-7000-8000-000000000000", nil, nil)
		require.Equal(t, http.StatusNotFound, resp.StatusCode)
		var listed []string
		cursor := ""
		for {
			var page struct {
				Items      []txView `json:"items"`
				NextCursor string   `json:"nextCursor"`
			}
			resp := call(t, http.MethodGet, urls[1]+"/v1/transactions?limit=97&cursor="+cursor, nil, &page)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			for _, v := range page.Items {
				listed = append(listed, v.ID)
			}
			if page.NextCursor == "" {
				break
			}
			cursor = page.NextCursor
		}
		require.Len(t, listed, len(created), "every transaction listed once")
		require.True(t, sort.StringsAreSorted(listed), "in id order across shards")
	})

	// Drive everything to CONFIRMED with a worker process: Submit and
	// Receipt prompts per signer, finality sweeps. A long poll on the feed
	// waits meanwhile, asked again while it answers empty after its whole
	// wait with no outcome written before its end (on a loaded machine the
	// first outcome may come later than one wait): an empty answer that
	// came early, or after outcomes were written, is the failure.
	wk := w.worker(t, "worker")
	polled := make(chan feedPage, 1)
	const wait = 25 * time.Second
	written := func(before time.Time) int {
		n := 0
		for _, pool := range w.pools {
			var c int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM tx_completion WHERE created_at < $1 AND NOT lifecycle`, before).Scan(&c); err != nil {
				return -1
			}
			n += c
		}
		return n
	}
	go func() {
		for {
			var p feedPage
			asked := time.Now()
			call(t, http.MethodGet, urls[1]+"/v1/completions?wait=25s&limit=1000", nil, &p)
			answered := time.Now()
			if len(p.Items) > 0 || answered.Sub(asked) < wait || written(answered.Add(-2*time.Second)) != 0 {
				polled <- p
				return
			}
		}
	}()
	for _, k := range w.Keys {
		require.NoError(t, wk.submit.Handle(ctx, stacktest.Prompt(t, k.Address)), "submit %s", k.Address.Hex())
	}
	for _, k := range w.Keys {
		w.MineAll(t, k.Address, perSigner)
	}
	w.Mine(int(w.Cfg.Confirmations) + 1)
	for _, k := range w.Keys {
		require.NoError(t, wk.receipt.Handle(ctx, stacktest.Prompt(t, k.Address)), "receipts %s", k.Address.Hex())
	}
	stacktest.WaitFor(t, "every transaction confirmed", func() bool {
		require.Equal(t, http.StatusOK, wk.sweep())
		n := 0
		for _, pool := range w.pools {
			var c int
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM managed_tx WHERE state = 'CONFIRMED'`).Scan(&c))
			n += c
		}
		return n == len(created)
	})

	select {
	case p := <-polled:
		require.NotEmpty(t, p.Items, "the long poll woke with outcomes")
		for _, it := range p.Items {
			require.Equal(t, created[it.TxID], it.Shard)
		}
	case <-time.After(wait + 5*time.Second):
		t.Fatal("the long poll did not return")
	}

	// The feed, page by page through every instance in turn: each outcome
	// exactly once, named by (shard, seq), in seq order within a shard.
	seen := map[string]bool{}
	last := map[string]int64{}
	cursor := ""
	for page := 0; ; page++ {
		var p feedPage
		resp := call(t, http.MethodGet, fmt.Sprintf("%s/v1/completions?limit=97&after=%s", urls[page%3], cursor), nil, &p)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Empty(t, p.UnavailableShards)
		for _, it := range p.Items {
			require.False(t, seen[it.TxID], "outcome of %s delivered twice", it.TxID)
			seen[it.TxID] = true
			require.Equal(t, created[it.TxID], it.Shard, "the item names its transaction's shard")
			require.Equal(t, it.Shard, w.shard[common.HexToAddress(it.From)])
			require.Greater(t, it.Seq, last[it.Shard], "seq order within shard %s", it.Shard)
			last[it.Shard] = it.Seq
			require.Equal(t, "CONFIRMED", it.State)
		}
		require.Equal(t, fmt.Sprintf("a:%d,b:%d", last["a"], last["b"]), p.Next)
		cursor = p.Next
		if len(p.Items) == 0 {
			break
		}
	}
	require.Len(t, seen, len(created), "every outcome delivered")

	// A bare number is the home shard's seq (a consumer's cursor from
	// before the deployment had shards): every other shard from its start.
	var fromHome feedPage
	resp := call(t, http.MethodGet, fmt.Sprintf("%s/v1/completions?after=%d&limit=1000", urls[0], last["a"]), nil, &fromHome)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NotEmpty(t, fromHome.Items)
	for _, it := range fromHome.Items {
		require.Equal(t, "b", it.Shard, "shard a's outcomes are behind the cursor")
	}
	assert.Equal(t, fmt.Sprintf("a:%d,b:%d", last["a"], last["b"]), fromHome.Next)
	resp = call(t, http.MethodGet, urls[0]+"/v1/completions?after=c:1", nil, nil)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "an unknown shard")
}
