package finality

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/functions/internal/stacktest"
	"github.com/txfence/txfence/shared/app"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/evm/rpcproxy"
	"github.com/txfence/txfence/shared/pgtest"
	"github.com/txfence/txfence/shared/pubsub"
	"github.com/txfence/txfence/shared/pubsub/pubsubtest"
	"github.com/txfence/txfence/shared/txm"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var ctx = context.Background()

// broadcastAndMine drains the signer, mines everything and records receipts.
// A drain fenced because its lease ran out (tests with leases of a few
// hundred milliseconds, on a loaded machine), or one that found the lease
// busy for its whole wait (a finality sweep running beside the test
// writing the signer's confirmations), is tried again, as Pub/Sub would
// redeliver its prompt.
func broadcastAndMine(t *testing.T, w *stacktest.World, n *stacktest.Node, signer common.Address, total uint64) {
	t.Helper()
	for w.States(t)["ALLOCATED"] > 0 {
		_, err := n.Drain.Execute(ctx, stacktest.ChainID().Uint64(), signer)
		if !errors.Is(err, txm.ErrFenced) && !errors.Is(err, app.ErrNoLease) {
			require.NoError(t, err)
		}
	}
	w.MineAll(t, signer, total)
	stacktest.WaitFor(t, "receipts", func() bool {
		_, err := n.Receipts.Execute(ctx, stacktest.ChainID().Uint64(), signer)
		return err == nil
	})
}

type feedItem struct {
	Seq     int64     `json:"seq"`
	Type    string    `json:"type"`
	TxID    string    `json:"txId"`
	State   txm.State `json:"state"`
	NewFork bool      `json:"newFork"`
	Hash    *string   `json:"hash"`
}

// feed reads the completions feed over HTTP from after, page by page.
func feed(t *testing.T, n *stacktest.Node, after int64, limit int) []feedItem {
	t.Helper()
	var out []feedItem
	for {
		resp, err := http.Get(fmt.Sprintf("%s/v1/completions?after=%d&limit=%d", n.APIURL, after, limit))
		require.NoError(t, err)
		var page struct {
			Items []feedItem `json:"items"`
			Next  int64      `json:"next"`
		}
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&page))
		resp.Body.Close()
		out = append(out, page.Items...)
		if len(page.Items) < limit {
			return out
		}
		after = page.Next
	}
}

// consumer is what a downstream service does with completion messages:
// remember the last seq handled and skip anything at or below it.
type consumer struct {
	last    int64
	handled []int64
}

func (c *consumer) deliver(seq int64) {
	if seq <= c.last {
		return // a redelivery
	}
	c.last = seq
	c.handled = append(c.handled, seq)
}

func TestIssue5_ConfirmedFeedAndTopic(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 1).WithPubSub(t)
	n := w.Node(t, "n0")
	signer := w.Keys[0].Address
	const total = 200
	ids := n.Allocate(t, signer, total)
	broadcastAndMine(t, w, n, signer, total)
	require.Equal(t, map[string]int{"MINED": total}, w.States(t))

	w.Mine(int(w.Cfg.Confirmations))
	st, err := n.Finality.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, total, st.Confirmed)
	require.Equal(t, map[string]int{"CONFIRMED": total}, w.States(t))
	st, err = n.Finality.Pass(ctx)
	require.NoError(t, err)
	assert.Zero(t, st.Confirmed, "a second pass reports nothing again")

	// The feed: exactly the 200 outcomes, in seq order.
	items := feed(t, n, 0, 37)
	require.Len(t, items, total)
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	for i, it := range items {
		if i > 0 {
			require.Greater(t, it.Seq, items[i-1].Seq)
		}
		assert.True(t, want[it.TxID], "an outcome of one of ours")
		delete(want, it.TxID)
		assert.Equal(t, txm.StateConfirmed, it.State)
		assert.Equal(t, "TxConfirmed", it.Type)
		assert.False(t, it.NewFork)
		assert.NotNil(t, it.Hash)
	}
	assert.Empty(t, want, "each outcome exactly once")

	// The topic: the same 200, in seq order under the signer's ordering key.
	msgs := pullCompletions(t, w, total)
	require.Len(t, msgs, total)
	var seqs []int64
	for _, m := range msgs {
		var body txm.CompletionMessage
		require.NoError(t, json.Unmarshal(m.Data, &body))
		assert.Equal(t, txm.CanonicalAddress(signer), m.OrderingKey)
		assert.Equal(t, fmt.Sprint(body.Seq), m.Attributes["seq"])
		assert.Equal(t, "CONFIRMED", m.Attributes["state"])
		assert.Equal(t, "1337", m.Attributes["chain"])
		assert.Equal(t, txm.CanonicalAddress(signer), m.Attributes["signer"])
		assert.NotEmpty(t, m.Attributes[pubsub.AttrOutboxID])
		seqs = append(seqs, body.Seq)
	}
	assert.True(t, sort.SliceIsSorted(seqs, func(i, j int) bool { return seqs[i] < seqs[j] }), "topic delivers in seq order")
	for i, it := range items {
		assert.Equal(t, it.Seq, seqs[i], "topic and feed agree")
	}

	// At-least-once: a consumer handed redeliveries handles each seq once.
	c := &consumer{}
	for i, s := range seqs {
		c.deliver(s)
		if i%10 == 9 {
			for _, again := range seqs[i-5 : i+1] {
				c.deliver(again)
			}
		}
	}
	assert.Equal(t, seqs, c.handled)

	// A long poll past the end answers empty once its wait is over.
	resp, err := http.Get(fmt.Sprintf("%s/v1/completions?after=%d&wait=300ms", n.APIURL, seqs[len(seqs)-1]))
	require.NoError(t, err)
	var empty struct {
		Items []feedItem `json:"items"`
		Next  int64      `json:"next"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&empty))
	resp.Body.Close()
	assert.Empty(t, empty.Items)
	assert.Equal(t, seqs[len(seqs)-1], empty.Next)
}

func TestIssue5_LongPollWakes(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 1)
	n := w.Node(t, "n0")
	signer := w.Keys[0].Address
	n.Allocate(t, signer, 1)
	broadcastAndMine(t, w, n, signer, 1)
	w.Mine(int(w.Cfg.Confirmations))
	done := make(chan []feedItem, 1)
	go func() {
		resp, err := http.Get(n.APIURL + "/v1/completions?after=0&wait=20s")
		if err != nil {
			done <- nil
			return
		}
		defer resp.Body.Close()
		var page struct {
			Items []feedItem `json:"items"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&page)
		done <- page.Items
	}()
	w.WaitListening(t)
	_, err := n.Finality.Pass(ctx)
	require.NoError(t, err)
	items := <-done
	require.Len(t, items, 1, "the waiting poll answers when the outcome lands")
	assert.Equal(t, txm.StateConfirmed, items[0].State)
}

