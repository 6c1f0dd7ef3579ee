package submit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/functions/internal/stacktest"

	"github.com/txfence/txfence/shared/app"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/evm/rpcproxy"
	"github.com/txfence/txfence/shared/testsupport"
	"github.com/txfence/txfence/shared/txm"
)

// TestIssue4_HotSignerInOrder: 500 transactions created through the API for
// one signer are broadcast in nonce order and mined, and the recording
// proxy sees that every hash it forwards already had its attempt committed.
func TestIssue4_HotSignerInOrder(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 1)
	apis := []*stacktest.Node{w.Node(t, "api0"), w.Node(t, "api1"), w.Node(t, "api2")}
	sub := w.Node(t, "sub0")
	signer := w.Keys[0].Address

	var mu sync.Mutex
	var sentNonces []uint64
	var unpersisted []string
	w.Proxy.Before("eth_sendRawTransaction", func(params json.RawMessage) *rpcproxy.Fault {
		h, err := rpcproxy.TxHashOf(params)
		if err != nil {
			return &rpcproxy.Fault{RPCError: &rpcproxy.RPCError{Code: -32602, Message: err.Error()}}
		}
		var n int
		if err := w.DB.Pool.QueryRow(context.Background(), `SELECT count(*) FROM tx_attempt WHERE tx_hash = $1`, h.Hex()).Scan(&n); err != nil || n != 1 {
			mu.Lock()
			unpersisted = append(unpersisted, h.Hex())
			mu.Unlock()
		}
		var raw []hexutil.Bytes
		_ = json.Unmarshal(params, &raw)
		var tx types.Transaction
		if len(raw) == 1 && tx.UnmarshalBinary(raw[0]) == nil {
			mu.Lock()
			sentNonces = append(sentNonces, tx.Nonce())
			mu.Unlock()
		}
		return nil
	})

	const n = 500
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var wg sync.WaitGroup
	var failed atomic.Int64
	sem := make(chan struct{}, 64)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			body, _ := json.Marshal(map[string]any{"from": signer.Hex(), "to": "0x000000000000000000000000000000000000dEaD",
				"value": fmt.Sprint(i + 1), "gasLimit": 21000})
			resp, err := client.Post(apis[i%3].APIURL+"/v1/transactions", "application/json", bytes.NewReader(body))
			if err != nil || resp.StatusCode != http.StatusAccepted {
				failed.Add(1)
				return
			}
			resp.Body.Close()
		}(i)
	}
	wg.Wait()
	require.Zero(t, failed.Load())

	for w.States(t)["ALLOCATED"] > 0 {
		require.NoError(t, handler(t, sub).Handle(context.Background(), stacktest.Prompt(t, signer)))
	}
	assert.Equal(t, map[string]int{"TRACKING": n}, w.States(t))
	w.MineAll(t, signer, n)

	mu.Lock()
	defer mu.Unlock()
	assert.Empty(t, unpersisted, "every broadcast hash had its attempt committed first")
	require.Len(t, sentNonces, n, "each transaction broadcast once")
	for i, nonce := range sentNonces {
		require.EqualValues(t, i, nonce, "broadcast in nonce order")
	}
	// Every persisted attempt is what the chain mined.
	rows, err := w.DB.Pool.Query(context.Background(), `SELECT tx_hash FROM tx_attempt`)
	require.NoError(t, err)
	var hashes []common.Hash
	for rows.Next() {
		var h string
		require.NoError(t, rows.Scan(&h))
		hashes = append(hashes, common.HexToHash(h))
	}
	require.Len(t, hashes, n)
	for _, h := range hashes {
		r, err := w.Chain.Backend.Client().TransactionReceipt(context.Background(), h)
		require.NoError(t, err, h.Hex())
		assert.EqualValues(t, 1, r.Status)
	}
	assert.EqualValues(t, n, sub.Metrics.Count("tx_submit_total", "result", "accepted"))
}

