// Package e2e runs txfence end to end through the emulator: real function
// server processes, Pub/Sub with the push bridge, a simulated chain with a
// block ticker, and PostgreSQL.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/emulator/stack"
	"github.com/txfence/txfence/shared/testsupport"
	"github.com/txfence/txfence/shared/txm"
)

// build compiles a main package of this module into dir.
func build(t *testing.T, dir, pkg, name string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = testsupport.ModuleRoot(t)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build %s: %s", pkg, b)
	return out
}

type txView struct {
	ID    string    `json:"id"`
	From  string    `json:"from"`
	Nonce uint64    `json:"nonce"`
	State txm.State `json:"state"`
	Hash  *string   `json:"hash"`
}

type completion struct {
	Seq     int64     `json:"seq"`
	TxID    string    `json:"txId"`
	State   txm.State `json:"state"`
	NewFork bool      `json:"newFork"`
}

func postJSON(client *http.Client, url string, body any) (int, []byte, error) {
	b, _ := json.Marshal(body)
	resp, err := client.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, err
}

// TestIssue6_EndToEnd: transactions for several signers go through two
// function-server processes, one of which is SIGKILLed mid-run; every
// invariant is then checked over every row.
func TestIssue6_EndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end")
	}
	dir := t.TempDir()
	bin := build(t, dir, "./functions/server", "server")
	ctx := context.Background()
	s, err := stack.Start(ctx, stack.Options{ServerBinary: bin, Servers: 2, Signers: 4, BlockTime: 300 * time.Millisecond,
		Confirmations: 2, ScheduleEvery: 2 * time.Second})
	require.NoError(t, err)
	defer s.Close()

	const perSigner = 30
	total := perSigner * len(s.Signers)
	client := &http.Client{Timeout: 30 * time.Second}
	var (
		mu      sync.Mutex
		created = map[string]string{} // request id -> tx id
		sent    atomic.Int64
		killed  atomic.Bool
	)
	var wg sync.WaitGroup
	for i := 0; i < total; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			signer := s.Signers[i%len(s.Signers)]
			rid := fmt.Sprintf("e2e-%d", i)
			body := map[string]any{"from": txm.CanonicalAddress(signer), "to": "0x000000000000000000000000000000000000dEaD",
				"value": fmt.Sprint(i + 1), "gasLimit": 21000, "requestId": rid}
			// A client retries on a dead instance or a 503, with the same
			// request id: idempotency makes that safe.
			for attempt := 0; ; attempt++ {
				url := s.ServerURLs[(i+attempt)%len(s.ServerURLs)] + "/Api/v1/transactions"
				status, raw, err := postJSON(client, url, body)
				if err == nil && (status == http.StatusAccepted || status == http.StatusOK) {
					var v txView
					if json.Unmarshal(raw, &v) == nil {
						mu.Lock()
						created[rid] = v.ID
						mu.Unlock()
					}
					break
				}
				if attempt > 50 {
					t.Errorf("create %s: %d %s %v", rid, status, raw, err)
					return
				}
				// sleep: a client's pause before it retries, as a real one's
				time.Sleep(100 * time.Millisecond)
			}
			if sent.Add(1) == int64(total/2) && killed.CompareAndSwap(false, true) {
				t.Logf("SIGKILL function server 1 after %d creates", total/2)
				require.NoError(t, s.Kill(1))
			}
		}(i)
		// sleep: the creates come 5 ms apart, so that the kill lands in the middle of the traffic
		time.Sleep(5 * time.Millisecond)
	}
	wg.Wait()
	require.True(t, killed.Load())
	require.Len(t, created, total)

	pool, err := pgxpool.New(ctx, s.DatabaseURL)
	require.NoError(t, err)
	defer pool.Close()
	if !testsupport.WithinEvery(3*time.Minute, 500*time.Millisecond, func() bool {
		var confirmed int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM managed_tx WHERE state = 'CONFIRMED'`).Scan(&confirmed))
		return confirmed == total
	}) {
		rows, _ := pool.Query(ctx, `SELECT state, count(*) FROM managed_tx GROUP BY state`)
		states := map[string]int{}
		for rows.Next() {
			var st string
			var n int
			_ = rows.Scan(&st, &n)
			states[st] = n
		}
		t.Fatalf("not all confirmed: %v", states)
	}

	// Invariants over every row.
	var rows, bad int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM managed_tx`).Scan(&rows))
	assert.Equal(t, total, rows, "one transaction per request id, retries included")
	require.NoError(t, pool.QueryRow(ctx, `
SELECT count(*) FROM (
    SELECT signer, count(*) n, min(nonce) lo, max(nonce) hi, count(DISTINCT nonce) d FROM managed_tx GROUP BY signer
) s WHERE lo <> 0 OR hi - lo + 1 <> n OR d <> n`).Scan(&bad))
	assert.Zero(t, bad, "nonces contiguous from 0 per signer")
	require.NoError(t, pool.QueryRow(ctx, `
SELECT count(*) FROM (SELECT tx_id FROM tx_attempt GROUP BY tx_id HAVING count(DISTINCT tx_hash) > 1) x`).Scan(&bad))
	assert.Zero(t, bad, "no two different signed attempts for one nonce (no replacement was asked)")
	require.NoError(t, pool.QueryRow(ctx, `
SELECT count(*) FROM managed_tx t WHERE NOT EXISTS (SELECT 1 FROM tx_attempt a WHERE a.tx_id = t.id)`).Scan(&bad))
	assert.Zero(t, bad, "every transaction was signed")

	// The completions feed: each outcome exactly once, in seq order.
	var feed []completion
	after := int64(0)
	for {
		resp, err := client.Get(fmt.Sprintf("%s/v1/completions?after=%d&limit=100", s.APIURL, after))
		require.NoError(t, err)
		var page struct {
			Items []completion `json:"items"`
			Next  int64        `json:"next"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&page))
		resp.Body.Close()
		feed = append(feed, page.Items...)
		if len(page.Items) < 100 {
			break
		}
		after = page.Next
	}
	require.Len(t, feed, total)
	seen := map[string]bool{}
	for i, c := range feed {
		if i > 0 {
			require.Greater(t, c.Seq, feed[i-1].Seq)
		}
		require.False(t, seen[c.TxID], "outcome of %s reported twice", c.TxID)
		seen[c.TxID] = true
		assert.Equal(t, txm.StateConfirmed, c.State)
	}
	for _, id := range created {
		assert.True(t, seen[id])
	}
	// Every confirmed hash is on the chain.
	for _, id := range created {
		var hash string
		require.NoError(t, pool.QueryRow(ctx, `SELECT a.tx_hash FROM managed_tx t JOIN tx_attempt a ON a.tx_id = t.id AND a.attempt_no = t.receipt_attempt_no WHERE t.id = $1`, id).Scan(&hash))
		r, err := s.Chain.Backend.Client().TransactionReceipt(ctx, commonHash(hash))
		require.NoError(t, err)
		assert.EqualValues(t, 1, r.Status)
	}
	st := s.Bridge.Stats()
	t.Logf("bridge: %+v", st)
}

// TestIssue6_DevQuickStart runs the emulator binary as `make dev` does, reads
// its banner, sends the transaction its curl line describes, and follows it
// to CONFIRMED through GET and the completions feed; Ctrl-C then removes
// the temporary data.
func TestIssue6_DevQuickStart(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end")
	}
	dir := t.TempDir()
	server := build(t, dir, "./functions/server", "server")
	emu := build(t, dir, "./emulator/cmd/emulator", "emulator")
	port, admin := freePorts(t)
	cmd := exec.Command(emu, "-server", server, "-port", fmt.Sprint(port), "-admin-port", fmt.Sprint(admin), "-block-time", "300ms", "-confirmations", "2")
	cmd.Env = append(os.Environ(), "DATABASE_URL=", "PUBSUB_EMULATOR_HOST=", "RPC_URL=")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = io.Discard
	start := time.Now()
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var banner []string
	timeout := time.After(60 * time.Second)
wait:
	for {
		select {
		case l, ok := <-lines:
			require.True(t, ok, "the emulator exited: %s", strings.Join(banner, "\n"))
			banner = append(banner, l)
			if l == "ready" {
				break wait
			}
		case <-timeout:
			t.Fatalf("not ready within 60s:\n%s", strings.Join(banner, "\n"))
		}
	}
	t.Logf("ready in %s", time.Since(start).Round(10*time.Millisecond))
	text := strings.Join(banner, "\n")
	for _, want := range []string{"API", "RPC", "PUBSUB_EMULATOR_HOST", "development signers", "curl -s -X POST"} {
		require.Contains(t, text, want)
	}
	key := regexp.MustCompile(`export TXFENCE_KEY=(txfk_\S+)`).FindStringSubmatch(text)
	require.Len(t, key, 2, "the banner shows an API key to call with")
	m := regexp.MustCompile(`curl -s -X POST (\S+)/v1/transactions -H "Authorization: Bearer \$TXFENCE_KEY" \\\n\s+-H 'Content-Type: application/json' -d '([^']+)'`).FindStringSubmatch(text)
	require.Len(t, m, 3, "the banner has a ready-to-paste curl:\n%s", text)
	api, body := m[1], m[2]
	// As the banner says: every call with the key.
	call := func(method, url string, body io.Reader) *http.Response {
		req, err := http.NewRequest(method, url, body)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+key[1])
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		return resp
	}

	resp := call(http.MethodPost, api+"/v1/transactions", strings.NewReader(body))
	var tx txView
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&tx))
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)

	confirmed := testsupport.WithinEvery(60*time.Second, 300*time.Millisecond, func() bool {
		if tx.State == txm.StateConfirmed {
			return true
		}
		resp := call(http.MethodGet, api+"/v1/transactions/"+tx.ID, nil)
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&tx))
		resp.Body.Close()
		return tx.State == txm.StateConfirmed
	})
	require.True(t, confirmed, "not confirmed in time; last state %s", tx.State)
	resp = call(http.MethodGet, api+"/v1/completions?after=0&wait=5s", nil)
	var page struct {
		Items []completion `json:"items"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&page))
	resp.Body.Close()
	require.Len(t, page.Items, 1)
	assert.Equal(t, tx.ID, page.Items[0].TxID)
	assert.Equal(t, txm.StateConfirmed, page.Items[0].State)

	// A wrong key is refused.
	key[1] += "x"
	resp = call(http.MethodGet, api+"/v1/transactions/"+tx.ID, nil)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	// Ctrl-C: everything stops and the temporary data directory is gone.
	dataDir := regexp.MustCompile(`host=(\S+txfence-pg-\S+)`).FindStringSubmatch(text)
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the emulator did not stop on Ctrl-C")
	}
	if len(dataDir) == 2 {
		_, err := os.Stat(dataDir[1])
		assert.True(t, os.IsNotExist(err), "temporary data removed: %s", dataDir[1])
	}
}
