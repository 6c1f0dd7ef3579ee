package metrics

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.opentelemetry.io/otel/trace"
)

func TestIssue13_Extract(t *testing.T) {
	const tid = "4bf92f3577b34da6a3ce929d0e0e4736"
	for _, tc := range []struct {
		name    string
		header  http.Header
		trace   string
		span    string
		sampled bool
	}{
		{"traceparent", http.Header{"Traceparent": {"00-" + tid + "-00f067aa0ba902b7-01"}}, tid, "00f067aa0ba902b7", true},
		{"X-Cloud-Trace-Context, decimal span id", http.Header{"X-Cloud-Trace-Context": {tid + "/258;o=1"}}, tid, "0000000000000102", true},
		{"X-Cloud-Trace-Context not sampled", http.Header{"X-Cloud-Trace-Context": {tid + "/1;o=0"}}, tid, "0000000000000001", false},
		{"X-Cloud-Trace-Context without options", http.Header{"X-Cloud-Trace-Context": {tid + "/1"}}, tid, "0000000000000001", false},
		{"traceparent wins", http.Header{"Traceparent": {"00-" + tid + "-00f067aa0ba902b7-01"},
			"X-Cloud-Trace-Context": {"105445aa7843bc8bf206b12000100000/1;o=1"}}, tid, "00f067aa0ba902b7", true},
		{"none", http.Header{}, "", "", false},
		{"malformed trace id", http.Header{"X-Cloud-Trace-Context": {"xyz/1;o=1"}}, "", "", false},
		{"zero span id", http.Header{"X-Cloud-Trace-Context": {tid + "/0;o=1"}}, "", "", false},
		{"no span id", http.Header{"X-Cloud-Trace-Context": {tid}}, "", "", false},
		{"negative span id", http.Header{"X-Cloud-Trace-Context": {tid + "/-1"}}, "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := trace.SpanContextFromContext(Extract(context.Background(), tc.header))
			if tc.trace == "" {
				assert.False(t, sc.IsValid())
				return
			}
			assert.True(t, sc.IsRemote())
			assert.Equal(t, tc.trace, sc.TraceID().String())
			assert.Equal(t, tc.span, sc.SpanID().String())
			assert.Equal(t, tc.sampled, sc.IsSampled())
		})
	}
}

// TestIssue13_SpansFreeWithoutTracer: where telemetry is prometheus or none
// a span costs the hot path no allocation.
func TestIssue13_SpansFreeWithoutTracer(t *testing.T) {
	ctx := context.Background()
	none := http.Header{"Content-Type": {"application/json"}}
	for _, m := range []*Metrics{nil, New()} {
		allocs := testing.AllocsPerRun(100, func() {
			c, span := m.Start(ctx, "create")
			_, child := m.StartClient(c, "chain.estimate_gas")
			child.End()
			SetResult(span, "created", false)
			span.End()
			_, root := m.StartRoot(ctx, "submit")
			root.End()
			_, server := m.StartServer(Extract(ctx, none), "POST /v1/transactions")
			server.End()
		})
		assert.Zero(t, allocs)
	}
}
