package stacktest

import (
	"context"
	"fmt"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/app"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/testsupport"
	"github.com/txfence/txfence/shared/txm"
)

// Lively is an Option of timings that let a test see minutes of a
// deployment's life in seconds.
func Lively(c *config.Config) {
	c.BumpAfter = 300 * time.Millisecond
	c.ResubmitInterval = 300 * time.Millisecond
	c.RetryBackoffMin, c.RetryBackoffMax = 100*time.Millisecond, 400*time.Millisecond
	c.StuckAfter = time.Minute
	c.StaleReceiptTimeout = 300 * time.Millisecond
	c.Confirmations = 2
	c.FinalityInterval = 50 * time.Millisecond
}

// Dead is the address plain transfers go to.
var Dead = common.HexToAddress("0x000000000000000000000000000000000000dEaD")

// Transfer is a create request for a plain transfer with a gas limit (so
// that nothing is estimated and a signer that cannot pay is only found out
// at broadcast, as with any caller-given gas).
func Transfer(signer common.Address, value *big.Int) *txm.Request {
	return &txm.Request{ChainID: evmtest.ChainID, From: signer, To: &Dead, Value: value, GasLimit: 21000}
}

// CreateTx creates r through the node's create use case as the development
// principal and returns the new transaction; anything but a new one fails
// the test.
func (n *Node) CreateTx(t testing.TB, r *txm.Request) *txm.Tx {
	t.Helper()
	c, err := n.Create.Execute(context.Background(), app.DevPrincipal, r)
	require.NoError(t, err)
	require.Equal(t, txm.OutcomeCreated, c.Outcome)
	return c.Tx
}

// TxState reads the transaction's state and sub-state ("" when none).
func (w *World) TxState(t testing.TB, id string) (state, sub string) {
	t.Helper()
	var s *string
	require.NoError(t, w.DB.Pool.QueryRow(context.Background(), `SELECT state, sub_state FROM managed_tx WHERE id = $1`, id).Scan(&state, &s))
	if s != nil {
		sub = *s
	}
	return state, sub
}

// WaitState waits until id is in state want and its outcomes, if any, are
// numbered (in tx_completion): a write commits the state first and numbers
// its outcome right after, so a test that reads the feed next sees it.
func (w *World) WaitState(t testing.TB, id string, want txm.State, within time.Duration) {
	t.Helper()
	testsupport.EventuallyEvery(t, within, 20*time.Millisecond, fmt.Sprintf("tx %s to be %s", id, want), func() bool {
		s, _ := w.TxState(t, id)
		var pending bool
		require.NoError(t, w.DB.Pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM completion_pending WHERE tx_id = $1 AND NOT lifecycle)`, id).Scan(&pending))
		return s == string(want) && !pending
	})
}

// ChainLeaseToken reads the fencing token of signer's chain lease. It
// touches no testing.T, so a node's hook may call it.
func (w *World) ChainLeaseToken(signer common.Address) (int64, error) {
	var token int64
	err := w.DB.Pool.QueryRow(context.Background(), `SELECT fencing_token FROM signer_lease WHERE signer = $1 AND scope = 'chain'`,
		txm.CanonicalAddress(signer)).Scan(&token)
	return token, err
}

// StallUntilTakenOver freezes n as a process that stops running would be,
// from one of its hooks: its lease renewals are held back, stalled is
// closed, and it stays frozen until another has taken signer's chain lease
// over (a higher token; at most 20s); then it runs on.
func (w *World) StallUntilTakenOver(n *Node, signer common.Address, stalled chan<- struct{}) {
	n.Leases.Pause()
	defer n.Leases.Unpause()
	held, err := w.ChainLeaseToken(signer)
	close(stalled)
	if err != nil {
		return
	}
	testsupport.Within(20*time.Second, func() bool {
		now, err := w.ChainLeaseToken(signer)
		return err == nil && now > held
	})
}

// WaitListening waits until a session of the world's database listens for
// completions: a long poll of a node's feed is waiting.
func (w *World) WaitListening(t testing.TB) {
	t.Helper()
	testsupport.Eventually(t, 20*time.Second, "a long poll to wait (a session listening for completions)", func() bool {
		var n int
		require.NoError(t, w.DB.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND query ILIKE 'LISTEN %'`).Scan(&n))
		return n > 0
	})
}
