package sharded

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/functions/api"
	"github.com/txfence/txfence/functions/internal/deps"
	"github.com/txfence/txfence/functions/internal/stacktest"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/pgtest"
)

// oneDatabase is the world's configuration with one database, a fresh one
// on the shared test server, named by TXFENCE_DATABASE_URL: no shards.
func (w *world) oneDatabase(t *testing.T) (config.Config, *pgxpool.Pool) {
	t.Helper()
	db := pgtest.New(t)
	cfg := w.Cfg
	cfg.Shards, cfg.ShardMap = nil, config.ShardMap{}
	cfg.Database.URL = db.URL
	return cfg, db.Pool
}

// createOK creates a transfer from signer through the API and returns its id.
func createOK(t *testing.T, url string, signer common.Address, rid string) string {
	t.Helper()
	var v txView
	resp := call(t, http.MethodPost, url+"/v1/transactions", create(signer, rid, 1), &v)
	require.Equal(t, http.StatusAccepted, resp.StatusCode, "create %s for %s", rid, signer.Hex())
	return v.ID
}

// confirm drives the signers' transactions (nonces below want) to
// CONFIRMED with wk's Submit, Receipt and FinalitySweep handlers, and waits
// until each of ids has its outcome numbered in one of pools.
func (w *world) confirm(t *testing.T, wk *worker, want map[common.Address]uint64, ids []string, pools ...*pgxpool.Pool) {
	t.Helper()
	for s := range want {
		require.NoError(t, wk.submit.Handle(ctx, stacktest.Prompt(t, s)), "submit %s", s.Hex())
	}
	for s, n := range want {
		w.MineAll(t, s, n)
	}
	w.Mine(int(w.Cfg.Confirmations) + 1)
	for s := range want {
		require.NoError(t, wk.receipt.Handle(ctx, stacktest.Prompt(t, s)), "receipts %s", s.Hex())
	}
	stacktest.WaitFor(t, "the outcomes numbered", func() bool {
		require.Equal(t, http.StatusOK, wk.sweep())
		n := 0
		for _, p := range pools {
			var c int
			require.NoError(t, p.QueryRow(ctx, `SELECT count(*) FROM tx_completion WHERE tx_id::text = ANY($1::text[]) AND NOT lifecycle`, ids).Scan(&c))
			n += c
		}
		return n == len(ids)
	})
}

// listening waits until a long poll of the feed waits in each of pools'
// databases: it has read where it starts (after=latest resolves before the
// wait) and listens for what comes.
func listening(t *testing.T, pools ...*pgxpool.Pool) {
	t.Helper()
	stacktest.WaitFor(t, "a long poll waiting in every database", func() bool {
		for _, p := range pools {
			var n int
			require.NoError(t, p.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND query LIKE 'LISTEN %'`).Scan(&n))
			if n == 0 {
				return false
			}
		}
		return true
	})
}

// rawPage is a feed page with its next cursor as sent: a JSON number or
// a string.
type rawPage struct {
	Items []feedItem      `json:"items"`
	Next  json.RawMessage `json:"next"`
}

// getFeed reads a feed page; it may run outside the test's goroutine.
func getFeed(url string) (int, rawPage, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, rawPage{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, rawPage{}, err
	}
	var p rawPage
	if resp.StatusCode == http.StatusOK {
		err = json.Unmarshal(raw, &p)
	} else {
		err = fmt.Errorf("%d: %s", resp.StatusCode, raw)
	}
	return resp.StatusCode, p, err
}

// newest is the newest seq of the feed in pool.
func newest(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	var seq int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(max(seq), 0) FROM tx_completion`).Scan(&seq))
	return seq
}

// TestIssue46_AfterLatest: after=latest, the console's "only what happens
// from now on", works with one database and with two shards, through the
// production wiring: it answers nothing of the past and a next cursor at
// every database's newest seq (a JSON number with one database, as
// before; a:X,b:Y with two shards), and a long poll from latest wakes with
// the next outcome, written in the second shard, and only that.
func TestIssue46_AfterLatest(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a second PostgreSQL server")
	}
	w := newWorld(t, 4) // keys 0, 2 in shard a, keys 1, 3 in b
	one, onePool := w.oneDatabase(t)
	cases := []struct {
		name       string
		cfg        config.Config
		pools      []*pgxpool.Pool
		home, next common.Address // signers of the first and the second database (the same one with one database)
		shard      string         // the second outcome's shard on the wire
		cursor     func() string  // next, as JSON, at every database's newest seq
	}{
		{"one database", one, []*pgxpool.Pool{onePool}, w.Keys[2].Address, w.Keys[3].Address, "",
			func() string { return fmt.Sprint(newest(t, onePool)) }},
		{"two shards", w.Cfg, []*pgxpool.Pool{w.pools["a"], w.pools["b"]}, w.Keys[0].Address, w.Keys[1].Address, "b",
			func() string { return fmt.Sprintf(`"a:%d,b:%d"`, newest(t, w.pools["a"]), newest(t, w.pools["b"])) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, url := w.apiServerWith(t, "api-"+c.name, c.cfg)
			wk := w.workerWith(t, "worker-"+c.name, c.cfg)
			// The past: an outcome of each signer, so that latest is not
			// the start.
			past := []string{createOK(t, url, c.home, "past-home"), createOK(t, url, c.next, "past-next")}
			w.confirm(t, wk, map[common.Address]uint64{c.home: 1, c.next: 1}, past, c.pools...)

			status, page, err := getFeed(url + "/v1/completions?after=latest")
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, status)
			assert.Empty(t, page.Items, "nothing of the past")
			assert.Equal(t, c.cursor(), string(page.Next), "next is where now is in every database")

			type answer struct {
				status int
				page   rawPage
				err    error
			}
			polled := make(chan answer, 1)
			go func() {
				status, page, err := getFeed(url + "/v1/completions?after=latest&wait=25s")
				polled <- answer{status, page, err}
			}()
			listening(t, c.pools...)
			now := createOK(t, url, c.next, "now")
			w.confirm(t, wk, map[common.Address]uint64{c.next: 2}, []string{now}, c.pools...)
			select {
			case a := <-polled:
				require.NoError(t, a.err)
				require.Equal(t, http.StatusOK, a.status)
				require.Len(t, a.page.Items, 1, "the outcome written while it waited, and nothing before")
				assert.Equal(t, now, a.page.Items[0].TxID)
				assert.Equal(t, c.shard, a.page.Items[0].Shard)
				assert.Equal(t, c.cursor(), string(a.page.Next))
			case <-time.After(30 * time.Second):
				t.Fatal("the long poll did not return")
			}
		})
	}
}

