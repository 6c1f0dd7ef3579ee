// Package scheduled answers the HTTP calls Cloud Scheduler makes to the
// sweep functions in one way: run the job, report its stats as JSON, and
// answer 500 on failure so the scheduler records it (the next run starts
// afresh, so jobs are not retried).
package scheduled

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"time"

	"github.com/txfence/txfence/shared/metrics"
)

// Serve runs job for the request and writes its outcome. The job's context
// carries the trace of the request (Cloud Run's, from traceparent or
// X-Cloud-Trace-Context), so the job's log lines are filed under the
// scheduler's call.
func Serve(w http.ResponseWriter, r *http.Request, log *slog.Logger, name string, job func(ctx context.Context) (any, error)) {
	ctx := metrics.Extract(r.Context(), r.Header)
	start := time.Now()
	stats, err := job(ctx)
	took := time.Since(start)
	w.Header().Set("Content-Type", "application/json")
	body := map[string]any{"stats": stats}
	if err != nil {
		log.WarnContext(ctx, name, slog.Any("stats", stats), slog.Duration("took", took), slog.Any("error", err))
		body["error"] = err.Error()
		w.WriteHeader(http.StatusInternalServerError)
	} else {
		log.InfoContext(ctx, name, slog.Any("stats", stats), slog.Duration("took", took))
	}
	_ = json.NewEncoder(w).Encode(body)
}
