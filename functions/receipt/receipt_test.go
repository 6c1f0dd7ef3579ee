package receipt

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/ethereum/go-ethereum/common"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/emulator/bridge"
	fnevent "github.com/txfence/txfence/functions/internal/event"
	"github.com/txfence/txfence/functions/internal/stacktest"
	"github.com/txfence/txfence/shared/app"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/evm/rpcproxy"
	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/pgtest"
	"github.com/txfence/txfence/shared/txm"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The production receipt subscription (terraform/pubsub.tf: 20 deliveries,
// backoff 1s to 60s, StaleReceiptTimeout 60s: about 7 deliveries before
// the hand-off) scaled down, with a shorter longest backoff so that a
// prompt is answered "not mined yet" more often before it is handed off.
const (
	handOff     = 1500 * time.Millisecond
	minBackoff  = 10 * time.Millisecond
	maxBackoff  = 300 * time.Millisecond
	maxAttempts = 20
	deadTopic   = "txfence-deadletter"
	deadSub     = "txfence-deadletter-pull"
)

// setup is one test's world (Pub/Sub on, one signer), its node, the
// Receipt function served over HTTP as the Functions Framework serves it,
// and a push bridge with a dead-letter topic delivering the receipt topic
// to it. answers counts the function's non-2xx answers.
type setup struct {
	w       *stacktest.World
	n       *stacktest.Node
	b       *bridge.Bridge
	answers *atomic.Int32
}

func newSetup(t *testing.T, attempts int) *setup {
	t.Helper()
	w := stacktest.NewWorld(t, 1, func(c *config.Config) { c.StaleReceiptTimeout = handOff }).WithPubSub(t)
	n := w.Node(t, "A")
	ctx := context.Background()
	require.NoError(t, w.PubSub.CreateTopic(ctx, deadTopic))
	require.NoError(t, w.PubSub.CreateSubscription(ctx, deadSub, deadTopic, false))

	h, err := NewHandler(n.Receipts, n.Metrics, logging.Discard())
	require.NoError(t, err)
	var answers atomic.Int32
	ceh := fnevent.Handler(func(ctx context.Context, e event.Event) error {
		err := h.Handle(ctx, e)
		if err != nil {
			answers.Add(1)
		}
		return err
	})
	srv := httptest.NewServer(http.StripPrefix("/Receipt", ceh))
	t.Cleanup(srv.Close)

	b, err := bridge.New(w.PubSub.Client, w.Cfg.Project,
		[]bridge.Route{{Subscription: w.Cfg.TopicReceipt + "-sub", Endpoints: []string{srv.URL + "/Receipt"}}},
		bridge.Options{MaxAttempts: attempts, MinBackoff: minBackoff, MaxBackoff: maxBackoff, DeadLetterTopic: deadTopic},
		logging.Discard())
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := b.Run(runCtx); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("bridge: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return &setup{w: w, n: n, b: b, answers: &answers}
}

// broadcast creates one transfer and drains it: TRACKING, and its receipt
// prompt published to the receipt topic, while the chain mines nothing.
func (s *setup) broadcast(t *testing.T) {
	t.Helper()
	signer := s.w.Keys[0].Address
	s.n.Allocate(t, signer, 1)
	res, err := s.n.Drain.Execute(context.Background(), stacktest.ChainID().Uint64(), signer)
	require.NoError(t, err)
	require.Equal(t, 1, res.Broadcast)
}

// deadLetters pulls what reached the dead-letter topic.
func (s *setup) deadLetters(t *testing.T, wait time.Duration) int {
	t.Helper()
	got, err := s.w.PubSub.Pull(context.Background(), deadSub, 10, wait)
	require.NoError(t, err)
	return len(got)
}

// TestIssue45_ReceiptNotMinedIs2xx: a receipt prompt whose transaction is
// not mined yet, as under normal load when blocks are slow, is answered
// 2xx on its first delivery (Pub/Sub push slows a subscription that
// answers errors, holding back every signer's receipts); it never reaches
// the dead-letter topic, and the transaction is checked again later: the
// finality sweep finds the receipt of the stale TRACKING transaction and
// confirms it at depth.
func TestIssue45_ReceiptNotMinedIs2xx(t *testing.T) {
	t.Parallel()
	s := newSetup(t, maxAttempts)
	s.broadcast(t)

	stacktest.WaitFor(t, "the receipt prompt to be acked", func() bool { return s.b.Stats().Delivered == 1 })
	st := s.b.Stats()
	assert.Zero(t, s.answers.Load(), "no delivery answered with an error")
	assert.Zero(t, st.DeadLettered)
	assert.Equal(t, map[string]int{"TRACKING": 1}, s.w.States(t), "nothing mined yet")

	ctx := context.Background()
	stacktest.WaitFor(t, "the transaction to confirm", func() bool {
		s.w.Mine(1)
		_, _ = s.n.Finality.Pass(ctx)
		return s.w.States(t)["CONFIRMED"] == 1
	})
	assert.Zero(t, s.deadLetters(t, 300*time.Millisecond), "nothing dead-lettered")
	assert.Zero(t, s.b.Stats().DeadLettered)
}

// TestIssue13_FailingReceiptIsDeadLettered: the other side of the rule. A
// prompt whose work fails on every delivery (the chain's RPC endpoints
// down) is retried past the hand-off age and ends in the dead-letter topic,
// where an operator must look.
func TestIssue13_FailingReceiptIsDeadLettered(t *testing.T) {
	t.Parallel()
	const attempts = 12 // the last deliveries come after the hand-off age
	s := newSetup(t, attempts)
	// Every receipt check fails from its first call (the signer's latest
	// nonce); the drain's calls pass.
	s.w.Proxy.Before("eth_getTransactionCount", func(p json.RawMessage) *rpcproxy.Fault {
		if strings.Contains(string(p), "latest") {
			return &rpcproxy.Fault{HTTPStatus: http.StatusBadGateway}
		}
		return nil
	})
	s.broadcast(t)

	assert.Equal(t, 1, s.deadLetters(t, 30*time.Second), "the failing prompt is dead-lettered")
	assert.EqualValues(t, attempts, s.answers.Load(), "every delivery failed")
	assert.EqualValues(t, 1, s.b.Stats().DeadLettered)
}

// TestCheckReceipts_LoadsOnlyWhatCanBeMined: of a signer's transactions in
// flight, only those below the chain's latest nonce are loaded and looked up
// (a hot signer has thousands in flight and a block takes a few); the rest
// are counted as still waiting, so the prompt is retried for them.
func TestCheckReceipts_LoadsOnlyWhatCanBeMined(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 1)
	n := w.Node(t, "A")
	signer := w.Keys[0].Address
	ctx := context.Background()
	chainID := stacktest.ChainID().Uint64()

	drain := func(count int) {
		n.Allocate(t, signer, count)
		res, err := n.Drain.Execute(ctx, chainID, signer)
		require.NoError(t, err)
		require.Equal(t, count, res.Broadcast)
	}
	drain(3)
	w.MineAll(t, signer, 3)
	drain(4) // in the pool, not mined

	below, waiting, err := n.Store.TrackingBelow(ctx, chainID, signer, 3, 0)
	require.NoError(t, err)
	require.Len(t, below, 3)
	for i, tr := range below {
		assert.EqualValues(t, i, tr.Tx.Nonce)
		assert.NotEmpty(t, tr.Attempts, "attempts come with each")
	}
	assert.Equal(t, 4, waiting)

	mined, err := n.Receipts.Execute(ctx, chainID, signer)
	assert.Equal(t, 3, mined)
	require.ErrorIs(t, err, app.ErrNotMined)
	assert.Contains(t, err.Error(), "4 of 7")
	assert.Equal(t, map[string]int{"MINED": 3, "TRACKING": 4}, w.States(t))

	w.MineAll(t, signer, 7)
	mined, err = n.Receipts.Execute(ctx, chainID, signer)
	require.NoError(t, err)
	assert.Equal(t, 4, mined)
	assert.Equal(t, map[string]int{"MINED": 7}, w.States(t))
}

// TestCheckReceipts_LeaseOnlyToWrite: the lookups need no lease. A check
// that finds nothing mined leaves the signer's chain lease alone (another
// holds it: the check neither waits nor marks it wanted), and a receipt
// written by another check between this one's lookup and its write is
// left as it is, without an error.
func TestCheckReceipts_LeaseOnlyToWrite(t *testing.T) {
	t.Parallel()
	w, a, b, key := broadcastOnA(t, 2)
	signer, chainID := key.Signer, key.ChainID
	ctx := context.Background()
	held, _, err := a.Leases.Acquire(ctx, key, "holder")
	require.NoError(t, err)
	_, err = b.Receipts.Execute(ctx, chainID, signer)
	require.ErrorIs(t, err, app.ErrNotMined)
	assert.NotErrorIs(t, err, app.ErrNoLease)
	wanted, err := a.Leases.Wanted(ctx, held)
	require.NoError(t, err)
	assert.False(t, wanted.Any, "a check with nothing to write does not ask for the lease")
	require.NoError(t, a.Leases.Release(ctx, held))

	// Both mined; A looks them up, B writes them first, then A writes.
	w.MineAll(t, signer, 2)
	below, _, err := a.Store.TrackingBelow(ctx, chainID, signer, 2, 0)
	require.NoError(t, err)
	require.Len(t, below, 2)
	mined, err := b.Receipts.Execute(ctx, chainID, signer)
	require.NoError(t, err)
	require.Equal(t, 2, mined)
	l, _, err := a.Leases.Acquire(ctx, key, "late")
	require.NoError(t, err)
	_, err = a.Store.MarkMined(ctx, l, receiptsOf(t, w, below))
	require.NoError(t, err, "already MINED: left as it is")
	assert.Equal(t, map[string]int{"MINED": 2}, w.States(t))
	var history int
	require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM tx_history WHERE to_state = 'MINED'`).Scan(&history))
	assert.Equal(t, 2, history, "one MINED entry per transaction")
}

// TestCheckReceipts_GivesUpWhatAnotherWrote: a check that found receipts
// and waits for the signer's chain lease, held by another invocation that
// writes those same receipts meanwhile (another process's check of the same
// block), stops waiting once they are written: no ErrNoLease after the
// lease wait, no write, no lease taken.
func TestCheckReceipts_GivesUpWhatAnotherWrote(t *testing.T) {
	t.Parallel()
	w, a, b, key := broadcastOnA(t, 3)
	signer, chainID := key.Signer, key.ChainID
	ctx := context.Background()
	w.MineAll(t, signer, 3)
	held, _, err := a.Leases.Acquire(ctx, key, "other check")
	require.NoError(t, err)
	done := make(chan error, 1)
	var mined int
	go func() {
		var err error
		mined, err = b.Receipts.Execute(ctx, chainID, signer)
		done <- err
	}()
	// B waits for the lease (marking it wanted); the holder writes the
	// receipts, and keeps the lease past B's whole wait.
	stacktest.WaitFor(t, "B to ask for the lease", func() bool {
		wanted, err := a.Leases.Wanted(ctx, held)
		require.NoError(t, err)
		return wanted.Any
	})
	below, _, err := a.Store.TrackingBelow(ctx, chainID, signer, 3, 0)
	require.NoError(t, err)
	require.Len(t, below, 3)
	_, err = a.Store.MarkMined(ctx, held, receiptsOf(t, w, below))
	require.NoError(t, err)

	require.NoError(t, <-done, "B gave up its wait once the receipts were written, before ErrNoLease")
	assert.Equal(t, 3, mined, "what B found is mined, by whoever wrote it")
	assert.Zero(t, b.Metrics.Count("receipt_check_total", "result", "mined"), "B wrote nothing")
	assert.Equal(t, map[string]int{"MINED": 3}, w.States(t))
	rows, err := w.DB.Pool.Query(ctx, `SELECT DISTINCT owner FROM tx_history WHERE to_state = 'MINED'`)
	require.NoError(t, err)
	owners, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	assert.Equal(t, []string{"other check"}, owners)
	require.NoError(t, a.Leases.Check(ctx, held), "the holder kept its lease throughout")
}

// TestCheckReceipts_FollowsTheHead: a check that finds broadcast
// transactions not mined yet follows the chain's head (within ReceiptWait)
// and writes their receipts when the block comes, instead of asking for a
// retry and leaving the next look to the prompt's backoff. Checks that wait
// at once share the chain's head: one call a poll, however many wait. A
// second prompt for a signer being checked is answered at once.
func TestCheckReceipts_FollowsTheHead(t *testing.T) {
	t.Parallel()
	const poll = 50 * time.Millisecond // a fifth of the finality interval
	w := stacktest.NewWorld(t, 3, func(c *config.Config) {
		c.ReceiptWait = time.Minute
		c.FinalityInterval = 5 * poll
	})
	n := w.Node(t, "A")
	ctx := context.Background()
	chainID := stacktest.ChainID().Uint64()
	for _, k := range w.Keys {
		n.Allocate(t, k.Address, 1)
		res, err := n.Drain.Execute(ctx, chainID, k.Address)
		require.NoError(t, err)
		require.Equal(t, 1, res.Broadcast)
	}
	type result struct {
		mined int
		err   error
	}
	results := make(chan result, len(w.Keys))
	w.Proxy.Reset()
	for _, k := range w.Keys {
		go func() {
			mined, err := n.Receipts.Execute(ctx, chainID, k.Address)
			results <- result{mined, err}
		}()
	}
	const waited = 20 * poll
	// sleep: the checks wait this long; how many head calls they make in it is what is under test
	time.Sleep(waited)
	again, err := n.Receipts.Execute(ctx, chainID, w.Keys[0].Address)
	require.NoError(t, err, "a prompt for a signer being checked is answered at once")
	assert.Zero(t, again)
	heads := w.Proxy.Count("eth_getBlockByNumber")
	t.Logf("%d head calls while 3 checks waited %s, polling every %s", heads, waited, poll)
	assert.LessOrEqual(t, heads, int(waited/poll)+3, "the waiting checks share the head")
	select {
	case r := <-results:
		t.Fatalf("a check ended before its block came: %+v", r)
	default:
	}

	w.Mine(1)
	for range w.Keys {
		select {
		case r := <-results:
			require.NoError(t, r.err)
			assert.Equal(t, 1, r.mined, "written when the block came")
		case <-time.After(30 * time.Second):
			t.Fatal("a check did not see the block")
		}
	}
	assert.Equal(t, map[string]int{"MINED": 3}, w.States(t))
}

// TestCheckReceipts_WaitSpent: with no block, a check asks for a retry
// once ReceiptWait is spent, and with ReceiptWait 0 at once.
func TestCheckReceipts_WaitSpent(t *testing.T) {
	t.Parallel()
	for _, wait := range []time.Duration{0, 300 * time.Millisecond} {
		w := stacktest.NewWorld(t, 1, func(c *config.Config) {
			c.ReceiptWait = wait
			c.FinalityInterval = 250 * time.Millisecond
		})
		n := w.Node(t, "A")
		ctx := context.Background()
		chainID := stacktest.ChainID().Uint64()
		signer := w.Keys[0].Address
		n.Allocate(t, signer, 1)
		_, err := n.Drain.Execute(ctx, chainID, signer)
		require.NoError(t, err)
		start := time.Now()
		_, err = n.Receipts.Execute(ctx, chainID, signer)
		took := time.Since(start)
		require.ErrorIs(t, err, app.ErrNotMined, "wait %s", wait)
		assert.GreaterOrEqual(t, took, wait, "it followed the head for the wait first")
		assert.Equal(t, map[string]int{"TRACKING": 1}, w.States(t))
	}
}

// broadcastOnA is a world with nodes A and B and count transactions of its
// signer broadcast by A; key is the signer's chain lease.
func broadcastOnA(t *testing.T, count int) (*stacktest.World, *stacktest.Node, *stacktest.Node, txm.LeaseKey) {
	t.Helper()
	w := stacktest.NewWorld(t, 1)
	a, b := w.Node(t, "A"), w.Node(t, "B")
	key := txm.LeaseKey{ChainID: stacktest.ChainID().Uint64(), Signer: w.Keys[0].Address, Scope: txm.ScopeChain}
	a.Allocate(t, key.Signer, count)
	res, err := a.Drain.Execute(context.Background(), key.ChainID, key.Signer)
	require.NoError(t, err)
	require.Equal(t, count, res.Broadcast)
	return w, a, b, key
}

// receiptsOf reads from the chain the receipts of the transactions' first
// attempts, as a check finds them.
func receiptsOf(t *testing.T, w *stacktest.World, tracked []txm.Tracked) []txm.Mined {
	t.Helper()
	var found []txm.Mined
	for _, tr := range tracked {
		r, err := w.Chain.Backend.Client().TransactionReceipt(context.Background(), tr.Attempts[0].Hash)
		require.NoError(t, err)
		found = append(found, txm.Mined{TxID: tr.Tx.ID, AttemptNo: tr.Attempts[0].No, Receipt: txm.Receipt{
			BlockNumber: r.BlockNumber.Uint64(), BlockHash: r.BlockHash, Status: r.Status, GasUsed: r.GasUsed, EffectiveGasPrice: r.EffectiveGasPrice}})
	}
	return found
}

// TestCheckReceipts_AHotSignerThroughItsBlocks: a signer with many
// transactions mined at once has their receipts found through their
// blocks' receipts (two receipt look-ups for the ends, one call for the
// blocks), the same receipts a look-up each gives, another signer's
// transactions in those blocks left alone; and through a look-up each
// from a node that does not serve block receipts.
func TestCheckReceipts_AHotSignerThroughItsBlocks(t *testing.T) {
	t.Parallel()
	for _, served := range []bool{true, false} {
		t.Run(map[bool]string{true: "served", false: "not served"}[served], func(t *testing.T) {
			t.Parallel()
			w := stacktest.NewWorld(t, 2)
			n := w.Node(t, "A")
			hot, other := w.Keys[0].Address, w.Keys[1].Address
			ctx := context.Background()
			chainID := stacktest.ChainID().Uint64()
			drain := func(signer common.Address, count int) {
				n.Allocate(t, signer, count)
				res, err := n.Drain.Execute(ctx, chainID, signer)
				require.NoError(t, err)
				require.Equal(t, count, res.Broadcast)
			}
			drain(hot, 30)
			w.MineAll(t, hot, 30)
			drain(hot, 30)
			drain(other, 2)
			w.MineAll(t, hot, 60)
			w.MineAll(t, other, 2)

			w.Proxy.Reset()
			if !served {
				w.Proxy.Fail("eth_getBlockReceipts", -1, rpcproxy.Fault{RPCError: &rpcproxy.RPCError{Code: -32601,
					Message: "the method eth_getBlockReceipts does not exist/is not available"}})
			}
			mined, err := n.Receipts.Execute(ctx, chainID, hot)
			require.NoError(t, err)
			assert.Equal(t, 60, mined)
			if served {
				assert.Equal(t, 2, w.Proxy.Count("eth_getTransactionReceipt"), "the ends")
				assert.Equal(t, 2, w.Proxy.Count("eth_getBlockReceipts"), "their two blocks")
			} else {
				assert.Equal(t, 2+60, w.Proxy.Count("eth_getTransactionReceipt"), "the ends, then each")
			}
			assert.Equal(t, map[string]int{"MINED": 60, "TRACKING": 2}, w.States(t), "the other signer's are its own check's")

			rows, err := w.DB.Pool.Query(ctx, `SELECT a.tx_hash, t.receipt_block_number, t.receipt_block_hash, t.receipt_gas_used
FROM managed_tx t JOIN tx_attempt a ON a.tx_id = t.id AND a.attempt_no = t.receipt_attempt_no WHERE t.state = 'MINED'`)
			require.NoError(t, err)
			got := 0
			for rows.Next() {
				var hash, blockHash string
				var block, gas int64
				require.NoError(t, rows.Scan(&hash, &block, &blockHash, &gas))
				r, err := w.Chain.Backend.Client().TransactionReceipt(ctx, common.HexToHash(hash))
				require.NoError(t, err)
				assert.EqualValues(t, r.BlockNumber.Int64(), block)
				assert.Equal(t, r.BlockHash, common.HexToHash(blockHash))
				assert.EqualValues(t, r.GasUsed, gas)
				got++
			}
			require.NoError(t, rows.Err())
			assert.Equal(t, 60, got)
		})
	}
}

// TestCheckReceipts_ItsBlocksReorgedDuringTheLookUp: a hot signer's block
// replaced between the receipts of its ends and its blocks' receipts
// leaves nothing written from the block that left, and the transactions,
// mined again in the new branch, end MINED in it.
func TestCheckReceipts_ItsBlocksReorgedDuringTheLookUp(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 1)
	n := w.Node(t, "A")
	hot := w.Keys[0].Address
	ctx := context.Background()
	chainID := stacktest.ChainID().Uint64()
	n.Allocate(t, hot, 40)
	res, err := n.Drain.Execute(ctx, chainID, hot)
	require.NoError(t, err)
	require.Equal(t, 40, res.Broadcast)
	w.MineAll(t, hot, 40)

	var once sync.Once
	var reorgErr error
	w.Proxy.Before("eth_getBlockReceipts", func(json.RawMessage) *rpcproxy.Fault {
		once.Do(func() { reorgErr = w.Chain.Reorg(1, false) })
		return nil
	})
	_, err = n.Receipts.Execute(ctx, chainID, hot)
	require.NoError(t, reorgErr)
	require.Equal(t, 1, w.Proxy.Count("eth_getBlockReceipts"), "the look-up went through the blocks")
	if err != nil {
		require.ErrorIs(t, err, app.ErrNotMined, "the new branch may not hold them yet")
	}
	w.MineAll(t, hot, 40)
	_, err = n.Receipts.Execute(ctx, chainID, hot)
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"MINED": 40}, w.States(t))

	rows, err := w.DB.Pool.Query(ctx, `SELECT a.tx_hash, t.receipt_block_number, t.receipt_block_hash
FROM managed_tx t JOIN tx_attempt a ON a.tx_id = t.id AND a.attempt_no = t.receipt_attempt_no`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var hash, blockHash string
		var block int64
		require.NoError(t, rows.Scan(&hash, &block, &blockHash))
		r, err := w.Chain.Backend.Client().TransactionReceipt(ctx, common.HexToHash(hash))
		require.NoError(t, err)
		assert.Equal(t, r.BlockHash, common.HexToHash(blockHash), "the canonical block's receipt")
		assert.EqualValues(t, r.BlockNumber.Int64(), block)
	}
	require.NoError(t, rows.Err())
}
