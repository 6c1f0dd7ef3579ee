// Package stacktest assembles txfence's in-process stack for function
// tests: a fresh migrated database, a simulated chain served over HTTP
// behind a recording fault proxy, optionally Pub/Sub (pstest), and "nodes":
// independent instances, each with its own pool, store, chain client, use
// cases and API server.
package stacktest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/functions/api"
	"github.com/txfence/txfence/functions/internal/deps"
	fnevent "github.com/txfence/txfence/functions/internal/event"
	"github.com/txfence/txfence/shared/app"
	"github.com/txfence/txfence/shared/auth"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/evm"
	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/evm/rpcproxy"
	"github.com/txfence/txfence/shared/localkey"
	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/metrics"
	"github.com/txfence/txfence/shared/pgtest"
	"github.com/txfence/txfence/shared/postgres"
	"github.com/txfence/txfence/shared/pubsub"
	"github.com/txfence/txfence/shared/pubsub/pubsubtest"
	"github.com/txfence/txfence/shared/testsupport"
	"github.com/txfence/txfence/shared/txm"
)

// World is one test's database, chain, RPC proxy and configuration.
type World struct {
	DB    *pgtest.DB
	Cfg   config.Config
	Chain *evmtest.Chain
	Proxy *rpcproxy.Proxy
	// Lagging is a second endpoint of the chain that answers as a node
	// behind it (WithLaggingEndpoint); nil without one.
	Lagging *rpcproxy.Proxy
	Keys    []evmtest.DevKey
	PubSub  *pubsubtest.Server // nil unless WithPubSub
	// EVM is the chain client options nodes are built with; their fee
	// caps and tip floor come from Cfg (Cfg.FeesFor), as in production.
	EVM evm.Options
	// Hook is the stuck-resolution policy nodes are built with (nil: noop).
	Hook txm.StuckResolutionHook
	// WrapSigner, when set, wraps every signer nodes are built with (a
	// signer that fails, say).
	WrapSigner func(txm.Signer) txm.Signer
	// WrapPublisher, when set, wraps the Pub/Sub publisher nodes relay
	// through (one that refuses topics as IAM would, say).
	WrapPublisher func(txm.Publisher) txm.Publisher
	// LogTo, when set, receives the nodes' JSON logs (debug level).
	LogTo io.Writer
	// Telemetry, when set, builds each node's instruments from its
	// configuration (telemetry.Setup against a fake of Google's services,
	// say); otherwise each node gets a metrics.New() of its own.
	Telemetry func(t *testing.T, cfg config.Config, log *slog.Logger) *metrics.Metrics
}

// Option changes the world's configuration before nodes are built.
type Option func(*config.Config)

// NewWorld starts a chain whose first nkeys development keys are funded and
// configured as signers, a proxy in front of it, and a fresh database.
func NewWorld(t *testing.T, nkeys int, opts ...Option) *World {
	t.Helper()
	return NewWorldWithAlloc(t, nkeys, nil, opts...)
}

// NewWorldWithAlloc is NewWorld whose genesis alloc edit may change first
// (code at a signer's address, say); edit may be nil.
func NewWorldWithAlloc(t *testing.T, nkeys int, edit func(types.GenesisAlloc), opts ...Option) *World {
	t.Helper()
	keys := evmtest.DevKeys(nkeys)
	alloc := evmtest.FundedAlloc(keys, nil)
	alloc[evmtest.GasBurner] = evmtest.GasBurnerAccount() // for other users filling blocks
	if edit != nil {
		edit(alloc)
	}
	chain := evmtest.Start(t, alloc)
	proxy := rpcproxy.Start(t, chain.URL)
	db := pgtest.New(t)
	cfg := config.Defaults()
	cfg.Auth.Methods = []string{"dev"}
	cfg.Database.URL = db.URL
	cfg.Chains = []config.Chain{{ID: evmtest.ChainID, RPCURLs: []string{proxy.URL}}}
	for _, k := range keys {
		cfg.Signers = append(cfg.Signers, config.Signer{Address: k.Address})
	}
	cfg.MaxInFlight = 10_000
	cfg.Confirmations = 5
	// The test chain moves only when a test mines: a receipt check does not
	// wait for its head unless a test asks for it.
	cfg.ReceiptWait = 0
	for _, o := range opts {
		o(&cfg)
	}
	require.NoError(t, cfg.Validate())
	evmOpts := evm.DefaultOptions()
	evmOpts.CallTimeout = 15 * time.Second // generous: the machine running the tests may be loaded
	return &World{DB: db, Cfg: cfg, Chain: chain, Proxy: proxy, Keys: keys, EVM: evmOpts}
}

