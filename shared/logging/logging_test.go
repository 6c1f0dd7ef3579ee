package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
)

// TestIssue13_TraceFields: a line logged with a context that carries a span
// names its trace as Cloud Logging expects (projects/P/traces/T), its span
// and whether it was sampled; a line without one names none.
func TestIssue13_TraceFields(t *testing.T) {
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	traced := trace.ContextWithSpanContext(context.Background(),
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	line := func(project string, ctx context.Context) map[string]any {
		var b bytes.Buffer
		New(&b, "info", project).With("signer", "0xa1").InfoContext(ctx, "allocated")
		var m map[string]any
		require.NoError(t, json.Unmarshal(b.Bytes(), &m))
		return m
	}

	m := line("p1", traced)
	assert.Equal(t, "projects/p1/traces/4bf92f3577b34da6a3ce929d0e0e4736", m[KeyTrace])
	assert.Equal(t, "00f067aa0ba902b7", m[KeySpanID])
	assert.Equal(t, true, m[KeyTraceSampled])
	assert.Equal(t, "INFO", m["severity"])
	assert.Equal(t, "0xa1", m["signer"], "attributes added with With keep the trace fields")

	assert.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", line("", traced)[KeyTrace], "without a project, the bare trace id")

	m = line("p1", context.Background())
	assert.NotContains(t, m, KeyTrace)
	assert.NotContains(t, m, KeySpanID)
}
