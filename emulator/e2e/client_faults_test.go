package e2e

import (
	"context"
	"fmt"
	"maps"
	"math/big"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/client"
	"github.com/txfence/txfence/emulator/stack"
	"github.com/txfence/txfence/shared/txm"
)

// roundRobin sends each attempt to the next function server in turn, as a
// load balancer in front of several instances would: a retry of a call
// the dead server did not answer goes to another one.
type roundRobin struct {
	servers []*url.URL
	next    atomic.Uint64
	base    http.RoundTripper
}

func (rr *roundRobin) RoundTrip(req *http.Request) (*http.Response, error) {
	u := rr.servers[rr.next.Add(1)%uint64(len(rr.servers))]
	out := req.Clone(req.Context())
	out.URL.Scheme, out.URL.Host, out.Host = u.Scheme, u.Host, ""
	return rr.base.RoundTrip(out)
}

// faultWindow is one fault injected during the creates: how many creates
// had returned and how many were in flight when it began, and how many had
// returned when it ended.
type faultWindow struct {
	name                         string
	returnedAt, inFlight, endsAt int64
	from, to                     time.Time
}

// issue49Retry is the client's retry policy in TestIssue49_ExactlyOnceUnderFaults:
// enough attempts to outlast a PostgreSQL restart with short backoffs.
var issue49Retry = client.RetryPolicy{MaxAttempts: 30, MinBackoff: 50 * time.Millisecond, MaxBackoff: time.Second}