// WithPubSub starts pstest with the deployment's topics and one ordered
// subscription per topic named "<topic>-sub"; nodes built afterwards relay
// their outbox rows to it.
func (w *World) WithPubSub(t *testing.T) *World {
	t.Helper()
	w.Cfg.Project = "test"
	w.PubSub = pubsubtest.MustStart(t, w.Cfg.Project)
	ctx := context.Background()
	for _, topic := range []string{w.Cfg.TopicSubmit, w.Cfg.TopicReceipt, w.Cfg.TopicCompletion} {
		require.NoError(t, w.PubSub.CreateTopic(ctx, topic))
		require.NoError(t, w.PubSub.CreateSubscription(ctx, topic+"-sub", topic, true))
	}
	return w
}

// WithLaggingEndpoint gives the chain a second endpoint, after the first,
// that answers as a node blocks behind would (rpcproxy's Lag); nodes built
// afterwards fail over between the two.
func (w *World) WithLaggingEndpoint(t *testing.T, blocks uint64) *World {
	t.Helper()
	w.Lagging = rpcproxy.Start(t, w.Chain.URL)
	w.Lagging.Lag(blocks)
	w.Cfg.Chains[0].RPCURLs = append(w.Cfg.Chains[0].RPCURLs, w.Lagging.URL)
	return w
}

// Node is one process: its own pool, store, chain client and use cases.
type Node struct {
	Name     string
	Leases   *PausableLeases
	Pool     *pgxpool.Pool
	Store    *postgres.Store
	Client   *evm.Client
	Drain    *app.DrainSigner
	Receipts *app.CheckReceipts
	Finality *app.SweepFinality
	Resubmit *app.SweepResubmit
	Create   *app.CreateTx
	Policies *app.Policies
	// Approvals sweeps what waits for approval (every Resubmit pass runs
	// it too).
	Approvals *app.SweepApprovals
	Metrics   *metrics.Metrics
	Log       *slog.Logger
	APIURL    string
}