// crashWindow runs a drain on a "dead" node that stops at a hook and never
// comes back on its own (its lease is not released), lets another node
// deliver the same prompt again, and returns the stuck node's result channel.
func TestIssue4_CrashWindows(t *testing.T) {
	t.Parallel()
	for _, window := range []string{"after persist", "after broadcast"} {
		t.Run(window, func(t *testing.T) {
			t.Parallel()
			w := stacktest.NewWorld(t, 1, func(c *config.Config) {
				c.Lease.Duration = 300 * time.Millisecond
				c.Lease.RenewEvery = 100 * time.Millisecond
				c.Lease.ClockSkew = 50 * time.Millisecond
			})
			dead, live := w.Node(t, "dead"), w.Node(t, "live")
			signer := w.Keys[0].Address
			dead.Allocate(t, signer, 5)

			stopped, resume := make(chan struct{}), make(chan struct{})
			hook := func() { dead.Leases.Pause(); close(stopped); <-resume; dead.Leases.Unpause() }
			if window == "after persist" {
				dead.Drain.SetHooks(app.SubmitHooks{AfterPersist: hook})
			} else {
				dead.Drain.SetHooks(app.SubmitHooks{AfterBroadcast: hook})
			}
			deadErr := make(chan error, 1)
			go func() { _, err := dead.Drain.Execute(context.Background(), w.Cfg.Chains[0].ID, signer); deadErr <- err }()
			<-stopped
			original := w.AttemptHashes(t)
			require.Len(t, original, 5, "the dead node persisted its attempts")

			// The redelivered prompt: retried (nack) until the dead node's
			// lease expires, then it converges.
			var err error
			stacktest.WaitFor(t, "the redelivery to succeed", func() bool {
				err = handler(t, live).Handle(context.Background(), stacktest.Prompt(t, signer))
				return err == nil
			})
			assert.Equal(t, map[string]int{"TRACKING": 5}, w.States(t))
			assert.Equal(t, original, w.AttemptHashes(t), "converged to the original hashes")
			for id, n := range w.AttemptsPerTx(t) {
				assert.Equal(t, 1, n, "tx %s has one attempt", id)
			}

			// The dead node wakes up: nothing it does changes anything.
			close(resume)
			assert.ErrorIs(t, <-deadErr, txm.ErrFenced)
			assert.Equal(t, original, w.AttemptHashes(t))
			w.MineAll(t, signer, 5)
			for _, h := range original {
				r, err := w.Chain.Backend.Client().TransactionReceipt(context.Background(), common.HexToHash(h))
				require.NoError(t, err)
				assert.EqualValues(t, 1, r.Status)
			}
		})
	}
}

// TestIssue4_DualActive: two Submit invocations for one signer on different
// instances. The first stalls past its lease; the second takes over and
// drains everything; the first then writes nothing.
func TestIssue4_DualActive(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 1, func(c *config.Config) {
		c.Lease.Duration = 300 * time.Millisecond
		c.Lease.RenewEvery = 100 * time.Millisecond
		c.Lease.ClockSkew = 50 * time.Millisecond
	})
	a, b := w.Node(t, "A"), w.Node(t, "B")
	signer := w.Keys[0].Address
	const n = 150
	a.Allocate(t, signer, n)

	var once sync.Once
	stalled := make(chan struct{})
	a.Drain.SetHooks(app.SubmitHooks{AfterPersist: func() {
		once.Do(func() { w.StallUntilTakenOver(a, signer, stalled) })
	}})
	aErr := make(chan error, 1)
	go func() { _, err := a.Drain.Execute(context.Background(), w.Cfg.Chains[0].ID, signer); aErr <- err }()
	<-stalled
	var aToken int64
	require.NoError(t, w.DB.Pool.QueryRow(context.Background(), `SELECT fencing_token FROM signer_lease WHERE scope = 'chain'`).Scan(&aToken))

	var takeoverAt time.Time
	// A drain lets the lease go after a while when work remains and prompts
	// itself again through the outbox; here the test is the relay, so it
	// prompts B until nothing is left.
	stacktest.WaitFor(t, "B to take over and drain", func() bool {
		err := handler(t, b).Handle(context.Background(), stacktest.Prompt(t, signer))
		return err == nil && w.States(t)["ALLOCATED"] == 0
	})
	require.NoError(t, w.DB.Pool.QueryRow(context.Background(),
		`SELECT min(created_at) FROM tx_history WHERE reason = 'broadcast' AND fencing_token > $1`, aToken).Scan(&takeoverAt))
	err := <-aErr
	require.ErrorIs(t, err, txm.ErrFenced)
	fenced := a.Metrics.Count("lease_fenced_total", "op", "lease_check") + a.Metrics.Count("lease_fenced_total", "op", "mark_tracking") +
		a.Metrics.Count("lease_fenced_total", "op", "save_attempts")
	assert.Positive(t, fenced, "A's writes after the take-over were fenced")

	assert.Equal(t, map[string]int{"TRACKING": n}, w.States(t))
	for id, c := range w.AttemptsPerTx(t) {
		assert.Equal(t, 1, c, "tx %s: one attempt, whoever signed it", id)
	}
	var stale int
	require.NoError(t, w.DB.Pool.QueryRow(context.Background(), `
SELECT (SELECT count(*) FROM managed_tx WHERE fencing_token = $1 AND updated_at >= $2)
     + (SELECT count(*) FROM tx_attempt WHERE fencing_token = $1 AND created_at >= $2)
     + (SELECT count(*) FROM tx_history WHERE fencing_token = $1 AND created_at >= $2 AND reason = 'broadcast')`,
		aToken, takeoverAt).Scan(&stale))
	assert.Zero(t, stale, "no row carries A's token after B's take-over")
	w.MineAll(t, signer, n)
}

