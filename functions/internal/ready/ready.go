// Package ready answers Cloud Run's startup probe of the Pub/Sub-triggered
// functions (Submit, Receipt): GET /ready succeeds once every database the
// process's configuration names answers. Their instances start from zero
// behind Direct VPC egress, whose first connections may take a minute or
// more, and Cloud Run recommends a startup probe that tests the egress
// destination, so that no push reaches an instance that cannot reach its
// database yet. The probe reads only the database settings: it passes on a
// first deploy, before the schema, the chains or the signers exist.
package ready

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"

	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/postgres"
)

// Path is the probe's path (terraform/run.tf's startup_probe).
const Path = "/ready"

// Probe answers GET Path with check's verdict, 204 or 503, and hands every
// other request to next.
func Probe(check func(context.Context) error, next http.Handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != Path {
			next.ServeHTTP(w, r)
			return
		}
		if err := check(r.Context()); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

// Databases is the check that every database of the configuration (the one
// of TXFENCE_DATABASE_URL, or each shard of TXFENCE_DATABASES) answers a
// ping, over one connection each, closed again. Once they all did it holds:
// a startup probe only needs the first success.
func Databases(lookup func(string) (string, bool)) func(context.Context) error {
	var ok atomic.Bool
	return func(ctx context.Context) error {
		if ok.Load() {
			return nil
		}
		dbs, err := config.LoadDatabases(lookup)
		if err != nil {
			return err
		}
		for _, d := range dbs {
			cfg := d.Database
			cfg.MaxConns = 1
			db, err := postgres.Open(ctx, cfg)
			if err != nil {
				if d.Name != "" {
					return fmt.Errorf("shard %s: %w", d.Name, err)
				}
				return err
			}
			db.Close()
		}
		ok.Store(true)
		return nil
	}
}
