package resubmit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/params"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/functions/internal/stacktest"
	"github.com/txfence/txfence/shared/app"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/evm/rpcproxy"
	"github.com/txfence/txfence/shared/stuckpolicy"
	"github.com/txfence/txfence/shared/testsupport"
	"github.com/txfence/txfence/shared/txm"
	"github.com/txfence/txfence/shared/webhook"
)

// reported is one outcome's tx_completion row.
type reported struct {
	State    string
	NewFork  bool
	SubState string
}

func reports(t testing.TB, w *stacktest.World, id string) []reported {
	t.Helper()
	rows, err := w.DB.Pool.Query(ctx, `SELECT state, new_fork, coalesce(sub_state, '') FROM tx_completion WHERE tx_id = $1 AND NOT lifecycle ORDER BY seq`, id)
	require.NoError(t, err)
	var out []reported
	for rows.Next() {
		var r reported
		require.NoError(t, rows.Scan(&r.State, &r.NewFork, &r.SubState))
		out = append(out, r)
	}
	require.NoError(t, rows.Err())
	return out
}

// attemptRow is one tx_attempt row.
type attemptRow struct {
	No             int
	Kind           string
	MaxFee, Tip    *big.Int
	Outcome        string
	BroadcastCount int
}

func attempts(t testing.TB, w *stacktest.World, id string) []attemptRow {
	t.Helper()
	rows, err := w.DB.Pool.Query(ctx, `SELECT attempt_no, kind, max_fee_per_gas::text, max_priority_fee_per_gas::text,
    coalesce(outcome, ''), broadcast_count FROM tx_attempt WHERE tx_id = $1 ORDER BY attempt_no`, id)
	require.NoError(t, err)
	var out []attemptRow
	for rows.Next() {
		var a attemptRow
		var fee, tip string
		require.NoError(t, rows.Scan(&a.No, &a.Kind, &fee, &tip, &a.Outcome, &a.BroadcastCount))
		a.MaxFee, _ = new(big.Int).SetString(fee, 10)
		a.Tip, _ = new(big.Int).SetString(tip, 10)
		out = append(out, a)
	}
	require.NoError(t, rows.Err())
	return out
}

// assertReplacements checks the attempts of a mined transaction: each
// pays at least percent more than the one before (fee and tip), none above
// the caps, exactly one mined and every other one recorded as replaced.
func assertReplacements(t testing.TB, as []attemptRow, percent int, caps txm.FeeCaps) {
	t.Helper()
	require.GreaterOrEqual(t, len(as), 2, "replaced at least once")
	mined := 0
	for i, a := range as {
		if i > 0 {
			prev := as[i-1]
			for _, pair := range [][2]*big.Int{{prev.MaxFee, a.MaxFee}, {prev.Tip, a.Tip}} {
				min := new(big.Int).Mul(pair[0], big.NewInt(int64(100+percent)))
				assert.True(t, new(big.Int).Mul(pair[1], big.NewInt(100)).Cmp(min) >= 0,
					"attempt %d pays %s, not %d%% above %s", a.No, pair[1], percent, pair[0])
			}
			assert.LessOrEqual(t, a.MaxFee.Cmp(caps.MaxFee), 0, "attempt %d above the fee cap", a.No)
			assert.LessOrEqual(t, a.Tip.Cmp(caps.MaxTip), 0, "attempt %d above the tip cap", a.No)
		}
		switch a.Outcome {
		case "mined":
			mined++
		case "replaced":
		default:
			t.Errorf("attempt %d has outcome %q", a.No, a.Outcome)
		}
	}
	assert.Equal(t, 1, mined, "exactly one attempt is mined")
}

// poorSigner leaves keys[1] with about one ether: it sends the rest to
// keys[0] itself, before txfence uses the key (txfence starts after that
// nonce).
func poorSigner(t testing.TB, w *stacktest.World) common.Address {
	t.Helper()
	k := w.Keys[1]
	bal, err := w.Chain.Backend.Client().BalanceAt(ctx, k.Address, nil)
	require.NoError(t, err)
	keep := big.NewInt(params.Ether)
	_, err = w.Chain.Send(ctx, k.Key, w.Keys[0].Address, new(big.Int).Sub(bal, new(big.Int).Add(keep, big.NewInt(params.Ether/100))))
	require.NoError(t, err)
	w.Chain.Commit()
	return k.Address
}

