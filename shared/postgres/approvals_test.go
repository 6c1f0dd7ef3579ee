package postgres

import (
	"context"
	"encoding/json"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/pgtest"
	"github.com/txfence/txfence/shared/txm"
)

// hold writes r as a transaction waiting for one approval of alice.
func hold(t *testing.T, s *Store, r *txm.Request, expiresIn time.Duration) *txm.Tx {
	t.Helper()
	tx, created, err := s.Hold(context.Background(), txm.Hold{ID: uuid.Must(uuid.NewV7()).String(), Request: r,
		Approval:  txm.Approval{Asset: txm.AssetNative, Above: big.NewInt(0), Required: 1, Approvers: []string{"alice"}},
		ExpiresIn: expiresIn, Owner: "test"})
	require.NoError(t, err)
	require.True(t, created)
	return tx
}

// approved is the request of held, approved.
func approved(held *txm.Tx) txm.AllocationBatch {
	r := held.Request
	r.Approved = true
	return txm.AllocationBatch{ChainID: held.ChainID, Signer: held.From, Owner: "o", Requests: []*txm.Request{&r}, TxIDs: []string{held.ID}}
}

// TestIssue47_HoldAndAllocateApproved: a held transaction has no nonce and
// no fencing token, is found by its request id (a replay answers it), and
// is numbered in place, under the lease, by an allocation of its approved
// request: once, whatever number of approved copies of it come (in one
// batch or later), and not at all once it has ended.
func TestIssue47_HoldAndAllocateApproved(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	s := testStore(t, db.Pool)
	ctx := context.Background()
	signer := common.HexToAddress("0xa1")

	held := hold(t, s, allocRequest(signer, "treasury", "payout-1", 5), time.Hour)
	assert.Equal(t, txm.StatePendingApproval, held.State)
	assert.True(t, held.NoNonce)
	require.NotNil(t, held.Approval)
	assert.Equal(t, []string{"alice"}, held.Approval.Approvers)
	assert.WithinDuration(t, time.Now().Add(time.Hour), held.Approval.ExpiresAt, time.Minute)
	again, created, err := s.Hold(ctx, txm.Hold{ID: uuid.Must(uuid.NewV7()).String(), Request: allocRequest(signer, "treasury", "payout-1", 5),
		Approval: *held.Approval, ExpiresIn: time.Hour, Owner: "test"})
	require.NoError(t, err)
	assert.False(t, created, "the request id exists")
	assert.Equal(t, held.ID, again.ID)
	var nonce, token *int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT nonce, fencing_token FROM managed_tx WHERE id = $1`, held.ID).Scan(&nonce, &token))
	assert.Nil(t, nonce)
	assert.Nil(t, token)

	// A create meanwhile takes nonce 0; the approved one the next.
	got, _, err := s.Allocate(ctx, []txm.AllocationBatch{{ChainID: 1, Signer: signer, Owner: "o",
		Requests: []*txm.Request{allocRequest(signer, "treasury", "", 1)}}})
	require.NoError(t, err)
	require.EqualValues(t, 0, got[0][0].Tx.Nonce)
	b := approved(held)
	b.Requests = append(b.Requests, b.Requests[0])
	b.TxIDs = append(b.TxIDs, held.ID)
	got, _, err = s.Allocate(ctx, []txm.AllocationBatch{b})
	require.NoError(t, err)
	assert.Equal(t, txm.OutcomeCreated, got[0][0].Outcome)
	assert.EqualValues(t, 1, got[0][0].Tx.Nonce)
	assert.Equal(t, txm.OutcomeReplayed, got[0][1].Outcome, "a second copy in the batch is the first's")
	got, _, err = s.Allocate(ctx, []txm.AllocationBatch{approved(held)})
	require.NoError(t, err)
	assert.Equal(t, txm.OutcomeReplayed, got[0][0].Outcome, "numbered already")
	assert.EqualValues(t, 1, got[0][0].Tx.Nonce)
	cur, err := s.CursorState(ctx, 1, signer)
	require.NoError(t, err)
	assert.EqualValues(t, 2, cur.Next, "one nonce for it")
	after, err := s.GetTx(ctx, held.ID)
	require.NoError(t, err)
	assert.Equal(t, txm.StateAllocated, after.State)
	assert.False(t, after.NoNonce)
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT fencing_token FROM managed_tx WHERE id = $1`, held.ID).Scan(&token))
	assert.NotNil(t, token, "numbered under the lease")

	// One that ended is never numbered.
	ended := hold(t, s, allocRequest(signer, "treasury", "payout-2", 5), time.Hour)
	_, err = s.Reject(ctx, ended.ID, "alice", "no")
	require.NoError(t, err)
	got, _, err = s.Allocate(ctx, []txm.AllocationBatch{approved(ended)})
	require.NoError(t, err)
	assert.Equal(t, txm.OutcomeReplayed, got[0][0].Outcome)
	assert.Equal(t, txm.StateFailedFinal, got[0][0].Tx.State)
	cur, err = s.CursorState(ctx, 1, signer)
	require.NoError(t, err)
	assert.EqualValues(t, 2, cur.Next)

	// The schema holds it: a nonce exactly for the states that hold one.
	_, err = db.Pool.Exec(ctx, `UPDATE managed_tx SET nonce = 7 WHERE id = $1`, ended.ID)
	assert.ErrorIs(t, translate(err), txm.ErrInvalid, "a transaction that ended without a nonce gets none")
	_, err = db.Pool.Exec(ctx, `UPDATE managed_tx SET state = 'TRACKING', sub_state = NULL WHERE id = $1`, ended.ID)
	assert.ErrorIs(t, translate(err), txm.ErrInvalid, "no open state without a nonce")
}

