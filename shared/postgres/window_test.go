package postgres

import (
	"context"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/pgtest"
	"github.com/txfence/txfence/shared/txm"
)

// windowUsage is the usage under key in the last period.
func windowUsage(t *testing.T, db *pgtest.DB, key string) (count int64, amount string) {
	t.Helper()
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT coalesce(sum(tx_count), 0), coalesce(sum(amount), 0)::text FROM window_usage WHERE key = $1`, key).Scan(&count, &amount))
	return count, amount
}

// outcomes are the rules of a batch's answers: "" created, the rule refused.
func outcomes(t *testing.T, got []txm.Created) []string {
	t.Helper()
	out := make([]string, len(got))
	for i, c := range got {
		if c.Outcome == txm.OutcomeCreated {
			continue
		}
		require.Equal(t, txm.OutcomeRefused, c.Outcome, "request %d", i)
		var ref *txm.Refusal
		require.ErrorAs(t, c.Refusal, &ref)
		out[i] = ref.Rule
		assert.Contains(t, ref.Detail, "windows[", "the refusal names the window")
	}
	return out
}

func tokenTransfer(r *txm.Request, token common.Address, amount int64) *txm.Request {
	r.Effects = []txm.Effect{{Kind: txm.EffectERC20Transfer, Token: token, From: r.From, To: common.HexToAddress("0xbeef"),
		Amount: big.NewInt(amount)}}
	return r
}

// TestAllocate_WindowsInOrder: a principal's window counts its sends from
// every signer (what earlier minutes hold and what earlier requests of the
// batch add), a signer's window what the signer sends whoever creates it;
// a refused request adds to none (a later, smaller one may pass), and the
// usage written is what was created.
func TestAllocate_WindowsInOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := testStore(t, db.Pool)
	a, b := common.HexToAddress("0xa1"), common.HexToAddress("0xb1")
	token := common.HexToAddress("0x7070")
	// svc sent 30 wei from another signer 50 minutes ago, 20 wei two hours
	// ago: the hour's window sees the first only.
	_, err := db.Pool.Exec(ctx, `INSERT INTO window_usage (key, minute, tx_count, amount) VALUES
('p/1/svc/native', date_trunc('minute', clock_timestamp() - interval '50 minutes'), 1, 30),
('p/1/svc/native', date_trunc('minute', clock_timestamp() - interval '2 hours'), 1, 20)`)
	require.NoError(t, err)
	pol := txm.Policy{Principal: "svc", Windows: []txm.Window{
		{Scope: txm.WindowPrincipal, Period: time.Hour, MaxAmount: big.NewInt(100), MaxCount: 5},
		{Scope: txm.WindowSigner, Token: token, ChainID: 1, Day: true, MaxAmount: big.NewInt(10)},
	}}
	caps := map[string]txm.Policy{"svc": pol}
	reqs := []*txm.Request{
		allocRequest(a, "svc", "r1", 40),                           // 70 of 100
		allocRequest(a, "svc", "r2", 40),                           // 110: window_amount
		tokenTransfer(allocRequest(a, "other", "r3", 0), token, 6), // another principal's 6 tokens, counted for the signer
		tokenTransfer(allocRequest(a, "svc", "r4", 0), token, 5),   // 11 of 10: window_amount
		tokenTransfer(allocRequest(a, "svc", "r5", 0), token, 4),   // 10 of 10; 70 wei, 3 of 5
	}
	got, _, err := s.Allocate(ctx, []txm.AllocationBatch{
		{ChainID: 1, Signer: a, Owner: "o", Requests: reqs, Caps: caps},
		{ChainID: 1, Signer: b, Owner: "o", Requests: []*txm.Request{allocRequest(b, "svc", "b1", 30), allocRequest(b, "svc", "b2", 1)}, Caps: caps},
	})
	require.NoError(t, err)
	assert.Equal(t, []string{"", txm.RuleWindowAmount, "", txm.RuleWindowAmount, ""}, outcomes(t, got[0]))
	// b: 100 of 100 wei in 4 of 5 transactions: one wei more is too much.
	assert.Equal(t, []string{"", txm.RuleWindowAmount}, outcomes(t, got[1]))
	for i, want := range []uint64{0, 0, 1, 0, 2} {
		if got[0][i].Tx != nil {
			assert.Equal(t, want, got[0][i].Tx.Nonce, "request %d: refusals take no nonce", i)
		}
	}

	n, amount := windowUsage(t, db, "p/1/svc/native")
	assert.EqualValues(t, 2+3, n, "svc's created requests, from both signers, and the earlier minutes")
	assert.Equal(t, "120", amount)
	n, amount = windowUsage(t, db, "s/1/"+txm.CanonicalAddress(a)+"/"+txm.CanonicalAddress(token))
	assert.EqualValues(t, 2, n, "the signer's window counts every principal's sends")
	assert.Equal(t, "10", amount)
	n, _ = windowUsage(t, db, "s/1/"+txm.CanonicalAddress(a)+"/native")
	assert.EqualValues(t, 3, n, "a signer under a signer's window has its native sends counted too")
	n, _ = windowUsage(t, db, "s/1/"+txm.CanonicalAddress(b)+"/native")
	assert.Zero(t, n, "b is under no signer's window: its sends are not counted for it")

	// The next batch sees the usage: one transaction left in the hour.
	got, _, err = s.Allocate(ctx, []txm.AllocationBatch{{ChainID: 1, Signer: b, Owner: "o", Caps: caps,
		Requests: []*txm.Request{allocRequest(b, "svc", "c1", 0), allocRequest(b, "svc", "c2", 0)}}})
	require.NoError(t, err)
	assert.Equal(t, []string{"", txm.RuleWindowCount}, outcomes(t, got[0]))
}

// TestAllocate_WindowsWithCaps: a request that passes the rolling caps and
// is refused by a window adds nothing to the caps' usage of the requests
// after it in the batch, nor the other way round.
func TestAllocate_WindowsWithCaps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := testStore(t, db.Pool)
	a := common.HexToAddress("0xa1")
	token := common.HexToAddress("0x7070")
	pol := txm.Policy{Principal: "svc", Hourly: txm.Limit{Count: 2},
		Windows: []txm.Window{{Scope: txm.WindowPrincipal, Token: token, ChainID: 1, Period: 30 * time.Minute, MaxAmount: big.NewInt(5)}}}
	got, _, err := s.Allocate(ctx, []txm.AllocationBatch{{ChainID: 1, Signer: a, Owner: "o", Caps: map[string]txm.Policy{"svc": pol},
		Requests: []*txm.Request{
			tokenTransfer(allocRequest(a, "svc", "r1", 0), token, 6), // window_amount
			tokenTransfer(allocRequest(a, "svc", "r2", 0), token, 5), // 1 of 2, 5 of 5
			allocRequest(a, "svc", "r3", 0),                          // 2 of 2; moves no token, so the token's window does not count it
			allocRequest(a, "svc", "r4", 0),                          // hourly_count
		}}})
	require.NoError(t, err)
	assert.Equal(t, []string{txm.RuleWindowAmount, "", "", txm.RuleHourlyCount}, outcomesOf(got[0]))
}

// outcomesOf is outcomes without the checks on the details (the caps'
// refusals name no window).
func outcomesOf(got []txm.Created) []string {
	out := make([]string, len(got))
	for i, c := range got {
		if c.Refusal != nil {
			out[i] = c.Refusal.(*txm.Refusal).Rule
		}
	}
	return out
}

// TestAllocate_WatchedSignersCounted: once a policy with a signer's window
// names a signer, what any principal sends from it is counted, plain
// batches (no caps, no window of their own) included; a signer no such
// policy names costs its creates nothing.
func TestAllocate_WatchedSignersCounted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := testStore(t, db.Pool)
	a, b := common.HexToAddress("0xa1"), common.HexToAddress("0xb1")
	token := common.HexToAddress("0x7070")
	policies, err := NewPolicies(db.Pool)
	require.NoError(t, err)
	_, err = policies.PutPolicy(ctx, txm.Policy{Principal: "watcher", Roles: []txm.Role{txm.RoleSender}, Signers: []common.Address{a},
		Windows: []txm.Window{{Scope: txm.WindowSigner, Day: true, MaxCount: 100}}}, "test")
	require.NoError(t, err)

	plain := func(signer common.Address, id string, value, tokens int64) txm.AllocationBatch {
		r := allocRequest(signer, "other", id, value)
		r.MadeUpID = true
		if tokens > 0 {
			tokenTransfer(r, token, tokens)
		}
		return txm.AllocationBatch{ChainID: 1, Signer: signer, Owner: "o", Requests: []*txm.Request{r}}
	}
	batches := []txm.AllocationBatch{plain(a, "p1", 7, 3), plain(b, "p2", 9, 4)}
	require.True(t, newAllocationArgs(batches).plain(), "records alone keep a batch plain")
	_, _, err = s.Allocate(ctx, batches)
	require.NoError(t, err)
	n, amount := windowUsage(t, db, "s/1/"+txm.CanonicalAddress(a)+"/native")
	assert.EqualValues(t, 1, n)
	assert.Equal(t, "7", amount, "without a fee ceiling the cost counted is the value")
	n, amount = windowUsage(t, db, "s/1/"+txm.CanonicalAddress(a)+"/"+txm.CanonicalAddress(token))
	assert.EqualValues(t, 1, n)
	assert.Equal(t, "3", amount)
	var rows int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM window_usage WHERE key LIKE '%' || $1 || '%'`,
		txm.CanonicalAddress(b)).Scan(&rows))
	assert.Zero(t, rows, "b is not watched")

	_, err = policies.PutPolicy(ctx, txm.Policy{Principal: "all", Roles: []txm.Role{txm.RoleSender}, AllSigners: true,
		Windows: []txm.Window{{Scope: txm.WindowSigner, Token: token, ChainID: 1, Period: time.Hour, MaxAmount: big.NewInt(1)}}}, "test")
	require.NoError(t, err)
	_, _, err = s.Allocate(ctx, []txm.AllocationBatch{plain(b, "p3", 9, 4)})
	require.NoError(t, err)
	n, _ = windowUsage(t, db, "s/1/"+txm.CanonicalAddress(b)+"/native")
	assert.EqualValues(t, 1, n, "a policy of every signer watches every signer")
}