// TestIssue10_FundingDip: the signer's balance is too low for nonce N while
// N..N+9 wait; after a top-up every one of them is CONFIRMED with no call but
// the top-up; N reports TxStuck, then TxConfirmed with newFork.
func TestIssue10_FundingDip(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 2, stacktest.Lively)
	a, b := w.Node(t, "a"), w.Node(t, "b")
	signer := poorSigner(t, w)
	ids := []string{a.CreateTx(t, stacktest.Transfer(signer, big.NewInt(2*params.Ether))).ID}
	for i := 1; i < 10; i++ {
		ids = append(ids, b.CreateTx(t, stacktest.Transfer(signer, big.NewInt(int64(i)))).ID)
	}
	stop := w.Run(t, []*stacktest.Node{a, b}, stacktest.RunOptions{})
	defer stop()

	w.WaitState(t, ids[0], txm.StateStuck, 10*time.Second)
	_, sub := w.TxState(t, ids[0])
	assert.Equal(t, string(txm.ReasonInsufficientFunds), sub)
	// STUCK is not a dead end: it keeps being tried, with backoff, while the
	// nonces behind it wait unsigned instead of going stuck themselves.
	testsupport.Eventually(t, 10*time.Second, "more rounds on the stuck transaction", func() bool {
		var failures int
		require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT failures FROM managed_tx WHERE id = $1`, ids[0]).Scan(&failures))
		return failures >= 3
	})
	for _, id := range ids[1:] {
		s, _ := w.TxState(t, id)
		assert.Equal(t, string(txm.StateAllocated), s, "a nonce behind an unpaid one waits, neither sent again nor stuck")
		for _, a := range attempts(t, w, id) {
			assert.Zero(t, a.BroadcastCount)
		}
	}

	_, err := w.Chain.Send(ctx, w.Keys[0].Key, signer, new(big.Int).Mul(big.NewInt(10), big.NewInt(params.Ether))) // the top-up
	require.NoError(t, err)
	for _, id := range ids {
		w.WaitState(t, id, txm.StateConfirmed, 30*time.Second)
	}
	assert.Equal(t, []reported{{"STUCK", false, "insufficient_funds"}, {"CONFIRMED", true, ""}}, reports(t, w, ids[0]))
	for _, id := range ids[1:] {
		assert.Equal(t, []reported{{"CONFIRMED", false, ""}}, reports(t, w, id))
	}
}

// spiker fills blocks with other users' gas-burning transactions: four of
// 15M gas per block raise the base fee 12.5% a block, two hold it.
type spiker struct {
	t      testing.TB
	w      *stacktest.World
	mode   atomic.Int32 // 0 off, 1 spike, 2 hold
	failed atomic.Bool
}

func newSpiker(t testing.TB, w *stacktest.World) *spiker { return &spiker{t: t, w: w} }

func (s *spiker) beforeBlock() {
	n := map[int32]int{1: 4, 2: 2}[s.mode.Load()]
	if n == 0 {
		return
	}
	if err := s.w.Chain.Burn(ctx, s.w.Keys[0].Key, n, 15_000_000); err != nil && s.failed.CompareAndSwap(false, true) {
		s.t.Logf("spike: %v", err)
	}
}

func baseFee(t testing.TB, w *stacktest.World) *big.Int {
	t.Helper()
	f, err := w.Chain.BaseFee(ctx)
	require.NoError(t, err)
	return f
}

// TestIssue10_FeeSpike: a transaction whose fee is or becomes too low is
// replaced, each replacement paying at least the bump percentage more, never
// above the caps, until one is mined; at a low cap it is reported STUCK
// fee_cap_reached and confirms once the cap is raised in config.
func TestIssue10_FeeSpike(t *testing.T) {
	t.Parallel()
	t.Run("caller chose 1 wei", func(t *testing.T) {
		t.Parallel()
		w := stacktest.NewWorld(t, 1, stacktest.Lively)
		n := w.Node(t, "n")
		r := stacktest.Transfer(w.Keys[0].Address, big.NewInt(1))
		r.MaxFeePerGas, r.MaxPriorityFeePerGas = big.NewInt(1), big.NewInt(1)
		id := n.CreateTx(t, r).ID
		stop := w.Run(t, []*stacktest.Node{n}, stacktest.RunOptions{})
		defer stop()
		w.WaitState(t, id, txm.StateConfirmed, 30*time.Second)
		as := attempts(t, w, id)
		assert.Equal(t, big.NewInt(1), as[0].MaxFee, "the first attempt is the caller's")
		assertReplacements(t, as, w.Cfg.BumpPercent, w.Cfg.FeeCaps(evmtest.ChainID))
	})
	t.Run("base fee rises above the first attempt", func(t *testing.T) {
		t.Parallel()
		w := stacktest.NewWorld(t, 2, stacktest.Lively)
		a, b := w.Node(t, "a"), w.Node(t, "b")
		spike := newSpiker(t, w)
		id := a.CreateTx(t, stacktest.Transfer(w.Keys[1].Address, big.NewInt(1))).ID
		_, err := a.Drain.Execute(ctx, evmtest.ChainID, w.Keys[1].Address)
		require.NoError(t, err)
		first := attempts(t, w, id)[0]
		spike.mode.Store(1)
		stop := w.Run(t, []*stacktest.Node{a, b}, stacktest.RunOptions{BeforeBlock: spike.beforeBlock})
		defer stop()
		testsupport.Eventually(t, 20*time.Second, "the base fee above the first attempt's max fee", func() bool {
			return baseFee(t, w).Cmp(first.MaxFee) > 0
		})
		spike.mode.Store(2)
		w.WaitState(t, id, txm.StateConfirmed, 30*time.Second)
		as := attempts(t, w, id)
		assert.Equal(t, "replaced", as[0].Outcome, "the first attempt could not be mined")
		assertReplacements(t, as, w.Cfg.BumpPercent, w.Cfg.FeeCaps(evmtest.ChainID))
		assert.Equal(t, []reported{{"CONFIRMED", false, ""}}, reports(t, w, id))
	})
	t.Run("fee cap reached, then raised", func(t *testing.T) {
		t.Parallel()
		low := big.NewInt(3 * params.GWei)
		w := stacktest.NewWorld(t, 2, stacktest.Lively, func(c *config.Config) {
			c.ChainFees = map[uint64]config.FeeOverride{evmtest.ChainID: {MaxFee: low, MaxBumps: -1}}
		})
		a := w.Node(t, "a")
		spike := newSpiker(t, w)
		id := a.CreateTx(t, stacktest.Transfer(w.Keys[1].Address, big.NewInt(1))).ID
		_, err := a.Drain.Execute(ctx, evmtest.ChainID, w.Keys[1].Address)
		require.NoError(t, err)
		spike.mode.Store(1)
		stopA := w.Run(t, []*stacktest.Node{a}, stacktest.RunOptions{BeforeBlock: spike.beforeBlock})
		testsupport.Eventually(t, 30*time.Second, "the base fee above the cap", func() bool { return baseFee(t, w).Cmp(low) > 0 })
		spike.mode.Store(2)
		w.WaitState(t, id, txm.StateStuck, 20*time.Second)
		_, sub := w.TxState(t, id)
		assert.Equal(t, txm.SubStateFeeCapReached, sub)
		testsupport.Never(t, time.Second, "the transaction leaving STUCK while the cap holds", func() bool {
			s, _ := w.TxState(t, id)
			return s != string(txm.StateStuck)
		})
		s, _ := w.TxState(t, id)
		require.Equal(t, string(txm.StateStuck), s)
		stopA()
		for _, at := range attempts(t, w, id) {
			assert.LessOrEqual(t, at.MaxFee.Cmp(low), 0, "attempt %d above the cap", at.No)
		}

		// The operator raises the cap: a new revision of the service.
		w.Cfg.ChainFees = map[uint64]config.FeeOverride{evmtest.ChainID: {MaxFee: big.NewInt(1000 * params.GWei), MaxBumps: -1}}
		raised := w.Node(t, "raised")
		stop := w.Run(t, []*stacktest.Node{raised}, stacktest.RunOptions{BeforeBlock: spike.beforeBlock})
		defer stop()
		w.WaitState(t, id, txm.StateConfirmed, 30*time.Second)
		assert.Equal(t, []reported{{"STUCK", false, txm.SubStateFeeCapReached}, {"CONFIRMED", true, ""}}, reports(t, w, id))
		assertReplacements(t, attempts(t, w, id), w.Cfg.BumpPercent, w.Cfg.FeeCaps(evmtest.ChainID))
	})
}

// flakySigner fails while failing is set, counting its calls.
type flakySigner struct {
	txm.Signer
	failing *atomic.Bool
	calls   *atomic.Int64
}

func (s flakySigner) SignTx(ctx context.Context, tx *types.Transaction, chainID *big.Int) (*types.Transaction, error) {
	s.calls.Add(1)
	if s.failing.Load() {
		return nil, fmt.Errorf("kms: rpc error: code = Unavailable desc = the service is unavailable")
	}
	return s.Signer.SignTx(ctx, tx, chainID)
}

// TestIssue10_AllocatedStuck: a transaction whose signing keeps failing goes
// STUCK signing_failed after stuckAfter with one TxStuck, while the signer
// is tried at the backoff's pace however often it is prompted; once the
// signer heals it confirms, and so do the nonces behind it.
func TestIssue10_AllocatedStuck(t *testing.T) {
	t.Parallel()
	var failing atomic.Bool
	var calls atomic.Int64
	failing.Store(true)
	const stuckAfter = 1500 * time.Millisecond
	w := stacktest.NewWorld(t, 1, stacktest.Lively, func(c *config.Config) { c.StuckAfter = stuckAfter })
	w.WrapSigner = func(s txm.Signer) txm.Signer { return flakySigner{Signer: s, failing: &failing, calls: &calls} }
	n := w.Node(t, "n")
	signer := w.Keys[0].Address
	ids := []string{n.CreateTx(t, stacktest.Transfer(signer, big.NewInt(1))).ID, n.CreateTx(t, stacktest.Transfer(signer, big.NewInt(2))).ID}

	var prompts atomic.Int64
	start := time.Now()
	stopPrompts := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // Pub/Sub redelivering as fast as it can, plus the sweep
		defer wg.Done()
		for {
			select {
			case <-stopPrompts:
				return
			default:
			}
			_, _ = n.Drain.Execute(ctx, evmtest.ChainID, signer)
			prompts.Add(1)
			if prompts.Load()%10 == 0 {
				_, _ = n.Resubmit.Pass(ctx)
			}
			// sleep: the prompts' pace, as fast as Pub/Sub redelivers; that signing keeps the backoff's pace under it is the test
			time.Sleep(5 * time.Millisecond)
		}
	}()
	w.WaitState(t, ids[0], txm.StateStuck, 10*time.Second)
	elapsed := time.Since(start)
	close(stopPrompts)
	wg.Wait()
	_, sub := w.TxState(t, ids[0])
	assert.Equal(t, txm.SubStateSigningFailed, sub)
	assert.GreaterOrEqual(t, elapsed, stuckAfter, "not STUCK before stuckAfter")
	// Backoff 100ms doubling to 400ms: the tries come at 0, .1, .3, .7, 1.1,
	// 1.5 s (and each may lag the last by a prompt).
	bound := int64(2)
	for d, wait := time.Duration(0), w.Cfg.RetryBackoffMin; d < elapsed; d, wait = d+wait, min(2*wait, w.Cfg.RetryBackoffMax) {
		bound++
	}
	t.Logf("%d prompts in %s; the signer was tried %d times (bound %d)", prompts.Load(), elapsed.Round(time.Millisecond), calls.Load(), bound)
	assert.LessOrEqual(t, calls.Load(), bound, "signing is retried at the backoff's pace")
	assert.Greater(t, prompts.Load(), 5*calls.Load(), "far more prompts than tries")
	var promptsWritten int
	require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE topic = $1`, w.Cfg.TopicSubmit).Scan(&promptsWritten))
	assert.LessOrEqual(t, int64(promptsWritten), bound+1, "the sweep re-prompts at the backoff's pace (plus the create's prompt)")
	assert.Equal(t, []reported{{"STUCK", false, txm.SubStateSigningFailed}}, reports(t, w, ids[0]), "one TxStuck")

	failing.Store(false)
	stop := w.Run(t, []*stacktest.Node{n}, stacktest.RunOptions{})
	defer stop()
	for _, id := range ids {
		w.WaitState(t, id, txm.StateConfirmed, 30*time.Second)
	}
	assert.Equal(t, []reported{{"STUCK", false, txm.SubStateSigningFailed}, {"CONFIRMED", true, ""}}, reports(t, w, ids[0]))
}