func TestIssue5_RevertedOnChain(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 1)
	n := w.Node(t, "n0")
	signer := w.Keys[0].Address
	contract := w.DeployReverter(t) // uses the signer's nonce 0 outside txfence
	// An advisory simulation lets the reverting call through to the chain.
	ids := n.AllocateRequestsAs(t, w.Advisory(t), 1, func(int) *txm.Request {
		return &txm.Request{ChainID: stacktest.ChainID().Uint64(), From: signer, To: &contract, Data: []byte{1, 2, 3, 4}, GasLimit: 60_000}
	})
	broadcastAndMine(t, w, n, signer, 2)
	w.Mine(int(w.Cfg.Confirmations))
	st, err := n.Finality.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, st.Failed)
	tx, err := n.Store.GetTx(ctx, ids[0])
	require.NoError(t, err)
	assert.Equal(t, txm.StateFailedFinal, tx.State)
	require.NotNil(t, tx.Receipt)
	assert.EqualValues(t, 0, tx.Receipt.Status)
	assert.Positive(t, tx.Receipt.GasUsed)
	items := feed(t, n, 0, 10)
	require.Len(t, items, 1)
	assert.Equal(t, txm.StateFailedFinal, items[0].State)
	assert.Equal(t, "TxFailed", items[0].Type)
}

// mined is a world whose one signer has one transaction MINED, with what a
// reorg test needs: the transaction as mined, and its block's parent to
// fork from.
type mined struct {
	w      *stacktest.World
	n      *stacktest.Node
	signer common.Address
	id     string
	before *txm.Tx
	parent common.Hash
}

func mineOne(t *testing.T, opts ...stacktest.Option) mined {
	t.Helper()
	w := stacktest.NewWorld(t, 1, opts...)
	n := w.Node(t, "n0")
	signer := w.Keys[0].Address
	ids := n.Allocate(t, signer, 1)
	broadcastAndMine(t, w, n, signer, 1)
	tx, err := n.Store.GetTx(ctx, ids[0])
	require.NoError(t, err)
	require.NotNil(t, tx.Receipt)
	h, err := w.Chain.Backend.Client().HeaderByHash(ctx, tx.Receipt.BlockHash)
	require.NoError(t, err)
	return mined{w: w, n: n, signer: signer, id: ids[0], before: tx, parent: h.ParentHash}
}

func TestIssue5_ReorgMovesTx(t *testing.T) {
	t.Parallel()
	m := mineOne(t)
	w, n, signer, id, before := m.w, m.n, m.signer, m.id, m.before

	require.NoError(t, w.Chain.Fork(m.parent))
	w.Mine(2) // the transaction returns from the pool into a block of the new branch
	r, err := w.Chain.Backend.Client().TransactionReceipt(ctx, *before.Hash)
	require.NoError(t, err)
	require.NotEqual(t, before.Receipt.BlockHash, r.BlockHash, "the transaction moved to another block")

	reconfirm(t, w, n, signer, 0) // the node still has it: nothing to rebroadcast
	after, err := n.Store.GetTx(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, txm.StateConfirmed, after.State)
	assert.Equal(t, r.BlockHash, after.Receipt.BlockHash, "confirmed at the new block")
	assert.Equal(t, 1, after.ReorgCount)
	assert.EqualValues(t, 1, n.Metrics.Count("reorg_total"))
	items := feed(t, n, 0, 10)
	require.Len(t, items, 1)
	assert.True(t, items[0].NewFork, "the outcome of a reorged transaction carries newFork")
}

func TestIssue5_ReorgDropsTx(t *testing.T) {
	t.Parallel()
	m := mineOne(t)
	w, n, signer, id, before := m.w, m.n, m.signer, m.id, m.before

	require.NoError(t, w.Chain.Fork(m.parent))
	w.Chain.Rollback()
	w.Chain.Commit()
	known, err := n.Client.HasTransaction(ctx, *before.Hash)
	require.NoError(t, err)
	require.False(t, known, "the fork dropped the transaction")

	reconfirm(t, w, n, signer, 1) // the persisted attempt is sent again
	after, err := n.Store.GetTx(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, txm.StateConfirmed, after.State)
	assert.Equal(t, *before.Hash, *after.Hash, "the same signed bytes, never re-signed")
	assert.Equal(t, 1, after.ReorgCount)
	assert.Equal(t, map[string]int{id: 1}, w.AttemptsPerTx(t))
	items := feed(t, n, 0, 10)
	require.Len(t, items, 1)
	assert.True(t, items[0].NewFork)
}