// TestIssue4_BroadcastOutcomes: how the drain treats each class of broadcast
// answer (the classifier itself is tested in shared/evm). A refusal that may
// pass is recorded with a backoff and the prompt acknowledged (issue 10: no
// retries at the prompt's rate); after the backoff a transient failure sends
// the same bytes again, an underpriced one a replacement with bumped fees.
// One that can pass once the signer is funded goes STUCK and holds the
// later nonces; one that never can (issue 44) has its nonce filled by a
// placeholder at once, and the later nonces go on.
func TestIssue4_BroadcastOutcomes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		message  string
		state    string
		subState string
		backoff  bool
		bumped   bool
		filled   bool
	}{
		{"already known", "TRACKING", "broadcast_known", false, false, false},
		{"nonce too low: address 0x..., tx: 0 state: 1", "TRACKING", "broadcast_nonce_too_low", false, false, false},
		{"insufficient funds for gas * price + value: address 0x... have 0 want 21000", "STUCK", "insufficient_funds", false, false, false},
		{"intrinsic gas too low: gas 20000, minimum needed 21000", "TRACKING", "intrinsic_gas_too_low", false, false, true},
		{"exceeds block gas limit", "TRACKING", "exceeds_block_gas_limit", false, false, true},
		{"replacement transaction underpriced", "ALLOCATED", "broadcast_replacement_underpriced", true, true, false},
		{"transaction underpriced", "ALLOCATED", "broadcast_underpriced", true, true, false},
		{"upstream connect error or disconnect/reset before headers", "ALLOCATED", "broadcast_transient", true, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.message, func(t *testing.T) {
			t.Parallel()
			w := stacktest.NewWorld(t, 1, func(c *config.Config) { c.RetryBackoffMin, c.RetryBackoffMax = 300*time.Millisecond, time.Second })
			nd := w.Node(t, "n")
			signer := w.Keys[0].Address
			ids := nd.Allocate(t, signer, 2)
			w.Proxy.Fail("eth_sendRawTransaction", 1, rpcproxy.Fault{RPCError: &rpcproxy.RPCError{Code: -32000, Message: tc.message}})
			require.NoError(t, handler(t, nd).Handle(context.Background(), stacktest.Prompt(t, signer)), "the prompt is acknowledged")
			first := firstByNonce(t, w, ids)
			var state, sub, lastErr *string
			var failures int
			var next *time.Time
			require.NoError(t, w.DB.Pool.QueryRow(context.Background(),
				`SELECT state, sub_state, last_error, failures, next_attempt_at FROM managed_tx WHERE id = $1`, first).
				Scan(&state, &sub, &lastErr, &failures, &next))
			assert.Equal(t, tc.state, *state)
			require.NotNil(t, sub)
			assert.Equal(t, tc.subState, *sub)
			if tc.filled {
				var kind string
				var gas int64
				require.NoError(t, w.DB.Pool.QueryRow(context.Background(),
					`SELECT kind, gas_limit FROM tx_attempt WHERE tx_id = $1 ORDER BY attempt_no DESC LIMIT 1`, first).Scan(&kind, &gas))
				assert.Equal(t, string(txm.AttemptPlaceholder), kind, "its nonce is filled")
				assert.EqualValues(t, 21000, gas)
				assert.Equal(t, map[string]int{"TRACKING": 2}, w.States(t), "the later nonce is not held up")
				return
			}
			if tc.state != "TRACKING" {
				require.NotNil(t, lastErr, "the reason is recorded, never dropped silently")
				assert.Contains(t, *lastErr, tc.message[:10])
				var second string
				require.NoError(t, w.DB.Pool.QueryRow(context.Background(),
					`SELECT state FROM managed_tx ORDER BY nonce OFFSET 1 LIMIT 1`).Scan(&second))
				assert.Equal(t, "ALLOCATED", second, "the drain stops at the failed nonce")
			}
			if tc.state == "STUCK" {
				var hist int
				require.NoError(t, w.DB.Pool.QueryRow(context.Background(),
					`SELECT count(*) FROM tx_history WHERE tx_id = $1 AND to_state = 'STUCK' AND sub_state = $2`, first, tc.subState).Scan(&hist))
				assert.Equal(t, 1, hist)
			}
			if !tc.backoff {
				return
			}
			assert.Equal(t, 1, failures)
			require.NotNil(t, next, "the transaction backs off")
			before := w.AttemptHashes(t)
			res, err := nd.Drain.Execute(context.Background(), w.Cfg.Chains[0].ID, signer)
			require.NoError(t, err)
			assert.Zero(t, res.Broadcast, "a prompt within the backoff sends nothing")
			testsupport.Eventually(t, 10*time.Second, "the backoff to run out", func() bool {
				var over bool
				require.NoError(t, w.DB.Pool.QueryRow(context.Background(),
					`SELECT next_attempt_at <= clock_timestamp() FROM managed_tx WHERE id = $1`, first).Scan(&over))
				return over
			})
			require.NoError(t, handler(t, nd).Handle(context.Background(), stacktest.Prompt(t, signer)))
			assert.Equal(t, map[string]int{"TRACKING": 2}, w.States(t))
			attempts := w.AttemptsPerTx(t)
			if !tc.bumped {
				assert.Equal(t, before, w.AttemptHashes(t), "the same bytes again")
				return
			}
			assert.Equal(t, 2, attempts[first], "a replacement at the same nonce")
			var prevFee, newFee, prevTip, newTip string
			require.NoError(t, w.DB.Pool.QueryRow(context.Background(), `
SELECT a.max_fee_per_gas::text, b.max_fee_per_gas::text, a.max_priority_fee_per_gas::text, b.max_priority_fee_per_gas::text
FROM tx_attempt a JOIN tx_attempt b ON b.tx_id = a.tx_id AND b.attempt_no = 2 WHERE a.tx_id = $1 AND a.attempt_no = 1`, first).
				Scan(&prevFee, &newFee, &prevTip, &newTip))
			assertBumped(t, prevFee, newFee, w.Cfg.BumpPercent)
			assertBumped(t, prevTip, newTip, w.Cfg.BumpPercent)
		})
	}
}