// post sends an admin action through the API.
func post(t testing.TB, url string, body any) (int, map[string]any) {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out map[string]any
	require.NoError(t, json.Unmarshal(raw, &out), "%s", raw)
	return resp.StatusCode, out
}

// TestIssue10_CancelByAdmin: a STUCK transaction (its signer cannot pay its
// value) is cancelled through the admin API: a 0-value self-transfer takes
// the nonce, the original ends FAILED_FINAL cancelled (TxFailed), the nonces
// behind it confirm, and the action is idempotent and audited.
func TestIssue10_CancelByAdmin(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 2, stacktest.Lively)
	a, b := w.Node(t, "a"), w.Node(t, "b")
	signer := poorSigner(t, w)
	stuck := a.CreateTx(t, stacktest.Transfer(signer, big.NewInt(2*params.Ether)))
	var later []string
	for i := 1; i <= 3; i++ {
		later = append(later, a.CreateTx(t, stacktest.Transfer(signer, big.NewInt(int64(i)))).ID)
	}
	stop := w.Run(t, []*stacktest.Node{a, b}, stacktest.RunOptions{})
	defer stop()
	w.WaitState(t, stuck.ID, txm.StateStuck, 10*time.Second)

	url := a.APIURL + "/v1/transactions/" + stuck.ID + "/cancel"
	body := map[string]any{"actionId": "cancel-1", "reason": "the payout was sent another way"}
	status, first := post(t, url, body)
	require.Equal(t, http.StatusAccepted, status, "%v", first)
	assert.Equal(t, "pending", first["status"])
	status, again := post(t, b.APIURL+"/v1/transactions/"+stuck.ID+"/cancel", body)
	assert.Equal(t, http.StatusOK, status, "a replay returns the recorded action")
	assert.Equal(t, first["createdAt"], again["createdAt"])
	status, conflict := post(t, url, map[string]any{"actionId": "cancel-1", "reason": "another reason"})
	assert.Equal(t, http.StatusConflict, status, "%v", conflict)

	w.WaitState(t, stuck.ID, txm.StateFailedFinal, 30*time.Second)
	for _, id := range later {
		w.WaitState(t, id, txm.StateConfirmed, 30*time.Second)
	}
	state, sub := w.TxState(t, stuck.ID)
	assert.Equal(t, "FAILED_FINAL", state)
	assert.Equal(t, txm.SubStateCancelled, sub)
	assert.Equal(t, []reported{{"STUCK", false, "insufficient_funds"}, {"FAILED_FINAL", true, txm.SubStateCancelled}}, reports(t, w, stuck.ID))
	as := attempts(t, w, stuck.ID)
	last := as[len(as)-1]
	assert.Equal(t, "cancel", last.Kind)
	assert.Equal(t, "mined", last.Outcome)
	for _, a := range as[:len(as)-1] {
		assert.Equal(t, "replaced", a.Outcome)
	}
	// The nonce was taken by the self-transfer.
	rcpt, err := w.Chain.Backend.Client().TransactionReceipt(ctx, common.HexToHash(hashOf(t, w, stuck.ID, last.No)))
	require.NoError(t, err)
	tx, _, err := w.Chain.Backend.Client().TransactionByHash(ctx, rcpt.TxHash)
	require.NoError(t, err)
	assert.Equal(t, signer, *tx.To())
	assert.Zero(t, tx.Value().Sign())
	assert.Equal(t, stuck.Nonce, tx.Nonce())

	var action, actor, reason string
	var token int64
	require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT action, actor, reason, fencing_token FROM tx_history
