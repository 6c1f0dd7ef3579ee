package resubmit

import (
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/params"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/functions/internal/stacktest"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/evm/rpcproxy"
	"github.com/txfence/txfence/shared/testsupport"
	"github.com/txfence/txfence/shared/txm"
)

// decisions reads bump_decision_total of decision from the node.
func decisions(n *stacktest.Node, decision string) int64 {
	return n.Metrics.Count("bump_decision_total", "decision", decision)
}

// pastBumpAfter waits until an attempt broadcast now is due for a bump.
func pastBumpAfter(w *stacktest.World) {
	// sleep: the attempt must grow older than BumpAfter for the sweep to consider a bump
	time.Sleep(w.Cfg.BumpAfter + 50*time.Millisecond)
}

// lowTip is a priority fee below what the simulated miner includes
// (evmtest.MinerTip): the node's pool holds such a transaction, no block
// ever includes it.
var lowTip = big.NewInt(1000)

// TestIssue48_InclusionAwareBump (Acceptance 3): before the resubmit sweep
// replaces the next nonce's attempt at a higher fee, it asks the node. An
// attempt the node never got (the broadcast was lost on its way) is sent
// again as it is: no new attempt, and it confirms. One in the pool but
// paying less than the recent blocks included is bumped and confirms. One
// in the pool and priced like what is included waits, and is bumped after
// all once it has waited pricedOKPatience × BumpAfter.
func TestIssue48_InclusionAwareBump(t *testing.T) {
	t.Parallel()

	t.Run("dropped from the pool: sent again, not bumped", func(t *testing.T) {
		t.Parallel()
		w := stacktest.NewWorld(t, 1, stacktest.Lively)
		n := w.Node(t, "n")
		signer := w.Keys[0].Address
		id := n.CreateTx(t, stacktest.Transfer(signer, big.NewInt(1))).ID
		w.Proxy.Fail("eth_sendRawTransaction", 1, rpcproxy.Fault{Swallow: true}) // it never reaches the node's pool
		_, err := n.Drain.Execute(ctx, evmtest.ChainID, signer)
		require.NoError(t, err)
		require.Equal(t, map[string]int{"TRACKING": 1}, w.States(t))
		hashes := w.AttemptHashes(t)
		w.Mine(3) // blocks go by without it

		pastBumpAfter(w)
		w.Proxy.Reset()
		st, err := n.Resubmit.Pass(ctx)
		require.NoError(t, err)
		assert.Zero(t, st.Replaced, "not bumped")
		assert.Equal(t, 1, st.Rebroadcast, "sent again")
		assert.Equal(t, hashes, w.AttemptHashes(t), "the same bytes: no new attempt")
		assert.Equal(t, int64(1), decisions(n, "rebroadcast_not_in_pool"))
		var sent []string
		for _, c := range w.Proxy.Calls() {
			if c.Method == "eth_sendRawTransaction" {
				h, err := rpcproxy.TxHashOf(c.Params)
				require.NoError(t, err)
				sent = append(sent, h.Hex())
			}
		}
		assert.Equal(t, []string{common.HexToHash(hashes[id]).Hex()}, sent)

		stop := w.Run(t, []*stacktest.Node{n}, stacktest.RunOptions{})
		defer stop()
		w.WaitState(t, id, txm.StateConfirmed, 30*time.Second)
		as := attempts(t, w, id)
		require.Len(t, as, 1, "confirmed with its one attempt")
		assert.Equal(t, "mined", as[0].Outcome)
		assert.GreaterOrEqual(t, as[0].BroadcastCount, 2)
	})

	t.Run("below the recent inclusion price: bumped", func(t *testing.T) {
		t.Parallel()
		w := stacktest.NewWorld(t, 2, stacktest.Lively)
		n := w.Node(t, "n")
		signer, other := w.Keys[0].Address, w.Keys[1]
		// Other users' transactions at evmtest.SpamTip fill the recent
		// blocks: that is the price of inclusion.
		for range 4 {
			require.NoError(t, w.Chain.Burn(ctx, other.Key, 2, 100_000))
			w.Chain.Commit()
		}
		r := stacktest.Transfer(signer, big.NewInt(1))
		r.MaxFeePerGas, r.MaxPriorityFeePerGas = big.NewInt(100*params.GWei), lowTip // the max fee is plenty, the tip is not
		id := n.CreateTx(t, r).ID
		_, err := n.Drain.Execute(ctx, evmtest.ChainID, signer)
		require.NoError(t, err)
		has, err := n.Client.Inclusion(ctx, common.HexToHash(w.AttemptHashes(t)[id]))
		require.NoError(t, err)
		require.Equal(t, txm.PoolPending, has.Pool, "in the node's pool")

		pastBumpAfter(w)
		st, err := n.Resubmit.Pass(ctx)
		require.NoError(t, err)
		assert.Equal(t, 1, st.Replaced, "bumped")
		assert.Equal(t, int64(1), decisions(n, "bumped_underpriced"))
		require.Len(t, attempts(t, w, id), 2, "a new attempt with a higher fee")

		stop := w.Run(t, []*stacktest.Node{n}, stacktest.RunOptions{})
		defer stop()
		w.WaitState(t, id, txm.StateConfirmed, 30*time.Second)
		as := attempts(t, w, id)
		assertReplacements(t, as, w.Cfg.BumpPercent, w.Cfg.FeeCaps(evmtest.ChainID))
		assert.GreaterOrEqual(t, as[1].Tip.Cmp(evmtest.SpamTip), 0, "the replacement pays what the blocks include")
	})

	t.Run("priced like what is included: waits, then bumped after all", func(t *testing.T) {
		t.Parallel()
		w := stacktest.NewWorld(t, 1, stacktest.Lively, func(c *config.Config) { c.BumpAfter = 500 * time.Millisecond })
		n := w.Node(t, "n")
		signer := w.Keys[0].Address
		id := n.CreateTx(t, stacktest.Transfer(signer, big.NewInt(1))).ID
		_, err := n.Drain.Execute(ctx, evmtest.ChainID, signer) // no block is sealed: it waits in the pool
		require.NoError(t, err)
		start := time.Now()

		pastBumpAfter(w)
		st, err := n.Resubmit.Pass(ctx)
		require.NoError(t, err)
		assert.Zero(t, st.Replaced, "the recent blocks would have included it: not bumped")
		assert.Len(t, attempts(t, w, id), 1)
		assert.Equal(t, int64(1), decisions(n, "waited_priced_ok"))

		testsupport.Eventually(t, 20*time.Second, "a bump after the longer wait", func() bool {
			st, err := n.Resubmit.Pass(ctx)
			require.NoError(t, err)
			return st.Replaced == 1
		})
		assert.GreaterOrEqual(t, time.Since(start), 4*w.Cfg.BumpAfter, "not before four times BumpAfter")
		assert.Equal(t, int64(1), decisions(n, "bumped_after_wait"))
		w.MineAll(t, signer, 1)
	})
}

