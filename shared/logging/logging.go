// Package logging sets up slog for Cloud Logging: JSON lines whose level is
// `severity` and whose text is `message`, so that Cloud Run's log agent files
// them correctly, with trace correlation: a line logged with a context
// that carries a span (started by txfence or continued from the caller's
// traceparent or X-Cloud-Trace-Context) names its trace, span and sampling
// decision in Cloud Logging's fields, so Cloud Trace shows the lines of a
// trace and Cloud Logging links each line to its trace.
package logging

import (
	"context"
	"io"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel/trace"
)

// Stable attribute keys. Every critical write logs these.
const (
	KeySigner  = "signer"
	KeyChainID = "chain_id"
	KeyScope   = "scope"
	KeyTxID    = "tx_id"
	KeyNonce   = "nonce"
	KeyToken   = "token"
	KeyOwner   = "owner"
	KeyEventID = "event_id"
	KeyOp      = "op"
	// KeyPrincipal names the authenticated caller.
	KeyPrincipal = "principal"
)

// Cloud Logging's trace correlation fields.
const (
	KeyTrace        = "logging.googleapis.com/trace"
	KeySpanID       = "logging.googleapis.com/spanId"
	KeyTraceSampled = "logging.googleapis.com/trace_sampled"
)

// New returns a JSON logger writing to w at level ("debug", "info", "warn",
// "error"; anything else means info). project is the Google Cloud project
// traces are written to: a line names its trace projects/PROJECT/traces/ID,
// or just ID without one (locally).
func New(w io.Writer, level, project string) *slog.Logger {
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{
		Level:       parseLevel(level),
		ReplaceAttr: cloudLogging,
	})
	prefix := ""
	if project != "" {
		prefix = "projects/" + project + "/traces/"
	}
	return slog.New(traceHandler{Handler: h, prefix: prefix})
}

// Discard returns a logger that drops everything (for tests that do not read logs).
func Discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

func parseLevel(s string) slog.Level {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

// cloudLogging renames the standard keys to Cloud Logging's structured form.
func cloudLogging(groups []string, a slog.Attr) slog.Attr {
	if len(groups) > 0 {
		return a
	}
	switch a.Key {
	case slog.LevelKey:
		lvl, _ := a.Value.Any().(slog.Level)
		return slog.String("severity", severity(lvl))
	case slog.MessageKey:
		a.Key = "message"
	case slog.TimeKey:
		a.Key = "time"
	}
	return a
}

func severity(l slog.Level) string {
	switch {
	case l >= slog.LevelError:
		return "ERROR"
	case l >= slog.LevelWarn:
		return "WARNING"
	case l >= slog.LevelInfo:
		return "INFO"
	default:
		return "DEBUG"
	}
}

// traceHandler adds the trace of the record's context, if any.
type traceHandler struct {
	slog.Handler
	prefix string // "projects/P/traces/" or ""
}

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String(KeyTrace, h.prefix+sc.TraceID().String()), slog.String(KeySpanID, sc.SpanID().String()),
			slog.Bool(KeyTraceSampled, sc.IsSampled()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h traceHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return traceHandler{Handler: h.Handler.WithAttrs(as), prefix: h.prefix}
}

func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{Handler: h.Handler.WithGroup(name), prefix: h.prefix}
}
