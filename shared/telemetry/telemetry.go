// Package telemetry sends txfence's metrics and spans where the
// configuration says (config.Telemetry):
//
//   - gcp: metrics to Cloud Monitoring and spans to Cloud Trace, through
//     Google's OpenTelemetry exporters. A metric NAME arrives as the metric
//     type workload.googleapis.com/NAME, its attributes as metric labels
//     (plus service_name, service_namespace and service_instance_id), on
//     the monitored resource generic_task (job: the Cloud Run service,
//     task_id: the instance), counters CUMULATIVE INT64, histograms
//     CUMULATIVE DISTRIBUTION, gauges GAUGE. Metrics are exported every
//     TXFENCE_METRICS_INTERVAL and at shutdown; new traces are sampled at
//     TXFENCE_TRACE_SAMPLE_RATIO, continued ones as their caller decided.
//   - prometheus: metrics stay in the process (the API's /metrics); no
//     spans are recorded.
//   - none: nothing is recorded.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	mexporter "github.com/GoogleCloudPlatform/opentelemetry-operations-go/exporter/metric"
	texporter "github.com/GoogleCloudPlatform/opentelemetry-operations-go/exporter/trace"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/api/option"

	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/metrics"
)

// Namespace is the service namespace of every txfence process (the
// generic_task resource's namespace label).
const Namespace = "txfence"

// Shutdown exports what is left and stops the exporters.
type Shutdown func(context.Context) error

// Setup returns the process's instruments as cfg.Telemetry asks, and the
// Shutdown to call before the process exits. opts reach the Google API
// clients (tests point them at a fake; production uses the defaults and
// the service account's credentials). With gcp, export errors are logged
// to log: Setup installs it as OpenTelemetry's error handler, a setting of
// the whole process.
func Setup(ctx context.Context, cfg config.Config, log *slog.Logger, opts ...option.ClientOption) (*metrics.Metrics, Shutdown, error) {
	nothing := func(context.Context) error { return nil }
	switch cfg.Telemetry.Mode {
	case config.TelemetryNone:
		return nil, nothing, nil
	case config.TelemetryPrometheus:
		return metrics.New(), nothing, nil
	case config.TelemetryGCP:
	default:
		return nil, nil, fmt.Errorf("telemetry: unknown mode %q", cfg.Telemetry.Mode)
	}
	project := cfg.TelemetryProject()
	if project == "" {
		return nil, nil, errors.New("telemetry: gcp needs a project")
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("telemetry export", slog.Any("error", err))
	}))
	// The monitored resource is generic_task: its job is service.name,
	// its task_id service.instance.id, its location "global" (Cloud Run
	// names no region without asking the metadata server).
	res := resource.NewSchemaless(
		attribute.String("service.name", cfg.Telemetry.Service),
		attribute.String("service.namespace", Namespace),
		attribute.String("service.instance.id", cfg.InstanceID),
	)
	mexp, err := mexporter.New(mexporter.WithProjectID(project), mexporter.WithMonitoringClientOptions(opts...),
		mexporter.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return nil, nil, fmt.Errorf("telemetry: cloud monitoring exporter: %w", err)
	}
	texp, err := texporter.New(texporter.WithProjectID(project), texporter.WithTraceClientOptions(opts),
		texporter.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		_ = mexp.Shutdown(ctx)
		return nil, nil, fmt.Errorf("telemetry: cloud trace exporter: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(texp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.Telemetry.SampleRatio))),
	)
	m := metrics.New(
		metrics.WithReader(sdkmetric.NewPeriodicReader(mexp, sdkmetric.WithInterval(cfg.Telemetry.Interval))),
		metrics.WithResource(res),
		metrics.WithTracerProvider(tp),
	)
	return m, func(ctx context.Context) error { return errors.Join(tp.Shutdown(ctx), m.Shutdown(ctx)) }, nil
}
