package exporttest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/trace/apiv2/tracepb"
	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metricpb "google.golang.org/genproto/googleapis/api/metric"

	"github.com/txfence/txfence/functions/internal/stacktest"
	"github.com/txfence/txfence/functions/outbox"
	"github.com/txfence/txfence/functions/receipt"
	"github.com/txfence/txfence/functions/submit"
	"github.com/txfence/txfence/shared/app"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/metrics"
	"github.com/txfence/txfence/shared/pgtest"
	"github.com/txfence/txfence/shared/pubsub"
	"github.com/txfence/txfence/shared/pubsub/pubsubtest"
	"github.com/txfence/txfence/shared/telemetry"
	"github.com/txfence/txfence/shared/telemetry/telemetrytest"
	"github.com/txfence/txfence/shared/txm"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var ctx = context.Background()

const project = "txfence-test"

// exported is a world whose nodes export to a fake of Google's services,
// every trace sampled, and the way to flush them.
type exported struct {
	*stacktest.World
	google *telemetrytest.Server
	logs   *stacktest.LogBuffer

	mu        sync.Mutex
	shutdowns []telemetry.Shutdown
}

func newExported(t *testing.T, nkeys int, opts ...stacktest.Option) *exported {
	t.Helper()
	e := &exported{google: telemetrytest.Start(t, project), logs: &stacktest.LogBuffer{}}
	opts = append([]stacktest.Option{func(c *config.Config) {
		c.Telemetry.Mode = config.TelemetryGCP
		c.Telemetry.Project = project
		c.Telemetry.SampleRatio = 1
	}}, opts...)
	e.World = stacktest.NewWorld(t, nkeys, opts...)
	e.LogTo = e.logs
	e.Telemetry = func(t *testing.T, cfg config.Config, log *slog.Logger) *metrics.Metrics {
		m, shutdown, err := telemetry.Setup(ctx, cfg, log, e.google.ClientOptions()...)
		require.NoError(t, err)
		e.mu.Lock()
		e.shutdowns = append(e.shutdowns, shutdown)
		e.mu.Unlock()
		return m
	}
	return e
}

// flush exports what every node holds, as an instance does when Cloud Run
// stops it.
func (e *exported) flush(t *testing.T) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.shutdowns {
		require.NoError(t, s(ctx))
	}
	e.shutdowns = nil
}

// design is the list of metrics of docs/observability.md, with the stage latency
// histograms: the metric, its kind and value type in Cloud Monitoring, and
// its labels. It is written out, not read from what arrives, so that a
// metric that disappears fails the test.
var design = []struct {
	name   string
	kind   metricpb.MetricDescriptor_MetricKind
	value  metricpb.MetricDescriptor_ValueType
	labels []string
}{
	{"lease_acquire_total", metricpb.MetricDescriptor_CUMULATIVE, metricpb.MetricDescriptor_INT64, []string{"result"}},
	{"lease_fenced_total", metricpb.MetricDescriptor_CUMULATIVE, metricpb.MetricDescriptor_INT64, []string{"op"}},
	{"tx_create_total", metricpb.MetricDescriptor_CUMULATIVE, metricpb.MetricDescriptor_INT64, []string{"result"}},
	{"tx_submit_total", metricpb.MetricDescriptor_CUMULATIVE, metricpb.MetricDescriptor_INT64, []string{"result"}},
	{"receipt_check_total", metricpb.MetricDescriptor_CUMULATIVE, metricpb.MetricDescriptor_INT64, []string{"result"}},
	{"reorg_total", metricpb.MetricDescriptor_CUMULATIVE, metricpb.MetricDescriptor_INT64, nil},
	{"pending_oldest_age_seconds", metricpb.MetricDescriptor_GAUGE, metricpb.MetricDescriptor_DOUBLE, []string{"chain_id", "signer"}},
	{"resubmit_total", metricpb.MetricDescriptor_CUMULATIVE, metricpb.MetricDescriptor_INT64, []string{"result"}},
	{"stuck_total", metricpb.MetricDescriptor_CUMULATIVE, metricpb.MetricDescriptor_INT64, []string{"reason"}},
	{"writer_queue_depth", metricpb.MetricDescriptor_GAUGE, metricpb.MetricDescriptor_INT64, nil},
	// The health of the chain's endpoints, read from each node's client.
	{"rpc_endpoint_state", metricpb.MetricDescriptor_GAUGE, metricpb.MetricDescriptor_INT64, []string{"chain_id", "endpoint", "send_only", "state"}},
	{"rpc_endpoint_lag_blocks", metricpb.MetricDescriptor_GAUGE, metricpb.MetricDescriptor_INT64, []string{"chain_id", "endpoint"}},
	// What waits in the outbox, as the OutboxSweep left it (no shard label
	// without TXFENCE_DATABASES).
	{"outbox_backlog_rows", metricpb.MetricDescriptor_GAUGE, metricpb.MetricDescriptor_INT64, nil},
	{"outbox_failing_rows", metricpb.MetricDescriptor_GAUGE, metricpb.MetricDescriptor_INT64, nil},
	{"outbox_oldest_age_seconds", metricpb.MetricDescriptor_GAUGE, metricpb.MetricDescriptor_DOUBLE, nil},
	// Stage latencies: create, allocate batch, submit, broadcast, receipt,
	// time to CONFIRMED.
	{"create_latency_seconds", metricpb.MetricDescriptor_CUMULATIVE, metricpb.MetricDescriptor_DISTRIBUTION, []string{"result"}},
	{"allocation_latency_seconds", metricpb.MetricDescriptor_CUMULATIVE, metricpb.MetricDescriptor_DISTRIBUTION, nil},
	{"submit_latency_seconds", metricpb.MetricDescriptor_CUMULATIVE, metricpb.MetricDescriptor_DISTRIBUTION, nil},
	{"broadcast_latency_seconds", metricpb.MetricDescriptor_CUMULATIVE, metricpb.MetricDescriptor_DISTRIBUTION, nil},
	{"receipt_latency_seconds", metricpb.MetricDescriptor_CUMULATIVE, metricpb.MetricDescriptor_DISTRIBUTION, nil},
	{"confirmation_lag_seconds", metricpb.MetricDescriptor_CUMULATIVE, metricpb.MetricDescriptor_DISTRIBUTION, nil},
}

