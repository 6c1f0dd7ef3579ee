package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/app"
	"github.com/txfence/txfence/shared/auth"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/metrics"
	"github.com/txfence/txfence/shared/pgtest"
	"github.com/txfence/txfence/shared/postgres"
	"github.com/txfence/txfence/shared/txm"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const testChain = 1337

// fakeChain is a port-level double of the chain for the create path: it
// counts pending-nonce calls and estimates 21000 gas, or reverts for data
// starting 0xdead.
type fakeChain struct {
	mu           sync.Mutex
	pending      map[common.Address]uint64
	pendingCalls atomic.Int64
	fail         atomic.Bool
}

func newFakeChain() *fakeChain { return &fakeChain{pending: map[common.Address]uint64{}} }

func (f *fakeChain) setPending(a common.Address, n uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pending[a] = n
}

func (f *fakeChain) PendingNonce(_ context.Context, a common.Address) (uint64, error) {
	f.pendingCalls.Add(1)
	if f.fail.Load() {
		return 0, fmt.Errorf("dial tcp: connection refused")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pending[a], nil
}

func (f *fakeChain) LatestNonce(ctx context.Context, a common.Address) (uint64, error) {
	return f.PendingNonce(ctx, a)
}

func (f *fakeChain) EstimateGas(_ context.Context, msg txm.CallMsg) (uint64, error) {
	if bytes.HasPrefix(msg.Data, []byte{0xde, 0xad}) {
		return 0, &txm.RevertError{Reason: "nope"}
	}
	return 21000, nil
}

// HasCode says no address holds code: a create without data is a plain
// transfer.
func (f *fakeChain) HasCode(_ context.Context, a []common.Address) ([]bool, error) {
	return make([]bool, len(a)), nil
}

// Simulate answers as EstimateGas: 21000 gas, or a revert with
// Error("nope") for data starting 0xdead.
func (f *fakeChain) Simulate(_ context.Context, calls []txm.SimCall) ([]txm.SimResult, error) {
	if f.fail.Load() {
		return nil, fmt.Errorf("dial tcp: connection refused")
	}
	out := make([]txm.SimResult, len(calls))
	for i, c := range calls {
		out[i] = txm.SimResult{Method: txm.SimCallEstimate, Gas: 21000}
		if bytes.HasPrefix(c.Data, []byte{0xde, 0xad}) {
			out[i] = txm.SimResult{Method: txm.SimCallEstimate, Reverted: true}
		}
	}
	return out, nil
}

func (f *fakeChain) SimulationMethod() txm.SimMethod { return txm.SimCallEstimate }

func (f *fakeChain) DecodeRevert([]byte, string) (txm.Revert, error) {
	return txm.Revert{Kind: txm.RevertKindError, Reason: "nope"}, nil
}

// DataFees is an L1's: none.
func (f *fakeChain) ChargesDataFee() bool { return false }

func (f *fakeChain) DataFees(_ context.Context, txs []txm.DataFeeTx) ([]*big.Int, error) {
	out := make([]*big.Int, len(txs))
	for i := range out {
		out[i] = new(big.Int)
	}
	return out, nil
}

// signers are the configured test signers.
func signers(n int) []common.Address {
	out := make([]common.Address, n)
	for i := range out {
		out[i] = common.BigToAddress(big.NewInt(int64(0x5000 + i)))
	}
	return out
}

// instance is one API process as far as the database can tell: its own
// pool, store, owner ids and HTTP server.
type instance struct {
	url      string
	store    *postgres.Store
	metrics  *metrics.Metrics
	pool     *pgxpool.Pool
	keys     *postgres.APIKeys
	policies *postgres.Policies
}

type bundle struct {
	db     *pgtest.DB
	cfg    config.Config
	chain  *fakeChain
	reader app.ChainReader // what instances built from now on ask of the chain; nil: chain
	insts  []*instance
	client *http.Client
	// authOpts are what instances built from now on pass to auth.New.
	authOpts []auth.Option
	// feedReads counts the completions feed's database reads.
	feedReads atomic.Int64
	// feedLatest counts its reads of the newest seq, which a listener
	// makes once it listens, before it answers long polls from memory.
	feedLatest atomic.Int64
	// mount, when set, is the path instances built from now on serve the
	// API under (as the local stack's function server serves it at /Api).
	mount string
}

type option func(*config.Config)

func setup(t *testing.T, n int, opts ...option) *bundle {
	t.Helper()
	return setupWith(t, n, nil, opts...)
}

// setupWith is setup with options for the instances' authenticator.
func setupWith(t *testing.T, n int, authOpts []auth.Option, opts ...option) *bundle {
	t.Helper()
	db := pgtest.New(t)
	cfg := config.Defaults()
	cfg.Auth.Methods = []string{"dev"}
	// Throughput and concurrency tests must not meet the per-instance rate
	// limits; the rate-limit tests set their own.
	cfg.Auth.RatePerSecond, cfg.Auth.RateBurst, cfg.Auth.SignerRatePerSecond = 1e6, 1e6, 1e6
	cfg.Database.URL = db.URL
	cfg.Chains = []config.Chain{{ID: testChain, RPCURLs: []string{"http://127.0.0.1:1"}}}
	for _, a := range signers(200) {
		cfg.Signers = append(cfg.Signers, config.Signer{Address: a})
	}
	cfg.BatchWait = time.Millisecond
	for _, o := range opts {
		o(&cfg)
	}
	require.NoError(t, cfg.Validate())
	b := &bundle{db: db, cfg: cfg, chain: newFakeChain(), authOpts: authOpts,
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: time.Minute}}
	for i := 0; i < n; i++ {
		b.insts = append(b.insts, b.newInstance(t, fmt.Sprintf("api%d", i), db.URL))
	}
	return b
}

