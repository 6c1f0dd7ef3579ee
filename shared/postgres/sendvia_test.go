package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/pgtest"
	"github.com/txfence/txfence/shared/txm"
)

// TestSendVia_Recorded: the route a create names is written on its row by
// both allocation functions and by a hold, kept when the approved hold is
// allocated, and read back; a create that names none reads as "".
func TestSendVia_Recorded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := testStore(t, db.Pool)
	signer := common.HexToAddress("0x5e01")
	read := func(id string) *txm.Tx {
		t.Helper()
		tx, err := s.GetTx(ctx, id)
		require.NoError(t, err)
		return tx
	}

	plain := allocRequest(signer, "", "txf-plain", 1)
	plain.MadeUpID, plain.SendVia = true, "protect"
	general := allocRequest(signer, "svc", "general", 1)
	general.SendVia = "public"
	bare := allocRequest(signer, "", "txf-bare", 1)
	bare.MadeUpID = true
	for _, batch := range [][]*txm.Request{{plain}, {general}, {bare}} {
		got, _, err := s.Allocate(ctx, []txm.AllocationBatch{{ChainID: 1, Signer: signer, Owner: "o", Requests: batch}})
		require.NoError(t, err)
		require.Equal(t, txm.OutcomeCreated, got[0][0].Outcome)
		tx := read(got[0][0].Tx.ID)
		require.Equal(t, batch[0].SendVia, tx.SendVia)
		require.Equal(t, batch[0].Fingerprint(), tx.Fingerprint, "a replay compares the route with the rest")
	}

	r := allocRequest(signer, "treasury", "held", 1)
	r.SendVia = "protect"
	held := hold(t, s, r, time.Hour)
	require.Equal(t, "protect", held.SendVia)
	got, _, err := s.Allocate(ctx, []txm.AllocationBatch{approved(held)})
	require.NoError(t, err)
	require.Equal(t, txm.OutcomeCreated, got[0][0].Outcome)
	require.Equal(t, "protect", read(held.ID).SendVia)
}
