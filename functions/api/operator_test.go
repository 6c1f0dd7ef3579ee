package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/txm"
)

// signerList is GET /v1/signers's answer as a test reads it.
type signerList struct {
	Items      []signerRowView `json:"items"`
	Total      int             `json:"total"`
	NextCursor string          `json:"nextCursor"`
}

func (b *bundle) signerList(t testing.TB, inst *instance, query string, header ...string) (int, signerList) {
	t.Helper()
	r := b.do(t, inst, http.MethodGet, "/v1/signers"+query, nil, header...)
	var out signerList
	if r.status == http.StatusOK {
		require.NoError(t, json.Unmarshal(r.raw, &out), "%s", r.raw)
	}
	return r.status, out
}

// TestSignersList: every configured signer is listed, in address order, a
// page at a time; a signer's lanes count its open transactions by state,
// its lane lists them in nonce order, finalBelow is its lowest open nonce,
// the in-flight need adds value and gas × fee cap, and the last error is
// the newest on an open transaction. Filters narrow the list; bad ones 400.
func TestSignersList(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	inst := b.insts[0]
	ss := signers(3)
	var ids []string
	for i := 0; i < 4; i++ {
		r := b.create(t, inst, map[string]any{"chainId": testChain, "from": ss[1].Hex(), "to": "0x000000000000000000000000000000000000dEaD",
			"value": "1000", "gasLimit": 21000, "maxFeePerGas": "10", "maxPriorityFeePerGas": "1"})
		require.Equal(t, http.StatusAccepted, r.status, "%s", r.raw)
		ids = append(ids, r.tx.ID)
	}
	ctx := context.Background()
	_, err := b.db.Pool.Exec(ctx, `UPDATE managed_tx SET state = 'CONFIRMED' WHERE id = $1`, ids[0])
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `UPDATE managed_tx SET state = 'STUCK', sub_state = 'insufficient_funds', last_error = 'insufficient funds' WHERE id = $1`, ids[1])
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `UPDATE managed_tx SET state = 'MINED' WHERE id = $1`, ids[2])
	require.NoError(t, err)

	status, page := b.signerList(t, inst, "?limit=2")
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, 200, page.Total, "every configured signer")
	require.Len(t, page.Items, 2)
	assert.Equal(t, txm.CanonicalAddress(ss[0]), page.Items[0].Address)
	assert.True(t, page.Items[0].Configured)
	assert.Equal(t, laneCounts{}, page.Items[0].Counts)
	assert.Nil(t, page.Items[0].NextNonce)
	s := page.Items[1]
	assert.Equal(t, txm.CanonicalAddress(ss[1]), s.Address)
	assert.Equal(t, laneCounts{Allocated: 1, Mined: 1, Stuck: 1}, s.Counts)
	assert.EqualValues(t, 1, s.FinalBelow, "nonce 0 is final, 1 is the lowest open")
	require.NotNil(t, s.NextNonce)
	assert.EqualValues(t, 4, *s.NextNonce)
	require.Len(t, s.Lane, 3)
	assert.Equal(t, []txm.State{txm.StateStuck, txm.StateMined, txm.StateAllocated}, []txm.State{s.Lane[0].State, s.Lane[1].State, s.Lane[2].State})
	assert.Equal(t, ids[1], s.Lane[0].ID)
	assert.Equal(t, "insufficient_funds", s.Lane[0].SubState)
	assert.Equal(t, "422000", s.InFlightNeed, "the STUCK and the ALLOCATED one: 2 × (1000 + 21000 × 10)")
	assert.Equal(t, "insufficient funds", s.LastError)
	assert.NotNil(t, s.OldestPendingAgeSeconds)
	assert.Nil(t, s.Balance, "no chain view: unknown, not zero")

	// The next page starts after the cursor.
	status, next := b.signerList(t, inst, "?limit=2&cursor="+page.NextCursor)
	require.Equal(t, http.StatusOK, status)
	require.Len(t, next.Items, 2)
	assert.Equal(t, txm.CanonicalAddress(ss[2]), next.Items[0].Address)

	// A prefix (any case, 0x optional) narrows; a chain that has none is empty.
	status, one := b.signerList(t, inst, "?prefix="+strings.ToUpper(txm.CanonicalAddress(ss[1])[2:]))
	require.Equal(t, http.StatusOK, status)
	require.Len(t, one.Items, 1)
	assert.Equal(t, 1, one.Total)
	status, none := b.signerList(t, inst, "?chainId=999")
	require.Equal(t, http.StatusOK, status)
	assert.Empty(t, none.Items)
	assert.Zero(t, none.Total)

	for _, q := range []string{"?prefix=0xzz", "?limit=0", "?limit=501", "?cursor=nope", "?chainId=x", "?colour=red"} {
		r := b.do(t, inst, http.MethodGet, "/v1/signers"+q, nil)
		assert.Equal(t, http.StatusBadRequest, r.status, "%s: %s", q, r.raw)
	}
}