// TestIssue48_NoMempoolRetries: on a chain without a public pool (the
// arbitrum kind), a broadcast answered "nonce too high" is sent again at
// once, so that the transactions go out in one drain with no failure
// recorded; and a transaction that goes unmined is sent again, never
// bumped, even when the node never had it; one that keeps vanishing goes
// STUCK too_many_rebroadcasts and is still only sent again.
func TestIssue48_NoMempoolRetries(t *testing.T) {
	t.Parallel()
	noMempool := func(t *testing.T, opts ...stacktest.Option) (*stacktest.World, *stacktest.Node) {
		arbitrum := func(c *config.Config) {
			c.ChainProfiles = map[uint64]config.ProfileSpec{evmtest.ChainID: {Kind: config.KindArbitrum}}
		}
		w := stacktest.NewWorldWithAlloc(t, 1, evmtest.InstallPredeploys, append([]stacktest.Option{stacktest.Lively, arbitrum}, opts...)...)
		require.False(t, w.Cfg.Profile(evmtest.ChainID).PublicMempool)
		return w, w.Node(t, "n")
	}

	t.Run("nonce too high: the same bytes again at once", func(t *testing.T) {
		t.Parallel()
		w, n := noMempool(t)
		signer := w.Keys[0].Address
		ids := n.Allocate(t, signer, 3)
		// The sequencer has not seen the nonce before the first two yet.
		w.Proxy.Fail("eth_sendRawTransaction", 2, rpcproxy.Fault{RPCError: &rpcproxy.RPCError{Code: -32000, Message: "nonce too high"}})
		res, err := n.Drain.Execute(ctx, evmtest.ChainID, signer)
		require.NoError(t, err)
		assert.Equal(t, 3, res.Broadcast, "all three out in one drain")
		assert.Equal(t, map[string]int{"TRACKING": 3}, w.States(t))
		var failures int
		require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT coalesce(sum(failures), 0) FROM managed_tx`).Scan(&failures))
		assert.Zero(t, failures, "no failure recorded, no backoff")
		assert.Equal(t, 5, w.Proxy.Count("eth_sendRawTransaction"), "the two refused ones sent again")
		w.MineAll(t, signer, 3)
		stop := w.Run(t, []*stacktest.Node{n}, stacktest.RunOptions{})
		defer stop()
		for _, id := range ids {
			w.WaitState(t, id, txm.StateConfirmed, 30*time.Second)
		}
	})

	t.Run("silence: sent again, never bumped", func(t *testing.T) {
		t.Parallel()
		w, n := noMempool(t)
		signer := w.Keys[0].Address
		id := n.CreateTx(t, stacktest.Transfer(signer, big.NewInt(1))).ID
		w.Proxy.Fail("eth_sendRawTransaction", 1, rpcproxy.Fault{Swallow: true})
		_, err := n.Drain.Execute(ctx, evmtest.ChainID, signer)
		require.NoError(t, err)
		hashes := w.AttemptHashes(t)

		// No block is sealed: past BumpAfter, and past the wait after
		// which a transaction on a chain with a public pool is bumped
		// whatever its price, it is only ever sent again.
		deadline := time.Now().Add(5 * w.Cfg.BumpAfter)
		var replaced, rebroadcast int
		for time.Now().Before(deadline) {
			pastBumpAfter(w)
			st, err := n.Resubmit.Pass(ctx)
			require.NoError(t, err)
			replaced += st.Replaced
			rebroadcast += st.Rebroadcast
		}
		assert.Zero(t, replaced, "never bumped")
		assert.Positive(t, rebroadcast)
		assert.Equal(t, hashes, w.AttemptHashes(t), "the same bytes")
		assert.Positive(t, decisions(n, "rebroadcast_no_mempool"))

		stop := w.Run(t, []*stacktest.Node{n}, stacktest.RunOptions{})
		defer stop()
		w.WaitState(t, id, txm.StateConfirmed, 30*time.Second)
		assert.Len(t, attempts(t, w, id), 1, "confirmed with its one attempt")
	})

	t.Run("keeps vanishing: STUCK, and still only sent again", func(t *testing.T) {
		t.Parallel()
		w, n := noMempool(t, func(c *config.Config) { c.MaxRebroadcasts = 2 })
		signer := w.Keys[0].Address
		id := n.CreateTx(t, stacktest.Transfer(signer, big.NewInt(1))).ID
		w.Proxy.Fail("eth_sendRawTransaction", -1, rpcproxy.Fault{Swallow: true}) // every broadcast is lost
		_, err := n.Drain.Execute(ctx, evmtest.ChainID, signer)
		require.NoError(t, err)
		testsupport.Eventually(t, 20*time.Second, "the transaction to go STUCK", func() bool {
			_, err := n.Resubmit.Pass(ctx)
			require.NoError(t, err)
			s, _ := w.TxState(t, id)
			return s == string(txm.StateStuck)
		})
		_, sub := w.TxState(t, id)
		assert.Equal(t, txm.SubStateTooManyRebroadcasts, sub)
		sends := w.Proxy.Count("eth_sendRawTransaction")
		testsupport.Eventually(t, 20*time.Second, "the stuck policy to send it again", func() bool {
			_, err := n.Resubmit.Pass(ctx)
			require.NoError(t, err)
			return w.Proxy.Count("eth_sendRawTransaction") > sends
		})
		assert.Len(t, attempts(t, w, id), 1, "no bump for silence, STUCK or not")

		w.Proxy.Heal()
		stop := w.Run(t, []*stacktest.Node{n}, stacktest.RunOptions{})
		defer stop()
		w.WaitState(t, id, txm.StateConfirmed, 30*time.Second)
		assert.Len(t, attempts(t, w, id), 1)
	})
}