// Node builds an instance named name (its instance id and lease owner prefix).
func (w *World) Node(t *testing.T, name string) *Node {
	t.Helper()
	cfg := w.Cfg
	cfg.InstanceID = name
	dbcfg := cfg.Database
	dbcfg.MaxConns = 20
	db, err := postgres.Open(context.Background(), dbcfg) // as the services open it: with their timeouts
	require.NoError(t, err)
	t.Cleanup(db.Close)
	pool := db.Pool
	log := logging.Discard()
	if w.LogTo != nil {
		log = logging.New(w.LogTo, "debug", cfg.TelemetryProject())
	}
	m := metrics.New()
	if w.Telemetry != nil {
		m = w.Telemetry(t, cfg, log)
	}
	store, err := postgres.NewStoreFromConfig(pool, cfg, m, log)
	require.NoError(t, err)
	opts := deps.EndpointOptions(deps.ChainOptions(w.EVM, cfg.Profile(evmtest.ChainID)), cfg, evmtest.ChainID)
	opts.Log = log
	client, err := evm.Dial(context.Background(), evmtest.ChainID, cfg.Chains[0].RPCURLs, opts)
	require.NoError(t, err)
	t.Cleanup(client.Close)
	m.WatchEndpoints(evmtest.ChainID, client)
	var relay *app.Relay
	if w.PubSub != nil {
		pub, err := pubsub.NewPublisher(w.PubSub.Client, cfg.Project)
		require.NoError(t, err)
		t.Cleanup(pub.Close)
		pub.Unordered(cfg.TopicSubmit, cfg.TopicReceipt) // as deps.Build does
		var publisher txm.Publisher = pub
		if w.WrapPublisher != nil {
			publisher = w.WrapPublisher(pub)
		}
		relay, err = app.NewRelay(store, publisher, log)
		require.NoError(t, err)
	}
	signers := map[common.Address]txm.Signer{}
	for _, k := range w.Keys {
		s, err := localkey.New(k.Key)
		require.NoError(t, err)
		signers[k.Address] = s
		if w.WrapSigner != nil {
			signers[k.Address] = w.WrapSigner(s)
		}
	}
	leases := &PausableLeases{LeaseStore: store.Leases(), resume: make(chan struct{})}
	close(leases.resume)
	chains := map[uint64]txm.Chain{evmtest.ChainID: client}
	n := &Node{Name: name, Leases: leases, Pool: pool, Store: store, Client: client, Metrics: m, Log: log}
	n.Drain, err = app.NewDrainSigner(store, leases, chains, signers, relay, cfg.Drain(), m, log)
	require.NoError(t, err)
	n.Receipts, err = app.NewCheckReceipts(store, leases, chains, relay, cfg.Receipts(), m, log)
	require.NoError(t, err)
	n.Finality, err = app.NewSweepFinality(store, leases, chains, relay, cfg.Finality(), m, log)
	require.NoError(t, err)
	n.Resubmit, err = app.NewSweepResubmit(store, leases, chains, signers, w.Hook, relay, cfg.Resubmit(), m, log)
	require.NoError(t, err)
	policyStore, err := postgres.NewPolicies(pool)
	require.NoError(t, err)
	keys, err := postgres.NewAPIKeys(pool)
	require.NoError(t, err)
	audit, err := postgres.NewAuditLog(pool)
	require.NoError(t, err)
	authn, err := auth.New(cfg.Auth, keys)
	require.NoError(t, err)
	n.Policies, err = app.NewPolicies(policyStore, audit, m, log)
	require.NoError(t, err)
	n.Create, err = app.NewCreateTx(store, map[uint64]app.ChainReader{evmtest.ChainID: client}, relay, n.Policies, cfg.Create(), m, log)
	require.NoError(t, err)
	actions, err := app.NewRequestAction(store, relay, cfg.MaxFeeCap, log)
	require.NoError(t, err)
	follow, err := app.NewFollowCompletions(store, store, cfg.Auth.MaxWaits, log)
	require.NoError(t, err)
	feed, err := app.NewMergedCompletions(app.OneDatabase(), map[string]*app.FollowCompletions{"": follow})
	require.NoError(t, err)
	queries, err := app.NewShardedQueries(app.OneDatabase(), map[string]app.ShardStore{"": store})
	require.NoError(t, err)
	finish, err := app.NewFinishApproval(store, n.Create, n.Policies, relay, log)
	require.NoError(t, err)
	approve, err := app.NewApproveTx(store, finish, n.Policies, log)
	require.NoError(t, err)
	reject, err := app.NewRejectTx(store, n.Policies, relay, log)
	require.NoError(t, err)
	approvals, err := app.NewShardedApprovals(queries, map[string]*app.ApproveTx{"": approve}, map[string]*app.RejectTx{"": reject})
	require.NoError(t, err)
	n.Approvals, err = app.NewSweepApprovals(store, finish, relay, log)
	require.NoError(t, err)
	n.Resubmit.SetApprovals(n.Approvals)
	h, err := api.NewHandler(api.Deps{Config: cfg, Auth: authn, Policies: n.Policies, PolicyStore: policyStore, Create: n.Create,
		Queries: store, Completions: feed, Actions: actions, ActionLog: store, Operator: store,
		Views: map[uint64]txm.ChainView{evmtest.ChainID: client}, Simulators: map[uint64]txm.Simulator{evmtest.ChainID: client},
		Delegations: map[uint64]txm.DelegationReader{evmtest.ChainID: client},
		Endpoints:   map[uint64]txm.EndpointHealthReader{evmtest.ChainID: client},
		Metrics:     m, Log: log, Approvals: approvals})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	n.APIURL = srv.URL
	return n
}

// APIKey stores p (in its principal's name) and an API key for its
// principal, and returns the key to send as a bearer token. The world's
// configuration must accept API keys (Cfg.Auth.Methods).
func (w *World) APIKey(t *testing.T, p txm.Policy) string {
	t.Helper()
	ctx := context.Background()
	policies, err := postgres.NewPolicies(w.DB.Pool)
	require.NoError(t, err)
	_, err = policies.PutPolicy(ctx, p, "stacktest")
	require.NoError(t, err)
	keys, err := postgres.NewAPIKeys(w.DB.Pool)
	require.NoError(t, err)
	key, id, hash := auth.NewAPIKey()
	require.NoError(t, keys.CreateAPIKey(ctx, txm.APIKey{ID: id, Principal: p.Principal, Hash: hash, CreatedBy: "stacktest"}))
	return key
}