WHERE tx_id = $1 AND action = 'cancel'`, stuck.ID).Scan(&action, &actor, &reason, &token))
	assert.Equal(t, "dev", actor)
	assert.Equal(t, "the payout was sent another way", reason)
	assert.Positive(t, token)
	resp, err := http.Get(a.APIURL + "/v1/transactions/" + stuck.ID + "/actions")
	require.NoError(t, err)
	var list struct {
		Items []map[string]any `json:"items"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&list))
	resp.Body.Close()
	require.Len(t, list.Items, 1)
	assert.Equal(t, "done", list.Items[0]["status"])

	// A final transaction cannot be cancelled: 409, nothing written.
	status, p := post(t, a.APIURL+"/v1/transactions/"+later[0]+"/cancel", map[string]any{"actionId": "late", "reason": "too late"})
	assert.Equal(t, http.StatusConflict, status, "%v", p)
	assert.Len(t, attempts(t, w, later[0]), 1)
}

func hashOf(t testing.TB, w *stacktest.World, id string, no int) string {
	t.Helper()
	var h string
	require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT tx_hash FROM tx_attempt WHERE tx_id = $1 AND attempt_no = $2`, id, no).Scan(&h))
	return h
}

// TestIssue10_ConcurrentBump: two instances bump the same transaction at
// once; the one that stalls past its lease is fenced when it persists, so
// exactly one replacement is written for the round.
func TestIssue10_ConcurrentBump(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 1, stacktest.Lively, func(c *config.Config) {
		c.BumpAfter = 100 * time.Millisecond
		c.Lease.Duration, c.Lease.RenewEvery, c.Lease.ClockSkew = 500*time.Millisecond, 150*time.Millisecond, 50*time.Millisecond
	})
	a, b := w.Node(t, "A"), w.Node(t, "B")
	signer := w.Keys[0].Address
	r := stacktest.Transfer(signer, big.NewInt(1))
	r.MaxFeePerGas, r.MaxPriorityFeePerGas = big.NewInt(1), big.NewInt(1) // below the base fee: the round bumps it
	id := a.CreateTx(t, r).ID
	_, err := a.Drain.Execute(ctx, evmtest.ChainID, signer) // broadcast; no block is sealed, so it is not mined
	require.NoError(t, err)
	// sleep: the attempt must grow older than BumpAfter for the round to bump it
	time.Sleep(150 * time.Millisecond)

	stalled, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	a.Resubmit.SetHooks(app.ResubmitHooks{BeforeReplace: func() {
		once.Do(func() { a.Leases.Pause(); close(stalled); <-resume; a.Leases.Unpause() })
	}})
	aErr := make(chan error, 1)
	go func() { _, err := a.Resubmit.Pass(ctx); aErr <- err }()
	<-stalled
	// B runs the same round once A's lease has expired.
	testsupport.Eventually(t, 5*time.Second, "B to take over and bump", func() bool {
		st, err := b.Resubmit.Pass(ctx)
		require.NoError(t, err)
		return st.Replaced == 1
	})
	close(resume)
	assert.ErrorIs(t, <-aErr, txm.ErrFenced, "A's replacement is fenced")
	assert.Positive(t, a.Metrics.Count("lease_fenced_total", "op", "save_replacement"))

	as := attempts(t, w, id)
	require.Len(t, as, 2, "exactly one replacement for the round")
	var bToken, written int64
	require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT fencing_token FROM signer_lease WHERE scope = 'chain'`).Scan(&bToken))
	require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT fencing_token FROM tx_attempt WHERE tx_id = $1 AND attempt_no = 2`, id).Scan(&written))
	assert.Equal(t, bToken, written, "the replacement carries B's token")
}

// TestIssue10_ForeignNonce: the signer's key is used outside txfence and
// another transaction takes one of its nonces. That transaction ends
// FAILED_FINAL nonce_consumed_externally (TxFailed says so) once the other
// one is final, and the signer's later transactions confirm.
func TestIssue10_ForeignNonce(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 1, stacktest.Lively)
	n := w.Node(t, "n")
	key := w.Keys[0]
	taken := n.CreateTx(t, stacktest.Transfer(key.Address, big.NewInt(1)))
	require.Zero(t, taken.Nonce)
	_, err := w.Chain.SendAt(ctx, key.Key, taken.Nonce, stacktest.Dead, big.NewInt(42)) // another program, same key
	require.NoError(t, err)
	w.Chain.Commit()
	later := []string{n.CreateTx(t, stacktest.Transfer(key.Address, big.NewInt(2))).ID, n.CreateTx(t, stacktest.Transfer(key.Address, big.NewInt(3))).ID}

	stop := w.Run(t, []*stacktest.Node{n}, stacktest.RunOptions{})
	defer stop()
	w.WaitState(t, taken.ID, txm.StateFailedFinal, 30*time.Second)
	for _, id := range later {
		w.WaitState(t, id, txm.StateConfirmed, 30*time.Second)
	}
	_, sub := w.TxState(t, taken.ID)
	assert.Equal(t, txm.SubStateNonceConsumedExternally, sub)
	assert.Equal(t, []reported{{"FAILED_FINAL", false, txm.SubStateNonceConsumedExternally}}, reports(t, w, taken.ID))
	resp, err := http.Get(n.APIURL + "/v1/completions?after=0")
	require.NoError(t, err)
	var feed struct {
		Items []struct {
			TxID, Type, SubState string
		} `json:"items"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&feed))
	resp.Body.Close()
	found := false
	for _, c := range feed.Items {
		if c.TxID == taken.ID {
			found = true
			assert.Equal(t, "TxFailed", c.Type)
			assert.Equal(t, txm.SubStateNonceConsumedExternally, c.SubState)
		}
	}
	assert.True(t, found, "the feed reports it")
}

