package api

import (
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestQueries(t *testing.T) {
	t.Parallel()
	b := setup(t, 2)
	ss := signers(2)
	var ids []string
	for i := 0; i < 7; i++ {
		r := b.create(t, b.insts[i%2], transfer(ss[i%2], int64(i), "q-"+string(rune('a'+i))))
		require.Equal(t, http.StatusAccepted, r.status, "%s", r.raw)
		ids = append(ids, r.tx.ID)
	}

	t.Run("get by id from another instance", func(t *testing.T) {
		r := b.do(t, b.insts[1], http.MethodGet, "/v1/transactions/"+ids[0], nil)
		require.Equal(t, http.StatusOK, r.status)
		assert.Equal(t, ids[0], r.tx.ID)
		assert.Equal(t, "ALLOCATED", string(r.tx.State))
		assert.Equal(t, "0x000000000000000000000000000000000000dead", *r.tx.To)
		assert.EqualValues(t, 21000, *r.tx.GasLimit)
		assert.False(t, r.tx.CreatedAt.IsZero())
	})
	t.Run("get unknown and malformed ids", func(t *testing.T) {
		r := b.do(t, b.insts[0], http.MethodGet, "/v1/transactions/0190f7a2-0000-7000-8000-000000000000", nil)
		assert.Equal(t, http.StatusNotFound, r.status)
		r = b.do(t, b.insts[0], http.MethodGet, "/v1/transactions/nope", nil)
		assert.Equal(t, http.StatusBadRequest, r.status)
	})
	t.Run("get by request id", func(t *testing.T) {
		r := b.do(t, b.insts[0], http.MethodGet, "/v1/transactions?from="+ss[1].Hex()+"&requestId=q-b", nil)
		require.Equal(t, http.StatusOK, r.status, "%s", r.raw)
		assert.Equal(t, ids[1], r.tx.ID)
		r = b.do(t, b.insts[0], http.MethodGet, "/v1/transactions?signer="+ss[1].Hex()+"&requestId=none", nil)
		assert.Equal(t, http.StatusNotFound, r.status)
		r = b.do(t, b.insts[0], http.MethodGet, "/v1/transactions?requestId=q-b", nil)
		assert.Equal(t, http.StatusBadRequest, r.status)
	})
	t.Run("list with filters and cursor pagination", func(t *testing.T) {
		var got []string
		cursor := ""
		pages := 0
		for {
			path := "/v1/transactions?limit=2&from=" + ss[0].Hex()
			if cursor != "" {
				path += "&cursor=" + cursor
			}
			r := b.do(t, b.insts[0], http.MethodGet, path, nil)
			require.Equal(t, http.StatusOK, r.status, "%s", r.raw)
			var page listPage
			require.NoError(t, json.Unmarshal(r.raw, &page))
			for _, it := range page.Items {
				got = append(got, it.ID)
			}
			pages++
			if page.NextCursor == "" {
				break
			}
			cursor = page.NextCursor
		}
		want := []string{ids[0], ids[2], ids[4], ids[6]}
		assert.Equal(t, want, got, "signer 0's transactions in creation order, each once")
		assert.Equal(t, 3, pages)
		assert.True(t, sort.StringsAreSorted(got))

		r := b.do(t, b.insts[0], http.MethodGet, "/v1/transactions?state=CONFIRMED", nil)
		var page listPage
		require.NoError(t, json.Unmarshal(r.raw, &page))
		assert.Empty(t, page.Items)
		future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		r = b.do(t, b.insts[0], http.MethodGet, "/v1/transactions?createdAfter="+future, nil)
		require.NoError(t, json.Unmarshal(r.raw, &page))
		assert.Empty(t, page.Items)
		r = b.do(t, b.insts[0], http.MethodGet, "/v1/transactions?state=DONE&limit=0&bogus=1", nil)
		assert.Equal(t, http.StatusBadRequest, r.status)
		assert.Len(t, r.prob.Errors, 3)
	})
	t.Run("signer status", func(t *testing.T) {
		r := b.do(t, b.insts[1], http.MethodGet, "/v1/signers/"+ss[0].Hex(), nil)
		require.Equal(t, http.StatusOK, r.status, "%s", r.raw)
		var v signerView
		require.NoError(t, json.Unmarshal(r.raw, &v))
		require.NotNil(t, v.NextNonce)
		assert.EqualValues(t, 4, *v.NextNonce)
		assert.Equal(t, 4, v.Allocated)
		assert.NotNil(t, v.OldestPendingAgeSeconds)
		assert.NotNil(t, v.ChainPendingNonce)
		r = b.do(t, b.insts[1], http.MethodGet, "/v1/signers/0x00000000000000000000000000000000000000ff", nil)
		assert.Equal(t, http.StatusNotFound, r.status)
		r = b.do(t, b.insts[1], http.MethodGet, "/v1/signers/0x12", nil)
		assert.Equal(t, http.StatusBadRequest, r.status)
	})
	t.Run("served under /Api too", func(t *testing.T) {
		r := b.do(t, b.insts[0], http.MethodGet, "/Api/v1/transactions/"+ids[3], nil)
		require.Equal(t, http.StatusOK, r.status)
		assert.Equal(t, ids[3], r.tx.ID)
	})
	t.Run("metrics", func(t *testing.T) {
		r := b.do(t, b.insts[0], http.MethodGet, "/metrics", nil)
		require.Equal(t, http.StatusOK, r.status)
		assert.Contains(t, string(r.raw), `tx_create_total{result="created"} 4`)
		assert.Contains(t, string(r.raw), "allocation_latency_seconds_bucket")
		assert.Contains(t, string(r.raw), "writer_queue_depth 0")
	})
}

// TestOpenAPIMatchesRoutes fails when a route exists in the handler and not
// in the checked-in document, or the other way round.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(openapiDoc, &doc))
	require.True(t, strings.HasPrefix(doc.OpenAPI, "3."))
	inDoc := map[string]bool{}
	for path, ops := range doc.Paths {
		for method := range ops {
			if method == "parameters" {
				continue
			}
			inDoc[strings.ToUpper(method)+" "+path] = true
		}
	}
	inCode := map[string]bool{}
	for _, rt := range routes {
		inCode[rt.method+" "+rt.path] = true
	}
	assert.Equal(t, inCode, inDoc)

	b := setup(t, 1)
	r := b.do(t, b.insts[0], http.MethodGet, "/v1/openapi.json", nil)
	require.Equal(t, http.StatusOK, r.status)
	assert.JSONEq(t, string(openapiDoc), string(r.raw))
}

// TestDatabaseUnavailable: an instance whose database cannot be reached
// answers 503 with Retry-After and writes nothing.
func TestDatabaseUnavailable(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	down := b.newInstance(t, "down", "host=127.0.0.1 port=1 user=postgres dbname=x sslmode=disable connect_timeout=2")
	before := b.counts(t)
	r := b.create(t, down, transfer(signers(1)[0], 1, "while-down"))
	assert.Equal(t, http.StatusServiceUnavailable, r.status, "%s", r.raw)
	assert.Equal(t, "1", r.header.Get("Retry-After"))
	assert.Equal(t, "application/problem+json", r.header.Get("Content-Type"))
	r = b.do(t, down, http.MethodGet, "/v1/transactions/0190f7a2-0000-7000-8000-000000000000", nil)
	assert.Equal(t, http.StatusServiceUnavailable, r.status, "%s", r.raw)
	assert.Equal(t, before, b.counts(t))
	// The same request through a healthy instance then succeeds.
	r = b.create(t, b.insts[0], transfer(signers(1)[0], 1, "while-down"))
	assert.Equal(t, http.StatusAccepted, r.status)
}