var eventSeq atomic.Int64

// Prompt builds the CloudEvent Pub/Sub push delivers for a submit or
// receipt message about signer.
func Prompt(t testing.TB, signer common.Address) event.Event {
	t.Helper()
	body, err := json.Marshal(txm.PromptMessage{ChainID: evmtest.ChainID, Signer: txm.CanonicalAddress(signer)})
	require.NoError(t, err)
	var data fnevent.MessagePublished
	data.Message.Data = body
	data.Message.MessageID = fmt.Sprint(eventSeq.Add(1))
	data.Subscription = "projects/test/subscriptions/prompt"
	e := event.New()
	e.SetID(data.Message.MessageID)
	e.SetSource("//pubsub.googleapis.com/projects/test/topics/prompt")
	e.SetType("google.cloud.pubsub.topic.v1.messagePublished")
	require.NoError(t, e.SetData(event.ApplicationJSON, data))
	return e
}

// Allocate creates count plain transfers for signer through the create use
// case, concurrently, and returns their ids.
func (n *Node) Allocate(t testing.TB, signer common.Address, count int) []string {
	t.Helper()
	to := common.HexToAddress("0x000000000000000000000000000000000000dEaD")
	return n.AllocateRequests(t, count, func(i int) *txm.Request {
		return &txm.Request{ChainID: evmtest.ChainID, From: signer, To: &to, Value: big.NewInt(int64(i + 1)), GasLimit: 21000}
	})
}

// AllocateRequests creates count requests built by req, concurrently. A
// create refused as fenced (a test's short lease outlived by a call on a
// loaded machine; nothing was written) is retried, as its client would.
func (n *Node) AllocateRequests(t testing.TB, count int, req func(i int) *txm.Request) []string {
	t.Helper()
	return n.AllocateRequestsAs(t, app.DevPrincipal, count, req)
}

// Advisory stores, for the principal "advisory", a sender's policy of every
// signer whose simulation is advisory, and returns the principal: its
// creates that revert in simulation still get a nonce (those that give a
// gas limit), so that a test can have a call revert on chain.
func (w *World) Advisory(t testing.TB) txm.Principal {
	t.Helper()
	policies, err := postgres.NewPolicies(w.DB.Pool)
	require.NoError(t, err)
	_, err = policies.PutPolicy(context.Background(), txm.Policy{Principal: "advisory", Roles: []txm.Role{txm.RoleSender, txm.RoleReader},
		AllSigners: true, SkipEstimation: true, SimulationAdvisory: true}, "stacktest")
	require.NoError(t, err)
	return txm.Principal{ID: "advisory"}
}

