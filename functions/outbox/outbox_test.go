package outbox

import (
	"context"
	"encoding/json"
	"math/big"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/app"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/metrics"
	"github.com/txfence/txfence/shared/pgtest"
	"github.com/txfence/txfence/shared/postgres"
	"github.com/txfence/txfence/shared/pubsub"
	"github.com/txfence/txfence/shared/pubsub/pubsubtest"
	"github.com/txfence/txfence/shared/testsupport"
	"github.com/txfence/txfence/shared/txm"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type chainStub struct{}

func (chainStub) PendingNonce(context.Context, common.Address) (uint64, error) { return 0, nil }
func (chainStub) LatestNonce(context.Context, common.Address) (uint64, error)  { return 0, nil }
func (chainStub) EstimateGas(context.Context, txm.CallMsg) (uint64, error)     { return 21000, nil }
func (chainStub) HasCode(_ context.Context, a []common.Address) ([]bool, error) {
	return make([]bool, len(a)), nil
}
func (chainStub) Simulate(_ context.Context, calls []txm.SimCall) ([]txm.SimResult, error) {
	out := make([]txm.SimResult, len(calls))
	for i := range out {
		out[i] = txm.SimResult{Method: txm.SimCallEstimate, Gas: 21000}
	}
	return out, nil
}
func (chainStub) SimulationMethod() txm.SimMethod { return txm.SimCallEstimate }
func (chainStub) DecodeRevert([]byte, string) (txm.Revert, error) {
	return txm.Revert{Kind: txm.RevertKindUnknown}, nil
}
func (chainStub) ChargesDataFee() bool { return false }

func (chainStub) DataFees(_ context.Context, txs []txm.DataFeeTx) ([]*big.Int, error) {
	out := make([]*big.Int, len(txs))
	for i := range out {
		out[i] = new(big.Int)
	}
	return out, nil
}

func setup(t *testing.T) (*pgtest.DB, config.Config, *postgres.Store, *pubsubtest.Server, *app.Relay) {
	t.Helper()
	db := pgtest.New(t)
	ps := pubsubtest.MustStart(t, "test")
	cfg := config.Defaults()
	cfg.Auth.Methods = []string{"dev"}
	cfg.Database.URL = db.URL
	cfg.Chains = []config.Chain{{ID: 1337, RPCURLs: []string{"http://127.0.0.1:1"}}}
	cfg.Signers = []config.Signer{{Address: common.HexToAddress("0xa1")}}
	cfg.InstanceID = "outbox-test"
	cfg.Project = "test"
	ctx := context.Background()
	require.NoError(t, ps.CreateTopic(ctx, cfg.TopicSubmit))
	require.NoError(t, ps.CreateSubscription(ctx, "submit-sub", cfg.TopicSubmit, true))
	store, err := postgres.NewStoreFromConfig(db.Pool, cfg, metrics.New(), logging.Discard())
	require.NoError(t, err)
	pub, err := pubsub.NewPublisher(ps.Client, "test")
	require.NoError(t, err)
	t.Cleanup(pub.Close)
	relay, err := app.NewRelay(store, pub, logging.Discard())
	require.NoError(t, err)
	return db, cfg, store, ps, relay
}

// policies is the policy source of a test's CreateTx (its callers are the
// development principal).
func policies(t *testing.T, db *pgtest.DB) *app.Policies {
	t.Helper()
	store, err := postgres.NewPolicies(db.Pool)
	require.NoError(t, err)
	p, err := app.NewPolicies(store, nil, nil, logging.Discard())
	require.NoError(t, err)
	return p
}

func createMany(t *testing.T, c *app.CreateTx, signer common.Address, n int) {
	t.Helper()
	to := common.HexToAddress("0xdead")
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_, err := c.Execute(context.Background(), app.DevPrincipal, &txm.Request{ChainID: 1337, From: signer, To: &to, Value: big.NewInt(int64(i)), GasLimit: 21000})
			assert.NoError(t, err)
		}(i)
	}
	wg.Wait()
}

