// Package clienttest_test runs the Go client (package client) against the in-process stack, with faults at the HTTP edge. It lives under functions/ because the stack harness is internal there; the client itself imports nothing of the server.
package clienttest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/oauth2"

	"github.com/txfence/txfence/client"
	"github.com/txfence/txfence/functions/internal/stacktest"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/txm"
)

// fault is what the edge proxy does to one call.
type fault int

const (
	pass fault = iota
	// dropAfter lets the server handle the call, then closes the
	// connection without its answer: the caller cannot tell whether it
	// happened.
	dropAfter
	// unknownAfter lets the server handle the call, then answers 503
	// outcome-unknown, as the API does when a COMMIT's fate is lost.
	unknownAfter
	// limited answers 429 with Retry-After without reaching the server.
	limited
	// badGateway answers 502 without reaching the server.
	badGateway
	// dropBefore closes the connection without reaching the server.
	dropBefore
)

// edge is a reverse proxy in front of a node's API that injects faults
// chosen by plan, and counts what it injected.
type edge struct {
	URL   string
	proxy *httputil.ReverseProxy
	plan  func(r *http.Request, body []byte) fault

	mu       sync.Mutex
	injected map[fault]int
	// faulted are the request ids of creates that the server handled but
	// whose answer the caller did not get.
	faulted map[string]bool
}

func newEdge(t *testing.T, target string, plan func(r *http.Request, body []byte) fault) *edge {
	t.Helper()
	u, err := url.Parse(target)
	require.NoError(t, err)
	e := &edge{proxy: httputil.NewSingleHostReverseProxy(u), plan: plan, injected: map[fault]int{}, faulted: map[string]bool{}}
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	e.URL = srv.URL
	return e
}

func (e *edge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	f := e.plan(r, body)
	e.mu.Lock()
	if f != pass {
		e.injected[f]++
	}
	e.mu.Unlock()
	switch f {
	case limited:
		problem(w, http.StatusTooManyRequests, "rate-limited", "")
	case badGateway:
		http.Error(w, "bad gateway", http.StatusBadGateway)
	case dropBefore:
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			_ = conn.Close()
		}
	case dropAfter, unknownAfter:
		rec := httptest.NewRecorder()
		e.proxy.ServeHTTP(rec, r)
		var created struct {
			RequestID string `json:"requestId"`
		}
		_ = json.Unmarshal(body, &created)
		if rec.Code == http.StatusAccepted || rec.Code == http.StatusOK {
			e.mu.Lock()
			e.faulted[created.RequestID] = true
			e.mu.Unlock()
		}
		if f == unknownAfter {
			problem(w, http.StatusServiceUnavailable, "outcome-unknown", created.RequestID)
			return
		}
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	default:
		e.proxy.ServeHTTP(w, r)
	}
}

func problem(w http.ResponseWriter, status int, kind, requestID string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Retry-After", "1")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "https://txfence.dev/problems/" + kind, "title": kind, "status": status,
		"requestId": requestID})
}

// createFaults is an edge plan that, of every nine creates (POSTs), drops
// one's answer after the server handled it, answers one outcome-unknown
// after it handled it, one 502 and drops one before the server; the
// first limitedUntil POSTs also see one 429 with Retry-After in nine
// (each costs a second). Other calls pass.
func createFaults(limitedUntil int) func(r *http.Request, _ []byte) fault {
	var mu sync.Mutex
	n := 0
	return func(r *http.Request, _ []byte) fault {
		if r.Method != http.MethodPost {
			return pass
		}
		mu.Lock()
		defer mu.Unlock()
		n++
		switch n % 9 {
		case 1:
			return dropAfter
		case 3:
			return unknownAfter
		case 5:
			return badGateway
		case 7:
			if n < limitedUntil {
				return limited
			}
		case 8:
			return dropBefore
		}
		return pass
	}
}

// fastRetries keeps a test's own backoffs short; Retry-After is honoured
// as the server sends it.
var fastRetries = client.RetryPolicy{MaxAttempts: 20, MinBackoff: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}

