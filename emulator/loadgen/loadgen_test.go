package loadgen

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The lean client reads answers with a length, chunked answers and answers
// that close the connection, keeps connections alive, and counts what is
// not 202 as an error.
func TestRun_LeanClient(t *testing.T) {
	t.Parallel()
	var conns, requests atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		n := requests.Add(1)
		switch {
		case r.Method != http.MethodPost || r.URL.Path != "/Api/v1/transactions" || !strings.Contains(string(body), `"from":"0xa"`):
			w.WriteHeader(http.StatusBadRequest)
		case n%10 == 0:
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusAccepted)
			_, _ = w.Write([]byte(`{"closing":true}`))
		case n%7 == 0:
			w.WriteHeader(http.StatusAccepted)
			w.(http.Flusher).Flush() // chunked from here
			_, _ = w.Write([]byte(strings.Repeat("x", 5000)))
		case n%13 == 0:
			w.WriteHeader(http.StatusConflict)
		default:
			w.WriteHeader(http.StatusAccepted)
			_, _ = w.Write([]byte(`{"id":"1"}`))
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	// A base URL with a path, as the local stack serves the API under /Api.
	res, err := Run(context.Background(), Config{URLs: []string{srv.URL + "/Api"}, ChainID: 1, Signers: []string{"0xa"}, Concurrency: 4, Requests: 500})
	require.NoError(t, err)
	assert.Equal(t, 500, res.Requests)
	conflicts := 0
	for n := 1; n <= 500; n++ {
		if n%13 == 0 && n%10 != 0 && n%7 != 0 {
			conflicts++
		}
	}
	assert.Equal(t, conflicts, res.Errors, "%v", res.Statuses)
	assert.Equal(t, conflicts, res.Statuses[http.StatusConflict])
	assert.Equal(t, 500-conflicts, len(res.Latencies))
	assert.Less(t, conns.Load(), int64(100), "kept alive: a new connection after each of the 50 closes at most")
}

// Clients share the connections to a server, so a run opens at most as many
// as it ever has requests in flight, and runs that share Conns (a warm-up
// and the run it warms) open them once: 2 runs of 8 clients open 8 at most,
// where a connection per client and run opened 16. A run's own connections
// are closed when it ends.
func TestRun_SharesConnections(t *testing.T) {
	t.Parallel()
	var opened, closed atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusAccepted)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			opened.Add(1)
		case http.StateClosed:
			closed.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	cfg := Config{URLs: []string{srv.URL}, ChainID: 1, Signers: []string{"0xa"}, Concurrency: 8, Requests: 400, Conns: NewConns()}
	for run := 0; run < 2; run++ {
		res, err := Run(context.Background(), cfg)
		require.NoError(t, err)
		require.Equal(t, 400, len(res.Latencies), "%v", res.Statuses)
	}
	assert.LessOrEqual(t, opened.Load(), int64(8), "one set of connections for both runs")
	assert.Zero(t, closed.Load(), "kept for the runs that share them")
	cfg.Conns.Close()
	assert.Eventually(t, func() bool { return closed.Load() == opened.Load() }, 5*time.Second, 10*time.Millisecond, "closed by Close")

	// A run of its own closes what it opened when it ends.
	opened.Store(0)
	closed.Store(0)
	cfg.Conns = nil
	_, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	assert.LessOrEqual(t, opened.Load(), int64(8))
	assert.Eventually(t, func() bool { return closed.Load() == opened.Load() }, 5*time.Second, 10*time.Millisecond, "closed when the run ended")
}

// A run with Data sends calls that carry it and leave the gas to the
// create's simulation; without, plain transfers with their gas limit.
func TestRun_Data(t *testing.T) {
	t.Parallel()
	bodies := make(chan map[string]any, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b map[string]any
		_ = json.NewDecoder(r.Body).Decode(&b)
		bodies <- b
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(srv.Close)
	for _, data := range []string{"0xa9059cbb", ""} {
		_, err := Run(context.Background(), Config{URLs: []string{srv.URL}, ChainID: 1, Signers: []string{"0xa"}, To: "0xc",
			Data: data, Concurrency: 1, Requests: 1})
		require.NoError(t, err)
		b := <-bodies
		if data != "" {
			assert.Equal(t, map[string]any{"chainId": 1.0, "from": "0xa", "to": "0xc", "data": data}, b)
		} else {
			assert.Equal(t, map[string]any{"chainId": 1.0, "from": "0xa", "to": "0xc", "value": "1", "gasLimit": 21000.0}, b)
		}
	}
}