// TestIssue5_ReportedThenSuperseded: a transaction reported STUCK (TxStuck)
// that gets mined anyway is reported again, CONFIRMED, with newFork.
func TestIssue5_ReportedThenSuperseded(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 1, func(c *config.Config) { c.StaleReceiptTimeout = 100 * time.Millisecond })
	n := w.Node(t, "n0")
	signer := w.Keys[0].Address
	ids := n.Allocate(t, signer, 1)
	// A provider that takes the transaction but answers with an error that
	// reads as deterministic: txfence reports STUCK, the chain mines it.
	w.Proxy.Before("eth_sendRawTransaction", func(params json.RawMessage) *rpcproxy.Fault {
		var raw []hexutil.Bytes
		var tx types.Transaction
		if json.Unmarshal(params, &raw) == nil && len(raw) == 1 && tx.UnmarshalBinary(raw[0]) == nil {
			_ = w.Chain.Backend.Client().SendTransaction(ctx, &tx)
		}
		return &rpcproxy.Fault{RPCError: &rpcproxy.RPCError{Code: -32000, Message: "insufficient funds for gas * price + value"}}
	})
	_, err := n.Drain.Execute(ctx, stacktest.ChainID().Uint64(), signer)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"STUCK": 1}, w.States(t))
	items := feed(t, n, 0, 10)
	require.Len(t, items, 1)
	assert.Equal(t, "TxStuck", items[0].Type)
	assert.False(t, items[0].NewFork)

	w.Proxy.Before("eth_sendRawTransaction", nil)
	w.MineAll(t, signer, 1)
	// sleep: the stuck transaction's receipt check must grow stale (StaleReceiptTimeout) for the sweep to look again
	time.Sleep(150 * time.Millisecond)
	st, err := n.Finality.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, st.Mined, "the sweep picks up the receipt of a stale transaction")
	w.Mine(int(w.Cfg.Confirmations))
	_, err = n.Finality.Pass(ctx)
	require.NoError(t, err)
	items = feed(t, n, 0, 10)
	require.Len(t, items, 2)
	assert.Equal(t, "TxConfirmed", items[1].Type)
	assert.Equal(t, ids[0], items[1].TxID)
	assert.True(t, items[1].NewFork, "an earlier reported outcome is superseded")
}

func TestIssue5_LostLease(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 1, func(c *config.Config) {
		c.Lease.Duration = 300 * time.Millisecond
		c.Lease.RenewEvery = 100 * time.Millisecond
		c.Lease.ClockSkew = 50 * time.Millisecond
	})
	a, b := w.Node(t, "A"), w.Node(t, "B")
	signer := w.Keys[0].Address
	const total = 20
	a.Allocate(t, signer, total)
	broadcastAndMine(t, w, a, signer, total)
	w.Mine(int(w.Cfg.Confirmations))

	var once sync.Once
	stalled := make(chan struct{})
	a.Finality.SetHooks(app.SweepHooks{BeforeWrite: func() {
		once.Do(func() { w.StallUntilTakenOver(a, signer, stalled) })
	}})
	aErr := make(chan error, 1)
	go func() { _, err := a.Finality.Pass(ctx); aErr <- err }()
	<-stalled
	var aToken int64
	require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT fencing_token FROM signer_lease WHERE scope = 'chain'`).Scan(&aToken))

	stacktest.WaitFor(t, "B to take over and finalize", func() bool {
		st, err := b.Finality.Pass(ctx)
		return err == nil && st.Confirmed == total
	})
	err := <-aErr
	require.ErrorIs(t, err, txm.ErrFenced)
	assert.Positive(t, a.Metrics.Count("lease_fenced_total", "op", "finalize"))
	assert.Equal(t, map[string]int{"CONFIRMED": total}, w.States(t))
	var completions, stale int
	require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM tx_completion WHERE NOT lifecycle`).Scan(&completions))
	assert.Equal(t, total, completions, "each outcome reported once")
	require.NoError(t, w.DB.Pool.QueryRow(ctx, `
SELECT (SELECT count(*) FROM managed_tx WHERE fencing_token = $1 AND state = 'CONFIRMED')
     + (SELECT count(*) FROM tx_history WHERE fencing_token = $1 AND reason = 'final')`, aToken).Scan(&stale))
	assert.Zero(t, stale, "the sweeper that lost its lease wrote nothing")
}

