package sharded

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/functions/api"
	"github.com/txfence/txfence/functions/finality"
	"github.com/txfence/txfence/functions/internal/deps"
	"github.com/txfence/txfence/functions/internal/stacktest"
	"github.com/txfence/txfence/functions/receipt"
	"github.com/txfence/txfence/functions/submit"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var ctx = context.Background()

// world is a chain with funded signers and two PostgreSQL servers: shard
// "a" on the shared test server, shard "b" on a server of its own behind
// a proxy that can take it down.
type world struct {
	*stacktest.World
	pools  map[string]*pgxpool.Pool // straight to each shard, for checks
	proxyB *pgtest.Proxy
	shard  map[common.Address]string
}

// newWorld puts the odd signers in shard b by explicit rules and the
// others in a by the default rule.
func newWorld(t *testing.T, nsigners int) *world {
	t.Helper()
	w := stacktest.NewWorld(t, nsigners, func(c *config.Config) {
		c.LogLevel = "error"
		c.Auth.RatePerSecond, c.Auth.RateBurst, c.Auth.SignerRatePerSecond = 1e6, 1e6, 1e6
		c.FinalityBudget, c.FinalityInterval = 300*time.Millisecond, 50*time.Millisecond
		c.StaleReceiptTimeout = 100 * time.Millisecond
	})
	_, dbB := pgtest.NewServer(t)
	proxyB := pgtest.NewProxy(t, dbB.URL)
	keys := t.TempDir()
	cfg := w.Cfg
	cfg.Database.URL = ""
	cfg.Shards = []config.Shard{{Name: "a", URL: w.DB.URL}, {Name: "b", URL: proxyB.URL}}
	cfg.ShardMap = config.ShardMap{Version: 1, Signers: map[common.Address]string{}, Default: "a"}
	shard := map[common.Address]string{}
	for i, k := range w.Keys {
		path := filepath.Join(keys, fmt.Sprintf("key%d", i))
		require.NoError(t, os.WriteFile(path, []byte(hex.EncodeToString(crypto.FromECDSA(k.Key))), 0o600))
		cfg.Signers[i].KeyRef = "local:file:" + path
		shard[k.Address] = "a"
		if i%2 == 1 {
			cfg.ShardMap.Signers[k.Address] = "b"
			shard[k.Address] = "b"
		}
	}
	require.NoError(t, cfg.Validate())
	w.Cfg = cfg
	return &world{World: w, pools: map[string]*pgxpool.Pool{"a": w.DB.Pool, "b": dbB.Pool}, proxyB: proxyB, shard: shard}
}

// process builds one txfence process named name, as deployed.
func (w *world) process(t *testing.T, name string) *deps.Process {
	t.Helper()
	return w.processWith(t, name, w.Cfg)
}

// processWith builds a process with another configuration.
func (w *world) processWith(t *testing.T, name string, cfg config.Config) *deps.Process {
	t.Helper()
	require.NoError(t, cfg.Validate())
	cfg.InstanceID = name
	p, err := deps.Build(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// apiServer serves the Api function of a new process.
func (w *world) apiServer(t *testing.T, name string) (*deps.Process, string) {
	t.Helper()
	return w.apiServerWith(t, name, w.Cfg)
}

// apiServerWith serves the Api function of a process with another
// configuration.
func (w *world) apiServerWith(t *testing.T, name string, cfg config.Config) (*deps.Process, string) {
	t.Helper()
	p := w.processWith(t, name, cfg)
	h, err := api.Build(ctx, p)
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return p, srv.URL
}

// worker is a process's Submit, Receipt and FinalitySweep handlers.
type worker struct {
	p        *deps.Process
	submit   *submit.Handler
	receipt  *receipt.Handler
	finality *finality.Handler
}

func (w *world) worker(t *testing.T, name string) *worker {
	t.Helper()
	return w.workerWith(t, name, w.Cfg)
}

// workerWith is a worker of a process with another configuration.
func (w *world) workerWith(t *testing.T, name string, cfg config.Config) *worker {
	t.Helper()
	p := w.processWith(t, name, cfg)
	s, err := submit.Build(ctx, p)
	require.NoError(t, err)
	r, err := receipt.Build(ctx, p)
	require.NoError(t, err)
	f, err := finality.Build(ctx, p)
	require.NoError(t, err)
	return &worker{p: p, submit: s, receipt: r, finality: f}
}

// sweep runs one FinalitySweep invocation and returns its status.
func (wk *worker) sweep() int {
	rec := httptest.NewRecorder()
	wk.finality.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/FinalitySweep", nil))
	return rec.Code
}

// call makes an API call and decodes a JSON answer into out (if not nil).
func call(t *testing.T, method, url string, body any, out any) *http.Response {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if out != nil && resp.StatusCode < 300 {
		require.NoError(t, json.Unmarshal(raw, out), string(raw))
	}
	return resp
}

// create is a create body: a transfer of value wei to the burn address.
func create(from common.Address, requestID string, value int) map[string]any {
	return map[string]any{"from": from.Hex(), "to": "0x000000000000000000000000000000000000dEaD",
		"value": fmt.Sprint(value), "gasLimit": 21000, "requestId": requestID}
}

type txView struct {
	ID        string `json:"id"`
	From      string `json:"from"`
	Nonce     uint64 `json:"nonce"`
	State     string `json:"state"`
	RequestID string `json:"requestId"`
}

type feedItem struct {
	Shard string `json:"shard"`
	Seq   int64  `json:"seq"`
	TxID  string `json:"txId"`
	State string `json:"state"`
	From  string `json:"signer"`
}

type feedPage struct {
	Items             []feedItem `json:"items"`
	Next              string     `json:"next"`
	UnavailableShards []string   `json:"unavailableShards"`
}