// resourceLabels are the labels the exporter adds to every metric from the
// process's resource: they keep instances' series apart.
var resourceLabels = []string{"service_instance_id", "service_name", "service_namespace"}

// TestIssue13_ExportToCloudMonitoring: a transaction's whole life and the
// failures the metrics count happen on the real stack; what arrives at Cloud
// Monitoring is every metric of docs/observability.md as workload.googleapis.com/NAME, with
// its kind, value type and labels, on a generic_task resource.
func TestIssue13_ExportToCloudMonitoring(t *testing.T) {
	t.Parallel()
	e := newExported(t, 2, func(c *config.Config) {
		c.ResubmitInterval = 100 * time.Millisecond // ALLOCATED work untouched this long is re-prompted
	})
	n, other := e.Node(t, "n0"), e.Node(t, "n1")
	signer, stuckSigner := e.Keys[0].Address, e.Keys[1].Address
	chainID := stacktest.ChainID().Uint64()

	// A create through the API, its submit and receipt prompts through the
	// functions' handlers, a reorg that moves it, its confirmation.
	id := create(t, n, signer, nil)
	require.NoError(t, submitHandler(t, n).Handle(ctx, stacktest.Prompt(t, signer)))
	e.MineAll(t, signer, 1)
	require.NoError(t, receiptHandler(t, n).Handle(ctx, stacktest.Prompt(t, signer)))
	reorgAndConfirm(t, e, n, signer, id)

	// A write fenced: n's drain stalls past its lease after persisting,
	// the other instance takes the signer over, n's next write is refused.
	n.Allocate(t, signer, 1)
	n.Drain.SetHooks(app.SubmitHooks{AfterPersist: func() {
		_, err := e.DB.Pool.Exec(ctx, `UPDATE signer_lease SET expires_at = clock_timestamp() - interval '1 hour'
WHERE scope = 'chain' AND signer = $1`, txm.CanonicalAddress(signer))
		require.NoError(t, err)
		_, err = other.Drain.Execute(ctx, chainID, signer)
		require.NoError(t, err)
	}})
	_, err := n.Drain.Execute(ctx, chainID, signer)
	require.ErrorIs(t, err, txm.ErrFenced)
	n.Drain.SetHooks(app.SubmitHooks{})

	// A broadcast refused for good: STUCK. Then work left ALLOCATED, which
	// the resubmit sweep re-prompts, measuring the signers' oldest pending
	// transactions.
	n.Allocate(t, stuckSigner, 1)
	e.RefuseNextBroadcast("insufficient funds for gas * price + value")
	res, err := n.Drain.Execute(ctx, chainID, stuckSigner)
	require.NoError(t, err)
	require.Equal(t, 1, res.Stuck)
	n.Allocate(t, signer, 1)
	// sleep: past the resubmit interval, so that the new transaction is stranded
	time.Sleep(150 * time.Millisecond)
	st, err := n.Resubmit.Pass(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.Prompted)

	// The outbox sweep during a Pub/Sub outage (the nodes relay nothing
	// themselves; the topics do not exist): it measures what waits.
	ps := pubsubtest.MustStart(t, "test")
	pub, err := pubsub.NewPublisher(ps.Client, "test")
	require.NoError(t, err)
	t.Cleanup(pub.Close)
	relay, err := app.NewRelay(n.Store, pub, n.Log)
	require.NoError(t, err)
	sweeper, err := outbox.NewSweeper(relay, n.Metrics, n.Log)
	require.NoError(t, err)
	sweeper.MinAge = 0
	ob, err := sweeper.Run(ctx)
	require.Error(t, err, "nothing can be published")
	require.Len(t, ob.Backlog, 1)
	require.Positive(t, ob.Backlog[0].Rows)

	e.flush(t)

	descriptors := e.google.Descriptors()
	series := e.google.TimeSeries()
	for _, want := range design {
		t.Run(want.name, func(t *testing.T) {
			typ := "workload.googleapis.com/" + want.name
			md, ok := descriptors[typ]
			require.True(t, ok, "no metric descriptor %s", typ)
			assert.Equal(t, want.kind, md.GetMetricKind())
			assert.Equal(t, want.value, md.GetValueType())
			wantLabels := append(append([]string{}, want.labels...), resourceLabels...)
			sort.Strings(wantLabels)
			var keys []string
			for _, l := range md.GetLabels() {
				keys = append(keys, l.GetKey())
			}
			sort.Strings(keys)
			assert.Equal(t, wantLabels, keys, "the descriptor's labels")

			var found int
			for _, ts := range series {
				if ts.GetMetric().GetType() != typ {
					continue
				}
				found++
				assert.Equal(t, want.kind, ts.GetMetricKind())
				assert.Equal(t, want.value, ts.GetValueType())
				assert.Equal(t, wantLabels, sortedKeys(ts.GetMetric().GetLabels()), "a series' labels")
				assert.Equal(t, "generic_task", ts.GetResource().GetType())
				assert.Equal(t, telemetry.Namespace, ts.GetResource().GetLabels()["namespace"])
				assert.Contains(t, []string{"n0", "n1"}, ts.GetResource().GetLabels()["task_id"], "the instance")
			}
			assert.Positive(t, found, "time series of %s", typ)
		})
	}

	// The per-signer gauge the pending-age alert reads.
	ages := map[string]string{}
	for _, ts := range series {
		if ts.GetMetric().GetType() == "workload.googleapis.com/pending_oldest_age_seconds" {
			ages[ts.GetMetric().GetLabels()["signer"]] = ts.GetMetric().GetLabels()["chain_id"]
		}
	}
	assert.Equal(t, map[string]string{txm.CanonicalAddress(signer): "1337", txm.CanonicalAddress(stuckSigner): "1337"}, ages)
}

