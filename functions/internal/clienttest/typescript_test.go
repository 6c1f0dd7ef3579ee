package clienttest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/functions/internal/stacktest"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/testsupport"
	"github.com/txfence/txfence/shared/txm"
)

// tsTools are node and the npm packages make tsclient installs into
// .tools/tsclient (openapi-typescript, openapi-fetch, typescript).
type tsTools struct {
	root, node, modules string
}

// needTSTools finds node and .tools/tsclient; without them the test skips,
// except under CI (make test installs them).
func needTSTools(t *testing.T) tsTools {
	t.Helper()
	root := testsupport.ModuleRoot(t)
	modules := filepath.Join(root, ".tools", "tsclient", "node_modules")
	node, nodeErr := exec.LookPath("node")
	_, tscErr := os.Stat(filepath.Join(modules, "typescript", "package.json"))
	if nodeErr != nil || tscErr != nil {
		if os.Getenv("CI") == "" {
			t.Skip("the TypeScript client's tools are not installed (node or .tools/tsclient missing): run make tsclient")
		}
		t.Fatalf("the TypeScript client's tools are not installed under CI: node: %v; .tools/tsclient: %v (make test installs them with make tsclient)", nodeErr, tscErr)
	}
	return tsTools{root: root, node: node, modules: modules}
}

// compile compiles the TypeScript project dir (relative to the repository)
// with the pinned tsc into a temporary directory, which it returns; a
// node_modules link there lets the output import the installed packages.
func (ts tsTools) compile(t *testing.T, project string) string {
	t.Helper()
	out := t.TempDir()
	cmd := exec.Command(ts.node, filepath.Join(ts.modules, "typescript", "bin", "tsc"), "-p", filepath.Join(ts.root, project), "--outDir", out)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "tsc -p %s:\n%s", project, b)
	require.NoError(t, os.Symlink(ts.modules, filepath.Join(out, "node_modules")))
	return out
}

// TestIssue49_TypeScriptTypesCurrent: the checked-in types of the
// TypeScript client are what the pinned openapi-typescript makes of
// functions/api/openapi.json.
func TestIssue49_TypeScriptTypesCurrent(t *testing.T) {
	t.Parallel()
	ts := needTSTools(t)
	fresh := filepath.Join(t.TempDir(), "schema.d.ts")
	cmd := exec.Command(ts.node, filepath.Join(ts.modules, "openapi-typescript", "bin", "cli.js"),
		filepath.Join(ts.root, "functions", "api", "openapi.json"), "-o", fresh)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "openapi-typescript: %s", b)
	want, err := os.ReadFile(fresh)
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join(ts.root, "client", "typescript", "src", "schema.d.ts"))
	require.NoError(t, err)
	if !bytes.Equal(want, got) {
		wl, gl := strings.Split(string(want), "\n"), strings.Split(string(got), "\n")
		line := 0
		for line < len(wl) && line < len(gl) && wl[line] == gl[line] {
			line++
		}
		at := func(lines []string) string {
			if line < len(lines) {
				return lines[line]
			}
			return "(end of file)"
		}
		t.Fatalf("client/typescript/src/schema.d.ts is not what openapi-typescript makes of functions/api/openapi.json: run make ts-types and commit it.\n"+
			"first difference at line %d:\n  checked in: %s\n  generated:  %s", line+1, at(gl), at(wl))
	}
}