func TestIssue5_RPCFaults(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 1)
	w.EVM.CallTimeout = 2 * time.Second // the timeout faults below outlast it
	n := w.Node(t, "n0")
	signer := w.Keys[0].Address
	const total = 10
	n.Allocate(t, signer, total)
	for w.States(t)["ALLOCATED"] > 0 {
		_, err := n.Drain.Execute(ctx, stacktest.ChainID().Uint64(), signer)
		require.NoError(t, err)
	}
	w.MineAll(t, signer, total)
	chainID := stacktest.ChainID().Uint64()

	faults := []struct {
		name   string
		method string
		fault  rpcproxy.Fault
	}{
		{"nonce errors", "eth_getTransactionCount", rpcproxy.Fault{RPCError: &rpcproxy.RPCError{Code: -32603, Message: "internal error"}}},
		{"nonce timeouts", "eth_getTransactionCount", rpcproxy.Fault{Delay: 3 * time.Second}},
		{"receipts empty", "eth_getTransactionReceipt", rpcproxy.Fault{EmptyResult: true}},
		{"receipts 502", "eth_getTransactionReceipt", rpcproxy.Fault{HTTPStatus: http.StatusBadGateway}},
		{"connection dropped", "eth_getTransactionReceipt", rpcproxy.Fault{Drop: true}},
	}
	for _, f := range faults {
		w.Proxy.Fail(f.method, -1, f.fault)
		_, err := n.Receipts.Execute(ctx, chainID, signer)
		require.Error(t, err, f.name)
		assert.Equal(t, map[string]int{"TRACKING": total}, w.States(t), "%s corrupts nothing", f.name)
		w.Proxy.Heal()
	}
	assert.Positive(t, n.Metrics.Count("receipt_check_total", "result", "rpc_error"))
	assert.Positive(t, n.Metrics.Count("receipt_check_total", "result", "not_mined"), "empty receipts read as not mined")

	// Healed: receipts land. Then the sweep meets broken block lookups.
	_, err := n.Receipts.Execute(ctx, chainID, signer)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"MINED": total}, w.States(t))
	w.Mine(int(w.Cfg.Confirmations))
	for _, f := range []rpcproxy.Fault{
		{RPCError: &rpcproxy.RPCError{Code: -32000, Message: "header not found"}},
		{HTTPStatus: http.StatusServiceUnavailable},
		{Delay: 3 * time.Second},
	} {
		w.Proxy.Fail("eth_getBlockByNumber", -1, f)
		_, err := n.Finality.Pass(ctx)
		require.Error(t, err)
		assert.Equal(t, map[string]int{"MINED": total}, w.States(t), "a failed pass changes nothing")
		w.Proxy.Heal()
	}
	st, err := n.Finality.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, total, st.Confirmed, "progress resumes once the node heals")
	assert.Zero(t, st.Reorged, "an unreachable node is never mistaken for a reorg")
	var completions int
	require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM tx_completion WHERE NOT lifecycle`).Scan(&completions))
	assert.Equal(t, total, completions)
}

func TestIssue5_FinalityModes(t *testing.T) {
	t.Parallel()
	t.Run("confirmations", func(t *testing.T) {
		t.Parallel()
		w := stacktest.NewWorld(t, 1, func(c *config.Config) { c.Confirmations = 3 })
		n := w.Node(t, "n0")
		signer := w.Keys[0].Address
		ids := n.Allocate(t, signer, 1)
		broadcastAndMine(t, w, n, signer, 1)
		tx, err := n.Store.GetTx(ctx, ids[0])
		require.NoError(t, err)
		for {
			head, err := n.Client.Head(ctx)
			require.NoError(t, err)
			depth := head.Number - tx.Receipt.BlockNumber + 1
			st, err := n.Finality.Pass(ctx)
			require.NoError(t, err)
			if depth < 3 {
				require.Zero(t, st.Confirmed, "depth %d is not final", depth)
				w.Chain.Commit()
				continue
			}
			require.Equal(t, 1, st.Confirmed, "depth %d is final", depth)
			require.EqualValues(t, 3, depth, "final exactly at the required depth")
			break
		}
	})
	t.Run("finalized tag", func(t *testing.T) {
		t.Parallel()
		w := stacktest.NewWorld(t, 1, func(c *config.Config) { c.FinalityMode = config.FinalityFinalized })
		n := w.Node(t, "n0")
		signer := w.Keys[0].Address
		ids := n.Allocate(t, signer, 1)
		broadcastAndMine(t, w, n, signer, 1)
		tx, err := n.Store.GetTx(ctx, ids[0])
		require.NoError(t, err)
		for i := 0; i < 80; i++ {
			fin, err := n.Client.Finalized(ctx)
			require.NoError(t, err)
			st, err := n.Finality.Pass(ctx)
			require.NoError(t, err)
			if fin.Number < tx.Receipt.BlockNumber {
				require.Zero(t, st.Confirmed, "block %d is above finalized %d", tx.Receipt.BlockNumber, fin.Number)
				w.Chain.Commit()
				continue
			}
			require.Equal(t, 1, st.Confirmed, "at or below the finalized block %d", fin.Number)
			return
		}
		t.Fatal("the finalized block never reached the transaction")
	})
}

// TestIssue5_ReorgAfterReport: a reorg deeper than the confirmation depth,
// within the watch window, drops a transaction whose CONFIRMED outcome was
// already reported; it is reopened, rebroadcast, confirmed again, and the
// new outcome carries newFork.
func TestIssue5_ReorgAfterReport(t *testing.T) {
	t.Parallel()
	m := mineOne(t, func(c *config.Config) { c.Confirmations = 2 })
	w, n, signer, id, before := m.w, m.n, m.signer, m.id, m.before
	w.Mine(2)
	st, err := n.Finality.Pass(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.Confirmed)
	first := feed(t, n, 0, 10)
	require.Len(t, first, 1)
	assert.False(t, first[0].NewFork)

	// A longer branch from below the block: the reported transaction is gone.
	require.NoError(t, w.Chain.Fork(m.parent))
	w.Chain.Rollback()
	w.Mine(5)
	known, err := n.Client.HasTransaction(ctx, *before.Hash)
	require.NoError(t, err)
	require.False(t, known)

	reconfirm(t, w, n, signer, 1)
	items := feed(t, n, 0, 10)
	require.Len(t, items, 2, "the first report stands in the feed; the new one follows it")
	assert.Equal(t, id, items[1].TxID)
	assert.True(t, items[1].NewFork, "the earlier reported outcome is superseded")
	after, err := n.Store.GetTx(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, 1, after.ReorgCount)
	assert.Equal(t, *before.Hash, *after.Hash, "the same signed bytes")
}

// reconfirm follows a reorged transaction back to its outcome: a pass that
// finds the reorg (and reports how many attempts it had to rebroadcast), the
// receipt again, enough blocks, and a pass that confirms it.
func reconfirm(t *testing.T, w *stacktest.World, n *stacktest.Node, signer common.Address, rebroadcast int) {
	t.Helper()
	st, err := n.Finality.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, st.Reorged)
	assert.Equal(t, rebroadcast, st.Rebroadcast)
	assert.Equal(t, map[string]int{"TRACKING": 1}, w.States(t))
	w.MineAll(t, signer, 1)
	_, err = n.Receipts.Execute(ctx, stacktest.ChainID().Uint64(), signer)
	require.NoError(t, err)
	w.Mine(int(w.Cfg.Confirmations))
	st, err = n.Finality.Pass(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.Confirmed)
}

// TestSweepFinality_LeaseOnlyToWrite: a pass over a signer whose MINED
// transactions are not deep enough yet, and whose receipts are already
// written, neither takes nor asks for the signer's chain lease (it took
// every signer's lease every pass, and a hot signer's drain waited behind
// it); once a block is final it takes the lease and writes CONFIRMED.
func TestSweepFinality_LeaseOnlyToWrite(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 1)
	n := w.Node(t, "A")
	signer := w.Keys[0].Address
	chainID := stacktest.ChainID().Uint64()
	const total = 3
	n.Allocate(t, signer, total)
	broadcastAndMine(t, w, n, signer, total)
	require.Equal(t, map[string]int{"MINED": total}, w.States(t))

	key := txm.LeaseKey{ChainID: chainID, Signer: signer, Scope: txm.ScopeChain}
	held, _, err := n.Leases.Acquire(ctx, key, "holder")
	require.NoError(t, err)
	st, err := n.Finality.Pass(ctx)
	require.NoError(t, err, "nothing to write: the held lease is not needed")
	assert.Equal(t, 0, st.Skipped)
	assert.Equal(t, 0, st.Confirmed)
	wanted, err := n.Leases.Wanted(ctx, held)
	require.NoError(t, err)
	assert.False(t, wanted.Any, "a pass with nothing to write does not ask for the lease")

	w.Mine(int(w.Cfg.Confirmations))
	st, err = n.Finality.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, st.Skipped, "final blocks: it needs the lease another holds")
	wanted, err = n.Leases.Wanted(ctx, held)
	require.NoError(t, err)
	assert.Equal(t, txm.Wanting{Any: true, First: true}, wanted, "and asked for it first")
	require.NoError(t, n.Leases.Release(ctx, held))
	st, err = n.Finality.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, total, st.Confirmed)
	assert.Equal(t, map[string]int{"CONFIRMED": total}, w.States(t))
}

// TestFinalityRun_ASlowSignerHoldsUpNoOther: while one signer's sweep is
// stuck (here in a hook, holding its lease; in production waiting for the
// lease behind a hot signer's drain, or on a slow node), the sweep's later
// passes go on confirming the other signers on time, and leave the stuck
// one alone until its sweep is done. A pass that waited for its slowest
// signer held every other signer's confirmations behind it.
func TestFinalityRun_ASlowSignerHoldsUpNoOther(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 2)
	n := w.Node(t, "n0")
	for _, k := range w.Keys {
		n.Allocate(t, k.Address, 1)
		broadcastAndMine(t, w, n, k.Address, 1)
	}
	w.Mine(int(w.Cfg.Confirmations))

	var once sync.Once
	stuck, release := make(chan struct{}), make(chan struct{})
	n.Finality.SetHooks(app.SweepHooks{BeforeWrite: func() {
		first := false
		once.Do(func() { first = true })
		if first {
			close(stuck)
			<-release
		}
	}})
	done := make(chan error, 1)
	var st app.PassStats
	go func() {
		var err error
		st, err = n.Finality.Run(ctx, 8*time.Second, 20*time.Millisecond)
		done <- err
	}()
	<-stuck
	// The stuck sweep holds its signer's lease for good; the other
	// signer's sweep may still hold its own for a moment.
	var slow string
	stacktest.WaitFor(t, "one finality sweep holding a lease", func() bool {
		rows, err := w.DB.Pool.Query(ctx, `