// TestIssue10_NullHeader: a node that answers null for the header of a
// receipt's block is behind, not reorganised: no reorg, no newFork, and the
// transaction confirms once the node catches up.
func TestIssue10_NullHeader(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 1, stacktest.Lively)
	n := w.Node(t, "n")
	signer := w.Keys[0].Address
	id := n.CreateTx(t, stacktest.Transfer(signer, big.NewInt(1))).ID
	_, err := n.Drain.Execute(ctx, evmtest.ChainID, signer)
	require.NoError(t, err)
	w.MineAll(t, signer, 1)
	_, err = n.Receipts.Execute(ctx, evmtest.ChainID, signer)
	require.NoError(t, err)
	tx, err := n.Store.GetTx(ctx, id)
	require.NoError(t, err)
	require.Equal(t, txm.StateMined, tx.State)
	height := tx.Receipt.BlockNumber

	var nulls atomic.Int64
	w.Proxy.Before("eth_getBlockByNumber", func(params json.RawMessage) *rpcproxy.Fault {
		var args []any
		_ = json.Unmarshal(params, &args)
		if len(args) > 0 && args[0] == fmt.Sprintf("0x%x", height) {
			nulls.Add(1)
			return &rpcproxy.Fault{EmptyResult: true}
		}
		return nil
	})
	w.Mine(int(w.Cfg.Confirmations) + 1)
	st, err := n.Finality.Pass(ctx)
	require.NoError(t, err)
	require.Positive(t, nulls.Load(), "the node answered null")
	assert.Zero(t, st.Reorged)
	tx, err = n.Store.GetTx(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, txm.StateMined, tx.State, "still waiting for the node")
	assert.Zero(t, tx.ReorgCount)
	assert.Positive(t, n.Metrics.Count("receipt_check_total", "result", "node_behind"))

	w.Proxy.Before("eth_getBlockByNumber", nil)
	_, err = n.Finality.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, []reported{{"CONFIRMED", false, ""}}, reports(t, w, id))
}

