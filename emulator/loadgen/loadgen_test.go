package loadgen

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

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
