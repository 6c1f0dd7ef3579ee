package telemetry

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metricpb "google.golang.org/genproto/googleapis/api/metric"

	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/telemetry/telemetrytest"
)

// TestIssue13_Modes: prometheus keeps metrics in the process and records no
// span; none records nothing; gcp exports both to Google, here its fake.
func TestIssue13_Modes(t *testing.T) {
	ctx := context.Background()
	cfg := config.Defaults()
	cfg.InstanceID = "i-1"

	t.Run("prometheus", func(t *testing.T) {
		m, shutdown, err := Setup(ctx, cfg, logging.Discard())
		require.NoError(t, err)
		require.NotNil(t, m)
		c, span := m.Start(ctx, "create")
		assert.Equal(t, ctx, c, "no tracer: the context is left as it is")
		assert.False(t, span.IsRecording())
		m.Reorg(ctx)
		assert.EqualValues(t, 1, m.Count("reorg_total"))
		require.NoError(t, shutdown(ctx))
	})
	t.Run("none", func(t *testing.T) {
		c := cfg
		c.Telemetry.Mode = config.TelemetryNone
		m, shutdown, err := Setup(ctx, c, logging.Discard())
		require.NoError(t, err)
		assert.Nil(t, m, "nothing is recorded")
		require.NoError(t, shutdown(ctx))
	})
	t.Run("gcp without a project", func(t *testing.T) {
		c := cfg
		c.Telemetry.Mode = config.TelemetryGCP
		_, _, err := Setup(ctx, c, logging.Discard())
		require.Error(t, err)
	})
	t.Run("gcp", func(t *testing.T) {
		google := telemetrytest.Start(t, "p1")
		c := cfg
		c.Telemetry.Mode = config.TelemetryGCP
		c.Project = "p1"
		c.Telemetry.SampleRatio = 1
		c.Telemetry.Service = "txfence-submit"
		m, shutdown, err := Setup(ctx, c, logging.Discard(), google.ClientOptions()...)
		require.NoError(t, err)
		sctx, root := m.StartRoot(ctx, "submit")
		_, child := m.Start(sctx, "submit.sign")
		child.End()
		root.End()
		m.Stuck(ctx, "insufficient_funds")
		require.NoError(t, shutdown(ctx))

		md := google.Descriptors()["workload.googleapis.com/stuck_total"]
		require.NotNil(t, md)
		assert.Equal(t, metricpb.MetricDescriptor_CUMULATIVE, md.GetMetricKind())
		var series int
		for _, ts := range google.TimeSeries() {
			if ts.GetMetric().GetType() != "workload.googleapis.com/stuck_total" {
				continue
			}
			series++
			assert.Equal(t, map[string]string{"reason": "insufficient_funds", "service_name": "txfence-submit",
				"service_namespace": Namespace, "service_instance_id": "i-1"}, ts.GetMetric().GetLabels())
			assert.Equal(t, map[string]string{"location": "global", "namespace": Namespace, "job": "txfence-submit", "task_id": "i-1"},
				ts.GetResource().GetLabels())
		}
		assert.Equal(t, 1, series)
		spans := google.Spans()
		require.Len(t, spans, 2)
		byName := map[string]string{}
		for _, sp := range spans {
			byName[sp.GetDisplayName().GetValue()] = sp.GetParentSpanId()
		}
		assert.Empty(t, byName["submit"])
		assert.NotEmpty(t, byName["submit.sign"])
	})
}