// TestIssue10_MaxInFlightStuck: with maxInFlight 1 and one STUCK
// transaction, no second transaction is broadcast.
func TestIssue10_MaxInFlightStuck(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 1, stacktest.Lively, func(c *config.Config) {
		c.MaxInFlight = 1
		c.MaxRebroadcasts = 1
		c.BumpAfter = time.Hour // rebroadcast, never bump, so that it goes STUCK too_many_rebroadcasts
		c.ResubmitInterval = 50 * time.Millisecond
	})
	n := w.Node(t, "n")
	signer := w.Keys[0].Address
	// The provider says it has the transaction but never passes it on.
	w.Proxy.Fail("eth_sendRawTransaction", -1, rpcproxy.Fault{RPCError: &rpcproxy.RPCError{Code: -32000, Message: "already known"}})
	first := n.CreateTx(t, stacktest.Transfer(signer, big.NewInt(1))).ID
	_, err := n.Drain.Execute(ctx, evmtest.ChainID, signer)
	require.NoError(t, err)
	testsupport.Eventually(t, 10*time.Second, "the first transaction to go STUCK", func() bool {
		_, err := n.Resubmit.Pass(ctx)
		require.NoError(t, err)
		s, _ := w.TxState(t, first)
		return s == string(txm.StateStuck)
	})
	w.Proxy.Heal()
	second := n.CreateTx(t, stacktest.Transfer(signer, big.NewInt(2))).ID
	sends := w.Proxy.Count("eth_sendRawTransaction")
	res, err := n.Drain.Execute(ctx, evmtest.ChainID, signer)
	require.NoError(t, err)
	assert.True(t, res.Full, "maxInFlight is reached by the STUCK transaction")
	assert.Zero(t, res.Broadcast)
	assert.Equal(t, sends, w.Proxy.Count("eth_sendRawTransaction"), "no second broadcast")
	s, _ := w.TxState(t, second)
	assert.Equal(t, string(txm.StateAllocated), s)
	assert.Empty(t, attempts(t, w, second))
}