// TestClient_CreateRetriesSameID creates transactions over two signers
// through an edge that drops answers after the server handled the create,
// answers outcome-unknown after it handled it, 429 with Retry-After, 502
// and a dropped connection before it: each create is made exactly once (one row per create,
// nonces contiguous per signer, each answer names its own transaction),
// every dropped or unknown answer is followed by a replay, and the client
// counts each retry with its reason.
func TestClient_CreateRetriesSameID(t *testing.T) {
	w := stacktest.NewWorld(t, 2, stacktest.Lively)
	nd := w.Node(t, "a")
	e := newEdge(t, nd.APIURL, createFaults(60))
	var hookMu sync.Mutex
	hooked := map[string]int{}
	c, err := client.New(e.URL, client.WithRetryPolicy(fastRetries), client.WithRetryHook(func(ev client.RetryEvent) {
		hookMu.Lock()
		hooked[ev.Reason]++
		hookMu.Unlock()
	}))
	require.NoError(t, err)

	const creates = 200
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type result struct {
		requestID string
		got       client.Created
		err       error
	}
	results := make(chan result, creates)
	sem := make(chan struct{}, 16)
	for i := range creates {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			req := client.CreateRequest{From: w.Keys[i%2].Address.Hex(), To: stacktest.Dead.Hex(), Value: big.NewInt(int64(i + 1)), GasLimit: 21000}
			if i%2 == 0 {
				req.RequestID = fmt.Sprintf("caller-%d", i) // the caller's own; the others are made by the client
			}
			got, err := c.Create(ctx, req)
			results <- result{requestID: req.RequestID, got: got, err: err}
		}()
	}
	ids := map[string]bool{}
	requestIDs := map[string]bool{}
	replayed := 0
	for range creates {
		r := <-results
		require.NoError(t, r.err)
		require.False(t, ids[r.got.ID], "transaction %s answered twice", r.got.ID)
		ids[r.got.ID] = true
		require.NotNil(t, r.got.RequestID)
		if r.requestID != "" {
			require.Equal(t, r.requestID, *r.got.RequestID)
		}
		require.False(t, requestIDs[*r.got.RequestID])
		requestIDs[*r.got.RequestID] = true
		if r.got.Replayed {
			replayed++
		}
		require.NotNil(t, r.got.Nonce)
	}

	// One row per create; nonces 0..k-1 per signer, none twice.
	var rows int
	require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM managed_tx`).Scan(&rows))
	require.Equal(t, creates, rows)
	for _, k := range w.Keys[:2] {
		var count, distinct int
		var lo, hi int64
		require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT nonce), min(nonce), max(nonce) FROM managed_tx WHERE signer = $1`,
			txm.CanonicalAddress(k.Address)).Scan(&count, &distinct, &lo, &hi))
		require.Equal(t, creates/2, count)
		require.Equal(t, count, distinct, "a nonce given twice")
		require.EqualValues(t, 0, lo)
		require.EqualValues(t, count-1, hi, "nonces not contiguous")
	}

	e.mu.Lock()
	injected := map[fault]int{}
	for k, v := range e.injected {
		injected[k] = v
	}
	faulted := len(e.faulted)
	e.mu.Unlock()
	stats := c.Stats()
	t.Logf("injected %v; retries %v; replayed %d", injected, stats, replayed)
	require.Positive(t, injected[dropAfter])
	require.Positive(t, injected[unknownAfter])
	require.Positive(t, injected[limited])
	require.Positive(t, injected[badGateway])
	require.Positive(t, injected[dropBefore])
	// Every retry is one the edge caused, counted under its reason.
	require.EqualValues(t, injected[dropAfter]+injected[dropBefore], stats[client.ReasonTransport])
	require.EqualValues(t, injected[unknownAfter], stats[client.ReasonOutcomeUnknown])
	require.EqualValues(t, injected[limited], stats[client.ReasonRateLimited])
	require.EqualValues(t, injected[badGateway], stats[client.ReasonServerError])
	hookMu.Lock()
	for reason, count := range stats {
		require.EqualValues(t, count, hooked[reason], reason)
	}
	hookMu.Unlock()
	// A create whose answer was lost is answered by a replay of it.
	require.Equal(t, faulted, replayed)
}