// TestIssue13_TraceSpans: a create through the API and a submit and a
// receipt check through their handlers arrive at Cloud Trace as trees: the
// create's server span with the create, its wait for a batch, the
// allocation transaction and, inside it, the nonce lease and the writes; the
// submit's root with the lease, signing, persisting, broadcasting and
// marking TRACKING; the receipt check's root with the lease, the lookup and
// the write.
func TestIssue13_TraceSpans(t *testing.T) {
	t.Parallel()
	e := newExported(t, 1)
	n := e.Node(t, "n0")
	signer := e.Keys[0].Address
	create(t, n, signer, nil)
	require.NoError(t, submitHandler(t, n).Handle(ctx, stacktest.Prompt(t, signer)))
	e.MineAll(t, signer, 1)
	require.NoError(t, receiptHandler(t, n).Handle(ctx, stacktest.Prompt(t, signer)))
	e.flush(t)
	spans := e.google.Spans()

	createRoot := onlyRoot(t, spans, "POST /v1/transactions")
	assert.Equal(t, tracepb.Span_SERVER, createRoot.GetSpanKind())
	tree := treeOf(spans, createRoot)
	assert.Equal(t, map[string]string{
		"create":              "POST /v1/transactions",
		"create.batch_wait":   "create",
		"chain.pending_nonce": "create", // the signer's first create: its nonce comes from the chain
		"create.allocate":     "create",
		"allocate.call":       "create.allocate",
	}, tree, "the create's spans and their parents")

	submitRoot := onlyRoot(t, spans, "submit")
	assert.Equal(t, tracepb.Span_CONSUMER, submitRoot.GetSpanKind())
	assert.Equal(t, map[string]string{
		"lease.acquire":    "submit",
		"submit.sign":      "submit",
		"submit.persist":   "submit",
		"submit.broadcast": "submit",
		"submit.track":     "submit",
	}, treeOf(spans, submitRoot), "the submit's spans and their parents")
	assert.Equal(t, "done", attr(submitRoot, "txfence.result"))
	assert.Equal(t, txm.CanonicalAddress(signer), attr(submitRoot, "txfence.signer"))

	receiptRoot := onlyRoot(t, spans, "receipt")
	assert.Equal(t, map[string]string{
		"lease.acquire":   "receipt",
		"receipt.lookup":  "receipt",
		"receipt.persist": "receipt",
	}, treeOf(spans, receiptRoot), "the receipt check's spans and their parents")

	require.NotEmpty(t, traceOf(createRoot), "spans are named projects/P/traces/T/spans/S")
	assert.NotEqual(t, traceOf(createRoot), traceOf(submitRoot), "a prompt's work is a trace of its own")
	assert.NotEqual(t, traceOf(submitRoot), traceOf(receiptRoot))
}