// TestIssue10_CancelByWebhook: the webhook policy decides a STUCK
// transaction's fate. Its answers are signed: one signed with another secret
// and one with a stale timestamp are refused and change nothing (the default
// work goes on); a good one cancels it, and the nonces behind it confirm.
func TestIssue10_CancelByWebhook(t *testing.T) {
	t.Parallel()
	secret := []byte("a webhook secret of some length")
	var phase atomic.Int32 // 0 forged, 1 stale, 2 honest
	var asked [3]atomic.Int64
	honest := webhook.NewReceiver(secret, func(_ context.Context, r webhook.Request) (webhook.Answer, error) {
		return webhook.Answer{Action: txm.ActionCancel, Reason: "payout " + r.TxID + " superseded"}, nil
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := phase.Load()
		asked[p].Add(1)
		if p == 2 {
			honest.ServeHTTP(w, r)
			return
		}
		body := []byte(`{"action":"cancel","reason":"forged"}`)
		key, at := []byte("another secret entirely"), time.Now()
		if p == 1 {
			key, at = secret, time.Now().Add(-10*time.Minute)
		}
		ts, sig := webhook.Sign(key, body, at)
		w.Header().Set(webhook.HeaderTimestamp, ts)
		w.Header().Set(webhook.HeaderSignature, sig)
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)

	w := stacktest.NewWorld(t, 2, stacktest.Lively, func(c *config.Config) {
		c.StuckPolicy = []config.StuckRule{{Action: config.StuckWebhookAction}}
		c.StuckWebhook = config.StuckWebhook{URL: srv.URL + "/txfence/stuck?key=k", Secret: string(secret), Timeout: 2 * time.Second}
	})
	hook, err := stuckpolicy.FromConfig(w.Cfg)
	require.NoError(t, err)
	w.Hook = hook
	n := w.Node(t, "n")
	signer := poorSigner(t, w)
	stuck := n.CreateTx(t, stacktest.Transfer(signer, big.NewInt(2*params.Ether)))
	later := n.CreateTx(t, stacktest.Transfer(signer, big.NewInt(1))).ID
	stop := w.Run(t, []*stacktest.Node{n}, stacktest.RunOptions{})
	defer stop()
	w.WaitState(t, stuck.ID, txm.StateStuck, 10*time.Second)

	for p := int32(0); p < 2; p++ {
		testsupport.Eventually(t, 10*time.Second, "the webhook to be asked", func() bool { return asked[p].Load() >= 2 })
		phase.Store(p + 1)
		s, _ := w.TxState(t, stuck.ID)
		assert.Equal(t, string(txm.StateStuck), s, "a refused answer changes nothing")
		for _, a := range attempts(t, w, stuck.ID) {
			assert.NotEqual(t, "cancel", a.Kind, "no cancel from a refused answer")
		}
	}
	assert.Positive(t, n.Metrics.Count("resubmit_total", "result", "policy_error"))

	w.WaitState(t, stuck.ID, txm.StateFailedFinal, 30*time.Second)
	w.WaitState(t, later, txm.StateConfirmed, 30*time.Second)
	_, sub := w.TxState(t, stuck.ID)
	assert.Equal(t, txm.SubStateCancelled, sub)
	var actor, reason string
	require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT actor, reason FROM tx_history WHERE tx_id = $1 AND action = 'cancel'`, stuck.ID).
		Scan(&actor, &reason))
	assert.Equal(t, "policy:webhook", actor)
	assert.Equal(t, "payout "+stuck.ID+" superseded", reason)
	assert.Equal(t, []reported{{"STUCK", false, "insufficient_funds"}, {"FAILED_FINAL", true, txm.SubStateCancelled}}, reports(t, w, stuck.ID))
}

// TestIssue10_PlaceholderPolicy: the static policy fills the nonce of a
// STUCK transaction that will never be sent with a placeholder; it ends
// FAILED_FINAL placeholder, audited as the policy's, and the nonces behind
// it confirm.
func TestIssue10_PlaceholderPolicy(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 2, stacktest.Lively, func(c *config.Config) {
		c.StuckPolicy = []config.StuckRule{{ChainID: evmtest.ChainID, Action: string(txm.ActionPlaceholder)}}
	})
	hook, err := stuckpolicy.FromConfig(w.Cfg)
	require.NoError(t, err)
	w.Hook = hook
	n := w.Node(t, "n")
	signer := poorSigner(t, w)
	never := n.CreateTx(t, stacktest.Transfer(signer, big.NewInt(2*params.Ether)))
	later := n.CreateTx(t, stacktest.Transfer(signer, big.NewInt(1))).ID
	stop := w.Run(t, []*stacktest.Node{n}, stacktest.RunOptions{})
	defer stop()
	w.WaitState(t, never.ID, txm.StateFailedFinal, 30*time.Second)
	w.WaitState(t, later, txm.StateConfirmed, 30*time.Second)
	_, sub := w.TxState(t, never.ID)
	assert.Equal(t, txm.SubStatePlaceholder, sub)
	as := attempts(t, w, never.ID)
	assert.Equal(t, "placeholder", as[len(as)-1].Kind)
	assert.Equal(t, "mined", as[len(as)-1].Outcome)
	var actor, reason string
	require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT actor, reason FROM tx_history WHERE tx_id = $1 AND action = 'placeholder'`, never.ID).
		Scan(&actor, &reason))
	assert.Equal(t, "policy:static", actor)
	assert.Equal(t, "stuck rule 1337=placeholder", reason)
	assert.Equal(t, []reported{{"STUCK", false, "insufficient_funds"}, {"FAILED_FINAL", true, txm.SubStatePlaceholder}}, reports(t, w, never.ID))
}

