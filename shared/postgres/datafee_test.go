package postgres

import (
	"context"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/pgtest"
	"github.com/txfence/txfence/shared/txm"
)

// TestDataFee_Recorded: a transaction's execution fee bound and L2 data fee
// are written on its row by both allocation functions, by a hold and by
// the allocation of an approved hold (the fees judged then), and read back;
// a row without them reads as nil.
func TestDataFee_Recorded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := testStore(t, db.Pool)
	signer := common.HexToAddress("0xdf01")
	withFees := func(r *txm.Request, exec, data int64) *txm.Request {
		r.ExecutionFee, r.DataFee = big.NewInt(exec), big.NewInt(data)
		r.Cost = new(big.Int).Add(r.Value, big.NewInt(exec+data))
		return r
	}
	read := func(id string) *txm.Tx {
		t.Helper()
		tx, err := s.GetTx(ctx, id)
		require.NoError(t, err)
		return tx
	}

	plain := withFees(allocRequest(signer, "", "txf-plain", 1), 21000*7, 1234)
	plain.MadeUpID = true
	general := withFees(allocRequest(signer, "svc", "general", 1), 21000*8, 5678)
	bare := allocRequest(signer, "", "txf-bare", 1)
	bare.MadeUpID = true
	for _, batch := range [][]*txm.Request{{plain}, {general}, {bare}} {
		got, _, err := s.Allocate(ctx, []txm.AllocationBatch{{ChainID: 1, Signer: signer, Owner: "o", Requests: batch}})
		require.NoError(t, err)
		require.Equal(t, txm.OutcomeCreated, got[0][0].Outcome)
		r, tx := batch[0], read(got[0][0].Tx.ID)
		if r.DataFee == nil {
			require.Nil(t, tx.ExecutionFee)
			require.Nil(t, tx.DataFee)
			continue
		}
		require.Equal(t, r.ExecutionFee, tx.ExecutionFee)
		require.Equal(t, r.DataFee, tx.DataFee)
	}

	held := hold(t, s, withFees(allocRequest(signer, "treasury", "held", 1), 100, 200), time.Hour)
	require.Equal(t, big.NewInt(100), held.ExecutionFee)
	require.Equal(t, big.NewInt(200), held.DataFee)
	b := approved(held)
	withFees(b.Requests[0], 300, 400)
	got, _, err := s.Allocate(ctx, []txm.AllocationBatch{b})
	require.NoError(t, err)
	require.Equal(t, txm.OutcomeCreated, got[0][0].Outcome)
	tx := read(held.ID)
	require.Equal(t, big.NewInt(300), tx.ExecutionFee, "the fees as judged at approval")
	require.Equal(t, big.NewInt(400), tx.DataFee)
}
