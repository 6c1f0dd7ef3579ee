package submit

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/ethereum/go-ethereum/common"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/functions/api"
	fnevent "github.com/txfence/txfence/functions/internal/event"
	"github.com/txfence/txfence/shared/app"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/evm"
	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/evm/rpcproxy"
	"github.com/txfence/txfence/shared/localkey"
	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/metrics"
	"github.com/txfence/txfence/shared/pgtest"
	"github.com/txfence/txfence/shared/postgres"
	"github.com/txfence/txfence/shared/txm"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// world is one test's database, chain, RPC proxy and configuration.
type world struct {
	db    *pgtest.DB
	cfg   config.Config
	chain *evmtest.Chain
	proxy *rpcproxy.Proxy
	keys  []evmtest.DevKey
}

func newWorld(t *testing.T, nkeys int, opts ...func(*config.Config)) *world {
	t.Helper()
	keys := evmtest.DevKeys(nkeys)
	chain := evmtest.Start(t, evmtest.FundedAlloc(keys, nil))
	proxy := rpcproxy.Start(t, chain.URL)
	db := pgtest.New(t)
	cfg := config.Defaults()
	cfg.Database.URL = db.URL
	cfg.Chains = []config.Chain{{ID: evmtest.ChainID, RPCURLs: []string{proxy.URL}}}
	for _, k := range keys {
		cfg.Signers = append(cfg.Signers, config.Signer{Address: k.Address})
	}
	cfg.MaxInFlight = 10_000
	for _, o := range opts {
		o(&cfg)
	}
	require.NoError(t, cfg.Validate())
	return &world{db: db, cfg: cfg, chain: chain, proxy: proxy, keys: keys}
}

// node is one process: its own pool, store, chain client and use cases.
type node struct {
	name    string
	leases  *pausableLeases
	pool    *pgxpool.Pool
	store   *postgres.Store
	client  *evm.Client
	drain   *app.DrainSigner
	handler *Handler
	create  *app.CreateTx
	metrics *metrics.Metrics
	apiURL  string
}

func (w *world) node(t *testing.T, name string) *node {
	t.Helper()
	cfg := w.cfg
	cfg.InstanceID = name
	pool := pgtest.Pool(t, w.db.URL)
	m := metrics.New()
	log := logging.Discard()
	store, err := postgres.NewStoreFromConfig(pool, cfg, m, log)
	require.NoError(t, err)
	client, err := evm.Dial(context.Background(), evmtest.ChainID, w.cfg.Chains[0].RPCURLs, evm.DefaultOptions())
	require.NoError(t, err)
	t.Cleanup(client.Close)
	signers := map[common.Address]txm.Signer{}
	for _, k := range w.keys {
		s, err := localkey.New(k.Key)
		require.NoError(t, err)
		signers[k.Address] = s
	}
	leases := &pausableLeases{LeaseStore: store.Leases(), resume: make(chan struct{})}
	close(leases.resume)
	drain, err := app.NewDrainSigner(store, leases, map[uint64]txm.Chain{evmtest.ChainID: client}, signers, nil, cfg, m, log)
	require.NoError(t, err)
	h, err := NewHandler(drain, log)
	require.NoError(t, err)
	create, err := app.NewCreateTx(store, map[uint64]app.ChainReader{evmtest.ChainID: client}, nil, cfg, m, log)
	require.NoError(t, err)
	apiH, err := api.NewHandler(api.Deps{Config: cfg, Create: create, Queries: store, Completions: store, Metrics: m, Log: log})
	require.NoError(t, err)
	srv := httptest.NewServer(apiH)
	t.Cleanup(srv.Close)
	return &node{name: name, leases: leases, pool: pool, store: store, client: client, drain: drain, handler: h, create: create, metrics: m, apiURL: srv.URL}
}

var eventSeq atomic.Int64

// prompt builds the CloudEvent Pub/Sub push delivers for a submit message.
func prompt(t testing.TB, signer common.Address) event.Event {
	t.Helper()
	body, err := json.Marshal(txm.PromptMessage{ChainID: evmtest.ChainID, Signer: txm.CanonicalAddress(signer)})
	require.NoError(t, err)
	var data fnevent.MessagePublished
	data.Message.Data = body
	data.Message.MessageID = fmt.Sprint(eventSeq.Add(1))
	data.Subscription = "projects/test/subscriptions/submit"
	e := event.New()
	e.SetID(data.Message.MessageID)
	e.SetSource("//pubsub.googleapis.com/projects/test/topics/txfence-submit")
	e.SetType("google.cloud.pubsub.topic.v1.messagePublished")
	require.NoError(t, e.SetData(event.ApplicationJSON, data))
	return e
}

// allocate creates n plain transfers for signer through the create use case.
func (n *node) allocate(t testing.TB, signer common.Address, count int) []string {
	t.Helper()
	to := common.HexToAddress("0x000000000000000000000000000000000000dEaD")
	ids := make([]string, count)
	errs := make(chan error, count)
	for i := 0; i < count; i++ {
		go func(i int) {
			c, err := n.create.Execute(context.Background(), &txm.Request{ChainID: evmtest.ChainID, From: signer, To: &to,
				Value: big.NewInt(int64(i + 1)), GasLimit: 21000})
			if err == nil {
				ids[i] = c.Tx.ID
			}
			errs <- err
		}(i)
	}
	for i := 0; i < count; i++ {
		require.NoError(t, <-errs)
	}
	return ids
}

// states counts the signer's transactions by state.
func (w *world) states(t testing.TB) map[string]int {
	t.Helper()
	rows, err := w.db.Pool.Query(context.Background(), `SELECT state, count(*) FROM managed_tx GROUP BY state`)
	require.NoError(t, err)
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		require.NoError(t, rows.Scan(&s, &n))
		out[s] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// mineAll commits blocks until the signer's latest nonce reaches want.
func (w *world) mineAll(t testing.TB, signer common.Address, want uint64) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < 100; i++ {
		n, err := w.chain.Backend.Client().NonceAt(ctx, signer, nil)
		require.NoError(t, err)
		if n >= want {
			return
		}
		w.chain.Commit()
	}
	n, _ := w.chain.Backend.Client().NonceAt(ctx, signer, nil)
	require.Failf(t, "not mined", "latest nonce %d, want %d", n, want)
}

// attemptsPerTx returns the number of attempts of every transaction.
func (w *world) attemptsPerTx(t testing.TB) map[string]int {
	t.Helper()
	rows, err := w.db.Pool.Query(context.Background(), `SELECT t.id::text, count(a.*) FROM managed_tx t LEFT JOIN tx_attempt a ON a.tx_id = t.id GROUP BY t.id`)
	require.NoError(t, err)
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		require.NoError(t, rows.Scan(&id, &n))
		out[id] = n
	}
	require.NoError(t, rows.Err())
	return out
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			require.Failf(t, "timed out", "waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (w *world) chainID() *big.Int { return big.NewInt(evmtest.ChainID) }

// pausableLeases stands for a process that stops running: while paused, its
// lease renewals do not reach the database (the real store underneath).
type pausableLeases struct {
	txm.LeaseStore
	mu     sync.Mutex
	resume chan struct{}
}

func (p *pausableLeases) pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resume = make(chan struct{})
}

func (p *pausableLeases) unpause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	close(p.resume)
}

func (p *pausableLeases) Renew(ctx context.Context, l txm.Lease) (txm.Lease, error) {
	p.mu.Lock()
	ch := p.resume
	p.mu.Unlock()
	<-ch
	return p.LeaseStore.Renew(ctx, l)
}