// assertBumped checks that next pays at least percent more than prev.
func assertBumped(t testing.TB, prev, next string, percent int) {
	t.Helper()
	p, ok1 := new(big.Int).SetString(prev, 10)
	n, ok2 := new(big.Int).SetString(next, 10)
	require.True(t, ok1 && ok2, "%s %s", prev, next)
	min := new(big.Int).Mul(p, big.NewInt(int64(100+percent)))
	assert.True(t, new(big.Int).Mul(n, big.NewInt(100)).Cmp(min) >= 0, "%s is not %d%% above %s", next, percent, prev)
}

func firstByNonce(t testing.TB, w *stacktest.World, ids []string) string {
	t.Helper()
	var id string
	require.NoError(t, w.DB.Pool.QueryRow(context.Background(), `SELECT id::text FROM managed_tx ORDER BY nonce LIMIT 1`).Scan(&id))
	return id
}

// TestIssue4_RevertingCreate: a create without a gas limit whose call would
// revert gets 422 and consumes no nonce.
func TestIssue4_RevertingCreate(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 1)
	nd := w.Node(t, "n")
	signer := w.Keys[0].Address
	contract := w.DeployReverter(t)
	ok := nd.Allocate(t, signer, 1) // the cursor exists and is at 1
	require.Len(t, ok, 1)

	before := cursorOf(t, w, signer)
	body, _ := json.Marshal(map[string]any{"from": signer.Hex(), "to": contract.Hex(), "data": "0x12345678"})
	resp, err := http.Post(nd.APIURL+"/v1/transactions", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	var prob struct {
		Status int `json:"status"`
		Errors []struct{ Field, Message string }
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&prob))
	assert.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode)
	require.NotEmpty(t, prob.Errors)
	assert.Contains(t, prob.Errors[0].Message, "revert")
	assert.Equal(t, before, cursorOf(t, w, signer), "the cursor did not move")
	var rows int
	require.NoError(t, w.DB.Pool.QueryRow(context.Background(), `SELECT count(*) FROM managed_tx`).Scan(&rows))
	assert.Equal(t, 1, rows)

	// Without data that reverts, the same target estimates fine and allocates.
	body, _ = json.Marshal(map[string]any{"from": signer.Hex(), "to": "0x000000000000000000000000000000000000dEaD", "value": "1"})
	resp2, err := http.Post(nd.APIURL+"/v1/transactions", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	resp2.Body.Close()
	assert.Equal(t, http.StatusAccepted, resp2.StatusCode)
}