SELECT signer FROM signer_lease WHERE scope = 'chain' AND owner LIKE '%/finality/%' AND expires_at > clock_timestamp()`)
		require.NoError(t, err)
		held, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		if len(held) != 1 {
			return false
		}
		slow = held[0]
		return true
	})
	other := w.Keys[0].Address
	if txm.CanonicalAddress(other) == slow {
		other = w.Keys[1].Address
	}
	// The other signer's first transaction is confirmed, and a new one
	// mined now is confirmed by a later pass, the stuck sweep still stuck.
	n.Allocate(t, other, 1)
	broadcastAndMine(t, w, n, other, 2)
	w.Mine(int(w.Cfg.Confirmations))
	confirmed := func(signer string) int {
		var c int
		require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM managed_tx WHERE signer = $1 AND state = 'CONFIRMED'`,
			signer).Scan(&c))
		return c
	}
	stacktest.WaitFor(t, "the other signer's confirmations while one sweep is stuck", func() bool {
		return confirmed(txm.CanonicalAddress(other)) == 2
	})
	assert.Zero(t, confirmed(slow), "the stuck sweep wrote nothing yet")
	close(release)
	require.NoError(t, <-done)
	assert.Equal(t, 1, confirmed(slow), "the stuck sweep finished")
	assert.Equal(t, 3, st.Confirmed)
	assert.Positive(t, st.Skipped, "passes left the signer being swept alone")
}

// TestFinality_OutcomesNumberedAfterAFault: a finality write commits its
// outcomes and numbers them after the commit, under the feed's lock. When
// the numbering cannot run (here the lock is held elsewhere until the
// pass's context ends; in production the instance crashed or lost the
// database after its commit), the transactions are CONFIRMED and their
// outcomes wait, unnumbered: not in the feed, not on the topic. Once the
// fault heals, the next pass numbers them: each appears in the feed and on
// the topic exactly once, in seq order.
func TestFinality_OutcomesNumberedAfterAFault(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 1).WithPubSub(t)
	n := w.Node(t, "n0")
	signer := w.Keys[0].Address
	const total = 5
	ids := n.Allocate(t, signer, total)
	broadcastAndMine(t, w, n, signer, total)
	w.Mine(int(w.Cfg.Confirmations))

	unlock := holdFeedLock(t, w)
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	st, err := n.Finality.Pass(pctx)
	cancel()
	require.NoError(t, err, "the write committed; the numbering is left for later")
	assert.Equal(t, total, st.Confirmed)
	require.Equal(t, map[string]int{"CONFIRMED": total}, w.States(t))
	assert.Empty(t, feed(t, n, 0, 100), "not numbered: not in the feed yet")
	var pending int
	require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM completion_pending WHERE NOT lifecycle`).Scan(&pending))
	assert.Equal(t, total, pending)

	unlock()
	st, err = n.Finality.Pass(ctx)
	require.NoError(t, err)
	assert.Zero(t, st.Confirmed, "nothing confirmed twice")
	items := feed(t, n, 0, 100)
	require.Len(t, items, total, "the next pass numbered them")
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	for i, it := range items {
		assert.True(t, want[it.TxID], "each outcome once")
		delete(want, it.TxID)
		if i > 0 {
			assert.Greater(t, it.Seq, items[i-1].Seq)
		}
		assert.False(t, it.NewFork)
	}
	msgs := pullCompletions(t, w, total)
	require.Len(t, msgs, total, "and relayed them to the topic")
	for i, m := range msgs {
		var body txm.CompletionMessage
		require.NoError(t, json.Unmarshal(m.Data, &body))
		assert.Equal(t, items[i].Seq, body.Seq, "topic and feed agree")
		assert.Equal(t, fmt.Sprint(body.Seq), m.Attributes["seq"])
	}
	require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM completion_pending`).Scan(&pending))
	assert.Zero(t, pending)
}

