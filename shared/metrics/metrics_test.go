package metrics

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/txm"
)

// TestNilRecordsNothing: a nil *Metrics (TXFENCE_TELEMETRY=none) is valid
// everywhere instruments are used.
func TestNilRecordsNothing(t *testing.T) {
	ctx := context.Background()
	var m *Metrics
	assert.NotPanics(t, func() {
		m.LeaseAcquire(ctx, "acquired")
		m.LeaseFenced(ctx, "op")
		m.TxCreate(ctx, "created", 1)
		m.CreateLatency(ctx, "created", 0.1)
		m.TxSubmit(ctx, "accepted")
		m.ReceiptCheck(ctx, "mined")
		m.Reorg(ctx)
		m.Resubmit(ctx, "prompted")
		m.Stuck(ctx, "r")
		m.Refused(ctx, "rate_limited")
		m.QueueDepth(ctx, 1)
		for s := Stage(0); s < stageCount; s++ {
			m.Latency(ctx, s, 1)
		}
		m.PendingOldest(ctx, 1, "0xa1", 2)
		assert.Zero(t, m.Count("reorg_total"))
		require.NoError(t, m.WritePrometheus(ctx, &strings.Builder{}))
		require.NoError(t, m.Shutdown(ctx))
	})
}

// TestPrometheusText: every instrument renders in the Prometheus text
// format with its type and labels.
func TestPrometheusText(t *testing.T) {
	ctx := context.Background()
	m := New()
	m.TxCreate(ctx, "created", 2)
	m.TxCreate(ctx, "some_new_result", 1)
	m.QueueDepth(ctx, 3)
	m.Latency(ctx, StageSubmit, 0.3)
	m.PendingOldest(ctx, 1337, "0xa1", 12.5)
	m.Delegated(ctx, 1337, "0xa1", true)
	m.Delegated(ctx, 1337, "0xa2", false)
	m.OutboxBacklog(ctx, "", 7, 2, 61.5)
	m.OutboxBacklog(ctx, "eu", 0, 0, 0)
	var b strings.Builder
	require.NoError(t, m.WritePrometheus(ctx, &b))
	text := b.String()
	for _, want := range []string{
		"# TYPE tx_create_total counter\n", `tx_create_total{result="created"} 2` + "\n", `tx_create_total{result="some_new_result"} 1` + "\n",
		"# TYPE writer_queue_depth gauge\n", "writer_queue_depth 3\n",
		"# TYPE submit_latency_seconds histogram\n", `submit_latency_seconds_bucket{le="0.5"} 1` + "\n", "submit_latency_seconds_count 1\n",
		"# TYPE pending_oldest_age_seconds gauge\n", `pending_oldest_age_seconds{chain_id="1337",signer="0xa1"} 12.5` + "\n",
		"# TYPE delegated_signers gauge\n", `delegated_signers{chain_id="1337",signer="0xa1"} 1` + "\n", `delegated_signers{chain_id="1337",signer="0xa2"} 0` + "\n",
		"# TYPE outbox_backlog_rows gauge\n", "outbox_backlog_rows 7\n", `outbox_backlog_rows{shard="eu"} 0` + "\n",
		"outbox_failing_rows 2\n", "# TYPE outbox_oldest_age_seconds gauge\n", "outbox_oldest_age_seconds 61.5\n",
	} {
		assert.Contains(t, text, want)
	}
	assert.EqualValues(t, 2, m.Count("tx_create_total", "result", "created"))
}

// endpointList is a chain's endpoint health as a client would report it.
type endpointList []txm.EndpointHealth

func (l endpointList) EndpointHealth() []txm.EndpointHealth { return l }

// TestEndpointHealthGauges: each watched chain's endpoints are read when
// the instruments are collected: one state series per state (1 for the
// endpoint's), and the lag of the read endpoints.
func TestEndpointHealthGauges(t *testing.T) {
	ctx := context.Background()
	m := New()
	list := endpointList{
		{Name: "endpoint 0 (https://a.example/...)", State: txm.EndpointLagging, Head: 90, Lag: 12},
		{Name: "endpoint 1 (https://b.example)", State: txm.EndpointHealthy, Head: 102},
		{Name: "protect", SendOnly: true, State: txm.EndpointDead, LastError: "http_502"},
	}
	m.WatchEndpoints(1337, list)
	var b strings.Builder
	require.NoError(t, m.WritePrometheus(ctx, &b))
	text := b.String()
	for _, want := range []string{
		"# TYPE rpc_endpoint_state gauge\n",
		`rpc_endpoint_state{chain_id="1337",endpoint="endpoint 0 (https://a.example/...)",send_only="false",state="lagging"} 1` + "\n",
		`rpc_endpoint_state{chain_id="1337",endpoint="endpoint 0 (https://a.example/...)",send_only="false",state="healthy"} 0` + "\n",
		`rpc_endpoint_state{chain_id="1337",endpoint="protect",send_only="true",state="dead"} 1` + "\n",
		`rpc_endpoint_lag_blocks{chain_id="1337",endpoint="endpoint 0 (https://a.example/...)"} 12` + "\n",
		`rpc_endpoint_lag_blocks{chain_id="1337",endpoint="endpoint 1 (https://b.example)"} 0` + "\n",
	} {
		assert.Contains(t, text, want)
	}
	assert.NotContains(t, text, `rpc_endpoint_lag_blocks{chain_id="1337",endpoint="protect"}`, "a send-only endpoint has no head")
	v, ok := m.Gauge("rpc_endpoint_state", "chain_id", "1337", "endpoint", "endpoint 1 (https://b.example)", "send_only", "false", "state", "healthy")
	assert.True(t, ok)
	assert.EqualValues(t, 1, v)
	list[1].State = txm.EndpointDead
	v, _ = m.Gauge("rpc_endpoint_state", "chain_id", "1337", "endpoint", "endpoint 1 (https://b.example)", "send_only", "false", "state", "healthy")
	assert.Zero(t, v, "read afresh at each collection")
}