// unsent counts the outbox rows, which are the ones not yet published: a
// relay deletes what it published.
func unsent(t *testing.T, db *pgtest.DB) (n int) {
	t.Helper()
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox`).Scan(&n))
	return
}

// TestIssue4_OutboxRelay: the create path publishes its own submit prompts
// after commit, one per allocation batch; the sweep publishes what was left
// behind; a publish failure loses nothing.
func TestIssue4_OutboxRelay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, cfg, store, ps, relay := setup(t)
	signer := cfg.Signers[0].Address
	stub := map[uint64]app.ChainReader{1337: chainStub{}}

	t.Run("invocations relay their own rows, one prompt per batch", func(t *testing.T) {
		c, err := app.NewCreateTx(store, stub, relay, policies(t, db), cfg.Create(), metrics.New(), logging.Discard())
		require.NoError(t, err)
		createMany(t, c, signer, 300)
		assert.Eventually(t, func() bool { return unsent(t, db) == 0 }, 20*app.RelayDeleteEvery, 10*time.Millisecond,
			"every row published right after its commit, and gone within app.RelayDeleteEvery")
		msgs, err := ps.Pull(ctx, "submit-sub", 1000, 2*time.Second)
		require.NoError(t, err)
		var batches int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(DISTINCT fencing_token) FROM managed_tx`).Scan(&batches))
		assert.Len(t, msgs, batches, "one prompt per batch (each batch takes a new token), not one per transaction")
		assert.Less(t, len(msgs), 300)
		for _, m := range msgs {
			var p txm.PromptMessage
			require.NoError(t, json.Unmarshal(m.Data, &p))
			assert.Equal(t, txm.CanonicalAddress(signer), p.Signer)
			assert.EqualValues(t, 1337, p.ChainID)
			assert.Equal(t, txm.CanonicalAddress(signer), m.OrderingKey)
			assert.NotEmpty(t, m.Attributes[pubsub.AttrOutboxID])
		}
	})

	t.Run("the sweep publishes what was left behind", func(t *testing.T) {
		noRelay, err := app.NewCreateTx(store, stub, nil, policies(t, db), cfg.Create(), metrics.New(), logging.Discard())
		require.NoError(t, err)
		createMany(t, noRelay, signer, 50)
		left := unsent(t, db)
		require.Positive(t, left)
		s, err := NewSweeper(relay, nil, logging.Discard())
		require.NoError(t, err)
		s.MinAge = 0
		n, err := s.Sweep(ctx)
		require.NoError(t, err)
		assert.Equal(t, left, n)
		assert.Zero(t, unsent(t, db))
		msgs, err := ps.Pull(ctx, "submit-sub", 1000, 2*time.Second)
		require.NoError(t, err)
		assert.Len(t, msgs, n)
	})

	t.Run("a publish failure keeps the row for later", func(t *testing.T) {
		// A topic that does not exist: every publish fails.
		bad := cfg
		bad.TopicSubmit = "missing-topic"
		badStore, err := postgres.NewStoreFromConfig(db.Pool, bad, metrics.New(), logging.Discard())
		require.NoError(t, err)
		c, err := app.NewCreateTx(badStore, stub, relay, policies(t, db), bad.Create(), metrics.New(), logging.Discard())
		require.NoError(t, err)
		var before int64
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT max(fencing_token) FROM managed_tx`).Scan(&before))
		createMany(t, c, signer, 5)
		var kept, attempts int
		var lastErr *string
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) OVER (), attempts, last_error FROM outbox WHERE topic = 'missing-topic' ORDER BY id LIMIT 1`).Scan(&kept, &attempts, &lastErr))
		var batches int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(DISTINCT fencing_token) FROM managed_tx WHERE fencing_token > $1`, before).Scan(&batches))
		assert.Equal(t, batches, kept, "every prompt of the failed publishes kept")
		assert.Positive(t, attempts)
		require.NotNil(t, lastErr)
		assert.Contains(t, *lastErr, "missing-topic")
		require.NoError(t, ps.CreateTopic(ctx, "missing-topic"))
		s, err := NewSweeper(relay, nil, logging.Discard())
		require.NoError(t, err)
		s.MinAge = 0
		_, err = s.Sweep(ctx)
		require.NoError(t, err)
		assert.Zero(t, unsent(t, db), "published once the topic exists")
	})
}

// countingOutbox counts the relay's statements that delete published rows:
// DeleteOutbox's, and those of Relay (which deletes what it publishes).
type countingOutbox struct {
	txm.OutboxStore
	deletes atomic.Int64
}

func (c *countingOutbox) DeleteOutbox(ctx context.Context, ids []int64) error {
	c.deletes.Add(1)
	return c.OutboxStore.DeleteOutbox(ctx, ids)
}

func (c *countingOutbox) Relay(ctx context.Context, ids []int64, olderThan time.Duration, limit int,
	publish func(context.Context, []txm.Message) []error) (int, error) {
	c.deletes.Add(1)
	return c.OutboxStore.Relay(ctx, ids, olderThan, limit, publish)
}

// TestRelay_DeletesPublishedPromptsTogether: the create path's relay
// publishes each allocation call's prompts as soon as the call is over,
// and deletes the published rows of the calls within
// app.RelayDeleteEvery of each other in one statement, not one each; a
// process that stops deletes what it holds (Flush).
func TestRelay_DeletesPublishedPromptsTogether(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, cfg, store, ps, _ := setup(t)
	pub, err := pubsub.NewPublisher(ps.Client, "test")
	require.NoError(t, err)
	t.Cleanup(pub.Close)
	counting := &countingOutbox{OutboxStore: store}
	relay, err := app.NewRelay(counting, pub, logging.Discard())
	require.NoError(t, err)
	c, err := app.NewCreateTx(store, map[uint64]app.ChainReader{1337: chainStub{}}, relay, policies(t, db), cfg.Create(), metrics.New(), logging.Discard())
	require.NoError(t, err)

	const calls = 20
	start := time.Now()
	for i := 0; i < calls; i++ {
		createMany(t, c, cfg.Signers[0].Address, 1) // one request: one allocation call
	}
	took := time.Since(start)
	msgs, err := ps.Pull(ctx, "submit-sub", 1000, 2*time.Second)
	require.NoError(t, err)
	assert.Len(t, msgs, calls, "every call's prompt published")
	assert.Eventually(t, func() bool { return unsent(t, db) == 0 }, 20*app.RelayDeleteEvery, 10*time.Millisecond,
		"the published rows deleted")
	bound := int64(took/app.RelayDeleteEvery) + 2
	assert.LessOrEqual(t, counting.deletes.Load(), bound,
		"one delete per app.RelayDeleteEvery at most (the calls took %s), not one per call", took)

	// What a process holds when it stops is deleted by Flush.
	quiet, err := app.NewCreateTx(store, map[uint64]app.ChainReader{1337: chainStub{}}, nil, policies(t, db), cfg.Create(), metrics.New(), logging.Discard())
	require.NoError(t, err)
	createMany(t, quiet, cfg.Signers[0].Address, 1)
	var id int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT id FROM outbox`).Scan(&id))
	relay.PublishDeleteLater(ctx, []int64{id})
	relay.Flush(ctx)
	assert.Zero(t, unsent(t, db), "flushed")
}