// TestSweepFinality_ConfirmationsDoNotWaitForReceipts: a signer with final
// MINED transactions and stale TRACKING ones whose receipts must be looked
// up. The receipt lookup is slow (here the node answers receipts after 2
// s; under load it took 0.3-0.6 s), and the final ones are CONFIRMED while
// it runs, not after it. Then what it found is written, as before: MINED,
// and CONFIRMED in the same pass when its block is already final.
func TestSweepFinality_ConfirmationsDoNotWaitForReceipts(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 1, func(c *config.Config) { c.StaleReceiptTimeout = 100 * time.Millisecond })
	w.EVM.CallTimeout = 10 * time.Second
	n := w.Node(t, "n0")
	signer := w.Keys[0].Address
	chainID := stacktest.ChainID().Uint64()
	first := n.Allocate(t, signer, 3)
	broadcastAndMine(t, w, n, signer, 3)
	require.Equal(t, map[string]int{"MINED": 3}, w.States(t))
	n.Allocate(t, signer, 2)
	for w.States(t)["ALLOCATED"] > 0 {
		_, err := n.Drain.Execute(ctx, chainID, signer)
		require.NoError(t, err)
	}
	w.MineAll(t, signer, 5) // on chain; their receipts are not written yet
	w.Mine(int(w.Cfg.Confirmations))
	// sleep: the TRACKING ones must grow stale (StaleReceiptTimeout) for the sweep to look up their receipts
	time.Sleep(150 * time.Millisecond)

	w.Proxy.Fail("eth_getTransactionReceipt", -1, rpcproxy.Fault{Delay: 2 * time.Second})
	done := make(chan app.PassStats, 1)
	go func() {
		st, err := n.Finality.Pass(ctx)
		assert.NoError(t, err)
		done <- st
	}()
	stacktest.WaitFor(t, "the final MINED ones confirmed", func() bool {
		return w.States(t)["CONFIRMED"] >= 3
	})
	select {
	case <-done:
		t.Fatal("the pass ended before the confirmations were seen: they waited for the receipt lookup")
	default:
	}
	var lookups int
	for _, c := range w.Proxy.Calls() {
		if c.Method == "eth_getTransactionReceipt" {
			lookups++
		}
	}
	require.Positive(t, lookups, "the receipt lookup was under way")
	var confirmed []string
	rows, err := w.DB.Pool.Query(ctx, `SELECT id::text FROM managed_tx WHERE state = 'CONFIRMED' ORDER BY nonce`)
	require.NoError(t, err)
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		confirmed = append(confirmed, id)
	}
	require.NoError(t, rows.Err())
	assert.ElementsMatch(t, first, confirmed, "the ones MINED before the pass")
	st := <-done
	w.Proxy.Heal()
	assert.Equal(t, 2, st.Mined, "what the lookup found is written in the same pass")
	assert.Equal(t, 5, st.Confirmed, "and, final already, confirmed too")
	assert.Equal(t, map[string]int{"CONFIRMED": 5}, w.States(t))
}

// A sweep's next pass starts when the chain's head moves, not an interval
// after the last: with an interval far longer than the test, the blocks
// that complete the depth of MINED transactions get them CONFIRMED. A head
// that stays put starts no pass (the sweep does not spin between blocks).
func TestSweepFinality_PassesFollowTheHead(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 1)
	n := w.Node(t, "n0")
	signer := w.Keys[0].Address
	n.Allocate(t, signer, 3)
	broadcastAndMine(t, w, n, signer, 3)
	require.Equal(t, map[string]int{"MINED": 3}, w.States(t))

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan app.PassStats, 1)
	go func() {
		st, err := n.Finality.Run(rctx, 2*time.Hour, time.Hour)
		assert.NoError(t, err)
		done <- st
	}()
	// sleep: the first pass, then a window of polls of an unchanged head, which must start no pass (st.Signers below)
	time.Sleep(500 * time.Millisecond)
	require.Equal(t, map[string]int{"MINED": 3}, w.States(t), "not deep enough yet")
	w.Mine(int(w.Cfg.Confirmations))
	stacktest.WaitFor(t, "confirmed by a pass the new blocks started", func() bool {
		return w.States(t)["CONFIRMED"] == 3
	})
	// The write is committed once the rows show it, but the sweep may not
	// have its answer yet: ended then, it would count the write failed.
	// It lets the signer's lease go once it has.
	stacktest.WaitFor(t, "the sweep let the lease go after its write", func() bool {
		var c int
		require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM signer_lease
WHERE scope = 'chain' AND owner LIKE '%/finality/%' AND expires_at = '-infinity'`).Scan(&c))
		return c > 0
	})
	cancel()
	st := <-done
	assert.Equal(t, 3, st.Confirmed)
	// The first pass and at most one per block mined since swept the signer.
	assert.LessOrEqual(t, st.Signers, 1+int(w.Cfg.Confirmations), "passes ran without a new head")
	assert.GreaterOrEqual(t, st.Signers, 2)
}

// TestSweepFinality_LeftoversDoNotHoldUpThePass: outcomes that were
// recorded and left unnumbered (a writer crashed after its commit, or here
// the feed's lock is held elsewhere) are numbered beside a pass's signer
// sweeps, not before them, and a signer's write does not wait for its own
// numbering either. A pass numbered leftovers first, and every signer's
// confirmations waited behind it for the feed's lock; now the pass confirms
// what is due, and lets the signer's lease go, while the numbering waits,
// and the next pass after the lock is free numbers everything once.
func TestSweepFinality_LeftoversDoNotHoldUpThePass(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 1)
	n := w.Node(t, "n0")
	signer := w.Keys[0].Address
	confirmed := func(want int) func() bool {
		return func() bool { return w.States(t)["CONFIRMED"] == want }
	}
	// numbering is whether the pass's numbering waits for the feed's lock.
	numbering := func() bool {
		var c int
		require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE wait_event_type = 'Lock' AND wait_event = 'advisory' AND datname = current_database()`).Scan(&c))
		return c > 0
	}
	// let is whether the signer's chain lease was let go by a finality
	// sweep since (database time): its write has committed (and was not
	// numbered under it).
	let := func(since time.Time) bool {
		var c int
		require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM signer_lease
WHERE scope = 'chain' AND owner LIKE '%/finality/%' AND expires_at = '-infinity' AND updated_at > $1`, since).Scan(&c))
		return c > 0
	}
	// pass runs a pass until cond holds, the signer's lease was let go
	// and the numbering waits for the lock, then ends it. Ended when cond
	// alone held, it could cut the write's COMMIT short after the rows
	// became visible (outcome unknown: a failure).
	pass := func(what string, cond func() bool) (app.PassStats, error) {
		var since time.Time
		require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&since))
		pctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var st app.PassStats
		var err error
		done := make(chan struct{})
		go func() {
			defer close(done)
			st, err = n.Finality.Pass(pctx)
		}()
		stacktest.WaitFor(t, what, func() bool { return cond() && let(since) && numbering() })
		cancel()
		<-done
		return st, err
	}
	pending := func() int {
		var c int
		require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM completion_pending WHERE NOT lifecycle`).Scan(&c))
		return c
	}
	n.Allocate(t, signer, 2)
	broadcastAndMine(t, w, n, signer, 2)
	w.Mine(int(w.Cfg.Confirmations))

	unlock := holdFeedLock(t, w)
	st, err := pass("the first two confirmed", confirmed(2))
	require.NoError(t, err, "a numbering cut short by the pass's end is not a failure")
	require.Equal(t, 2, st.Confirmed)
	require.Equal(t, 2, pending(), "left unnumbered")

	// More come due while the leftovers cannot be numbered.
	n.Allocate(t, signer, 3)
	broadcastAndMine(t, w, n, signer, 5)
	w.Mine(int(w.Cfg.Confirmations))
	st, err = pass("confirmed while the leftovers wait for the lock", confirmed(5))
	require.NoError(t, err)
	assert.Equal(t, 3, st.Confirmed)
	assert.Equal(t, 5, pending(), "all of them still waiting for the lock")

	unlock()
	st, err = n.Finality.Pass(ctx)
	require.NoError(t, err)
	assert.Zero(t, st.Confirmed)
	assert.Zero(t, pending())
	assert.Len(t, feed(t, n, 0, 100), 5, "every outcome numbered once")
}