// TestIssue49_ExactlyOnceUnderFaults: the Go client, through a round robin
// over two function-server processes, creates 2,000 transactions over four
// signers from 16 goroutines; once 300 creates have returned one server is
// SIGKILLed and restarted 2s later, and once 1,000 have returned
// PostgreSQL is restarted under the servers. Every Create returns once
// with no error, the database holds exactly 2,000 rows, one per request
// id, each the transaction its Create returned, nonces per signer
// contiguous from 0, and the client's retries by reason include transport
// errors (the kill) and 5xx answers (the database restart) and sum to
// their total.
func TestIssue49_ExactlyOnceUnderFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end")
	}
	bin := build(t, t.TempDir(), "./functions/server", "server")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s, err := stack.Start(ctx, stack.Options{ServerBinary: bin, Servers: 2, Signers: 4, BlockTime: time.Second, Confirmations: 2})
	require.NoError(t, err)
	defer s.Close()
	db, err := pgxpool.New(ctx, s.DatabaseURL)
	require.NoError(t, err)
	defer db.Close()

	rr := &roundRobin{base: &http.Transport{MaxIdleConnsPerHost: 32, ResponseHeaderTimeout: 20 * time.Second}}
	defer rr.base.(*http.Transport).CloseIdleConnections()
	for _, u := range s.ServerURLs {
		p, err := url.Parse(u)
		require.NoError(t, err)
		rr.servers = append(rr.servers, p)
	}
	var hookMu sync.Mutex
	hooked := map[string]int64{} // the retries as the hook sees them, one by one
	c, err := client.New(s.APIURL, client.WithHTTPClient(&http.Client{Transport: rr}), client.WithRetryPolicy(issue49Retry),
		client.WithRetryHook(func(ev client.RetryEvent) {
			hookMu.Lock()
			hooked[ev.Reason]++
			hookMu.Unlock()
		}))
	require.NoError(t, err)

	const (
		total     = 2000
		workers   = 16
		killAt    = 300 // creates returned when a server is SIGKILLed
		killFor   = 2 * time.Second
		restartAt = 1000 // creates returned when PostgreSQL restarts
		// pace spreads the creates over ~20s, so that creates are made
		// before, during and after each fault.
		pace = 10 * time.Millisecond
	)
	type result struct {
		calls      int // how many times this Create returned
		got        client.Created
		err        error
		began, end time.Time
	}
	var (
		mu       sync.Mutex
		results  = make([]result, total)
		started  atomic.Int64
		returned atomic.Int64
		reached  = map[int64]chan struct{}{killAt: make(chan struct{}), restartAt: make(chan struct{})}
	)

	// The faults, each once its number of creates has returned.
	var windows []faultWindow
	faultsDone := make(chan error, 1)
	go func() {
		faultsDone <- func() error {
			inject := func(name string, at int64, f func() error) error {
				select {
				case <-reached[at]:
				case <-ctx.Done():
					return fmt.Errorf("%s: %d creates never returned: %w", name, at, ctx.Err())
				}
				w := faultWindow{name: name, returnedAt: returned.Load(), inFlight: started.Load() - returned.Load(), from: time.Now()}
				if err := f(); err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
				w.to, w.endsAt = time.Now(), returned.Load()
				windows = append(windows, w)
				return nil
			}
			if err := inject("SIGKILL server 1, restart after "+killFor.String(), killAt, func() error {
				if err := s.Kill(1); err != nil {
					return err
				}
				// sleep: the server stays dead for the window, as a crashed instance until its replacement is up
				time.Sleep(killFor)
				return s.Restart(ctx, 1)
			}); err != nil {
				return err
			}
			return inject("restart PostgreSQL", restartAt, func() error { return s.RestartDatabase(ctx) })
		}()
	}()

	jobs := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range jobs {
				started.Add(1)
				began := time.Now()
				signer := txm.CanonicalAddress(s.Signers[i%len(s.Signers)])
				got, err := c.Create(ctx, client.CreateRequest{From: signer, To: "0x000000000000000000000000000000000000dEaD",
					Value: big.NewInt(int64(i + 1)), GasLimit: 21000})
				mu.Lock()
				results[i].calls++
				results[i].got, results[i].err = got, err
				results[i].began, results[i].end = began, time.Now()
				mu.Unlock()
				if ch, ok := reached[returned.Add(1)]; ok {
					close(ch)
				}
			}
		})
	}
	begin := time.Now()
	tick := time.NewTicker(pace)
	for i := range total {
		<-tick.C
		jobs <- i
	}
	tick.Stop()
	close(jobs)
	wg.Wait()
	took := time.Since(begin)
	require.NoError(t, <-faultsDone)
	for _, w := range windows {
		// A create overlaps the fault when it was made before the fault
		// ended and returned after it began.
		overlapped := 0
		for _, r := range results {
			if r.began.Before(w.to) && r.end.After(w.from) {
				overlapped++
			}
		}
		t.Logf("fault %q: at %d creates returned with %d in flight, took %s, %d creates overlapped it, %d returned by its end",
			w.name, w.returnedAt, w.inFlight, w.to.Sub(w.from).Round(time.Millisecond), overlapped, w.endsAt)
		assert.Positive(t, overlapped, "%s: creates made while it lasted", w.name)
		assert.Less(t, w.endsAt, int64(total), "%s: creates still to make when it ended", w.name)
	}

	stats := c.Stats()
	var retries int64
	for _, n := range stats {
		retries += n
	}
	reasons := slices.Sorted(maps.Keys(stats))
	var line []string
	for _, r := range reasons {
		line = append(line, fmt.Sprintf("%s=%d", r, stats[r]))
	}
	t.Logf("%d creates in %s; client retries: total=%d %s", total, took.Round(time.Millisecond), retries, strings.Join(line, " "))

	// Each Create returned once, with no error, its own transaction.
	txIDs := map[string]int{}
	requestIDs := map[string]string{} // request id -> tx id
	failed, replayed := 0, 0
	for i, r := range results {
		require.Equal(t, 1, r.calls, "create %d returned %d times", i, r.calls)
		if r.err != nil {
			if failed++; failed <= 5 {
				t.Errorf("create %d: %v", i, r.err)
			}
			continue
		}
		require.NotNil(t, r.got.RequestID, "create %d: answer without its request id", i)
		require.Equal(t, txm.CanonicalAddress(s.Signers[i%len(s.Signers)]), r.got.From, "create %d", i)
		require.Equal(t, fmt.Sprint(i+1), r.got.Value, "create %d: the answer is another create's", i)
		if prev, ok := txIDs[r.got.ID]; ok {
			t.Fatalf("creates %d and %d returned the same transaction %s", prev, i, r.got.ID)
		}
		txIDs[r.got.ID] = i
		if r.got.Replayed {
			replayed++
		}
		requestIDs[*r.got.RequestID] = r.got.ID
	}
	require.Zero(t, failed, "creates that returned an error (of %d)", total)
	t.Logf("%d creates answered as replays (an earlier attempt had created the transaction)", replayed)

	// The database: exactly the transactions the creates returned.
	var rows, distinctRequests int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*), count(DISTINCT request_id) FROM managed_tx`).Scan(&rows, &distinctRequests))
	assert.Equal(t, total, rows, "rows")
	assert.Equal(t, total, distinctRequests, "request ids, each once")
	dbRows, err := db.Query(ctx, `SELECT id::text, request_id FROM managed_tx`)
	require.NoError(t, err)
	for dbRows.Next() {
		var id, requestID string
		require.NoError(t, dbRows.Scan(&id, &requestID))
		assert.Equal(t, requestIDs[requestID], id, "the row of request id %s is the transaction its create returned", requestID)
	}
	require.NoError(t, dbRows.Err())
	perSigner, err := db.Query(ctx, `SELECT signer::text, count(*), min(nonce), max(nonce), count(DISTINCT nonce) FROM managed_tx GROUP BY signer ORDER BY signer`)
	require.NoError(t, err)
	signers := 0
	for perSigner.Next() {
		var signer string
		var n, lo, hi, distinct int64
		require.NoError(t, perSigner.Scan(&signer, &n, &lo, &hi, &distinct))
		signers++
		assert.EqualValues(t, total/len(s.Signers), n, "signer %s: rows", signer)
		assert.True(t, lo == 0 && hi == n-1 && distinct == n, "signer %s: nonces %d..%d, %d distinct of %d rows: not contiguous from 0", signer, lo, hi, distinct, n)
	}
	require.NoError(t, perSigner.Err())
	assert.Equal(t, len(s.Signers), signers)

	// The retries: the ones the faults cause, counted by reason.
	assert.Positive(t, retries, "retries")
	var seen int64
	for _, n := range hooked {
		seen += n
	}
	assert.Equal(t, seen, retries, "the per-reason counts sum to the retries the hook saw")
	assert.Equal(t, hooked, stats, "Stats counts each retry the hook saw, by its reason")
	assert.Positive(t, stats[client.ReasonTransport], "transport retries (the SIGKILLed server)")
	assert.Positive(t, stats[client.ReasonOutcomeUnknown]+stats[client.ReasonUnavailable]+stats[client.ReasonServerError],
		"5xx and outcome-unknown retries (the PostgreSQL restart)")
}