func (b *bundle) newInstance(t *testing.T, name, url string) *instance {
	t.Helper()
	cfg := b.cfg
	cfg.InstanceID = name
	pool := openPool(t, cfg.Database, url)
	m := metrics.New()
	log := testLog()
	store, err := postgres.NewStoreFromConfig(pool, cfg, m, log)
	require.NoError(t, err)
	var reader app.ChainReader = b.chain
	if b.reader != nil {
		reader = b.reader
	}
	readers := map[uint64]app.ChainReader{}
	for _, ch := range cfg.Chains {
		readers[ch.ID] = reader
	}
	policyStore, err := postgres.NewPolicies(pool)
	require.NoError(t, err)
	keys, err := postgres.NewAPIKeys(pool)
	require.NoError(t, err)
	audit, err := postgres.NewAuditLog(pool)
	require.NoError(t, err)
	authn, err := auth.New(cfg.Auth, keys, b.authOpts...)
	require.NoError(t, err)
	policies, err := app.NewPolicies(policyStore, audit, m, log)
	require.NoError(t, err)
	create, err := app.NewCreateTx(store, readers, nil, policies, cfg.Create(), m, log)
	require.NoError(t, err)
	actions, err := app.NewRequestAction(store, nil, cfg.MaxFeeCap, log)
	require.NoError(t, err)
	follow, err := app.NewFollowCompletions(b.countFeed(store), store, cfg.Auth.MaxWaits, log)
	require.NoError(t, err)
	feed, err := app.NewMergedCompletions(app.OneDatabase(), map[string]*app.FollowCompletions{"": follow})
	require.NoError(t, err)
	approvals := oneShardApprovals(t, store, create, policies, nil, log)
	h, err := NewHandler(Deps{Config: cfg, Auth: authn, Policies: policies, PolicyStore: policyStore, Create: create, Queries: store,
		Completions: feed, Actions: actions, ActionLog: store, Operator: store, Nonces: map[uint64]txm.NonceSource{testChain: reader}, Metrics: m, Log: log,
		Approvals: approvals})
	require.NoError(t, err)
	var served http.Handler = h
	if b.mount != "" {
		served = http.StripPrefix(b.mount, h)
	}
	srv := httptest.NewServer(served)
	t.Cleanup(srv.Close)
	return &instance{url: srv.URL + b.mount, store: store, metrics: m, pool: pool, keys: keys, policies: policyStore}
}

// openPool opens a pool on url as the services do (with the
// configuration's statement, lock and idle timeouts), closed at the end of
// the test.
func openPool(t testing.TB, dbcfg config.Database, url string) *pgxpool.Pool {
	t.Helper()
	dbcfg.URL, dbcfg.MaxConns = url, 20
	db, err := postgres.Connect(context.Background(), dbcfg)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	return db.Pool
}

// countingFeed counts the feed's reads, for the long-poll cost test, and
// its reads of the newest seq.
type countingFeed struct {
	txm.CompletionFeed
	reads, latest *atomic.Int64
}

func (c countingFeed) LatestCompletion(ctx context.Context) (int64, error) {
	seq, err := c.CompletionFeed.LatestCompletion(ctx)
	c.latest.Add(1)
	return seq, err
}

func (c countingFeed) CompletionsAfter(ctx context.Context, after int64, limit int, f txm.CompletionFilter) ([]txm.Completion, error) {
	c.reads.Add(1)
	return c.CompletionFeed.CompletionsAfter(ctx, after, limit, f)
}

