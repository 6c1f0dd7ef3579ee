package api

import (
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
)

// traced wraps a route in its server span, named after the route pattern
// ("POST /v1/transactions"). Where the span is not recorded (not sampled,
// or no tracer) nothing else is done, so the hot path pays for the span
// alone; a recorded span gets the route and the response status.
func (h *Handler) traced(name string, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, span := h.deps.Metrics.StartServer(r.Context(), name)
		defer span.End()
		if ctx != r.Context() {
			r = r.WithContext(ctx)
		}
		if !span.IsRecording() {
			next(w, r)
			return
		}
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		next(rec, r)
		span.SetAttributes(attribute.String("http.request.method", r.Method), attribute.String("http.route", name),
			attribute.Int("http.response.status_code", rec.status))
		if rec.status >= http.StatusInternalServerError {
			span.SetStatus(codes.Error, http.StatusText(rec.status))
		}
	}
}

// statusRecorder remembers the status a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the writer underneath.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