// TestIssue10_AdminActions: resubmit and replace through the API: bad
// input is 422 and changes nothing, a state where the action makes no sense
// is 409, fees that do not beat the last attempt fail the action (nothing
// else changes), and the caller's fees are what the replacement pays.
func TestIssue10_AdminActions(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 1, stacktest.Lively, func(c *config.Config) { c.BumpAfter = time.Hour })
	n := w.Node(t, "n")
	signer := w.Keys[0].Address
	tx := n.CreateTx(t, stacktest.Transfer(signer, big.NewInt(1)))
	base := n.APIURL + "/v1/transactions/" + tx.ID

	// Not broadcast yet: nothing to replace.
	status, p := post(t, base+"/replace", map[string]any{"actionId": "r0", "reason": "too early"})
	assert.Equal(t, http.StatusConflict, status, "%v", p)
	for _, bad := range []map[string]any{
		{"actionId": "x"},   // no reason
		{"reason": "no id"}, // no action id
		{"actionId": "x", "reason": "r", "maxFeePerGas": "1"},                                                  // half the 1559 fees
		{"actionId": "x", "reason": "r", "maxFeePerGas": "100000000000000000000", "maxPriorityFeePerGas": "1"}, // above the cap
	} {
		status, p := post(t, base+"/replace", bad)
		assert.Equal(t, http.StatusUnprocessableEntity, status, "%v → %v", bad, p)
	}
	status, p = post(t, base+"/cancel", map[string]any{"actionId": "c", "reason": "r", "maxFeePerGas": "5", "maxPriorityFeePerGas": "1"})
	assert.Equal(t, http.StatusUnprocessableEntity, status, "fees only for replace: %v", p)
	status, _ = post(t, n.APIURL+"/v1/transactions/01a2080c-8f95-799b-bad0-9beedcb82ae4/resubmit", map[string]any{"actionId": "x", "reason": "r"})
	assert.Equal(t, http.StatusNotFound, status)
	var actions int
	require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM tx_action`).Scan(&actions))
	assert.Zero(t, actions, "refusals write nothing")

	_, err := n.Drain.Execute(ctx, evmtest.ChainID, signer) // TRACKING, not mined: no block is sealed
	require.NoError(t, err)
	first := attempts(t, w, tx.ID)[0]

	status, p = post(t, base+"/resubmit", map[string]any{"actionId": "s1", "reason": "node restarted"})
	require.Equal(t, http.StatusAccepted, status, "%v", p)
	sends := w.Proxy.Count("eth_sendRawTransaction")
	_, err = n.Drain.Execute(ctx, evmtest.ChainID, signer) // the prompt's work
	require.NoError(t, err)
	assert.Equal(t, sends+1, w.Proxy.Count("eth_sendRawTransaction"), "broadcast again")
	assert.Len(t, attempts(t, w, tx.ID), 1, "the same attempt")

	low := new(big.Int).Add(first.MaxFee, big.NewInt(1))
	status, p = post(t, base+"/replace", map[string]any{"actionId": "r1", "reason": "too little", "maxFeePerGas": low.String(),
		"maxPriorityFeePerGas": first.Tip.String()})
	require.Equal(t, http.StatusAccepted, status, "%v", p)
	fee := new(big.Int).Mul(first.MaxFee, big.NewInt(3))
	tip := new(big.Int).Mul(first.Tip, big.NewInt(3))
	status, p = post(t, base+"/replace", map[string]any{"actionId": "r2", "reason": "gas spike", "maxFeePerGas": fee.String(),
		"maxPriorityFeePerGas": tip.String()})
	require.Equal(t, http.StatusAccepted, status, "%v", p)
	_, err = n.Drain.Execute(ctx, evmtest.ChainID, signer)
	require.NoError(t, err)

	resp, err := http.Get(base + "/actions")
	require.NoError(t, err)
	var list struct {
		Items []struct{ ActionID, Action, Status, Result string } `json:"items"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&list))
	resp.Body.Close()
	got := map[string]string{}
	for _, a := range list.Items {
		got[a.ActionID] = a.Status + ": " + a.Result
	}
	assert.Equal(t, "done: attempt 1 broadcast again", got["s1"])
	assert.Contains(t, got["r1"], "failed: fees too low to replace the last attempt")
	assert.Equal(t, "done: signed attempt 2 (replace)", got["r2"])
	as := attempts(t, w, tx.ID)
	require.Len(t, as, 2, "one replacement: the refused one wrote nothing")
	assert.Equal(t, fee, as[1].MaxFee, "the caller's fees")
	assert.Equal(t, tip, as[1].Tip)
	var audited int
	require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM tx_history WHERE tx_id = $1 AND actor = 'dev'`, tx.ID).Scan(&audited))
	assert.Equal(t, 3, audited, "every admin action is in the history, the failed one too")

	w.MineAll(t, signer, 1)
	_, err = n.Receipts.Execute(ctx, evmtest.ChainID, signer)
	require.NoError(t, err)
	as = attempts(t, w, tx.ID)
	assert.Equal(t, []string{"replaced", "mined"}, []string{as[0].Outcome, as[1].Outcome})
	status, p = post(t, base+"/replace", map[string]any{"actionId": "r3", "reason": "late"})
	assert.Equal(t, http.StatusConflict, status, "a MINED transaction: %v", p)
}

// TestIssue10_AdminCancelPastBumpBudget: once automation has spent the
// replacement budget (here none at all), an admin's cancel is still the
// way out: it is bounded by the fee caps, not by the count.
func TestIssue10_AdminCancelPastBumpBudget(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 2, stacktest.Lively, func(c *config.Config) { c.MaxBumps = 0 })
	a := w.Node(t, "a")
	signer := poorSigner(t, w)
	stuck := a.CreateTx(t, stacktest.Transfer(signer, big.NewInt(2*params.Ether)))
	later := a.CreateTx(t, stacktest.Transfer(signer, big.NewInt(1)))
	stop := w.Run(t, []*stacktest.Node{a}, stacktest.RunOptions{})
	defer stop()
	w.WaitState(t, stuck.ID, txm.StateStuck, 10*time.Second)

	status, body := post(t, a.APIURL+"/v1/transactions/"+stuck.ID+"/cancel", map[string]any{"actionId": "cancel-past-budget", "reason": "the budget is spent"})
	require.Equal(t, http.StatusAccepted, status, "%v", body)
	w.WaitState(t, stuck.ID, txm.StateFailedFinal, 30*time.Second)
	w.WaitState(t, later.ID, txm.StateConfirmed, 30*time.Second)
	_, sub := w.TxState(t, stuck.ID)
	assert.Equal(t, txm.SubStateCancelled, sub)
}