// TestClient_CreateTypedErrors checks that answers which may not be
// retried come back at once as typed errors, each tried once.
func TestClient_CreateTypedErrors(t *testing.T) {
	w := stacktest.NewWorld(t, 1, stacktest.Lively)
	nd := w.Node(t, "a")
	var calls sync.Map
	e := newEdge(t, nd.APIURL, func(r *http.Request, _ []byte) fault {
		v, _ := calls.LoadOrStore(r.Method, new(int))
		*(v.(*int))++
		return pass
	})
	c, err := client.New(e.URL, client.WithRetryPolicy(fastRetries))
	require.NoError(t, err)
	ctx := context.Background()
	from := w.Keys[0].Address.Hex()

	_, err = c.Create(ctx, client.CreateRequest{From: "0x1234", To: stacktest.Dead.Hex(), GasLimit: 21000})
	require.ErrorIs(t, err, client.ErrInvalid)
	var pe *client.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, http.StatusUnprocessableEntity, pe.Status)
	require.NotEmpty(t, pe.Fields)

	first, err := c.Create(ctx, client.CreateRequest{From: from, To: stacktest.Dead.Hex(), Value: big.NewInt(1), GasLimit: 21000, RequestID: "r-1"})
	require.NoError(t, err)
	require.False(t, first.Replayed)
	again, err := c.Create(ctx, client.CreateRequest{From: from, To: stacktest.Dead.Hex(), Value: big.NewInt(1), GasLimit: 21000, RequestID: "r-1"})
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, first.ID, again.ID)
	_, err = c.Create(ctx, client.CreateRequest{From: from, To: stacktest.Dead.Hex(), Value: big.NewInt(2), GasLimit: 21000, RequestID: "r-1"})
	require.ErrorIs(t, err, client.ErrConflict)
	require.ErrorAs(t, err, &pe)
	require.Equal(t, first.ID, pe.ExistingID)

	_, err = c.Get(ctx, "00000000-0000-4000-8000-000000000000")
	require.ErrorIs(t, err, client.ErrNotFound)
	require.NotErrorIs(t, err, client.ErrRateLimited)

	got, err := c.GetByRequestID(ctx, 0, from, "r-1")
	require.NoError(t, err)
	require.Equal(t, first.ID, got.ID)
	page, err := c.List(ctx, client.ListOptions{Signer: from, State: client.StateAllocated, Limit: 1})
	require.NoError(t, err)
	require.Len(t, page.Items, 1)
	require.NotEmpty(t, page.NextCursor) // a full page may have more
	page, err = c.List(ctx, client.ListOptions{Signer: from, Limit: 1, Cursor: page.NextCursor})
	require.NoError(t, err)
	require.Empty(t, page.Items)
	require.Empty(t, c.Stats())
	v, _ := calls.Load(http.MethodPost)
	require.Equal(t, 4, *(v.(*int)), "each refused create tried once")
}