// TestIssue13_TraceInLogs: a request that carries its caller's trace
// (traceparent, or X-Cloud-Trace-Context from Google's front ends) is
// continued, and the log lines written while serving it name the trace as
// Cloud Logging expects; so do the lines of a prompt's work.
func TestIssue13_TraceInLogs(t *testing.T) {
	t.Parallel()
	e := newExported(t, 1)
	n := e.Node(t, "n0")
	signer := e.Keys[0].Address

	const (
		w3cTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
		w3cParent = "00f067aa0ba902b7"
		xctcTrace = "105445aa7843bc8bf206b12000100000"
	)
	create(t, n, signer, http.Header{"Traceparent": {"00-" + w3cTrace + "-" + w3cParent + "-01"}})
	create(t, n, signer, http.Header{"X-Cloud-Trace-Context": {xctcTrace + "/1;o=1"}})
	require.NoError(t, submitHandler(t, n).Handle(ctx, stacktest.Prompt(t, signer)))
	e.flush(t)
	spans := e.google.Spans()

	for _, trace := range []string{w3cTrace, xctcTrace} {
		lines := linesOf(t, e.logs, "allocated", trace)
		require.Len(t, lines, 1, "the allocation of the request of trace %s logs its trace", trace)
		assert.Equal(t, "projects/"+project+"/traces/"+trace, lines[0]["logging.googleapis.com/trace"])
		assert.Equal(t, true, lines[0]["logging.googleapis.com/trace_sampled"], "the caller sampled it")
		spanID, _ := lines[0]["logging.googleapis.com/spanId"].(string)
		sp := spanNamed(spans, "projects/"+project+"/traces/"+trace+"/spans/"+spanID)
		require.NotNil(t, sp, "the line's span %s was exported in trace %s", spanID, trace)
		assert.Equal(t, "create.allocate", sp.GetDisplayName().GetValue(), "the line was written inside the allocation")
	}
	var server *tracepb.Span
	for _, sp := range spans {
		if sp.GetDisplayName().GetValue() == "POST /v1/transactions" && traceOf(sp) == w3cTrace {
			server = sp
		}
	}
	require.NotNil(t, server, "the create continued the caller's trace")
	assert.Equal(t, w3cParent, server.GetParentSpanId(), "its server span is a child of the caller's span")

	submitRoot := onlyRoot(t, spans, "submit")
	lines := linesOf(t, e.logs, "submit done", traceOf(submitRoot))
	require.Len(t, lines, 1, "the submit's log line names its trace")
	assert.Equal(t, submitRoot.GetSpanId(), lines[0]["logging.googleapis.com/spanId"])
}

func submitHandler(t *testing.T, n *stacktest.Node) *submit.Handler {
	t.Helper()
	h, err := submit.NewHandler(n.Drain, time.Minute, n.Metrics, n.Log)
	require.NoError(t, err)
	return h
}

