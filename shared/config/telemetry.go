package config

import (
	"time"
)

// TelemetryMode chooses where metrics and traces go.
type TelemetryMode string

const (
	// TelemetryPrometheus keeps metrics in the process, rendered as
	// Prometheus text at the API's /metrics; no spans are recorded (log
	// lines carry the trace a caller sent, if any). The default.
	TelemetryPrometheus TelemetryMode = "prometheus"
	// TelemetryGCP also exports metrics to Cloud Monitoring (as
	// workload.googleapis.com/NAME) and sampled spans to Cloud Trace.
	TelemetryGCP TelemetryMode = "gcp"
	// TelemetryNone records nothing: no metrics, no spans.
	TelemetryNone TelemetryMode = "none"
)

// Telemetry says where metrics and traces go.
type Telemetry struct {
	Mode TelemetryMode
	// Project is the Google Cloud project metrics and traces are written
	// to, and that log lines name their traces in; empty means Config.Project
	// (see Config.TelemetryProject).
	Project string
	// SampleRatio is the share of new traces recorded (gcp): a request that
	// arrives with a trace follows its caller's sampling decision, so on
	// Cloud Run the API follows Cloud Run's.
	SampleRatio float64
	// Interval is how often metrics are exported (gcp).
	Interval time.Duration
	// Service names this process's service in the exported resource: the
	// Cloud Run service (K_SERVICE), else "txfence".
	Service string
}

func (c Config) validateTelemetry(bad func(env, format string, args ...any)) {
	t := c.Telemetry
	switch t.Mode {
	case TelemetryPrometheus, TelemetryNone:
	case TelemetryGCP:
		if c.TelemetryProject() == "" {
			bad(EnvTelemetryProject, "is required with %s=gcp (or set %s): the project metrics and traces are written to", EnvTelemetry, EnvProject)
		}
	default:
		bad(EnvTelemetry, "must be gcp, prometheus or none; got %q", t.Mode)
	}
	if t.SampleRatio < 0 || t.SampleRatio > 1 {
		bad(EnvTraceSampleRatio, "must be between 0 and 1, got %g", t.SampleRatio)
	}
	// Cloud Monitoring refuses points of one series closer than 5s apart.
	if t.Interval < 10*time.Second || t.Interval > time.Hour {
		bad(EnvMetricsInterval, "must be between 10s and 1h, got %s", t.Interval)
	}
}

// TelemetryProject is the project metrics and traces are written to:
// Telemetry.Project, else Project.
func (c Config) TelemetryProject() string {
	if c.Telemetry.Project != "" {
		return c.Telemetry.Project
	}
	return c.Project
}
