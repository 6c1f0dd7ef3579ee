// Package metrics declares txfence's instruments (docs/observability.md lists them) on an
// OpenTelemetry meter provider, and the tracer its spans come from. Locally
// and in tests the provider has a manual reader, rendered as Prometheus text
// at /metrics and readable by tests; in production more readers (an exporter
// to Cloud Monitoring, see shared/telemetry) are attached, and a tracer
// provider that exports to Cloud Trace.
package metrics

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
	"go.opentelemetry.io/otel/trace"

	"github.com/txfence/txfence/shared/txm"
)

// Metrics holds every instrument and the tracer. A nil *Metrics is valid
// and records nothing, so that code under test need not care.
type Metrics struct {
	provider *sdkmetric.MeterProvider
	reader   *sdkmetric.ManualReader
	mu       sync.Mutex   // serializes Collect
	tracer   trace.Tracer // nil: spans are not recorded

	counters      [counterCount]metric.Int64Counter
	queueDepth    metric.Int64UpDownCounter
	createLatency metric.Float64Histogram
	stages        [stageCount]metric.Float64Histogram
	pendingOldest metric.Float64Gauge
	delegated     metric.Int64Gauge
	outboxRows    metric.Int64Gauge
	outboxFailing metric.Int64Gauge
	outboxOldest  metric.Float64Gauge

	// endpoints reads each chain's endpoint health when the instruments
	// are collected (WatchEndpoints).
	endpointsMu sync.Mutex
	endpoints   map[uint64]txm.EndpointHealthReader

	// createResults holds the attribute option of each create result,
	// built once: a create records two measurements by result, and building
	// an attribute set for each would cost the hot path allocations.
	createResults map[string]metric.MeasurementOption
}

// createResultNames are the results a create is counted under.
var createResultNames = []string{"created", "replayed", "conflict", "invalid", "forbidden", "outcome_unknown", "unavailable", "error"}

// Option configures New.
type Option func(*options)

type options struct {
	readers  []sdkmetric.Reader
	resource *resource.Resource
	tracer   trace.TracerProvider
}

// WithReader attaches a reader besides the manual one (a periodic exporter).
func WithReader(r sdkmetric.Reader) Option {
	return func(o *options) { o.readers = append(o.readers, r) }
}

// WithResource describes the process the measurements come from.
func WithResource(r *resource.Resource) Option { return func(o *options) { o.resource = r } }

// WithTracerProvider records spans through tp; without it no span is
// recorded (Start returns the context unchanged).
func WithTracerProvider(tp trace.TracerProvider) Option { return func(o *options) { o.tracer = tp } }

// latencyBuckets are seconds, from 100µs to 30s: one operation.
var latencyBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// lagBuckets are seconds, from 10ms to an hour: a transaction waiting for
// the next stage (a drain, a block).
var lagBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600}

// counter names a counter.
type counter int

const (
	leaseAcquireTotal counter = iota
	leaseFencedTotal
	txCreateTotal
	txSubmitTotal
	receiptCheckTotal
	reorgTotal
	resubmitTotal
	stuckTotal
	apiRefusedTotal
	outcomeContradictedTotal
	bumpDecisionTotal
	counterCount
)

// counters declares each counter.
var counters = [counterCount]struct{ name, description string }{
	leaseAcquireTotal: {"lease_acquire_total", "Lease acquisitions by result."},
	leaseFencedTotal:  {"lease_fenced_total", "Writes rejected because the fencing token was stale, by operation."},
	txCreateTotal:     {"tx_create_total", "Create requests by result."},
	txSubmitTotal:     {"tx_submit_total", "Broadcasts by result."},
	receiptCheckTotal: {"receipt_check_total", "Receipt checks by result."},
	reorgTotal:        {"reorg_total", "Mined transactions whose block left the canonical chain."},
	resubmitTotal:     {"resubmit_total", "Rebroadcasts and re-prompts by result."},
	stuckTotal:        {"stuck_total", "Transactions that entered STUCK, by reason."},
	apiRefusedTotal:   {"api_refused_total", "Calls refused: unauthenticated, forbidden by a rule, rate limited."},
	outcomeContradictedTotal: {"outcome_contradicted_total",
		"Reported FAILED_FINAL outcomes that a later look at the chain contradicts (an attempt mined), by sub-state: a bug, never corrected silently."},
	bumpDecisionTotal: {"bump_decision_total",
		"What the resubmit sweep did with a transaction due for a fee bump, by decision: bumped, sent again, or left to wait."},
}