func receiptHandler(t *testing.T, n *stacktest.Node) *receipt.Handler {
	t.Helper()
	h, err := receipt.NewHandler(n.Receipts, n.Metrics, n.Log)
	require.NoError(t, err)
	return h
}

// create posts a transfer from signer to the node's API and returns its id.
func create(t *testing.T, n *stacktest.Node, signer common.Address, header http.Header) string {
	t.Helper()
	body, err := json.Marshal(map[string]any{"chainId": stacktest.ChainID().Uint64(), "from": signer.Hex(),
		"to": "0x000000000000000000000000000000000000dEaD", "value": "1", "gasLimit": 21000})
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, n.APIURL+"/v1/transactions", bytes.NewReader(body))
	require.NoError(t, err)
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusAccepted, resp.StatusCode, string(b))
	var tx struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.Unmarshal(b, &tx))
	return tx.ID
}

// reorgAndConfirm moves the mined transaction id to another block of a new
// branch (the finality sweep sees the reorg), then confirms it.
func reorgAndConfirm(t *testing.T, e *exported, n *stacktest.Node, signer common.Address, id string) {
	t.Helper()
	tx, err := n.Store.GetTx(ctx, id)
	require.NoError(t, err)
	require.NotNil(t, tx.Receipt, "mined")
	h, err := e.Chain.Backend.Client().HeaderByHash(ctx, tx.Receipt.BlockHash)
	require.NoError(t, err)
	require.NoError(t, e.Chain.Fork(h.ParentHash))
	e.Mine(2) // the transaction returns from the pool into a block of the new branch
	st, err := n.Finality.Pass(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.Reorged)
	e.MineAll(t, signer, 1)
	_, err = n.Receipts.Execute(ctx, stacktest.ChainID().Uint64(), signer)
	require.NoError(t, err)
	e.Mine(int(e.Cfg.Confirmations))
	st, err = n.Finality.Pass(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.Confirmed)
}

// onlyRoot is the one span named name without a parent.
func onlyRoot(t *testing.T, spans []*tracepb.Span, name string) *tracepb.Span {
	t.Helper()
	var roots []*tracepb.Span
	for _, sp := range spans {
		if sp.GetDisplayName().GetValue() == name && sp.GetParentSpanId() == "" {
			roots = append(roots, sp)
		}
	}
	require.Len(t, roots, 1, "root spans named %q", name)
	return roots[0]
}

// treeOf maps each span below root (in root's trace) to its parent's name.
func treeOf(spans []*tracepb.Span, root *tracepb.Span) map[string]string {
	byID := map[string]*tracepb.Span{}
	for _, sp := range spans {
		if traceOf(sp) == traceOf(root) {
			byID[sp.GetSpanId()] = sp
		}
	}
	out := map[string]string{}
	for _, sp := range byID {
		if sp == root || sp.GetSpanId() == root.GetSpanId() {
			continue
		}
		parent := byID[sp.GetParentSpanId()]
		name := "(missing parent " + sp.GetParentSpanId() + ")"
		if parent != nil {
			name = parent.GetDisplayName().GetValue()
		}
		out[sp.GetDisplayName().GetValue()] = name
	}
	return out
}

// traceOf is the trace id of a span named projects/P/traces/T/spans/S.
func traceOf(sp *tracepb.Span) string {
	_, rest, _ := strings.Cut(sp.GetName(), "/traces/")
	id, _, _ := strings.Cut(rest, "/")
	return id
}

func spanNamed(spans []*tracepb.Span, name string) *tracepb.Span {
	for _, sp := range spans {
		if sp.GetName() == name {
			return sp
		}
	}
	return nil
}

func attr(sp *tracepb.Span, key string) string {
	v := sp.GetAttributes().GetAttributeMap()[key]
	if v == nil {
		return ""
	}
	if s := v.GetStringValue(); s != nil {
		return s.GetValue()
	}
	return fmt.Sprint(v.GetValue())
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// linesOf are the JSON log lines with message msg whose trace ends in
// trace.
func linesOf(t *testing.T, logs *stacktest.LogBuffer, msg, trace string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		tr, _ := m["logging.googleapis.com/trace"].(string)
		if m["message"] == msg && strings.HasSuffix(tr, "/traces/"+trace) {
			out = append(out, m)
		}
	}
	return out
}