// TestIssue46_CursorAcrossTopologies: a consumer's numeric cursor from a
// deployment with one database keeps its place when that database becomes
// the home shard of two: a bare number is read as the home shard's seq, so
// the consumer gets what came after it in the home shard and everything of
// the new shard, nothing twice, and a cursor naming both for the next page.
func TestIssue46_CursorAcrossTopologies(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a second PostgreSQL server")
	}
	w := newWorld(t, 2)
	inA, inB := w.Keys[0].Address, w.Keys[1].Address
	require.Equal(t, "b", w.shard[inB])

	// One database: shard a's, before it was a shard.
	one := w.Cfg
	one.Shards, one.ShardMap = nil, config.ShardMap{}
	one.Database.URL = w.DB.URL
	_, url := w.apiServerWith(t, "api-one", one)
	wk := w.workerWith(t, "worker-one", one)
	before := createOK(t, url, inA, "before")
	w.confirm(t, wk, map[common.Address]uint64{inA: 1}, []string{before}, w.pools["a"])
	status, page, err := getFeed(url + "/v1/completions?after=0")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status)
	require.Len(t, page.Items, 1)
	var cursor int64
	require.NoError(t, json.Unmarshal(page.Next, &cursor), "one database's cursor is a number: %s", page.Next)

	// The same database as the home shard a, and a new shard b.
	_, url = w.apiServer(t, "api-two")
	wk = w.worker(t, "worker-two")
	after := []string{createOK(t, url, inA, "after-a"), createOK(t, url, inB, "after-b")}
	w.confirm(t, wk, map[common.Address]uint64{inA: 2, inB: 1}, after, w.pools["a"], w.pools["b"])
	status, page, err = getFeed(fmt.Sprintf("%s/v1/completions?after=%d", url, cursor))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status)
	got := map[string]string{}
	for _, it := range page.Items {
		got[it.TxID] = it.Shard
	}
	assert.Equal(t, map[string]string{after[0]: "a", after[1]: "b"}, got, "what came after the cursor, in both shards; not what came before")
	assert.Equal(t, fmt.Sprintf(`"a:%d,b:%d"`, newest(t, w.pools["a"]), newest(t, w.pools["b"])), string(page.Next))
}

// TestIssue46_OneCodePath: one database is the one-shard case. No function
// branches on the topology (Config.Sharded is configuration's business),
// the process and the API carry no field that exists for one topology
// only, and a process with one database routes every signer to its one
// unnamed shard.
func TestIssue46_OneCodePath(t *testing.T) {
	fset := token.NewFileSet()
	var branches []string
	require.NoError(t, filepath.WalkDir(filepath.Join("..", ".."), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "Sharded" {
				branches = append(branches, fset.Position(sel.Pos()).String())
			}
			return true
		})
		return nil
	}))
	assert.Empty(t, branches, "functions that branch on Config.Sharded()")

	for typ, fields := range map[reflect.Type][]string{
		reflect.TypeOf(deps.Process{}): {"Store", "Relay"},
		reflect.TypeOf(api.Deps{}):     {"ShardedCompletions"},
	} {
		for _, f := range fields {
			_, ok := typ.FieldByName(f)
			assert.False(t, ok, "%s.%s exists for one topology only", typ, f)
		}
	}

	w := stacktest.NewWorld(t, 2, func(c *config.Config) { c.LogLevel = "error" })
	p, err := deps.Build(ctx, w.Cfg)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	assert.Equal(t, []string{""}, p.ShardNames())
	for _, a := range []common.Address{w.Keys[0].Address, w.Keys[1].Address, common.HexToAddress("0x1234")} {
		name, err := p.Router.For(ctx, a)
		require.NoError(t, err)
		assert.Equal(t, "", name, "every signer in the one database")
	}
}