// TestClient_FollowResumes follows the feed through an edge that fails some
// polls and rewinds others (as a redelivery would), stops part way as a
// client that is restarted, and resumes with a new client from the cursor
// it stored: every transaction's outcome arrives, each (shard, seq) once.
func TestClient_FollowResumes(t *testing.T) {
	w := stacktest.NewWorld(t, 2, stacktest.Lively)
	nd := w.Node(t, "a")
	var mu sync.Mutex
	polls := 0
	e := newEdge(t, nd.APIURL, func(r *http.Request, _ []byte) fault {
		if !strings.HasSuffix(r.URL.Path, "/v1/completions") {
			return pass
		}
		mu.Lock()
		defer mu.Unlock()
		polls++
		switch polls % 5 {
		case 2:
			return badGateway
		case 4:
			// A redelivery: ask for what was already given.
			q := r.URL.Query()
			q.Set("after", "0")
			r.URL.RawQuery = q.Encode()
		}
		return pass
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c1, err := client.New(e.URL, client.WithRetryPolicy(fastRetries))
	require.NoError(t, err)

	const txs = 30
	want := map[string]bool{}
	for i := range txs {
		got, err := c1.Create(ctx, client.CreateRequest{From: w.Keys[i%2].Address.Hex(), To: stacktest.Dead.Hex(), Value: big.NewInt(int64(i + 1)), GasLimit: 21000})
		require.NoError(t, err)
		want[got.ID] = true
	}
	stop := w.Run(t, []*stacktest.Node{nd}, stacktest.RunOptions{})
	defer stop()

	type key struct {
		shard string
		seq   int64
	}
	seen := map[key]bool{}
	final := map[string]bool{}
	take := func(it client.FeedItem) {
		k := key{it.Shard, it.Seq}
		require.False(t, seen[k], "(%q, %d) twice", it.Shard, it.Seq)
		seen[k] = true
		require.True(t, want[it.TxID], "an outcome of a transaction not created here")
		if it.State.Final() {
			final[it.TxID] = true
		}
	}

	// The first client handles a third of the outcomes, storing the
	// cursor after each, and stops.
	var stored client.Cursor
	for it, err := range c1.Follow(ctx, "", client.FollowOptions{Wait: 2 * time.Second, Limit: 4}) {
		require.NoError(t, err)
		take(it)
		stored = it.Cursor
		if len(seen) == txs/3 {
			break
		}
	}
	require.NotEmpty(t, stored)

	// A new client resumes from the stored cursor.
	c2, err := client.New(e.URL, client.WithRetryPolicy(fastRetries))
	require.NoError(t, err)
	for it, err := range c2.Follow(ctx, stored, client.FollowOptions{Wait: 2 * time.Second, Limit: 4}) {
		require.NoError(t, err)
		take(it)
		if len(final) == txs {
			break
		}
	}
	require.Len(t, final, txs)
	require.Positive(t, c1.Stats()[client.ReasonServerError]+c2.Stats()[client.ReasonServerError], "the edge failed no poll")
}

// TestClient_Wait waits for a transaction's confirmation through the feed.
func TestClient_Wait(t *testing.T) {
	w := stacktest.NewWorld(t, 1, stacktest.Lively)
	nd := w.Node(t, "a")
	var mu sync.Mutex
	gets := 0
	e := newEdge(t, nd.APIURL, func(r *http.Request, _ []byte) fault {
		if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/transactions/") {
			mu.Lock()
			gets++
			mu.Unlock()
		}
		return pass
	})
	c, err := client.New(e.URL, client.WithRetryPolicy(fastRetries))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	created, err := c.Create(ctx, client.CreateRequest{From: w.Keys[0].Address.Hex(), To: stacktest.Dead.Hex(), Value: big.NewInt(1), GasLimit: 21000})
	require.NoError(t, err)

	_, err = c.Wait(ctx, created.ID, client.State("SIGNED"))
	require.ErrorIs(t, err, client.ErrNotOnFeed, "not a state")

	done := make(chan struct{})
	var got client.Transaction
	go func() {
		defer close(done)
		got, err = c.Wait(ctx, created.ID)
	}()
	w.WaitListening(t) // Wait holds a long poll before anything moves
	w.Run(t, []*stacktest.Node{nd}, stacktest.RunOptions{})
	<-done
	require.NoError(t, err)
	require.Equal(t, client.StateConfirmed, got.State)
	mu.Lock()
	require.Equal(t, 2, gets, "one read at start, one when the outcome came: the transaction is not polled")
	mu.Unlock()

	// Already final: answered by the first read.
	again, err := c.Wait(ctx, created.ID, client.StateConfirmed)
	require.NoError(t, err)
	require.Equal(t, created.ID, again.ID)
	_, err = c.Wait(ctx, created.ID, client.StateFailedFinal)
	require.ErrorIs(t, err, client.ErrEnded)
	require.True(t, errors.Is(err, client.ErrEnded))

	// A state before the outcomes, through the lifecycle feed: a wait for
	// MINED ends with the TxMined event (or at once, once mined).
	second, err := c.Create(ctx, client.CreateRequest{From: w.Keys[0].Address.Hex(), To: stacktest.Dead.Hex(), Value: big.NewInt(2), GasLimit: 21000})
	require.NoError(t, err)
	mined, err := c.Wait(ctx, second.ID, client.StateMined)
	require.NoError(t, err)
	require.Contains(t, []client.State{client.StateMined, client.StateConfirmed}, mined.State)
	require.NotNil(t, mined.Hash, "mined: it has its hash")
}

// TestClient_Credentials calls a deployment that takes API keys: with the
// key, as a token source's token, without one (401) and beyond the key's
// policy (403 naming the rule), none of them retried.
func TestClient_Credentials(t *testing.T) {
	w := stacktest.NewWorld(t, 1, func(c *config.Config) { c.Auth.Methods = []string{"apikey"} }, stacktest.Lively)
	nd := w.Node(t, "a")
	key := w.APIKey(t, txm.Policy{Principal: "payouts@example.com", Roles: []txm.Role{txm.RoleSender}, AllSigners: true,
		MaxValue: big.NewInt(1e18)})
	ctx := context.Background()
	req := client.CreateRequest{From: w.Keys[0].Address.Hex(), To: stacktest.Dead.Hex(), Value: big.NewInt(1), GasLimit: 21000}

	byKey, err := client.New(nd.APIURL, client.WithAPIKey(key), client.WithRetryPolicy(fastRetries))
	require.NoError(t, err)
	created, err := byKey.Create(ctx, req)
	require.NoError(t, err)
	bySource, err := client.New(nd.APIURL, client.WithTokenSource(client.OAuth2TokenSource(oauth2.StaticTokenSource(&oauth2.Token{AccessToken: key}))),
		client.WithRetryPolicy(fastRetries))
	require.NoError(t, err)
	got, err := bySource.Get(ctx, created.ID)
	require.NoError(t, err)
	require.Equal(t, created.ID, got.ID)

	anonymous, err := client.New(nd.APIURL, client.WithRetryPolicy(fastRetries))
	require.NoError(t, err)
	_, err = anonymous.Get(ctx, created.ID)
	require.ErrorIs(t, err, client.ErrUnauthenticated)

	over := req
	over.Value = big.NewInt(2e18)
	_, err = byKey.Create(ctx, over)
	require.ErrorIs(t, err, client.ErrForbidden)
	var pe *client.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, txm.RuleMaxValue, pe.Rule)
	require.Empty(t, byKey.Stats())
	require.Empty(t, anonymous.Stats())
}