// holdFeedLock takes the feed's numbering lock (completionLock) on a
// connection of its own, so that no outcome can be numbered until unlock.
func holdFeedLock(t *testing.T, w *stacktest.World) (unlock func()) {
	t.Helper()
	holder, err := w.DB.Pool.Acquire(ctx)
	require.NoError(t, err)
	t.Cleanup(holder.Release)
	_, err = holder.Exec(ctx, `SELECT pg_advisory_lock(7342001)`)
	require.NoError(t, err)
	return func() {
		_, err := holder.Exec(ctx, `SELECT pg_advisory_unlock(7342001)`)
		require.NoError(t, err)
	}
}

// TestSweepFinality_MostReadyFirst: a pass sweeps first the signers with
// the most transactions to end now, so that a hot signer's confirmations
// do not wait for a free worker behind many signers with one each. One
// worker here: the busier signer, last in (chain, signer) order, is
// confirmed before the other.
func TestSweepFinality_MostReadyFirst(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 2, func(c *config.Config) { c.ReceiptWorkers = 1 })
	n := w.Node(t, "A")
	light, busy := w.Keys[0].Address, w.Keys[1].Address
	if txm.CanonicalAddress(light) > txm.CanonicalAddress(busy) {
		light, busy = busy, light
	}
	n.Allocate(t, light, 1)
	broadcastAndMine(t, w, n, light, 1)
	n.Allocate(t, busy, 4)
	broadcastAndMine(t, w, n, busy, 4)
	w.Mine(int(w.Cfg.Confirmations))

	st, err := n.Finality.Pass(ctx)
	require.NoError(t, err)
	require.Equal(t, 5, st.Confirmed)
	finalized := func(signer common.Address, agg string) time.Time {
		var at time.Time
		require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT `+agg+`(finalized_at) FROM managed_tx WHERE signer = $1 AND state = 'CONFIRMED'`,
			txm.CanonicalAddress(signer)).Scan(&at))
		return at
	}
	assert.True(t, finalized(busy, "max").Before(finalized(light, "min")), "the signer with four to confirm went first")
}

// TestSweepFinality_KnownBlocksUntilAReorg: a pass asks the node only for
// the blocks it cannot prove canonical from the head by parent hashes.
// After a pass that read a MINED transaction's block, the next one (the
// head a block on) asks for no block by number; after a reorg that
// replaced that block, the next pass asks for it again and finds the
// reorg, and the transaction confirms in the new block.
func TestSweepFinality_KnownBlocksUntilAReorg(t *testing.T) {
	t.Parallel()
	m := mineOne(t, func(c *config.Config) { c.Confirmations = 5 })
	w, n, signer, id, before := m.w, m.n, m.signer, m.id, m.before
	byNumber := func() int { // eth_getBlockByNumber calls for a height, not a tag
		k := 0
		for _, c := range w.Proxy.Calls() {
			if c.Method == "eth_getBlockByNumber" && strings.HasPrefix(string(c.Params), `["0x`) {
				k++
			}
		}
		return k
	}
	pass := func() app.PassStats {
		t.Helper()
		w.Proxy.Reset()
		st, err := n.Finality.Pass(ctx)
		require.NoError(t, err)
		return st
	}

	w.Mine(1)
	require.Zero(t, pass().Confirmed)
	require.Positive(t, byNumber(), "the first pass reads the transaction's block")
	w.Mine(1)
	require.Zero(t, pass().Confirmed)
	assert.Zero(t, byNumber(), "the head's parent hashes prove the block canonical")

	require.NoError(t, w.Chain.Fork(m.parent))
	w.Mine(2) // the transaction returns from the pool into a block of the new branch
	r, err := w.Chain.Backend.Client().TransactionReceipt(ctx, *before.Hash)
	require.NoError(t, err)
	require.NotEqual(t, before.Receipt.BlockHash, r.BlockHash)
	st := pass()
	assert.Equal(t, 1, st.Reorged, "the replaced block is not taken from what was known")
	assert.Positive(t, byNumber())
	assert.Equal(t, map[string]int{"TRACKING": 1}, w.States(t))

	_, err = n.Receipts.Execute(ctx, stacktest.ChainID().Uint64(), signer)
	require.NoError(t, err)
	w.Mine(int(w.Cfg.Confirmations))
	require.Equal(t, 1, pass().Confirmed)
	after, err := n.Store.GetTx(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, txm.StateConfirmed, after.State)
	assert.Equal(t, r.BlockHash, after.Receipt.BlockHash, "confirmed at the new block")
}