func (b *bundle) countFeed(f txm.CompletionFeed) txm.CompletionFeed {
	return countingFeed{CompletionFeed: f, reads: &b.feedReads, latest: &b.feedLatest}
}

// response is a decoded API answer.
type response struct {
	status int
	header http.Header
	tx     txView
	prob   problem
	raw    []byte
}

func (b *bundle) do(t testing.TB, inst *instance, method, path string, body any, header ...string) response {
	t.Helper()
	var rd io.Reader
	switch v := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(v)
	default:
		j, err := json.Marshal(v)
		require.NoError(t, err)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, inst.url+path, rd)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := b.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	r := response{status: resp.StatusCode, header: resp.Header, raw: raw}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
		require.NoError(t, json.Unmarshal(raw, &r.prob), "problem body: %s", raw)
	} else if resp.StatusCode < 300 && len(raw) > 0 && raw[0] == '{' {
		_ = json.Unmarshal(raw, &r.tx)
	}
	return r
}

func (b *bundle) create(t testing.TB, inst *instance, body map[string]any, header ...string) response {
	return b.do(t, inst, http.MethodPost, "/v1/transactions", body, header...)
}

func transfer(from common.Address, value int64, requestID string) map[string]any {
	m := map[string]any{
		"chainId":  testChain,
		"from":     from.Hex(),
		"to":       "0x000000000000000000000000000000000000dEaD",
		"value":    fmt.Sprint(value),
		"gasLimit": 21000,
	}
	if requestID != "" {
		m["requestId"] = requestID
	}
	return m
}

// nonces returns the signer's allocated nonces, ascending.
func (b *bundle) nonces(t testing.TB, signer common.Address) []int64 {
	t.Helper()
	rows, err := b.db.Pool.Query(context.Background(),
		`SELECT nonce FROM managed_tx WHERE chain_id = $1 AND signer = $2 ORDER BY nonce`, testChain, txm.CanonicalAddress(signer))
	require.NoError(t, err)
	var out []int64
	for rows.Next() {
		var n int64
		require.NoError(t, rows.Scan(&n))
		out = append(out, n)
	}
	require.NoError(t, rows.Err())
	return out
}

func (b *bundle) cursor(t testing.TB, signer common.Address) int64 {
	t.Helper()
	var n int64
	err := b.db.Pool.QueryRow(context.Background(),
		`SELECT next_nonce FROM signer_nonce_cursor WHERE chain_id = $1 AND signer = $2`, testChain, txm.CanonicalAddress(signer)).Scan(&n)
	require.NoError(t, err)
	return n
}

// counts returns the row count of every table that a create may write.
func (b *bundle) counts(t testing.TB) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, table := range []string{"managed_tx", "signer_nonce_cursor", "outbox", "tx_history", "signer_lease", "tx_attempt"} {
		var n int
		require.NoError(t, b.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n))
		out[table] = n
	}
	return out
}

// requireContiguous checks nonces are exactly start..start+len-1.
func requireContiguous(t testing.TB, nonces []int64, start int64, msg string) {
	t.Helper()
	for i, n := range nonces {
		if n != start+int64(i) {
			require.Failf(t, "nonces not contiguous", "%s: position %d holds %d, want %d", msg, i, n, start+int64(i))
		}
	}
}

// testLog discards the servers' logs unless TXFENCE_TEST_LOG is set.
func testLog() *slog.Logger {
	if os.Getenv("TXFENCE_TEST_LOG") != "" {
		return logging.New(os.Stderr, "warn", "")
	}
	return logging.Discard()
}

// nonce is the view's nonce; a transaction without one (it waits for
// approval) reads as the largest uint64, which no test expects.
func (v txView) nonce() uint64 {
	if v.Nonce == nil {
		return ^uint64(0)
	}
	return *v.Nonce
}

// oneShardApprovals are the approval use cases over one database's store.
func oneShardApprovals(t testing.TB, store *postgres.Store, create *app.CreateTx, policies *app.Policies, relay *app.Relay,
	log *slog.Logger) *app.ShardedApprovals {
	t.Helper()
	queries, err := app.NewShardedQueries(app.OneDatabase(), map[string]app.ShardStore{"": store})
	require.NoError(t, err)
	finish, err := app.NewFinishApproval(store, create, policies, relay, log)
	require.NoError(t, err)
	approve, err := app.NewApproveTx(store, finish, policies, log)
	require.NoError(t, err)
	reject, err := app.NewRejectTx(store, policies, relay, log)
	require.NoError(t, err)
	approvals, err := app.NewShardedApprovals(queries, map[string]*app.ApproveTx{"": approve}, map[string]*app.RejectTx{"": reject})
	require.NoError(t, err)
	return approvals
}