// Stage names a stage latency histogram (the create call's own,
// create_latency_seconds, is counted by result: CreateLatency).
type Stage = txm.Stage

// The stages, as txm declares them.
const (
	StageAllocation   = txm.StageAllocation
	StageSubmit       = txm.StageSubmit
	StageBroadcast    = txm.StageBroadcast
	StageReceipt      = txm.StageReceipt
	StageConfirmation = txm.StageConfirmation
	stageCount        = StageConfirmation + 1
)

// stageHistograms declares each Stage's histogram.
var stageHistograms = [stageCount]struct {
	name, description string
	buckets           []float64
}{
	StageAllocation:   {"allocation_latency_seconds", "Time from a create entering the writer queue to its batch committing.", latencyBuckets},
	StageSubmit:       {"submit_latency_seconds", "Time from a transaction's allocation to its first broadcast a node accepted.", lagBuckets},
	StageBroadcast:    {"broadcast_latency_seconds", "Time of one batched sendRawTransaction call.", latencyBuckets},
	StageReceipt:      {"receipt_latency_seconds", "Time from a transaction's first accepted broadcast to its receipt being recorded (MINED).", lagBuckets},
	StageConfirmation: {"confirmation_lag_seconds", "Time from a transaction's creation to its final outcome (CONFIRMED or FAILED_FINAL).", []float64{1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600}},
}

// scope names the instrumentation of every instrument and span.
const scope = "github.com/txfence/txfence"

// New returns a Metrics on its own provider with a manual reader, plus what
// opts add.
func New(opts ...Option) *Metrics {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	reader := sdkmetric.NewManualReader()
	mopts := []sdkmetric.Option{sdkmetric.WithReader(reader)}
	for _, r := range o.readers {
		mopts = append(mopts, sdkmetric.WithReader(r))
	}
	if o.resource != nil {
		mopts = append(mopts, sdkmetric.WithResource(o.resource))
	}
	mp := sdkmetric.NewMeterProvider(mopts...)
	m := &Metrics{provider: mp, reader: reader, createResults: map[string]metric.MeasurementOption{}}
	for _, r := range createResultNames {
		m.createResults[r] = attrs([]string{"result", r})
	}
	if o.tracer != nil {
		m.tracer = o.tracer.Tracer(scope)
	}
	meter := mp.Meter(scope)
	must := func(err error) {
		if err != nil {
			panic(fmt.Sprintf("metrics: %v", err)) // only on a malformed instrument declaration
		}
	}
	var err error
	for c, d := range counters {
		m.counters[c], err = meter.Int64Counter(d.name, metric.WithDescription(d.description))
		must(err)
	}
	m.queueDepth, err = meter.Int64UpDownCounter("writer_queue_depth", metric.WithDescription("Create requests waiting in per-signer writer queues."))
	must(err)
	m.createLatency, err = meter.Float64Histogram("create_latency_seconds", metric.WithDescription("Time of one create call, from validation to its answer, by result."), metric.WithExplicitBucketBoundaries(latencyBuckets...))
	must(err)
	for st, h := range stageHistograms {
		m.stages[st], err = meter.Float64Histogram(h.name, metric.WithDescription(h.description), metric.WithExplicitBucketBoundaries(h.buckets...))
		must(err)
	}
	m.pendingOldest, err = meter.Float64Gauge("pending_oldest_age_seconds", metric.WithDescription("Age of a signer's oldest non-final transaction, as the last resubmit sweep saw it (0: none)."))
	must(err)
	m.delegated, err = meter.Int64Gauge("delegated_signers", metric.WithDescription("1 for a signer whose account carries an EIP-7702 delegation (its in-flight limit is the delegated one), 0 otherwise, as its last drain saw it."))
	must(err)
	m.outboxRows, err = meter.Int64Gauge("outbox_backlog_rows", metric.WithDescription("Outbox rows waiting to be published, as the last outbox sweep left them."))
	must(err)
	m.outboxFailing, err = meter.Int64Gauge("outbox_failing_rows", metric.WithDescription("Outbox rows whose publish failed at least once, as the last outbox sweep left them."))
	must(err)
	m.outboxOldest, err = meter.Float64Gauge("outbox_oldest_age_seconds", metric.WithDescription("Age of the oldest outbox row waiting to be published, as the last outbox sweep left it (0: none)."))
	must(err)
	state, err := meter.Int64ObservableGauge("rpc_endpoint_state", metric.WithDescription("1 for the state (healthy, lagging, dead) a chain's endpoint is in, 0 for the others, as this instance's client last saw it."))
	must(err)
	lag, err := meter.Int64ObservableGauge("rpc_endpoint_lag_blocks", metric.WithDescription("How many blocks a chain's read endpoint's head is behind the best head known, as this instance's client last saw it."))
	must(err)
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		m.observeEndpoints(o, state, lag)
		return nil
	}, state, lag)
	must(err)
	return m
}