// TestIssue47_DecideRejectExpire: one decision per approver, only while the
// transaction waits and its approval has not expired; a rejection and an
// expiry each end it FAILED_FINAL with one outcome, whose message has no
// nonce.
func TestIssue47_DecideRejectExpire(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	s := testStore(t, db.Pool)
	ctx := context.Background()
	signer := common.HexToAddress("0xa2")

	waiting := hold(t, s, allocRequest(signer, "treasury", "", 5), time.Hour)
	require.NoError(t, s.Decide(ctx, waiting.ID, "alice", "fine"))
	assert.ErrorIs(t, s.Decide(ctx, waiting.ID, "alice", ""), txm.ErrAlreadyDecided)
	_, err := s.Reject(ctx, waiting.ID, "alice", "changed my mind")
	assert.ErrorIs(t, err, txm.ErrAlreadyDecided)
	ids, err := s.ApprovedPending(ctx, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{waiting.ID}, ids, "it has its approvals and still waits")

	rejected := hold(t, s, allocRequest(signer, "treasury", "", 5), time.Hour)
	outbox, err := s.Reject(ctx, rejected.ID, "bob", "wrong amount")
	require.NoError(t, err)
	assert.Len(t, outbox, 1, "one completion-topic message")
	assert.ErrorIs(t, s.Decide(ctx, rejected.ID, "carol", ""), txm.ErrNotPendingApproval)
	got, err := s.GetTx(ctx, rejected.ID)
	require.NoError(t, err)
	assert.Equal(t, txm.StateFailedFinal, got.State)
	assert.Equal(t, txm.SubStateRejected, got.SubState)
	assert.Equal(t, "wrong amount", got.Approval.Rejection().Text)

	expiring := hold(t, s, allocRequest(signer, "treasury", "", 5), time.Millisecond)
	// sleep: its approval's expiry must pass in database time
	time.Sleep(20 * time.Millisecond)
	assert.ErrorIs(t, s.Decide(ctx, expiring.ID, "alice", ""), txm.ErrNotPendingApproval, "expired")
	n, outbox, err := s.ExpireApprovals(ctx, 10)
	require.NoError(t, err)
	assert.Equal(t, 1, n, "the one that waits without its approvals, not the approved one")
	assert.Len(t, outbox, 1)
	n, _, err = s.ExpireApprovals(ctx, 10)
	require.NoError(t, err)
	assert.Zero(t, n)

	rows, err := db.Pool.Query(ctx, `SELECT c.tx_id::text, o.payload FROM tx_completion c JOIN outbox o
    ON o.topic = 'c' AND (o.payload->>'seq')::bigint = c.seq ORDER BY c.seq`)
	require.NoError(t, err)
	type msg struct {
		id      string
		payload []byte
	}
	msgs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (msg, error) {
		var m msg
		return m, r.Scan(&m.id, &m.payload)
	})
	require.NoError(t, err)
	require.Len(t, msgs, 2)
	for i, want := range []struct{ id, sub string }{{rejected.ID, txm.SubStateRejected}, {expiring.ID, txm.SubStateApprovalExpired}} {
		assert.Equal(t, want.id, msgs[i].id)
		var m map[string]any
		require.NoError(t, json.Unmarshal(msgs[i].payload, &m))
		assert.Equal(t, want.sub, m["subState"])
		assert.Equal(t, string(txm.EventFailed), m["type"])
		assert.NotContains(t, m, "nonce", "it never had one")
	}
	feed, err := s.CompletionsAfter(ctx, 0, 10, txm.CompletionFilter{})
	require.NoError(t, err)
	require.Len(t, feed, 2)
	assert.Nil(t, feed[0].Nonce)
}

// TestIssue47_HoldWaitsForAllocation: a hold shares the signer's nonce
// lease row, which an allocation locks while it looks request ids up and
// writes its rows: a hold never commits in the middle of an allocation, so
// a request id an allocation did not find is not taken before its rows
// are written.
func TestIssue47_HoldWaitsForAllocation(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	s := testStore(t, db.Pool)
	ctx := context.Background()
	signer := common.HexToAddress("0xa3")
	require.NoError(t, s.ensureLeaseRow(ctx, 1, txm.CanonicalAddress(signer)))
	allocating, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = allocating.Rollback(ctx) }()
	_, err = allocating.Exec(ctx, `SELECT 1 FROM signer_lease WHERE chain_id = 1 AND signer = $1 AND scope = 'nonce' FOR UPDATE`,
		txm.CanonicalAddress(signer))
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() {
		_, _, err := s.Hold(ctx, txm.Hold{ID: uuid.Must(uuid.NewV7()).String(), Request: allocRequest(signer, "treasury", "r-1", 5),
			Approval:  txm.Approval{Asset: txm.AssetNative, Above: big.NewInt(0), Required: 1, Approvers: []string{"alice"}},
			ExpiresIn: time.Hour, Owner: "test"})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("the hold did not wait for the allocation under way: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	require.NoError(t, allocating.Commit(ctx))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the hold did not go on once the allocation ended")
	}
}
