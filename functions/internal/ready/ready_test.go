package ready

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// TestIssue45_StartupProbe: GET /ready answers 204 once the process's
// databases answer, 503 while one does not (an unreachable shard), with
// nothing but the database settings configured (a first deploy has no
// schema, chains or signers yet); every other request goes to the function.
func TestIssue45_StartupProbe(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, false) // no schema: only reachability counts
	next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	get := func(h http.Handler, method, path string) int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
		return rec.Code
	}

	up := Probe(Databases(env(map[string]string{config.EnvDatabaseURL: url})), next)
	assert.Equal(t, http.StatusNoContent, get(up, http.MethodGet, Path))
	assert.Equal(t, http.StatusTeapot, get(up, http.MethodPost, "/projects/p/topics/txfence-submit"), "pushes go to the function")
	assert.Equal(t, http.StatusTeapot, get(up, http.MethodPost, Path), "only GET is the probe")

	down := Probe(Databases(env(map[string]string{
		config.EnvDatabases: "a=" + url + "|b=postgres://nobody@127.0.0.1:1/none?connect_timeout=2",
	})), next)
	assert.Equal(t, http.StatusServiceUnavailable, get(down, http.MethodGet, Path), "a shard that does not answer")

	unconfigured := Probe(Databases(env(nil)), next)
	assert.Equal(t, http.StatusServiceUnavailable, get(unconfigured, http.MethodGet, Path))
}