// WatchEndpoints reports the health of chain chainID's endpoints, read
// from r whenever the instruments are collected: rpc_endpoint_state (by
// chain_id, endpoint, send_only and state) and, for the
// read endpoints, rpc_endpoint_lag_blocks (by chain_id and endpoint). An
// endpoint is named, never by more of its URL than scheme and host.
func (m *Metrics) WatchEndpoints(chainID uint64, r txm.EndpointHealthReader) {
	if m == nil || r == nil {
		return
	}
	m.endpointsMu.Lock()
	defer m.endpointsMu.Unlock()
	if m.endpoints == nil {
		m.endpoints = map[uint64]txm.EndpointHealthReader{}
	}
	m.endpoints[chainID] = r
}

func (m *Metrics) observeEndpoints(o metric.Observer, state, lag metric.Int64Observable) {
	m.endpointsMu.Lock()
	defer m.endpointsMu.Unlock()
	for id, r := range m.endpoints {
		chain := strconv.FormatUint(id, 10)
		for _, e := range r.EndpointHealth() {
			sendOnly := strconv.FormatBool(e.SendOnly)
			for _, s := range txm.EndpointStates {
				v := int64(0)
				if e.State == s {
					v = 1
				}
				o.ObserveInt64(state, v, metric.WithAttributes(attrsKV([]string{"chain_id", chain, "endpoint", e.Name, "send_only", sendOnly,
					"state", string(s)})...))
			}
			if !e.SendOnly {
				o.ObserveInt64(lag, int64(e.Lag), metric.WithAttributes(attrsKV([]string{"chain_id", chain, "endpoint", e.Name})...))
			}
		}
	}
}

func attrs(kv []string) metric.MeasurementOption {
	return metric.WithAttributes(attrsKV(kv)...)
}

func (m *Metrics) add(ctx context.Context, c counter, n int64, kv ...string) {
	if m == nil {
		return
	}
	m.counters[c].Add(ctx, n, attrs(kv))
}

// LeaseAcquire counts one acquisition attempt by result.
func (m *Metrics) LeaseAcquire(ctx context.Context, result string) {
	m.add(ctx, leaseAcquireTotal, 1, "result", result)
}

// LeaseFenced counts one write rejected for a stale token.
func (m *Metrics) LeaseFenced(ctx context.Context, op string) {
	m.add(ctx, leaseFencedTotal, 1, "op", op)
}

// TxCreate counts create requests by result.
func (m *Metrics) TxCreate(ctx context.Context, result string, n int) {
	if m == nil {
		return
	}
	m.counters[txCreateTotal].Add(ctx, int64(n), m.createResult(result))
}

func (m *Metrics) createResult(result string) metric.MeasurementOption {
	if o, ok := m.createResults[result]; ok {
		return o
	}
	return attrs([]string{"result", result})
}

// TxSubmit counts broadcasts by result.
func (m *Metrics) TxSubmit(ctx context.Context, result string) {
	m.add(ctx, txSubmitTotal, 1, "result", result)
}

// ReceiptCheck counts receipt checks by result.
func (m *Metrics) ReceiptCheck(ctx context.Context, result string) {
	m.add(ctx, receiptCheckTotal, 1, "result", result)
}

// OutcomeContradicted counts a reported outcome the chain contradicts.
func (m *Metrics) OutcomeContradicted(ctx context.Context, subState string) {
	m.add(ctx, outcomeContradictedTotal, 1, "sub_state", subState)
}

// Reorg counts one transaction moved back by a reorg.
func (m *Metrics) Reorg(ctx context.Context) { m.add(ctx, reorgTotal, 1) }

