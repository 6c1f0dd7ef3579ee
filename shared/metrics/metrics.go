// Package metrics declares txfence's instruments (DESIGN.md section 9) on an
// OpenTelemetry meter provider. Locally and in tests the provider has a manual
// reader, rendered as Prometheus text at /metrics and readable by tests; in
// production more readers (an exporter to Cloud Monitoring) can be attached.
package metrics

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Metrics holds every instrument. A nil *Metrics is valid and records nothing,
// so that code under test need not care.
type Metrics struct {
	reader *sdkmetric.ManualReader
	mu     sync.Mutex // serializes Collect

	leaseAcquire  metric.Int64Counter
	leaseFenced   metric.Int64Counter
	txCreate      metric.Int64Counter
	txSubmit      metric.Int64Counter
	receiptCheck  metric.Int64Counter
	reorg         metric.Int64Counter
	resubmit      metric.Int64Counter
	stuck         metric.Int64Counter
	refused       metric.Int64Counter
	queueDepth    metric.Int64UpDownCounter
	allocLatency  metric.Float64Histogram
	broadcastLat  metric.Float64Histogram
	confirmLag    metric.Float64Histogram
	pendingOldest metric.Float64Gauge
}

// latencyBuckets are seconds, from 100µs to 30s.
var latencyBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// New returns a Metrics on its own provider with a manual reader, plus any
// extra readers (for example a periodic exporter).
func New(extra ...sdkmetric.Reader) *Metrics {
	reader := sdkmetric.NewManualReader()
	opts := []sdkmetric.Option{sdkmetric.WithReader(reader)}
	for _, r := range extra {
		opts = append(opts, sdkmetric.WithReader(r))
	}
	mp := sdkmetric.NewMeterProvider(opts...)
	m := &Metrics{reader: reader}
	meter := mp.Meter("github.com/txfence/txfence")
	must := func(err error) {
		if err != nil {
			panic(fmt.Sprintf("metrics: %v", err)) // only on a malformed instrument declaration
		}
	}
	var err error
	m.leaseAcquire, err = meter.Int64Counter("lease_acquire_total", metric.WithDescription("Lease acquisitions by result."))
	must(err)
	m.leaseFenced, err = meter.Int64Counter("lease_fenced_total", metric.WithDescription("Writes rejected because the fencing token was stale, by operation."))
	must(err)
	m.txCreate, err = meter.Int64Counter("tx_create_total", metric.WithDescription("Create requests by result."))
	must(err)
	m.txSubmit, err = meter.Int64Counter("tx_submit_total", metric.WithDescription("Broadcasts by result."))
	must(err)
	m.receiptCheck, err = meter.Int64Counter("receipt_check_total", metric.WithDescription("Receipt checks by result."))
	must(err)
	m.reorg, err = meter.Int64Counter("reorg_total", metric.WithDescription("Mined transactions whose block left the canonical chain."))
	must(err)
	m.resubmit, err = meter.Int64Counter("resubmit_total", metric.WithDescription("Rebroadcasts and re-prompts by result."))
	must(err)
	m.stuck, err = meter.Int64Counter("stuck_total", metric.WithDescription("Transactions that entered STUCK."))
	must(err)
	m.refused, err = meter.Int64Counter("api_refused_total", metric.WithDescription("Calls refused: unauthenticated, forbidden by a rule, rate limited."))
	must(err)
	m.queueDepth, err = meter.Int64UpDownCounter("writer_queue_depth", metric.WithDescription("Create requests waiting in per-signer writer queues."))
	must(err)
	m.allocLatency, err = meter.Float64Histogram("allocation_latency_seconds", metric.WithDescription("Time from a create entering the writer queue to its batch committing."), metric.WithExplicitBucketBoundaries(latencyBuckets...))
	must(err)
	m.broadcastLat, err = meter.Float64Histogram("broadcast_latency_seconds", metric.WithDescription("Time of one sendRawTransaction call."), metric.WithExplicitBucketBoundaries(latencyBuckets...))
	must(err)
	m.confirmLag, err = meter.Float64Histogram("confirmation_lag_seconds", metric.WithDescription("Time from first broadcast to a final outcome."), metric.WithExplicitBucketBoundaries(1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600))
	must(err)
	m.pendingOldest, err = meter.Float64Gauge("pending_oldest_age_seconds", metric.WithDescription("Age of the oldest non-final transaction seen by the last sweep."))
	must(err)
	return m
}

func attrs(kv []string) metric.MeasurementOption {
	return metric.WithAttributes(attrsKV(kv)...)
}

func (m *Metrics) add(ctx context.Context, c metric.Int64Counter, n int64, kv ...string) {
	if m == nil {
		return
	}
	c.Add(ctx, n, attrs(kv))
}

// LeaseAcquire counts one acquisition attempt by result.
func (m *Metrics) LeaseAcquire(ctx context.Context, result string) {
	m.add(ctx, m.leaseAcquire, 1, "result", result)
}

// LeaseFenced counts one write rejected for a stale token.
func (m *Metrics) LeaseFenced(ctx context.Context, op string) { m.add(ctx, m.leaseFenced, 1, "op", op) }

// TxCreate counts create requests by result.
func (m *Metrics) TxCreate(ctx context.Context, result string, n int) {
	m.add(ctx, m.txCreate, int64(n), "result", result)
}

// TxSubmit counts broadcasts by result.
func (m *Metrics) TxSubmit(ctx context.Context, result string) {
	m.add(ctx, m.txSubmit, 1, "result", result)
}

// ReceiptCheck counts receipt checks by result.
func (m *Metrics) ReceiptCheck(ctx context.Context, result string) {
	m.add(ctx, m.receiptCheck, 1, "result", result)
}

// Reorg counts one transaction moved back by a reorg.
func (m *Metrics) Reorg(ctx context.Context) { m.add(ctx, m.reorg, 1) }

// Resubmit counts resubmit-sweep actions by result.
func (m *Metrics) Resubmit(ctx context.Context, result string) {
	m.add(ctx, m.resubmit, 1, "result", result)
}

// Stuck counts a transaction entering STUCK.
func (m *Metrics) Stuck(ctx context.Context, reason string) { m.add(ctx, m.stuck, 1, "reason", reason) }

// Refused counts a refused call by outcome ("unauthenticated",
// "refused:<rule>", "rate_limited").
func (m *Metrics) Refused(ctx context.Context, outcome string) {
	m.add(ctx, m.refused, 1, "outcome", outcome)
}

// QueueDepth moves writer_queue_depth by delta.
func (m *Metrics) QueueDepth(ctx context.Context, delta int64) {
	if m == nil {
		return
	}
	m.queueDepth.Add(ctx, delta)
}

// AllocationLatency records one create's queue-to-commit time in seconds.
func (m *Metrics) AllocationLatency(ctx context.Context, seconds float64) {
	if m == nil {
		return
	}
	m.allocLatency.Record(ctx, seconds)
}

// BroadcastLatency records one sendRawTransaction call in seconds.
func (m *Metrics) BroadcastLatency(ctx context.Context, seconds float64) {
	if m == nil {
		return
	}
	m.broadcastLat.Record(ctx, seconds)
}

// ConfirmationLag records broadcast-to-final time in seconds.
func (m *Metrics) ConfirmationLag(ctx context.Context, seconds float64) {
	if m == nil {
		return
	}
	m.confirmLag.Record(ctx, seconds)
}

// PendingOldest sets the oldest pending age in seconds.
func (m *Metrics) PendingOldest(ctx context.Context, seconds float64) {
	if m == nil {
		return
	}
	m.pendingOldest.Record(ctx, seconds)
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