// TestClient_ActionOnce resubmits a transaction through an edge that drops
// the first answer after the API recorded the action: the client retries
// with the same action id and the action is recorded once.
func TestClient_ActionOnce(t *testing.T) {
	w := stacktest.NewWorld(t, 1, stacktest.Lively)
	nd := w.Node(t, "a")
	var mu sync.Mutex
	dropped := false
	e := newEdge(t, nd.APIURL, func(r *http.Request, _ []byte) fault {
		mu.Lock()
		defer mu.Unlock()
		if strings.HasSuffix(r.URL.Path, "/resubmit") && !dropped {
			dropped = true
			return dropAfter
		}
		return pass
	})
	c, err := client.New(e.URL, client.WithRetryPolicy(fastRetries))
	require.NoError(t, err)
	ctx := context.Background()
	created, err := c.Create(ctx, client.CreateRequest{From: w.Keys[0].Address.Hex(), To: stacktest.Dead.Hex(), Value: big.NewInt(1), GasLimit: 21000})
	require.NoError(t, err)
	a, err := c.Resubmit(ctx, created.ID, client.ActionRequest{Reason: "node was down"})
	require.NoError(t, err)
	require.Equal(t, "resubmit", a.Action)
	list, err := c.Actions(ctx, created.ID)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, a.ActionID, list[0].ActionID)
	require.EqualValues(t, 1, c.Stats()[client.ReasonTransport])

	_, err = c.Cancel(ctx, created.ID, client.ActionRequest{ActionID: a.ActionID, Reason: "another payload"})
	require.ErrorIs(t, err, client.ErrConflict)
}
