package metrics

import (
	"context"
	"encoding/binary"
	"net/http"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Spans are cheap where nothing records them: without a tracer provider
// (TXFENCE_TELEMETRY prometheus or none) Start returns the context as it
// is and a span that does nothing, without allocating. With one, spans are
// sampled (config.Telemetry.SampleRatio for new traces, the caller's
// decision for continued ones); a span not sampled still carries its trace
// id into log lines.

// noSpan is the span that does nothing.
var noSpan = trace.SpanFromContext(context.Background())

var (
	serverSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
	rootSpan   = []trace.SpanStartOption{trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindConsumer)}
	clientSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}
)

// Start starts a span named name, a child of ctx's span.
func (m *Metrics) Start(ctx context.Context, name string) (context.Context, trace.Span) {
	if m == nil || m.tracer == nil {
		return ctx, noSpan
	}
	return m.tracer.Start(ctx, name)
}

// StartClient starts a span for a call to another service (the chain's
// RPC), a child of ctx's span.
func (m *Metrics) StartClient(ctx context.Context, name string) (context.Context, trace.Span) {
	if m == nil || m.tracer == nil {
		return ctx, noSpan
	}
	return m.tracer.Start(ctx, name, clientSpan...)
}

// StartServer starts the span of an incoming HTTP request; ctx carries the
// caller's trace, if any (Extract), which the span continues.
func (m *Metrics) StartServer(ctx context.Context, name string) (context.Context, trace.Span) {
	if m == nil || m.tracer == nil {
		return ctx, noSpan
	}
	return m.tracer.Start(ctx, name, serverSpan...)
}

// StartRoot starts the root span of a new trace, for work a Pub/Sub message
// prompted: a prompt names a signer with work, not the request that made
// it, so the work is traced on its own.
func (m *Metrics) StartRoot(ctx context.Context, name string) (context.Context, trace.Span) {
	if m == nil || m.tracer == nil {
		return ctx, noSpan
	}
	return m.tracer.Start(ctx, name, rootSpan...)
}

// SetResult names the outcome of a recorded span's work, marking the span
// failed when failed is true. result is a word from a closed set, never an
// error's text: errors may carry an RPC URL and the key in it.
func SetResult(span trace.Span, result string, failed bool) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.String("txfence.result", result))
	if failed {
		span.SetStatus(codes.Error, result)
	}
}

// propagator reads a caller's trace from W3C traceparent/tracestate, or,
// without them, from Google's X-Cloud-Trace-Context.
var propagator = propagation.NewCompositeTextMapPropagator(cloudTraceContext{}, propagation.TraceContext{})

// Extract returns ctx carrying the trace an incoming request's headers name
// (traceparent, else X-Cloud-Trace-Context), if any, so that its spans and
// log lines continue the caller's trace.
func Extract(ctx context.Context, h http.Header) context.Context {
	if len(h["Traceparent"]) == 0 && len(h[cloudTraceHeader]) == 0 {
		return ctx // nothing to continue: no header lookups that allocate
	}
	return propagator.Extract(ctx, propagation.HeaderCarrier(h))
}

// cloudTraceContext extracts X-Cloud-Trace-Context ("TRACE_ID/SPAN_ID;o=1",
// the span id decimal), which Google's load balancer and older clients
// send. It injects nothing: outgoing calls use traceparent. (Google's own
// propagator module is deprecated and logs every malformed header, a
// caller-controlled string, to stderr.)
type cloudTraceContext struct{}

const cloudTraceHeader = "X-Cloud-Trace-Context"

func (cloudTraceContext) Inject(context.Context, propagation.TextMapCarrier) {}

func (cloudTraceContext) Fields() []string { return []string{cloudTraceHeader} }

func (cloudTraceContext) Extract(ctx context.Context, c propagation.TextMapCarrier) context.Context {
	v := c.Get(cloudTraceHeader)
	if v == "" {
		return ctx
	}
	if sc, ok := parseCloudTrace(v); ok {
		return trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	return ctx
}

func parseCloudTrace(v string) (trace.SpanContext, bool) {
	ids, opts, _ := strings.Cut(v, ";")
	tid, sid, ok := strings.Cut(ids, "/")
	if !ok {
		return trace.SpanContext{}, false
	}
	traceID, err := trace.TraceIDFromHex(tid)
	if err != nil {
		return trace.SpanContext{}, false
	}
	n, err := strconv.ParseUint(sid, 10, 64)
	if err != nil || n == 0 {
		return trace.SpanContext{}, false
	}
	var spanID trace.SpanID
	binary.BigEndian.PutUint64(spanID[:], n)
	var flags trace.TraceFlags
	if opts == "o=1" {
		flags = trace.FlagsSampled
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID, SpanID: spanID, TraceFlags: flags, Remote: true}), true
}
