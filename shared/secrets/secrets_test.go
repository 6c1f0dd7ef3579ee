package secrets

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/option"
)

// fakeSecretManager serves the two calls txfence makes of Secret
// Manager's REST API (v1 versions.access and secrets.addVersion) from
// memory: secret name => versions' data, oldest first.
type fakeSecretManager struct {
	mu       sync.Mutex
	versions map[string][][]byte
	denied   map[string]bool
}

func (f *fakeSecretManager) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	path := strings.TrimPrefix(r.URL.Path, "/v1/")
	fail := func(code int, msg string) {
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": code, "message": msg}})
	}
	switch {
	case r.Method == http.MethodGet && strings.HasSuffix(path, ":access"):
		name := strings.TrimSuffix(path, ":access")
		secret, v, _ := strings.Cut(name, "/versions/")
		if f.denied[secret] {
			fail(http.StatusForbidden, "Permission denied")
			return
		}
		vs := f.versions[secret]
		if len(vs) == 0 || v != "latest" {
			fail(http.StatusNotFound, "Secret Version ["+name+"] not found.")
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"name": secret + "/versions/" + itoa(len(vs)),
			"payload": map[string]any{"data": base64.StdEncoding.EncodeToString(vs[len(vs)-1])}})
	case r.Method == http.MethodPost && strings.HasSuffix(path, ":addVersion"):
		secret := strings.TrimSuffix(path, ":addVersion")
		if f.denied[secret] {
			fail(http.StatusForbidden, "Permission denied")
			return
		}
		var req struct {
			Payload struct {
				Data string `json:"data"`
			} `json:"payload"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			fail(http.StatusBadRequest, "bad body")
			return
		}
		data, err := base64.StdEncoding.DecodeString(req.Payload.Data)
		if err != nil {
			fail(http.StatusBadRequest, "bad payload")
			return
		}
		f.versions[secret] = append(f.versions[secret], data)
		_ = json.NewEncoder(w).Encode(map[string]any{"name": secret + "/versions/" + itoa(len(f.versions[secret])), "state": "ENABLED"})
	default:
		fail(http.StatusNotFound, "no such method")
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// NewFake starts a fake Secret Manager and returns it with a client on it.
func newFake(t *testing.T) (*fakeSecretManager, *Client) {
	t.Helper()
	f := &fakeSecretManager{versions: map[string][][]byte{}, denied: map[string]bool{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	c, err := New(context.Background(), option.WithEndpoint(srv.URL+"/"), option.WithoutAuthentication())
	require.NoError(t, err)
	return f, c
}

func TestClientAccessAndAddVersion(t *testing.T) {
	ctx := context.Background()
	f, c := newFake(t)
	_, err := c.Access(ctx, "projects/p/secrets/s/versions/latest")
	require.ErrorIs(t, err, ErrNoVersion)

	name, err := c.AddVersion(ctx, "projects/p/secrets/s", []byte("one"))
	require.NoError(t, err)
	assert.Equal(t, "projects/p/secrets/s/versions/1", name)
	got, err := c.Access(ctx, "projects/p/secrets/s/versions/latest")
	require.NoError(t, err)
	assert.Equal(t, "one", string(got))

	f.denied["projects/p/secrets/s"] = true
	_, err = c.Access(ctx, "projects/p/secrets/s/versions/latest")
	require.ErrorIs(t, err, ErrDenied)
	_, err = c.AddVersion(ctx, "projects/p/secrets/s", []byte("two"))
	require.ErrorIs(t, err, ErrDenied)

	_, err = c.Access(ctx, "txfence-chains")
	assert.ErrorContains(t, err, "must be projects/PROJECT/secrets/SECRET/versions/VERSION")
	_, err = c.AddVersion(ctx, "projects/p/secrets/s/versions/1", nil)
	assert.ErrorContains(t, err, "must be projects/PROJECT/secrets/SECRET")
}

// TestIssue45_SettingsFromSecretManager: TXFENCE_SECRETS names settings a
// process reads from Secret Manager when it loads its configuration, so
// that a service can exist before its secret has a version (prod with the
// RPC keys kept out of terraform): until then the load fails, naming the
// setting, the secret and how to add a version, never a value; once a
// version exists, the next load reads it.
func TestIssue45_SettingsFromSecretManager(t *testing.T) {
	ctx := context.Background()
	f, c := newFake(t)
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	base := map[string]string{"TXFENCE_LOG_LEVEL": "info"}
	spec := "TXFENCE_CHAINS=projects/p/secrets/txfence-chains/versions/latest"

	_, err := Lookup(ctx, c, spec, env(base))
	require.Error(t, err, "no version yet")
	assert.Contains(t, err.Error(), "TXFENCE_CHAINS: secret projects/p/secrets/txfence-chains has no version to read yet")
	assert.Contains(t, err.Error(), "gcloud secrets versions add txfence-chains --data-file=-")

	const value = "1=https://eth.example/v2/SECRETKEY"
	_, err = c.AddVersion(ctx, "projects/p/secrets/txfence-chains", []byte(value))
	require.NoError(t, err)
	lookup, err := Lookup(ctx, c, spec, env(base))
	require.NoError(t, err, "the next load reads the version added since")
	v, ok := lookup("TXFENCE_CHAINS")
	assert.True(t, ok)
	assert.Equal(t, value, v)
	v, ok = lookup("TXFENCE_LOG_LEVEL")
	assert.True(t, ok && v == "info", "other settings come from the environment")

	base["TXFENCE_CHAINS"] = "1=https://other.example"
	_, err = Lookup(ctx, c, spec, env(base))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "TXFENCE_CHAINS is set both directly and in TXFENCE_SECRETS")
	assert.NotContains(t, err.Error(), "SECRETKEY")
	delete(base, "TXFENCE_CHAINS")

	f.denied["projects/p/secrets/txfence-chains"] = true
	_, err = Lookup(ctx, c, spec, env(base))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "may not read projects/p/secrets/txfence-chains")
	assert.NotContains(t, err.Error(), "SECRETKEY")

	for _, bad := range []string{"CHAINS=projects/p/secrets/s/versions/latest", "TXFENCE_CHAINS=txfence-chains", "TXFENCE_X=projects/p/secrets/s/versions/1,TXFENCE_X=projects/p/secrets/s/versions/1"} {
		_, err = Lookup(ctx, c, bad, env(base))
		assert.ErrorContains(t, err, "TXFENCE_SECRETS", bad)
	}
}
