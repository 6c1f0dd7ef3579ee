package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRPCTimer: the proxy forwards every request, and while it measures
// times only those that carry simulations, counting the simulated calls
// in each; its delay holds those alone.
func TestRPCTimer(t *testing.T) {
	t.Parallel()
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b) // echoes the request
	}))
	t.Cleanup(node.Close)
	timer, err := startRPCTimer(node.URL, 30*time.Millisecond)
	require.NoError(t, err)
	t.Cleanup(timer.close)
	post := func(body string) time.Duration {
		start := time.Now()
		resp, err := http.Post(timer.url, "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body)
		assert.Equal(t, body, string(got), "forwarded as sent")
		return time.Since(start)
	}
	sims := `[{"method":"eth_simulateV1"},{"method":"eth_estimateGas"},{"method":"eth_simulateV1"},{"method":"eth_estimateGas"}]`
	post(sims) // not measuring
	timer.measure(true)
	assert.Less(t, post(`{"method":"eth_blockNumber"}`), 30*time.Millisecond, "a request without simulations is not held")
	assert.GreaterOrEqual(t, post(sims), 30*time.Millisecond, "a simulation request is held")
	timer.measure(false)
	post(sims)
	require.Len(t, timer.calls, 1, "only the simulation request made while measuring")
	assert.GreaterOrEqual(t, timer.calls[0], 30*time.Millisecond)
	assert.Equal(t, 2, timer.simulated, "two simulated calls in it")
}