// counted wraps an edge with GET /_edge, which answers what the edge has
// injected so far by name (and extra's counts), for the node tests to
// compare with the retries their client counted.
func counted(t *testing.T, e *edge, extra func() map[string]int) string {
	t.Helper()
	names := map[fault]string{dropAfter: "dropAfter", unknownAfter: "unknownAfter", limited: "limited", badGateway: "badGateway", dropBefore: "dropBefore"}
	mux := http.NewServeMux()
	mux.HandleFunc("/_edge", func(w http.ResponseWriter, r *http.Request) {
		out := map[string]int{}
		e.mu.Lock()
		for f, n := range e.injected {
			out[names[f]] = n
		}
		out["faulted"] = len(e.faulted)
		e.mu.Unlock()
		if extra != nil {
			for k, v := range extra() {
				out[k] = v
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
	mux.Handle("/", e)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestIssue49_TypeScriptClient compiles the TypeScript client and its tests
// (client/typescript/test) with the pinned tsc and runs them with node
// --test against the stack, as deployed (API keys only): creates through an
// edge that loses answers after the server handled them, answers 503
// outcome-unknown, 429 with Retry-After, 502 and drops connections (each
// create made once, every retry counted under its reason); follow through
// an edge that fails and rewinds polls, stopped and resumed from a stored
// cursor (every outcome, none twice); typed errors on 4xx answers; wait.
// It fails when node's tests fail, and prints their output.
func TestIssue49_TypeScriptClient(t *testing.T) {
	ts := needTSTools(t)
	out := ts.compile(t, "client/typescript")

	w := stacktest.NewWorld(t, 2, func(c *config.Config) { c.Auth.Methods = []string{"apikey"} }, stacktest.Lively)
	nd := w.Node(t, "a")
	key := w.APIKey(t, txm.Policy{Principal: "ts-client@example.com", Roles: []txm.Role{txm.RoleSender, txm.RoleReader}, AllSigners: true})
	stop := w.Run(t, []*stacktest.Node{nd}, stacktest.RunOptions{})
	defer stop()

	createEdge := newEdge(t, nd.APIURL, createFaults(40))
	var feedMu sync.Mutex
	polls, rewound := 0, 0
	feedEdge := newEdge(t, nd.APIURL, func(r *http.Request, _ []byte) fault {
		if !strings.HasSuffix(r.URL.Path, "/v1/completions") {
			return pass
		}
		feedMu.Lock()
		defer feedMu.Unlock()
		polls++
		switch polls % 5 {
		case 2:
			return badGateway
		case 4:
			// A redelivery: ask for what was already given.
			q := r.URL.Query()
			q.Set("after", "0")
			r.URL.RawQuery = q.Encode()
			rewound++
		}
		return pass
	})

	signers := make([]string, 0, 2)
	for _, k := range w.Keys[:2] {
		signers = append(signers, k.Address.Hex())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tests, err := filepath.Glob(filepath.Join(out, "test", "*.test.mjs"))
	require.NoError(t, err)
	require.NotEmpty(t, tests, "no compiled node tests")
	cmd := exec.CommandContext(ctx, ts.node, append([]string{"--test", "--test-reporter=spec"}, tests...)...)
	cmd.Env = append(os.Environ(),
		"TXFENCE_API="+nd.APIURL,
		"TXFENCE_KEY="+key,
		"TXFENCE_CREATE_EDGE="+counted(t, createEdge, nil),
		"TXFENCE_FEED_EDGE="+counted(t, feedEdge, func() map[string]int {
			feedMu.Lock()
			defer feedMu.Unlock()
			return map[string]int{"rewound": rewound}
		}),
		"TXFENCE_SIGNERS="+strings.Join(signers, ","),
		"TXFENCE_TO="+stacktest.Dead.Hex(),
		"NO_COLOR=1",
	)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test failed (%v):\n%s", err, b)
	}
	t.Logf("node --test:\n%s", b)

	// What the node tests created is on the chain's terms too: each
	// signer's nonces are 0..n-1, none given twice.
	for _, k := range w.Keys[:2] {
		var count, distinct int
		var lo, hi int64
		require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT nonce), min(nonce), max(nonce) FROM managed_tx WHERE signer = $1`,
			txm.CanonicalAddress(k.Address)).Scan(&count, &distinct, &lo, &hi))
		require.Positive(t, count)
		require.Equal(t, count, distinct, "a nonce given twice")
		require.EqualValues(t, 0, lo)
		require.EqualValues(t, count-1, hi, "nonces not contiguous")
	}
}

// TestIssue49_TypeScriptExample compiles examples/typescript/sendmany with
// the pinned tsc and runs it against the stack as deployed (API keys only):
// with no signers given it reads the two configured ones, sends 100
// transactions over them, follows the feed until every one is final and
// prints the summary line the Go example prints, all confirmed; the
// database holds exactly what it says it sent, half on each signer.
func TestIssue49_TypeScriptExample(t *testing.T) {
	ts := needTSTools(t)
	out := ts.compile(t, "examples/typescript")

	w := stacktest.NewWorld(t, 2, func(c *config.Config) { c.Auth.Methods = []string{"apikey"} }, stacktest.Lively)
	nd := w.Node(t, "a")
	key := w.APIKey(t, txm.Policy{Principal: "ts-example@example.com", Roles: []txm.Role{txm.RoleSender, txm.RoleReader}, AllSigners: true})
	stop := w.Run(t, []*stacktest.Node{nd}, stacktest.RunOptions{})
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const n = 100
	cmd := exec.CommandContext(ctx, ts.node, filepath.Join(out, "examples", "typescript", "sendmany", "main.mjs"),
		"--api", nd.APIURL, "--key", key, "-n", fmt.Sprint(n), "--concurrency", "8", "--progress", "0.5")
	b, err := cmd.CombinedOutput()
	t.Logf("sendmany:\n%s", b)
	require.NoError(t, err)
	summary := regexp.MustCompile(`(?m)^sendmany: sent=(\d+) confirmed=(\d+) failed=(\d+) stuck=\d+ retries=\d+ seconds=[0-9.]+$`).FindStringSubmatch(string(b))
	require.NotNil(t, summary, "no summary line")
	want := fmt.Sprint(n)
	require.Equal(t, []string{want, want, "0"}, summary[1:], "sent, confirmed, failed")

	var rows, confirmed int
	require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state = 'CONFIRMED') FROM managed_tx`).Scan(&rows, &confirmed))
	require.Equal(t, n, rows)
	require.Equal(t, n, confirmed)
	for _, k := range w.Keys[:2] {
		var count int
		require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM managed_tx WHERE signer = $1`, txm.CanonicalAddress(k.Address)).Scan(&count))
		require.Equal(t, n/2, count)
	}
}
