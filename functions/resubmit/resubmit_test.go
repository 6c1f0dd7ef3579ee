package resubmit

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/functions/internal/stacktest"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/evm/rpcproxy"
	"github.com/txfence/txfence/shared/pgtest"
	"github.com/txfence/txfence/shared/txm"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var ctx = context.Background()

func fast(c *config.Config) {
	c.ResubmitInterval = 100 * time.Millisecond
	c.MaxRebroadcasts = 2
}

func TestResubmit_PromptsStrandedWork(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 1, fast)
	n := w.Node(t, "n0")
	n.Allocate(t, w.Keys[0].Address, 3)
	var prompts int
	require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE topic = $1`, w.Cfg.TopicSubmit).Scan(&prompts))
	// sleep: the work must grow older than ResubmitInterval to be stranded, and its age is measured below
	time.Sleep(150 * time.Millisecond)
	st, err := n.Resubmit.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, st.Prompted, "one prompt for the signer, not one per transaction")
	var after int
	require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE topic = $1`, w.Cfg.TopicSubmit).Scan(&after))
	assert.Equal(t, prompts+1, after)
	var text strings.Builder
	require.NoError(t, n.Metrics.WritePrometheus(ctx, &text))
	age, ok := pendingAge(t, n, w.Keys[0].Address.Hex())
	require.True(t, ok, "the gauge is exported, by chain and signer")
	assert.GreaterOrEqual(t, age, 0.15, "the oldest pending transaction waited at least the sleep")
}

