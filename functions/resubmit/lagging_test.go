package resubmit

import (
	"encoding/json"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/functions/internal/stacktest"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/evm/rpcproxy"
	"github.com/txfence/txfence/shared/testsupport"
	"github.com/txfence/txfence/shared/txm"
)

// TestIssue44_LaggingEndpoint: the chain has two endpoints, the second six
// blocks behind, and both answer 502 now and then, so that calls fail over
// between them in the middle of passes. Two instances send several
// thousand transactions of several signers, one of whose nonces another
// program takes first. Every transaction ends, and each is checked
// against the chain: none whose attempt is mined on the canonical chain
// ends FAILED_FINAL, and the one whose nonce was taken ends
// nonce_consumed_externally.
func TestIssue44_LaggingEndpoint(t *testing.T) {
	t.Parallel()
	const signers, perSigner = 4, 600
	w := stacktest.NewWorld(t, signers, func(c *config.Config) {
		c.Confirmations = 3
		c.StaleReceiptTimeout = 100 * time.Millisecond
		c.FinalityInterval = 50 * time.Millisecond
		c.ResubmitInterval = 300 * time.Millisecond
		c.BumpAfter = 2 * time.Second
		c.StuckAfter = time.Hour
		c.RetryBackoffMin, c.RetryBackoffMax = 50*time.Millisecond, 300*time.Millisecond
	}).WithLaggingEndpoint(t, 6)
	a, b := w.Node(t, "a"), w.Node(t, "b")

	// Another program takes the first nonce of the first signer.
	key := w.Keys[0]
	taken := a.CreateTx(t, &txm.Request{ChainID: stacktest.ChainID().Uint64(), From: key.Address, To: &stacktest.Dead, Value: big.NewInt(1), GasLimit: 21000})
	_, err := w.Chain.SendAt(ctx, key.Key, taken.Nonce, stacktest.Dead, big.NewInt(42))
	require.NoError(t, err)
	w.Chain.Commit()

	// Calls fail over between the endpoints mid-pass: the current one
	// answers 502 to half of the receipt look-ups, the lagging one to half
	// of the nonce and head reads, so that one pass reads some from each.
	flaky := func(p *rpcproxy.Proxy, percent int, methods ...string) {
		for _, m := range methods {
			p.Before(m, func(json.RawMessage) *rpcproxy.Fault {
				if rand.IntN(100) < percent {
					return &rpcproxy.Fault{HTTPStatus: 502}
				}
				return nil
			})
		}
	}
	flaky(w.Proxy, 90, "eth_getTransactionReceipt", "eth_getBlockReceipts")
	flaky(w.Lagging, 50, "eth_getTransactionCount", "eth_blockNumber", "eth_getBlockByNumber")
	stop := w.Run(t, []*stacktest.Node{a, b}, stacktest.RunOptions{Tick: 250 * time.Millisecond})
	defer stop()
	// The transactions come a few at a time while blocks are made, as a
	// service's do, so that some are always just mined.
	var ids []string
	for round := range perSigner / 10 {
		for i, k := range w.Keys {
			n := []*stacktest.Node{a, b}[(round+i)%2]
			ids = append(ids, n.Allocate(t, k.Address, 10)...)
		}
		// sleep: the transactions come a few at a time while blocks are made; the pacing is the load under test
		time.Sleep(30 * time.Millisecond)
	}

	all := append([]string{taken.ID}, ids...)
	testsupport.WithinEvery(4*time.Minute, 200*time.Millisecond, func() bool {
		st := w.States(t)
		return st[string(txm.StateConfirmed)]+st[string(txm.StateFailedFinal)] == len(all)
	})
	stop()
	st := w.States(t)
	require.Equal(t, len(all), st[string(txm.StateConfirmed)]+st[string(txm.StateFailedFinal)], "every transaction ended: %v", st)

	state, sub := w.TxState(t, taken.ID)
	assert.Equal(t, string(txm.StateFailedFinal), state)
	assert.Equal(t, txm.SubStateNonceConsumedExternally, sub)
	checkRowsAgainstChain(t, w)
}

