package resubmit

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/functions/internal/stacktest"
	"github.com/txfence/txfence/shared/app"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/evm/rpcproxy"
	"github.com/txfence/txfence/shared/txm"
)

// TestIssue48_ResumeAtOnce: the chain's only endpoint goes down right
// after a drain signed and persisted three transactions, so their
// broadcast meets the outage; the first backs off for an hour (the
// configured minimum) and holds the other two behind it. While the
// endpoint is down a resubmit pass resumes nothing. Once it answers again,
// the next pass ends that backoff and prompts the signer, and all three
// confirm: each was broadcast before the backoff recorded at the outage
// would have ended (nothing here is measured by the clock: the backoff is
// an hour, the test lasts seconds).
func TestIssue48_ResumeAtOnce(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 1, stacktest.Lively, func(c *config.Config) {
		c.RetryBackoffMin, c.RetryBackoffMax = time.Hour, 2*time.Hour
		c.StuckAfter = 3 * time.Hour
	})
	n := w.Node(t, "n")
	signer := w.Keys[0].Address
	chainID := stacktest.ChainID().Uint64()
	ids := n.Allocate(t, signer, 3)

	n.Drain.SetHooks(app.SubmitHooks{AfterPersist: func() { w.Proxy.FailAll(rpcproxy.Fault{HTTPStatus: 502}) }})
	res, err := n.Drain.Execute(ctx, chainID, signer)
	require.NoError(t, err, "a transaction's own failure is recorded, not returned")
	require.Equal(t, 1, res.Failed)
	n.Drain.SetHooks(app.SubmitHooks{})

	var until time.Time
	var outage bool
	var held int
	require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT next_attempt_at, backoff_outage FROM managed_tx WHERE next_attempt_at IS NOT NULL`).
		Scan(&until, &outage))
	require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM managed_tx t JOIN tx_attempt a ON a.tx_id = t.id
WHERE t.state = 'ALLOCATED' AND a.broadcast_at IS NULL`).Scan(&held))
	require.True(t, outage, "the failure was an outage of the chain's endpoints")
	require.Greater(t, time.Until(until), 50*time.Minute, "the row backs off for the configured hour")
	require.Equal(t, 3, held, "all three signed, none sent: the first backs off and holds the others")

	st, err := n.Resubmit.Pass(ctx)
	require.NoError(t, err)
	assert.Zero(t, st.Resumed, "the endpoint is still down: the backoff runs on")

	w.Proxy.Heal()
	st, err = n.Resubmit.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, st.Resumed, "the endpoint answers again: the backoff ends")
	var prompts int
	require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE topic = $1`, w.Cfg.TopicSubmit).Scan(&prompts))
	assert.Positive(t, prompts, "the signer is prompted")

	stop := w.Run(t, []*stacktest.Node{n}, stacktest.RunOptions{})
	for _, id := range ids {
		w.WaitState(t, id, txm.StateConfirmed, 20*time.Second)
	}
	stop()
	var late int
	require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM tx_attempt WHERE broadcast_at IS NULL OR broadcast_at >= $1`, until).
		Scan(&late))
	assert.Zero(t, late, "every attempt was broadcast before the outage's backoff would have ended")
}
