package metrics

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/txfence/txfence/shared/txm"
)

// *Metrics is the use cases' recorder; a nil one records nothing.
var _ txm.Recorder = (*Metrics)(nil)

// StartSpan implements txm.Recorder with Start.
func (m *Metrics) StartSpan(ctx context.Context, name string) (context.Context, txm.Span) {
	sctx, s := m.Start(ctx, name)
	return sctx, portSpan(ctx, s)
}

// StartClientSpan implements txm.Recorder with StartClient.
func (m *Metrics) StartClientSpan(ctx context.Context, name string) (context.Context, txm.Span) {
	sctx, s := m.StartClient(ctx, name)
	return sctx, portSpan(ctx, s)
}

// portSpan is s behind txm.Span; parent is the context s was started in.
// A span that records nothing is txm.NopSpan, so that the untraced path
// does not allocate.
func portSpan(parent context.Context, s trace.Span) txm.Span {
	if !s.IsRecording() {
		return txm.NopSpan{}
	}
	return &span{s: s, parent: trace.SpanContextFromContext(parent)}
}

// span is a recorded OpenTelemetry span behind txm.Span.
type span struct {
	s      trace.Span
	parent trace.SpanContext
}

func (s *span) End() { s.s.End() }

func (s *span) Recording() bool { return s.s.IsRecording() }

func (s *span) SetResult(result string, failed bool) { SetResult(s.s, result, failed) }

func (s *span) SetInt(key string, v int) { s.s.SetAttributes(attribute.Int(key, v)) }

func (s *span) Link(ctx context.Context) {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() && sc.SpanID() != s.parent.SpanID() {
		s.s.AddLink(trace.Link{SpanContext: sc})
	}
}