// pendingAge reads pending_oldest_age_seconds of signer from the node's
// Prometheus text.
func pendingAge(t *testing.T, n *stacktest.Node, signer string) (float64, bool) {
	t.Helper()
	var text strings.Builder
	require.NoError(t, n.Metrics.WritePrometheus(ctx, &text))
	a, err := txm.ParseAddress(signer)
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^pending_oldest_age_seconds\{chain_id="1337",signer="` + txm.CanonicalAddress(a) + `"\} (\S+)$`).
		FindStringSubmatch(text.String())
	if len(m) != 2 {
		return 0, false
	}
	age, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	return age, true
}

// TestIssue13_PendingOldestPerSigner: the resubmit sweep sets each
// signer's oldest pending age, the series the pending-age alert watches by
// chain and signer; a signer whose transactions all became final drops to
// 0 rather than keeping its last age.
func TestIssue13_PendingOldestPerSigner(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 2, fast)
	n := w.Node(t, "n0")
	busy, done := w.Keys[0].Address, w.Keys[1].Address
	n.Allocate(t, busy, 1)
	n.Allocate(t, done, 1)
	_, err := n.Resubmit.Pass(ctx)
	require.NoError(t, err)
	for _, s := range []string{busy.Hex(), done.Hex()} {
		age, ok := pendingAge(t, n, s)
		require.True(t, ok, "signer %s has its series", s)
		assert.Positive(t, age)
	}

	_, err = n.Drain.Execute(ctx, stacktest.ChainID().Uint64(), done)
	require.NoError(t, err)
	w.MineAll(t, done, 1)
	_, err = n.Receipts.Execute(ctx, stacktest.ChainID().Uint64(), done)
	require.NoError(t, err)
	w.Mine(int(w.Cfg.Confirmations))
	st, err := n.Finality.Pass(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.Confirmed)

	_, err = n.Resubmit.Pass(ctx)
	require.NoError(t, err)
	age, ok := pendingAge(t, n, done.Hex())
	require.True(t, ok)
	assert.Zero(t, age, "nothing of it is pending any more")
	age, _ = pendingAge(t, n, busy.Hex())
	assert.Positive(t, age, "the other signer still waits")
}

// TestResubmit_ResignWithUnchangedFees: a first attempt refused for
// insufficient funds is STUCK; re-signing it with fresh fees that equal its
// own (no block since) yields the very same transaction, which is sent
// again, not saved twice.
func TestResubmit_ResignWithUnchangedFees(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 1, fast)
	n := w.Node(t, "n0")
	signer := w.Keys[0].Address
	ids := n.Allocate(t, signer, 1)
	w.RefuseNextBroadcast("insufficient funds for gas * price + value")
	res, err := n.Drain.Execute(ctx, stacktest.ChainID().Uint64(), signer)
	require.NoError(t, err)
	require.Equal(t, 1, res.Stuck)
	hashes := w.AttemptHashes(t)

	st, err := n.Resubmit.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, st.Recovered, "the node took it this time")
	tx, err := n.Store.GetTx(ctx, ids[0])
	require.NoError(t, err)
	assert.Equal(t, txm.StateTracking, tx.State)
	assert.Equal(t, hashes, w.AttemptHashes(t), "one attempt, sent again")
}

func TestResubmit_RebroadcastsLostBroadcast(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 1, fast)
	n := w.Node(t, "n0")
	signer := w.Keys[0].Address
	ids := n.Allocate(t, signer, 1)
	// The provider says "already known" but never passes the transaction on.
	w.Proxy.Fail("eth_sendRawTransaction", 1, rpcproxy.Fault{RPCError: &rpcproxy.RPCError{Code: -32000, Message: "already known"}})
	_, err := n.Drain.Execute(ctx, stacktest.ChainID().Uint64(), signer)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"TRACKING": 1}, w.States(t))
	hashes := w.AttemptHashes(t)

	// sleep: the broadcast must grow older than ResubmitInterval to be sent again
	time.Sleep(150 * time.Millisecond)
	st, err := n.Resubmit.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, st.Rebroadcast)
	w.MineAll(t, signer, 1)
	_, err = n.Receipts.Execute(ctx, stacktest.ChainID().Uint64(), signer)
	require.NoError(t, err)
	tx, err := n.Store.GetTx(ctx, ids[0])
	require.NoError(t, err)
	assert.Equal(t, "MINED", string(tx.State))
	assert.Equal(t, 2, tx.BroadcastCount)
	assert.Equal(t, hashes, w.AttemptHashes(t), "the same persisted bytes, not a new signature")
}

func TestResubmit_StuckAfterTooManyRebroadcasts(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 1, fast)
	n := w.Node(t, "n0")
	signer := w.Keys[0].Address
	n.Allocate(t, signer, 1)
	w.Proxy.Fail("eth_sendRawTransaction", -1, rpcproxy.Fault{RPCError: &rpcproxy.RPCError{Code: -32000, Message: "already known"}})
	_, err := n.Drain.Execute(ctx, stacktest.ChainID().Uint64(), signer)
	require.NoError(t, err)
	stuck := 0
	for i := 0; i < 10 && stuck == 0; i++ {
		// sleep: each pass comes past ResubmitInterval, so that it rebroadcasts
		time.Sleep(120 * time.Millisecond)
		st, err := n.Resubmit.Pass(ctx)
		require.NoError(t, err)
		stuck += st.Stuck
	}
	require.Equal(t, 1, stuck)
	var sub string
	var reported int
	require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT sub_state FROM managed_tx`).Scan(&sub))
	assert.Equal(t, txm.SubStateTooManyRebroadcasts, sub)
	// sleep: past ResubmitInterval again, when a pass would rebroadcast it were it not STUCK
	time.Sleep(120 * time.Millisecond)
	st, err := n.Resubmit.Pass(ctx)
	require.NoError(t, err)
	assert.Zero(t, st.Stuck+st.Rebroadcast, "a STUCK transaction is left to the stuck policy")
	require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM tx_completion WHERE state = 'STUCK' AND NOT lifecycle`).Scan(&reported))
	assert.Equal(t, 1, reported, "reported once as TxStuck")
}

// lostHead sets the sweep to ask about the next nonce soon after its
// broadcast, and to rebroadcast on its own schedule only after an hour.
func lostHead(c *config.Config) {
	c.ResubmitInterval = time.Hour
	c.BumpAfter = time.Hour
	c.RecheckAfter = 2 * time.Second
}

// drainedSigner allocates count transactions for one signer and drains
// them, with the first broadcast lost on its way when lose is set.
func drainedSigner(t *testing.T, count int, lose bool) (*stacktest.World, *stacktest.Node, []string) {
	t.Helper()
	w := stacktest.NewWorld(t, 1, lostHead)
	n := w.Node(t, "n0")
	ids := n.Allocate(t, w.Keys[0].Address, count)
	if lose {
		w.Proxy.Fail("eth_sendRawTransaction", 1, rpcproxy.Fault{Swallow: true}) // nonce 0 never reaches the node
	}
	_, err := n.Drain.Execute(ctx, stacktest.ChainID().Uint64(), w.Keys[0].Address)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"TRACKING": count}, w.States(t))
	return w, n, ids
}

// A node that lost the next nonce's transaction (its pool dropped it, or
// never promoted it) holds every later nonce back: the sweep finds the head
// unmined after RecheckAfter, learns the node does not know it, and
// rebroadcasts it and the transactions after it, long before
// ResubmitInterval.
func TestResubmit_RebroadcastsFromALostHead(t *testing.T) {
	t.Parallel()
	w, n, ids := drainedSigner(t, 4, true)
	signer := w.Keys[0].Address
	w.Mine(2)
	latest, err := w.Chain.Backend.Client().NonceAt(ctx, signer, nil)
	require.NoError(t, err)
	require.Zero(t, latest, "the node holds nonces 1-3 back behind the missing 0")

	st, err := n.Resubmit.Pass(ctx)
	require.NoError(t, err)
	assert.Zero(t, st.Rebroadcast, "not before RecheckAfter")
	// sleep: past RecheckAfter, when the sweep asks about the head
	time.Sleep(2100 * time.Millisecond)
	w.Proxy.Reset()
	st, err = n.Resubmit.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, w.Proxy.Count("eth_getTransactionByHash"), "only the next nonce is asked about")
	assert.Equal(t, 4, st.Rebroadcast, "the lost head and every transaction after it")
	var sends []time.Time
	for _, c := range w.Proxy.Calls() {
		if c.Method == "eth_sendRawTransaction" {
			sends = append(sends, c.Time)
		}
	}
	require.Len(t, sends, 4)
	for _, at := range sends {
		assert.Equal(t, sends[0], at, "one JSON-RPC batch")
	}
	w.MineAll(t, signer, 4)
	_, err = n.Receipts.Execute(ctx, stacktest.ChainID().Uint64(), signer)
	require.NoError(t, err)
	for _, id := range ids {
		tx, err := n.Store.GetTx(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, "MINED", string(tx.State))
		assert.Equal(t, 2, tx.BroadcastCount, "each rebroadcast recorded")
	}
}

// A head the node knows (it is merely waiting for a block) is left alone.
func TestResubmit_AKnownHeadIsNotRebroadcast(t *testing.T) {
	t.Parallel()
	w, n, _ := drainedSigner(t, 2, false)
	// sleep: past RecheckAfter, when the sweep asks about the head
	time.Sleep(2100 * time.Millisecond)
	w.Proxy.Reset()
	st, err := n.Resubmit.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, w.Proxy.Count("eth_getTransactionByHash"), "the head was asked about")
	assert.Zero(t, st.Rebroadcast)
	assert.Zero(t, w.Proxy.Count("eth_sendRawTransaction"))
}

// A transport failure during the rebroadcast from a lost head fails the
// signer's sweep, records nothing as sent, and the next pass sends again.
func TestResubmit_LostHeadRebroadcastSurvivesATransportFailure(t *testing.T) {
	t.Parallel()
	w, n, _ := drainedSigner(t, 3, true)
	// sleep: past RecheckAfter, when the sweep asks about the head
	time.Sleep(2100 * time.Millisecond)
	w.Proxy.Fail("eth_sendRawTransaction", 1, rpcproxy.Fault{HTTPStatus: 502})
	_, err := n.Resubmit.Pass(ctx)
	require.Error(t, err)
	rows, err := w.DB.Pool.Query(ctx, `SELECT broadcast_count FROM managed_tx ORDER BY nonce`)
	require.NoError(t, err)
	counts, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	assert.Equal(t, []int{1, 1, 1}, counts, "nothing recorded as sent")
	st, err := n.Resubmit.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, 3, st.Rebroadcast)
	w.MineAll(t, w.Keys[0].Address, 3)
}