// Resubmit counts resubmit-sweep actions by result.
func (m *Metrics) Resubmit(ctx context.Context, result string) {
	m.add(ctx, resubmitTotal, 1, "result", result)
}

// BumpDecision counts one decision on a transaction due for a fee bump.
func (m *Metrics) BumpDecision(ctx context.Context, decision string) {
	m.add(ctx, bumpDecisionTotal, 1, "decision", decision)
}

// Stuck counts a transaction entering STUCK.
func (m *Metrics) Stuck(ctx context.Context, reason string) {
	m.add(ctx, stuckTotal, 1, "reason", reason)
}

// Refused counts a refused call by outcome ("unauthenticated",
// "refused:<rule>", "rate_limited").
func (m *Metrics) Refused(ctx context.Context, outcome string) {
	m.add(ctx, apiRefusedTotal, 1, "outcome", outcome)
}

// QueueDepth moves writer_queue_depth by delta.
func (m *Metrics) QueueDepth(ctx context.Context, delta int64) {
	if m == nil {
		return
	}
	m.queueDepth.Add(ctx, delta)
}

// CreateLatency records one create call's time in seconds, by the result
// TxCreate counts it under.
func (m *Metrics) CreateLatency(ctx context.Context, result string, seconds float64) {
	if m == nil {
		return
	}
	m.createLatency.Record(ctx, seconds, m.createResult(result))
}

// Latency records seconds in stage's histogram.
func (m *Metrics) Latency(ctx context.Context, stage Stage, seconds float64) {
	if m == nil {
		return
	}
	m.stages[stage].Record(ctx, seconds)
}

// PendingOldest sets the age in seconds of signer's oldest pending
// transaction on chain chainID (0 when it has none left).
func (m *Metrics) PendingOldest(ctx context.Context, chainID uint64, signer string, seconds float64) {
	if m == nil {
		return
	}
	m.pendingOldest.Record(ctx, seconds, attrs([]string{"chain_id", strconv.FormatUint(chainID, 10), "signer", signer}))
}

// Delegated sets whether signer's account on chain chainID carries an
// EIP-7702 delegation (1) or not (0).
func (m *Metrics) Delegated(ctx context.Context, chainID uint64, signer string, delegated bool) {
	if m == nil {
		return
	}
	v := int64(0)
	if delegated {
		v = 1
	}
	m.delegated.Record(ctx, v, attrs([]string{"chain_id", strconv.FormatUint(chainID, 10), "signer", signer}))
}

// OutboxBacklog sets what waits in shard's outbox after a sweep: rows,
// rows whose publish failed, the oldest's age in seconds. shard is ""
// without TXFENCE_DATABASES, and then not a label.
func (m *Metrics) OutboxBacklog(ctx context.Context, shard string, rows, failing int64, oldestSeconds float64) {
	if m == nil {
		return
	}
	var kv []string
	if shard != "" {
		kv = []string{"shard", shard}
	}
	opt := attrs(kv)
	m.outboxRows.Record(ctx, rows, opt)
	m.outboxFailing.Record(ctx, failing, opt)
	m.outboxOldest.Record(ctx, oldestSeconds, opt)
}

// Shutdown exports what the extra readers have not yet exported and stops
// them; nothing is recorded afterwards.
func (m *Metrics) Shutdown(ctx context.Context) error {
	if m == nil {
		return nil
	}
	return m.provider.Shutdown(ctx)
}

func (m *Metrics) collect(ctx context.Context) (metricdata.ResourceMetrics, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var rm metricdata.ResourceMetrics
	err := m.reader.Collect(ctx, &rm)
	return rm, err
}

// Count returns the current value of an integer counter for the given
// label pairs (all labels of the series must match). Tests use it.
func (m *Metrics) Count(name string, kv ...string) int64 {
	if m == nil {
		return 0
	}
	rm, err := m.collect(context.Background())
	if err != nil {
		return 0
	}
	want := attribute.NewSet(attrsKV(kv)...)
	var total int64
	for _, sm := range rm.ScopeMetrics {
		for _, md := range sm.Metrics {
			if md.Name != name {
				continue
			}
			if sum, ok := md.Data.(metricdata.Sum[int64]); ok {
				for _, dp := range sum.DataPoints {
					if dp.Attributes.Equals(&want) {
						total += dp.Value
					}
				}
			}
		}
	}
	return total
}

