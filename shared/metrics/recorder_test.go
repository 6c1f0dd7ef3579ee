package metrics

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/txfence/txfence/shared/txm"
)

// TestIssue46_RecorderSpans: the use cases' spans go through txm.Recorder.
// A batch span links the spans of the other requests, not its parent, and
// keeps its attributes and result; without a tracer the port's spans cost
// no allocation, as Start's do.
func TestIssue46_RecorderSpans(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	var rec txm.Recorder = New(WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))))

	lead, leadSpan := rec.StartSpan(context.Background(), "create")
	other, otherSpan := rec.StartSpan(context.Background(), "create")
	_, batch := rec.StartSpan(lead, "create.allocate")
	require.True(t, batch.Recording())
	batch.Link(lead)
	batch.Link(other)
	batch.Link(context.Background()) // no span: nothing to link
	batch.SetInt("txfence.batch_size", 2)
	batch.SetResult("created", false)
	batch.End()
	otherSpan.End()
	leadSpan.End()

	var allocate sdktrace.ReadOnlySpan
	for _, s := range spans.Ended() {
		if s.Name() == "create.allocate" {
			allocate = s
		}
	}
	require.NotNil(t, allocate)
	require.Len(t, allocate.Links(), 1, "the leader's own span is the parent, not a link")
	assert.Equal(t, otherSpan.(*span).s.SpanContext().SpanID(), allocate.Links()[0].SpanContext.SpanID())
	attrs := map[string]string{}
	for _, kv := range allocate.Attributes() {
		attrs[string(kv.Key)] = kv.Value.Emit()
	}
	assert.Equal(t, map[string]string{"txfence.batch_size": "2", "txfence.result": "created"}, attrs)

	for _, m := range []*Metrics{nil, New()} {
		var r txm.Recorder = m
		allocs := testing.AllocsPerRun(100, func() {
			c, s := r.StartSpan(context.Background(), "create")
			_, child := r.StartClientSpan(c, "chain.estimate_gas")
			child.End()
			s.SetResult("created", false)
			s.End()
		})
		assert.Zero(t, allocs)
	}
}