func cursorOf(t testing.TB, w *stacktest.World, signer common.Address) int64 {
	t.Helper()
	var n int64
	require.NoError(t, w.DB.Pool.QueryRow(context.Background(), `SELECT next_nonce FROM signer_nonce_cursor WHERE signer = $1`,
		txm.CanonicalAddress(signer)).Scan(&n))
	return n
}

// TestDrainSigner_KeepsTheLeaseUntilWanted: a hot signer's drain keeps the
// signer's chain lease past drainHold while nobody else asks for it (it
// used to hand it on every half second and lose most of its broadcast
// rate); it lets it go soon after a waiting invocation marks it wanted,
// and takes it back once the waiter is done, without a fresh prompt (which
// cost a Pub/Sub round trip per hand-over). A waiter that keeps it past
// the wait gets the rest handed on through a prompt.
func TestDrainSigner_KeepsTheLeaseUntilWanted(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 1)
	n := w.Node(t, "A")
	signer := w.Keys[0].Address
	chainID := stacktest.ChainID().Uint64()
	ctx := context.Background()
	const count = 2 * app.DrainBatch // two batches, each held up longer than drainHold
	persisted := make(chan struct{}, 4*count)
	n.Drain.SetHooks(app.SubmitHooks{AfterPersist: func() {
		persisted <- struct{}{}
		// sleep: each batch is held up longer than drainHold, so that the drain decides whether to keep the lease
		time.Sleep(600 * time.Millisecond)
	}})
	key := txm.LeaseKey{ChainID: chainID, Signer: signer, Scope: txm.ScopeChain}
	prompts := func() int {
		var k int
		require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE topic = $1`, w.Cfg.TopicSubmit).Scan(&k))
		return k
	}

	n.Allocate(t, signer, count)
	start := time.Now()
	res, err := n.Drain.Execute(ctx, chainID, signer)
	require.NoError(t, err)
	t.Logf("alone: %+v in %s", res, time.Since(start).Round(time.Millisecond))
	assert.False(t, res.Yielded, "nobody waited: the drain kept the lease")
	assert.Zero(t, res.HandedOver)
	assert.Equal(t, count, res.Broadcast)
	assert.Equal(t, map[string]int{"TRACKING": count}, w.States(t))

	// waitAndTake has another invocation wait for the lease, marking it
	// wanted, until the drain lets it go; it then holds it for hold.
	waitAndTake := func(hold time.Duration) {
		<-persisted
		_, _, err := n.Leases.Acquire(ctx, key, "waiter")
		require.ErrorIs(t, err, txm.ErrLeaseHeld)
		require.NoError(t, n.Leases.Want(ctx, key, "waiter", false))
		var l txm.Lease
		stacktest.WaitFor(t, "the drain to let the lease go", func() bool {
			l, _, err = n.Leases.Acquire(ctx, key, "waiter")
			return err == nil
		})
		wanted, err := n.Leases.Wanted(ctx, l)
		require.NoError(t, err)
		assert.False(t, wanted.Any, "taking the lease clears the mark")
		// sleep: the waiter's work holds the lease this long; whether the drain waits for it or hands on is under test
		time.Sleep(hold)
		require.NoError(t, n.Leases.Release(ctx, l))
	}
	drain := func() (<-chan app.DrainResult, int) {
		for len(persisted) > 0 {
			<-persisted
		}
		n.Allocate(t, signer, count)
		before := prompts()
		done := make(chan app.DrainResult, 1)
		go func() {
			res, err := n.Drain.Execute(ctx, chainID, signer)
			assert.NoError(t, err)
			done <- res
		}()
		return done, before
	}

	// A waiter that writes and lets go: the drain takes the lease back
	// and finishes, with no fresh prompt.
	done, before := drain()
	waitAndTake(10 * time.Millisecond)
	res = <-done
	t.Logf("wanted briefly: %+v", res)
	assert.Equal(t, 1, res.HandedOver, "it let the lease go once")
	assert.False(t, res.Yielded, "it took the lease back")
	assert.Equal(t, count, res.Broadcast, "and drained everything")
	assert.Equal(t, before, prompts(), "no fresh prompt")

	// A waiter that keeps the lease past the wait: the rest is handed on.
	done, before = drain()
	waitAndTake(1500 * time.Millisecond)
	res = <-done
	t.Logf("wanted and kept: %+v", res)
	assert.True(t, res.Yielded, "it prompted Submit again")
	assert.Less(t, res.Broadcast, count, "it yielded with work left")
	assert.Equal(t, before+1, prompts(), "one fresh prompt")
}

// TestDrainSigner_LetsAConfirmationInAfterItsBatch: a hot signer's drain
// lets its chain lease go after the batch it is on once a confirmation
// marked the lease wanted first, without waiting for drainHold as it does
// for a receipt write; then it takes the lease back and drains the rest.
// A confirmation, one a block, waited for the rest of drainHold, and the
// block's finality lag with it. Each batch is held after its attempts
// are persisted until the test lets it on, so that the batches are
// counted, not timed.
func TestDrainSigner_LetsAConfirmationInAfterItsBatch(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 1)
	n := w.Node(t, "A")
	signer := w.Keys[0].Address
	chainID := stacktest.ChainID().Uint64()
	ctx := context.Background()
	key := txm.LeaseKey{ChainID: chainID, Signer: signer, Scope: txm.ScopeChain}
	const count = 3 * app.DrainBatch
	persisted, proceed := make(chan struct{}, 8), make(chan struct{}, 8)
	n.Drain.SetHooks(app.SubmitHooks{AfterPersist: func() {
		persisted <- struct{}{}
		select {
		case <-proceed:
		case <-time.After(10 * time.Second):
		}
	}})

	n.Allocate(t, signer, count)
	done := make(chan app.DrainResult, 1)
	go func() {
		res, err := n.Drain.Execute(ctx, chainID, signer)
		assert.NoError(t, err)
		done <- res
	}()
	<-persisted // the first batch
	require.NoError(t, n.Leases.Want(ctx, key, "finality", true))
	proceed <- struct{}{}
	var l txm.Lease
	stacktest.WaitFor(t, "the drain to let the lease go", func() bool {
		var err error
		l, _, err = n.Leases.Acquire(ctx, key, "finality")
		return err == nil
	})
	assert.Empty(t, persisted, "no batch after the one it was on")
	states := w.States(t)
	require.NoError(t, n.Leases.Release(ctx, l))
	assert.Equal(t, map[string]int{"TRACKING": app.DrainBatch, "ALLOCATED": count - app.DrainBatch}, states,
		"the confirmation had the lease after one batch")
	for range 2 {
		<-persisted
		proceed <- struct{}{}
	}
	res := <-done
	t.Logf("wanted first: %+v", res)
	assert.Equal(t, 1, res.HandedOver, "it let the lease go once")
	assert.False(t, res.Yielded, "it took the lease back")
	assert.Equal(t, count, res.Broadcast)
	assert.Equal(t, map[string]int{"TRACKING": count}, w.States(t))
}

// TestDrainSigner_NothingToDoTakesNoLease: a prompt for a signer whose rows
// another drain already took (most prompts of a busy signer) is answered
// after one read, without taking the signer's chain lease; so is one whose
// only ALLOCATED transaction is backing off. A transaction whose backoff
// ran out, or a pending admin action, is drained as before.
func TestDrainSigner_NothingToDoTakesNoLease(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 1)
	n := w.Node(t, "A")
	signer := w.Keys[0].Address
	chainID := stacktest.ChainID().Uint64()
	ctx := context.Background()
	token := func() int64 {
		var tok int64
		require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT coalesce(max(fencing_token), 0) FROM signer_lease WHERE scope = 'chain' AND signer = $1`,
			txm.CanonicalAddress(signer)).Scan(&tok))
		return tok
	}

	ids := n.Allocate(t, signer, 3)
	res, err := n.Drain.Execute(ctx, chainID, signer)
	require.NoError(t, err)
	require.Equal(t, 3, res.Broadcast)
	took := token()
	require.Positive(t, took, "the drain took the lease")

	res, err = n.Drain.Execute(ctx, chainID, signer)
	require.NoError(t, err)
	assert.Equal(t, app.DrainResult{}, res)
	assert.Equal(t, took, token(), "nothing to do: no lease taken")

	backing := n.Allocate(t, signer, 1)[0]
	_, err = w.DB.Pool.Exec(ctx, `UPDATE managed_tx SET next_attempt_at = clock_timestamp() + interval '1 hour' WHERE id = $1`, backing)
	require.NoError(t, err)
	res, err = n.Drain.Execute(ctx, chainID, signer)
	require.NoError(t, err)
	assert.Zero(t, res.Broadcast)
	assert.Equal(t, took, token(), "only a transaction backing off: no lease taken")

	_, err = w.DB.Pool.Exec(ctx, `UPDATE managed_tx SET next_attempt_at = NULL WHERE id = $1`, backing)
	require.NoError(t, err)
	res, err = n.Drain.Execute(ctx, chainID, signer)
	require.NoError(t, err)
	assert.Equal(t, 1, res.Broadcast, "its backoff ran out: drained")
	assert.Greater(t, token(), took)
	took = token()

	_, _, _, err = n.Store.RecordAction(ctx, txm.ActionRequest{TxID: ids[0], ActionID: "a1", Kind: txm.ActionResubmit, Actor: "ops", Reason: "test"})
	require.NoError(t, err)
	_, err = n.Drain.Execute(ctx, chainID, signer)
	require.NoError(t, err)
	assert.Greater(t, token(), took, "a pending action: the drain took the lease")
	var status string
	require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT status FROM tx_action WHERE action_id = 'a1'`).Scan(&status))
	assert.NotEqual(t, "pending", status, "and carried it out")
}

// slowSigner signs as a remote signer does: after a round trip. It counts
// its signatures.
type slowSigner struct {
	txm.Signer
	delay  time.Duration
	signed *atomic.Int64
}

func (s slowSigner) SignTx(ctx context.Context, tx *types.Transaction, chainID *big.Int) (*types.Transaction, error) {
	// sleep: a remote signer's round trip, the delay under test
	time.Sleep(s.delay)
	s.signed.Add(1)
	return s.Signer.SignTx(ctx, tx, chainID)
}

// TestDrainSigner_ASlowSignerLetsWaitersIn: a drain of a backlog whose
// signer answers in 20ms (as Cloud KMS does) ends each batch's signing
// after a bounded time, so an invocation that wants the signer's lease
// (receipts, confirmations: they wait up to a second) is let in soon, not
// after the whole backlog was signed in one batch (5 s here). The backlog
// still drains whole without a fresh prompt.
func TestDrainSigner_ASlowSignerLetsWaitersIn(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 1)
	var signed atomic.Int64
	w.WrapSigner = func(s txm.Signer) txm.Signer {
		return slowSigner{Signer: s, delay: 20 * time.Millisecond, signed: &signed}
	}
	n := w.Node(t, "A")
	signer := w.Keys[0].Address
	chainID := stacktest.ChainID().Uint64()
	ctx := context.Background()
	key := txm.LeaseKey{ChainID: chainID, Signer: signer, Scope: txm.ScopeChain}
	const count = 250
	n.Allocate(t, signer, count)
	done := make(chan app.DrainResult, 1)
	go func() {
		res, err := n.Drain.Execute(ctx, chainID, signer)
		assert.NoError(t, err)
		done <- res
	}()

	stacktest.WaitFor(t, "the drain to be signing", func() bool { return signed.Load() >= 3 })
	_, _, err := n.Leases.Acquire(ctx, key, "waiter")
	require.ErrorIs(t, err, txm.ErrLeaseHeld, "the drain holds the lease")
	asked := time.Now()
	require.NoError(t, n.Leases.Want(ctx, key, "waiter", false))
	var l txm.Lease
	stacktest.WaitFor(t, "the drain to let the lease go", func() bool {
		l, _, err = n.Leases.Acquire(ctx, key, "waiter")
		return err == nil
	})
	waited := time.Since(asked)
	require.NoError(t, n.Leases.Release(ctx, l))
	t.Logf("the waiter got the lease after %s", waited.Round(time.Millisecond))
	assert.Less(t, waited, 2*time.Second, "let in after a batch, not after the backlog")

	res := <-done
	assert.Equal(t, count, res.Broadcast)
	assert.Equal(t, 1, res.HandedOver)
	assert.False(t, res.Yielded, "it took the lease back")
	assert.Equal(t, map[string]int{"TRACKING": count}, w.States(t))
}

// TestDrainSigner_DrainsShareFeeSuggestions: drains of many signers at once
// in one process ask the node for fees once between them (the latest
// header and the tip were two round trips before each drain's first
// signature), and every transaction is signed with them and broadcast.
// Another process asks for its own.
func TestDrainSigner_DrainsShareFeeSuggestions(t *testing.T) {
	t.Parallel()
	const signers = 12
	w := stacktest.NewWorld(t, signers)
	a, b := w.Node(t, "A"), w.Node(t, "B")
	chainID := stacktest.ChainID().Uint64()
	ctx := context.Background()
	for _, k := range w.Keys {
		a.Allocate(t, k.Address, 1)
	}
	w.Proxy.Reset()
	var wg sync.WaitGroup
	results := make([]app.DrainResult, signers)
	errs := make([]error, signers)
	for i, k := range w.Keys {
		wg.Go(func() { results[i], errs[i] = a.Drain.Execute(ctx, chainID, k.Address) })
	}
	wg.Wait()
	for i := range signers {
		require.NoError(t, errs[i])
		require.Equal(t, 1, results[i].Broadcast)
	}
	// One ask, or two when the drains straddled the reuse time on a slow
	// machine; never one per drain.
	asks := w.Proxy.Count("eth_maxPriorityFeePerGas")
	assert.GreaterOrEqual(t, asks, 1)
	assert.LessOrEqual(t, asks, 2, "drains asked for fees %d times", asks)
	assert.Equal(t, map[string]int{"TRACKING": signers}, w.States(t))

	w.Proxy.Reset()
	b.Allocate(t, w.Keys[0].Address, 1)
	res, err := b.Drain.Execute(ctx, chainID, w.Keys[0].Address)
	require.NoError(t, err)
	require.Equal(t, 1, res.Broadcast)
	assert.Equal(t, 1, w.Proxy.Count("eth_maxPriorityFeePerGas"), "another process asks for its own")
}