// AllocateRequestsAs is AllocateRequests by the principal who.
func (n *Node) AllocateRequestsAs(t testing.TB, who txm.Principal, count int, req func(i int) *txm.Request) []string {
	t.Helper()
	ids := make([]string, count)
	errs := make(chan error, count)
	for i := 0; i < count; i++ {
		go func(i int) {
			var c txm.Created
			var err error
			for try := 0; try < 5; try++ {
				if c, err = n.Create.Execute(context.Background(), who, req(i)); !errors.Is(err, txm.ErrFenced) {
					break
				}
			}
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

// States counts transactions by state.
func (w *World) States(t testing.TB) map[string]int {
	t.Helper()
	rows, err := w.DB.Pool.Query(context.Background(), `SELECT state, count(*) FROM managed_tx GROUP BY state`)
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

// MineAll commits blocks until the signer's latest nonce reaches want.
func (w *World) MineAll(t testing.TB, signer common.Address, want uint64) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < 100; i++ {
		n, err := w.Chain.Backend.Client().NonceAt(ctx, signer, nil)
		require.NoError(t, err)
		if n >= want {
			return
		}
		w.Chain.Commit()
	}
	n, _ := w.Chain.Backend.Client().NonceAt(ctx, signer, nil)
	require.Failf(t, "not mined", "latest nonce %d, want %d", n, want)
}

// Mine commits n blocks.
func (w *World) Mine(n int) {
	for i := 0; i < n; i++ {
		w.Chain.Commit()
	}
}

// AttemptsPerTx returns the number of attempts of every transaction.
func (w *World) AttemptsPerTx(t testing.TB) map[string]int {
	t.Helper()
	return w.stringInts(t, `SELECT t.id::text, count(a.*) FROM managed_tx t LEFT JOIN tx_attempt a ON a.tx_id = t.id GROUP BY t.id`)
}

// AttemptHashes maps tx id to its attempt hash (one attempt per tx).
func (w *World) AttemptHashes(t testing.TB) map[string]string {
	t.Helper()
	rows, err := w.DB.Pool.Query(context.Background(), `SELECT tx_id::text, tx_hash FROM tx_attempt`)
	require.NoError(t, err)
	out := map[string]string{}
	for rows.Next() {
		var id, h string
		require.NoError(t, rows.Scan(&id, &h))
		out[id] = h
	}
	require.NoError(t, rows.Err())
	return out
}

func (w *World) stringInts(t testing.TB, q string) map[string]int {
	rows, err := w.DB.Pool.Query(context.Background(), q)
	require.NoError(t, err)
	out := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		require.NoError(t, rows.Scan(&k, &n))
		out[k] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// RefuseNextBroadcast makes the next eth_sendRawTransaction fail with the
// JSON-RPC error a node gives when it refuses a transaction for message
// (for example "insufficient funds for gas * price + value").
func (w *World) RefuseNextBroadcast(message string) {
	w.Proxy.Fail("eth_sendRawTransaction", 1, rpcproxy.Fault{RPCError: &rpcproxy.RPCError{Code: -32000, Message: message}})
}

// LogBuffer is a log sink (World.LogTo) the nodes' goroutines may write to
// at once.
type LogBuffer = testsupport.SyncBuffer

// WaitFor polls cond until it holds, failing after 20s.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testsupport.Eventually(t, 20*time.Second, what, cond)
}

// ChainID is the simulated chain's id as a big.Int.
func ChainID() *big.Int { return big.NewInt(evmtest.ChainID) }

// PausableLeases stands for a process that stops running: while paused, its
// lease renewals do not reach the database (the real store underneath).
type PausableLeases struct {
	txm.LeaseStore
	mu     sync.Mutex
	resume chan struct{}
}

// Pause holds back renewals until Unpause.
func (p *PausableLeases) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resume = make(chan struct{})
}

// Unpause lets renewals through again.
func (p *PausableLeases) Unpause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	close(p.resume)
}

// Renew waits while paused, then renews.
func (p *PausableLeases) Renew(ctx context.Context, l txm.Lease) (txm.Lease, error) {
	p.mu.Lock()
	ch := p.resume
	p.mu.Unlock()
	<-ch
	return p.LeaseStore.Renew(ctx, l)
}

// DeployReverter deploys a contract whose every call reverts, from a key
// that txfence does not manage.
func (w *World) DeployReverter(t testing.TB) common.Address {
	t.Helper()
	ctx := context.Background()
	key := w.Keys[0]
	// init code: return the 5-byte runtime PUSH1 0 PUSH1 0 REVERT
	code := common.FromHex("0x6460006000fd6000526005601bf3")
	cl := w.Chain.Backend.Client()
	nonce, err := cl.PendingNonceAt(ctx, key.Address)
	require.NoError(t, err)
	tip, err := cl.SuggestGasTipCap(ctx)
	require.NoError(t, err)
	head, err := cl.HeaderByNumber(ctx, nil)
	require.NoError(t, err)
	tx, err := types.SignNewTx(key.Key, types.LatestSignerForChainID(ChainID()), &types.DynamicFeeTx{
		ChainID: ChainID(), Nonce: nonce, GasTipCap: tip, GasFeeCap: new(big.Int).Add(new(big.Int).Mul(head.BaseFee, big.NewInt(2)), tip),
		Gas: 100_000, Data: code})
	require.NoError(t, err)
	require.NoError(t, cl.SendTransaction(ctx, tx))
	w.Chain.Commit()
	r, err := cl.TransactionReceipt(ctx, tx.Hash())
	require.NoError(t, err)
	require.EqualValues(t, 1, r.Status)
	return r.ContractAddress
}