// TestAllocate_WindowDay: a window of the day counts the minutes of the UTC
// day, not the last 24 hours.
func TestAllocate_WindowDay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := testStore(t, db.Pool)
	a := common.HexToAddress("0xa1")
	// One transaction in the first minute of today, one in the last minute
	// of yesterday.
	_, err := db.Pool.Exec(ctx, `INSERT INTO window_usage (key, minute, tx_count, amount) VALUES
('p/1/svc/native', date_trunc('day', clock_timestamp(), 'UTC'), 1, 0),
('p/1/svc/native', date_trunc('day', clock_timestamp(), 'UTC') - interval '1 minute', 1, 0)`)
	require.NoError(t, err)
	caps := map[string]txm.Policy{"svc": {Principal: "svc", Windows: []txm.Window{{Scope: txm.WindowPrincipal, Day: true, MaxCount: 2}}}}
	got, _, err := s.Allocate(ctx, []txm.AllocationBatch{{ChainID: 1, Signer: a, Owner: "o", Caps: caps,
		Requests: []*txm.Request{allocRequest(a, "svc", "r1", 0), allocRequest(a, "svc", "r2", 0)}}})
	require.NoError(t, err)
	assert.Equal(t, []string{"", txm.RuleWindowCount}, outcomes(t, got[0]))
}

// TestAllocate_WindowUsagePruned: the windows' usage is kept for the
// longest window (31 days) and a day, and forgotten after.
func TestAllocate_WindowUsagePruned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := testStore(t, db.Pool)
	for _, age := range []string{"1 minute", "31 days", "31 days 23 hours", "32 days 1 minute", "60 days"} {
		_, err := db.Pool.Exec(ctx, `INSERT INTO window_usage (key, minute, tx_count, amount)
VALUES ('p/1/svc/native', date_trunc('minute', clock_timestamp() - $1::interval), 1, 5)`, age)
		require.NoError(t, err)
	}
	require.NoError(t, s.PruneUsage(ctx))
	var kept int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM window_usage`).Scan(&kept))
	assert.Equal(t, 3, kept)
}