// Gauge is the last value recorded in gauge name with exactly the
// attributes kv, and whether one was (for tests and diagnostics).
func (m *Metrics) Gauge(name string, kv ...string) (float64, bool) {
	if m == nil {
		return 0, false
	}
	rm, err := m.collect(context.Background())
	if err != nil {
		return 0, false
	}
	want := attribute.NewSet(attrsKV(kv)...)
	for _, sm := range rm.ScopeMetrics {
		for _, md := range sm.Metrics {
			if md.Name != name {
				continue
			}
			switch g := md.Data.(type) {
			case metricdata.Gauge[int64]:
				for _, dp := range g.DataPoints {
					if dp.Attributes.Equals(&want) {
						return float64(dp.Value), true
					}
				}
			case metricdata.Gauge[float64]:
				for _, dp := range g.DataPoints {
					if dp.Attributes.Equals(&want) {
						return dp.Value, true
					}
				}
			}
		}
	}
	return 0, false
}

func attrsKV(kv []string) []attribute.KeyValue {
	as := make([]attribute.KeyValue, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		as = append(as, attribute.String(kv[i], kv[i+1]))
	}
	return as
}

// WritePrometheus renders every instrument in the Prometheus text format.
func (m *Metrics) WritePrometheus(ctx context.Context, w io.Writer) error {
	if m == nil {
		return nil
	}
	rm, err := m.collect(ctx)
	if err != nil {
		return fmt.Errorf("collect metrics: %w", err)
	}
	var b strings.Builder
	for _, sm := range rm.ScopeMetrics {
		for _, md := range sm.Metrics {
			writeMetric(&b, md)
		}
	}
	_, err = io.WriteString(w, b.String())
	return err
}

func writeMetric(b *strings.Builder, md metricdata.Metrics) {
	fmt.Fprintf(b, "# HELP %s %s\n", md.Name, md.Description)
	switch d := md.Data.(type) {
	case metricdata.Sum[int64]:
		kind := "counter"
		if !d.IsMonotonic {
			kind = "gauge"
		}
		fmt.Fprintf(b, "# TYPE %s %s\n", md.Name, kind)
		for _, dp := range d.DataPoints {
			fmt.Fprintf(b, "%s%s %d\n", md.Name, labels(dp.Attributes, ""), dp.Value)
		}
	case metricdata.Gauge[int64]:
		fmt.Fprintf(b, "# TYPE %s gauge\n", md.Name)
		for _, dp := range d.DataPoints {
			fmt.Fprintf(b, "%s%s %d\n", md.Name, labels(dp.Attributes, ""), dp.Value)
		}
	case metricdata.Gauge[float64]:
		fmt.Fprintf(b, "# TYPE %s gauge\n", md.Name)
		for _, dp := range d.DataPoints {
			fmt.Fprintf(b, "%s%s %g\n", md.Name, labels(dp.Attributes, ""), dp.Value)
		}
	case metricdata.Histogram[float64]:
		fmt.Fprintf(b, "# TYPE %s histogram\n", md.Name)
		for _, dp := range d.DataPoints {
			var cum uint64
			for i, bound := range dp.Bounds {
				cum += dp.BucketCounts[i]
				fmt.Fprintf(b, "%s_bucket%s %d\n", md.Name, labels(dp.Attributes, fmt.Sprintf("le=%q", fmt.Sprint(bound))), cum)
			}
			fmt.Fprintf(b, "%s_bucket%s %d\n", md.Name, labels(dp.Attributes, `le="+Inf"`), dp.Count)
			fmt.Fprintf(b, "%s_sum%s %g\n", md.Name, labels(dp.Attributes, ""), dp.Sum)
			fmt.Fprintf(b, "%s_count%s %d\n", md.Name, labels(dp.Attributes, ""), dp.Count)
		}
	}
}

func labels(set attribute.Set, extra string) string {
	var parts []string
	for _, kv := range set.ToSlice() {
		parts = append(parts, fmt.Sprintf("%s=%q", kv.Key, kv.Value.Emit()))
	}
	sort.Strings(parts)
	if extra != "" {
		parts = append(parts, extra)
	}
	if len(parts) == 0 {
		return ""
	}
	return "{" + strings.Join(parts, ",") + "}"
}