// oneFinalOneShort makes a world whose one signer has two MINED
// transactions in consecutive blocks, the first final and the second one
// block short of the depth.
func oneFinalOneShort(t *testing.T) (*stacktest.World, *stacktest.Node, common.Address) {
	t.Helper()
	w := stacktest.NewWorld(t, 1)
	n := w.Node(t, "n0")
	signer := w.Keys[0].Address
	conf := int(w.Cfg.Confirmations)
	require.GreaterOrEqual(t, conf, 2)
	ids := n.Allocate(t, signer, 1)
	broadcastAndMine(t, w, n, signer, 1) // A, in block k
	ids = append(ids, n.Allocate(t, signer, 1)...)
	broadcastAndMine(t, w, n, signer, 2) // B, in block k+1
	a, err := n.Store.GetTx(ctx, ids[0])
	require.NoError(t, err)
	b, err := n.Store.GetTx(ctx, ids[1])
	require.NoError(t, err)
	require.Equal(t, a.Receipt.BlockNumber+1, b.Receipt.BlockNumber)
	w.Mine(conf - 2) // A's block is final, B's one block short
	require.Equal(t, map[string]int{"MINED": 2}, w.States(t))
	return w, n, signer
}

// TestSweepFinality_AWaitingSweepTakesTheLatestLook: a signer's sweep that
// waits for its lease (in production behind a hot signer's drain batch,
// often longer than a block) writes, once it has the lease, what the passes
// that skipped the signer meanwhile saw final, not only what its own pass
// saw: those blocks waited for the pass after the sweep, a second or more
// of finality lag.
func TestSweepFinality_AWaitingSweepTakesTheLatestLook(t *testing.T) {
	t.Parallel()
	w, n, signer := oneFinalOneShort(t)
	chainID := stacktest.ChainID().Uint64()
	key := txm.LeaseKey{ChainID: chainID, Signer: signer, Scope: txm.ScopeChain}
	held, _, err := n.Leases.Acquire(ctx, key, "drain")
	require.NoError(t, err)
	type result struct {
		st  app.PassStats
		err error
	}
	first := make(chan result, 1)
	go func() {
		st, err := n.Finality.Pass(ctx)
		first <- result{st, err}
	}()
	stacktest.WaitFor(t, "the first pass's sweep to wait for the lease", func() bool {
		wanted, err := n.Leases.Wanted(ctx, held)
		require.NoError(t, err)
		return wanted.Any
	})
	w.Mine(1) // B's block is final now
	st, err := n.Finality.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, st.Skipped, "the second pass leaves the signer to the sweep under way")
	assert.Zero(t, st.Confirmed)
	require.NoError(t, n.Leases.Release(ctx, held))
	r := <-first
	require.NoError(t, r.err, "the sweep got the lease within its wait")
	assert.Equal(t, 2, r.st.Confirmed, "the waiting sweep wrote what the later pass saw final too")
	assert.Equal(t, map[string]int{"CONFIRMED": 2}, w.States(t))
}

// TestSweepFinality_ALookThatCameDuringTheWriteIsWrittenToo: a pass that
// skips a signer while the signer's sweep is writing (a hot signer's
// hundreds of rows) leaves its look to that sweep, which writes what the
// look saw final in the same holding of the lease, instead of leaving it
// to the pass after the sweep.
func TestSweepFinality_ALookThatCameDuringTheWriteIsWrittenToo(t *testing.T) {
	t.Parallel()
	lookLeftToTheSweep(t, func(h func()) app.SweepHooks { return app.SweepHooks{BeforeWrite: h} })
}

// TestSweepFinality_ALookThatCameAfterTheWriteIsSweptToo: a pass that skips
// a signer after its sweep wrote and let its lease go, but before the sweep
// was over (relaying its messages), leaves its look to that sweep, which
// sweeps the signer again with it: dropped, the block the look saw final
// waited for the pass at the next head, a block late.
func TestSweepFinality_ALookThatCameAfterTheWriteIsSweptToo(t *testing.T) {
	t.Parallel()
	lookLeftToTheSweep(t, func(h func()) app.SweepHooks { return app.SweepHooks{AfterSweep: h} })
}

// lookLeftToTheSweep runs a pass over oneFinalOneShort's signer that, at
// the hook hooks puts it in, mines the block that makes the second
// transaction final and runs another pass: that pass skips the signer, and
// the first pass's sweep ends both transactions.
func lookLeftToTheSweep(t *testing.T, hooks func(func()) app.SweepHooks) {
	t.Helper()
	w, n, _ := oneFinalOneShort(t)
	var once sync.Once
	var during app.PassStats
	var duringErr error
	n.Finality.SetHooks(hooks(func() {
		once.Do(func() {
			w.Mine(1) // B's block is final now
			during, duringErr = n.Finality.Pass(ctx)
		})
	}))
	st, err := n.Finality.Pass(ctx)
	require.NoError(t, err)
	require.NoError(t, duringErr)
	assert.Equal(t, 1, during.Skipped, "the later pass left the signer to the sweep under way")
	assert.Equal(t, 2, st.Confirmed, "the sweep ended what that pass saw final too")
	assert.Equal(t, map[string]int{"CONFIRMED": 2}, w.States(t))
}

// pullCompletions pulls the completion topic until want messages arrived or
// 30 s passed (the relay publishes after the pass returns, later on a busy
// machine, so an empty pull is not yet an answer), and then looks once more.
func pullCompletions(t *testing.T, w *stacktest.World, want int) []pubsubtest.Received {
	t.Helper()
	var msgs []pubsubtest.Received
	for deadline := time.Now().Add(30 * time.Second); len(msgs) < want && time.Now().Before(deadline); {
		more, err := w.PubSub.Pull(ctx, w.Cfg.TopicCompletion+"-sub", 1000, 2*time.Second)
		require.NoError(t, err)
		msgs = append(msgs, more...)
	}
	// One more look, so that a message published twice is counted.
	more, err := w.PubSub.Pull(ctx, w.Cfg.TopicCompletion+"-sub", 1000, 500*time.Millisecond)
	require.NoError(t, err)
	return append(msgs, more...)
}