// TestSignersListCovers: a reader granted some signers sees those alone,
// and a transaction's attempts and history are read under the same rule.
func TestSignersListCovers(t *testing.T) {
	t.Parallel()
	s := setupSecure(t, 1)
	inst := s.insts[0]
	ss := signers(3)
	const narrow = "narrow@proj.iam.gserviceaccount.com"
	s.put(t, txm.Policy{Principal: narrow, Roles: []txm.Role{txm.RoleReader}, Signers: []common.Address{ss[2]}})
	status, page := s.signerList(t, inst, "", s.bearer(narrow)...)
	require.Equal(t, http.StatusOK, status)
	require.Len(t, page.Items, 1)
	assert.Equal(t, txm.CanonicalAddress(ss[2]), page.Items[0].Address)
	assert.Equal(t, 1, page.Total, "the total counts the caller's signers only")

	status, all := s.signerList(t, inst, "?limit=500", s.bearer(readerEmail)...)
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, 200, all.Total)

	r := s.do(t, inst, http.MethodGet, "/v1/me", nil, s.bearer(narrow)...)
	require.Equal(t, http.StatusOK, r.status)
	assert.JSONEq(t, `{"principal":"`+narrow+`","roles":["reader"],"admin":false,"allSigners":false,"signers":["`+txm.CanonicalAddress(ss[2])+`"]}`, string(r.raw))
	r = s.do(t, inst, http.MethodGet, "/v1/me", nil)
	assert.Equal(t, http.StatusUnauthorized, r.status)
}

// TestTxDetail: include=attempts,history adds the attempts (never raw
// bytes) and every state change; a bad include is 400.
func TestTxDetail(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	inst := b.insts[0]
	r := b.create(t, inst, transfer(signers(1)[0], 1, ""))
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.raw)
	id := r.tx.ID
	got := b.do(t, inst, http.MethodGet, "/v1/transactions/"+id+"?include=attempts,history", nil)
	require.Equal(t, http.StatusOK, got.status, "%s", got.raw)
	var v txDetailView
	require.NoError(t, json.Unmarshal(got.raw, &v))
	assert.Equal(t, id, v.ID)
	assert.Empty(t, v.AttemptList, "not signed yet")
	require.Len(t, v.History, 1, "created, nothing since")
	assert.Equal(t, txm.StateAllocated, v.History[0].To)
	assert.Equal(t, "created", v.History[0].Reason)
	assert.NotEmpty(t, v.History[0].Owner, "the allocating owner")
	assert.Positive(t, v.History[0].Token, "the allocation's fencing token")
	assert.NotContains(t, string(got.raw), "raw")

	plain := b.do(t, inst, http.MethodGet, "/v1/transactions/"+id, nil)
	assert.NotContains(t, string(plain.raw), "history", "without include the answer is as before")
	bad := b.do(t, inst, http.MethodGet, "/v1/transactions/"+id+"?include=secrets", nil)
	assert.Equal(t, http.StatusBadRequest, bad.status)
}

// TestConsoleFiles: the console is served without credentials, with a
// policy that loads nothing from elsewhere; paths cannot leave its folder.
func TestConsoleFiles(t *testing.T) {
	t.Parallel()
	s := setupSecure(t, 1)
	inst := s.insts[0]
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Get(inst.url + "/console")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusMovedPermanently, resp.StatusCode)
	assert.Equal(t, "console/", resp.Header.Get("Location"))
	for path, ctype := range map[string]string{"/console/": "text/html", "/console/console.js": "text/javascript", "/console/console.css": "text/css",
		"/Api/console/": "text/html"} {
		r := s.do(t, inst, http.MethodGet, path, nil)
		require.Equal(t, http.StatusOK, r.status, path)
		assert.Contains(t, r.header.Get("Content-Type"), ctype, path)
		assert.Contains(t, r.header.Get("Content-Security-Policy"), "default-src 'none'", path)
		assert.NotContains(t, string(r.raw), "https://", "%s: nothing fetched from elsewhere", path)
	}
	for _, path := range []string{"/console/../openapi.json", "/console/%2e%2e/api.go", "/console/nope.js"} {
		r := s.do(t, inst, http.MethodGet, path, nil)
		assert.Equal(t, http.StatusNotFound, r.status, path)
	}
	// The data behind it is not public.
	r := s.do(t, inst, http.MethodGet, "/v1/signers", nil)
	assert.Equal(t, http.StatusUnauthorized, r.status)
}

// TestCompletionsLatest: after=latest starts at the newest seq, so a page
// that only wants to hear of new outcomes does not read the feed's past.
func TestCompletionsLatest(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	inst := b.insts[0]
	r := b.create(t, inst, transfer(signers(1)[0], 1, ""))
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.raw)
	_, err := b.db.Pool.Exec(context.Background(), `UPDATE managed_tx SET state = 'CONFIRMED' WHERE id = $1`, r.tx.ID)
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(context.Background(), `INSERT INTO tx_completion (tx_id, chain_id, signer, state, type) SELECT id, chain_id, signer, state, 'TxConfirmed' FROM managed_tx`)
	require.NoError(t, err)

	all := b.do(t, inst, http.MethodGet, "/v1/completions?after=0", nil)
	require.Equal(t, http.StatusOK, all.status, "%s", all.raw)
	var page struct {
		Items []json.RawMessage `json:"items"`
		Next  int64             `json:"next"`
	}
	require.NoError(t, json.Unmarshal(all.raw, &page))
	require.Len(t, page.Items, 1)
	latest := b.do(t, inst, http.MethodGet, "/v1/completions?after=latest", nil)
	require.Equal(t, http.StatusOK, latest.status, "%s", latest.raw)
	var fromNow struct {
		Items []json.RawMessage `json:"items"`
		Next  int64             `json:"next"`
	}
	require.NoError(t, json.Unmarshal(latest.raw, &fromNow))
	assert.Empty(t, fromNow.Items)
	assert.Equal(t, page.Next, fromNow.Next, "next is the newest seq: the place to wait from")
	bad := b.do(t, inst, http.MethodGet, "/v1/completions?after=earliest", nil)
	assert.Equal(t, http.StatusBadRequest, bad.status)
}
