// Package exporttest holds the end-to-end test of txfence's telemetry
// export (issue 13): real creates, submits, receipt checks, a reorg, a
// fenced write and a STUCK transaction on the in-process stack (PostgreSQL,
// the simulated chain), their metrics and spans exported by Google's
// OpenTelemetry exporters to in-process fakes of Cloud Monitoring and Cloud
// Trace, and the trace fields of the log lines. It has no code of its own.
package exporttest