// TestSweeper_LeavesInvocationsTheirRows: an invocation relays the rows it
// wrote without claiming them, within app.PublishTimeout of its commit; the
// sweep must not take rows that young, or a row could be published twice.
func TestSweeper_LeavesInvocationsTheirRows(t *testing.T) {
	t.Parallel()
	_, _, _, _, relay := setup(t)
	s, err := NewSweeper(relay, nil, logging.Discard())
	require.NoError(t, err)
	assert.Greater(t, s.MinAge, app.PublishTimeout)
}

// TestSweeper_MeasuresWhatWaits: after each run the sweeper says, in its
// answer and in the gauges the outbox alert reads, how many rows wait to
// be published, how many of them failed to, and how old the oldest is;
// rows that cannot be published (their topic missing, as in a Pub/Sub
// outage) keep the figures up, and once they are published the figures
// fall to zero.
func TestSweeper_MeasuresWhatWaits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, cfg, _, ps, relay := setup(t)
	m := metrics.New()
	s, err := NewSweeper(relay, m, logging.Discard())
	require.NoError(t, err)
	s.MinAge = 0
	gauges := func() [3]float64 {
		t.Helper()
		var g [3]float64
		for i, name := range []string{"outbox_backlog_rows", "outbox_failing_rows", "outbox_oldest_age_seconds"} {
			v, ok := m.Gauge(name)
			require.True(t, ok, "%s recorded", name)
			g[i] = v
		}
		return g
	}

	st, err := s.Run(ctx)
	require.NoError(t, err)
	assert.Equal(t, Stats{Backlog: []Backlog{{}}}, st, "nothing waits")
	assert.Equal(t, [3]float64{}, gauges())

	// Prompts for a topic that does not exist: their writers' relay fails,
	// and so does every sweep.
	bad := cfg
	bad.TopicSubmit = "absent-topic"
	badStore, err := postgres.NewStoreFromConfig(db.Pool, bad, metrics.New(), logging.Discard())
	require.NoError(t, err)
	c, err := app.NewCreateTx(badStore, map[uint64]app.ChainReader{1337: chainStub{}}, relay, policies(t, db), bad.Create(), metrics.New(), logging.Discard())
	require.NoError(t, err)
	createMany(t, c, cfg.Signers[0].Address, 5)
	waiting := unsent(t, db)
	require.Positive(t, waiting)
	// And prompts that nothing relayed yet (their writer crashed).
	quiet, err := app.NewCreateTx(badStore, map[uint64]app.ChainReader{1337: chainStub{}}, nil, policies(t, db), cfg.Create(), metrics.New(), logging.Discard())
	require.NoError(t, err)
	createMany(t, quiet, cfg.Signers[0].Address, 3)
	fresh := unsent(t, db) - waiting
	require.Positive(t, fresh)
	testsupport.Eventually(t, 10*time.Second, "the oldest unsent row to be 50 ms old", func() bool {
		var old bool
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT min(created_at) <= clock_timestamp() - interval '50 milliseconds' FROM outbox`).Scan(&old))
		return old
	})

	// A sweep that leaves them (too young for it) measures them all.
	young, err := NewSweeper(relay, m, logging.Discard())
	require.NoError(t, err)
	young.MinAge = time.Hour
	st, err = young.Run(ctx)
	require.NoError(t, err)
	require.Len(t, st.Backlog, 1)
	b := st.Backlog[0]
	assert.Equal(t, Backlog{Rows: int64(waiting + fresh), Failing: int64(waiting), OldestSeconds: b.OldestSeconds}, b)
	assert.GreaterOrEqual(t, b.OldestSeconds, 0.05, "the oldest row's age")
	assert.Less(t, b.OldestSeconds, 60.0)
	assert.Equal(t, [3]float64{float64(waiting + fresh), float64(waiting), b.OldestSeconds}, gauges())

	// A sweep that tries them all fails, and says so.
	st, err = s.Run(ctx)
	require.Error(t, err, "the sweep could not publish")
	assert.Contains(t, err.Error(), "absent-topic")
	require.Len(t, st.Backlog, 1)
	older := st.Backlog[0]
	assert.Equal(t, Backlog{Rows: int64(waiting + fresh), Failing: int64(waiting + fresh), OldestSeconds: older.OldestSeconds}, older)
	assert.Greater(t, older.OldestSeconds, b.OldestSeconds, "the same oldest row, older")
	assert.Equal(t, [3]float64{float64(waiting + fresh), float64(waiting + fresh), older.OldestSeconds}, gauges())
	var attempts int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT max(attempts) FROM outbox`).Scan(&attempts))
	assert.Equal(t, 2, attempts, "the writer's relay and the sweep each tried once")

	// Pub/Sub heals: the next sweep publishes them and the figures fall.
	require.NoError(t, ps.CreateTopic(ctx, "absent-topic"))
	st, err = s.Run(ctx)
	require.NoError(t, err)
	assert.Equal(t, Stats{Sent: waiting + fresh, Backlog: []Backlog{{}}}, st)
	assert.Equal(t, [3]float64{}, gauges())
	assert.Zero(t, unsent(t, db))
}