// checkRowsAgainstChain reads every transaction and its attempts and asks
// the chain itself (not through the proxies) for each attempt's receipt: no
// FAILED_FINAL transaction has an attempt that carries its payment (an
// original or a replacement) mined successfully, and every CONFIRMED one
// has exactly one attempt mined.
func checkRowsAgainstChain(t *testing.T, w *stacktest.World) {
	t.Helper()
	rows, err := w.DB.Pool.Query(ctx, `
SELECT t.id::text, t.state, coalesce(t.sub_state, ''), array_agg(a.tx_hash ORDER BY a.attempt_no),
       array_agg(a.kind ORDER BY a.attempt_no)
FROM managed_tx t JOIN tx_attempt a ON a.tx_id = t.id
GROUP BY t.id`)
	require.NoError(t, err)
	type row struct {
		id, state, sub string
		hashes, kinds  []string
	}
	var all []row
	for rows.Next() {
		var r row
		require.NoError(t, rows.Scan(&r.id, &r.state, &r.sub, &r.hashes, &r.kinds))
		all = append(all, r)
	}
	require.NoError(t, rows.Err())
	client := w.Chain.Backend.Client()
	failedButMined := 0
	for _, r := range all {
		mined := 0
		for i, h := range r.hashes {
			rc, err := client.TransactionReceipt(ctx, common.HexToHash(h))
			if err != nil {
				continue // not mined
			}
			mined++
			payment := r.kinds[i] == string(txm.AttemptOriginal) || r.kinds[i] == string(txm.AttemptReplace)
			if r.state == string(txm.StateFailedFinal) && payment && rc.Status == 1 {
				failedButMined++
				t.Errorf("tx %s is FAILED_FINAL %s, but its attempt %s is mined", r.id, r.sub, h)
			}
		}
		if r.state == string(txm.StateConfirmed) {
			assert.Equal(t, 1, mined, "tx %s is CONFIRMED with one attempt mined", r.id)
		}
	}
	t.Logf("%d transactions checked against the chain; %d failed but mined", len(all), failedButMined)
}

// TestIssue44_ContradictedOutcome: an outcome FAILED_FINAL
// nonce_consumed_externally whose attempt a later look finds mined on the
// canonical chain (here written so by hand, as a bug would) is reported
// loudly, once: an error log line and outcome_contradicted_total. It is
// not corrected: the row keeps its outcome for an operator to settle.
func TestIssue44_ContradictedOutcome(t *testing.T) {
	t.Parallel()
	logs := &stacktest.LogBuffer{}
	w := stacktest.NewWorld(t, 1, stacktest.Lively)
	w.LogTo = logs
	n := w.Node(t, "n")
	signer := w.Keys[0].Address
	id := n.CreateTx(t, stacktest.Transfer(signer, big.NewInt(1))).ID
	_, err := n.Drain.Execute(ctx, stacktest.ChainID().Uint64(), signer)
	require.NoError(t, err)
	w.MineAll(t, signer, 1)

	found, err := n.Finality.CheckOutcomes(ctx)
	require.NoError(t, err)
	assert.Empty(t, found, "nothing reported FAILED_FINAL yet")

	_, err = w.DB.Pool.Exec(ctx, `UPDATE managed_tx SET state = 'FAILED_FINAL', sub_state = $2, finalized_at = now(), updated_at = now()
WHERE id = $1`, id, txm.SubStateNonceConsumedExternally)
	require.NoError(t, err)
	for range 2 {
		found, err = n.Finality.CheckOutcomes(ctx)
		require.NoError(t, err)
		require.Len(t, found, 1)
		assert.Equal(t, id, found[0].TxID)
	}
	assert.Equal(t, int64(1), n.Metrics.Count("outcome_contradicted_total", "sub_state", txm.SubStateNonceConsumedExternally),
		"counted once, however often it is seen")
	assert.Contains(t, logs.String(), `"severity":"ERROR"`)
	assert.Contains(t, logs.String(), "contradicted by the chain")
	state, sub := w.TxState(t, id)
	assert.Equal(t, string(txm.StateFailedFinal), state, "never corrected silently")
	assert.Equal(t, txm.SubStateNonceConsumedExternally, sub)
}
