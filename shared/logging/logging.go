// Package logging sets up slog for Cloud Logging: JSON lines whose level is
// `severity` and whose text is `message`, so that Cloud Run's log agent files
// them correctly, with trace correlation when a request carries one.
package logging

import (
	"context"
	"io"
	"log/slog"
	"strings"
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

// New returns a JSON logger writing to w at level ("debug", "info", "warn",
// "error"; anything else means info).
func New(w io.Writer, level string) *slog.Logger {
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{
		Level:       parseLevel(level),
		ReplaceAttr: cloudLogging,
	})
	return slog.New(traceHandler{h})
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

type traceKey struct{}

// WithTrace returns a context whose log lines carry the given Cloud Trace
// resource name (projects/P/traces/T) as logging.googleapis.com/trace.
func WithTrace(ctx context.Context, trace string) context.Context {
	if trace == "" {
		return ctx
	}
	return context.WithValue(ctx, traceKey{}, trace)
}

// TraceFromHeader turns an X-Cloud-Trace-Context header ("TRACE/SPAN;o=1")
// into a trace resource name for project.
func TraceFromHeader(project, header string) string {
	id, _, _ := strings.Cut(header, "/")
	if id == "" || project == "" {
		return ""
	}
	return "projects/" + project + "/traces/" + id
}

// traceHandler adds the trace of the record's context, if any.
type traceHandler struct{ slog.Handler }

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if t, ok := ctx.Value(traceKey{}).(string); ok {
		r.AddAttrs(slog.String("logging.googleapis.com/trace", t))
	}
	return h.Handler.Handle(ctx, r)
}

func (h traceHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return traceHandler{h.Handler.WithAttrs(as)}
}

func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{h.Handler.WithGroup(name)}
}
