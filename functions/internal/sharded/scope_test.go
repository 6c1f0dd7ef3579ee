package sharded

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/auth"
	"github.com/txfence/txfence/shared/postgres"
	"github.com/txfence/txfence/shared/txm"
)

// TestIssue44_ShardedScope: with signers sharded, the reads that span
// shards (by id in every shard, lists merged, the merged feed) and admin
// actions found by asking every shard keep the scoping of one database: two
// senders on one signer each see their own transactions alone, a reader of
// the signer sees both, and an admin of a signer in the other shard can
// neither read nor act on them (404, as for a transaction that does not
// exist).
func TestIssue44_ShardedScope(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a second PostgreSQL server")
	}
	w := newWorld(t, 2)
	inA, inB := w.Keys[0].Address, w.Keys[1].Address
	require.Equal(t, "b", w.shard[inB])
	cfg := w.Cfg
	cfg.Auth.Methods = []string{"apikey"}
	_, url := w.apiServerWith(t, "api0", cfg)

	// Keys and policies live in the home shard.
	keys, err := postgres.NewAPIKeys(w.pools["a"])
	require.NoError(t, err)
	pols, err := postgres.NewPolicies(w.pools["a"])
	require.NoError(t, err)
	bearer := map[string]string{}
	grant := func(principal string, roles []txm.Role, signer common.Address) {
		key, id, hash := auth.NewAPIKey()
		require.NoError(t, keys.CreateAPIKey(ctx, txm.APIKey{ID: id, Principal: principal, Hash: hash, CreatedBy: "test"}))
		_, err := pols.PutPolicy(ctx, txm.Policy{Principal: principal, Roles: roles, Signers: []common.Address{signer}}, "test")
		require.NoError(t, err)
		bearer[principal] = key
	}
	grant("one", []txm.Role{txm.RoleSender}, inB)
	grant("two", []txm.Role{txm.RoleSender}, inB)
	grant("reader", []txm.Role{txm.RoleReader}, inB)
	grant("admin-a", []txm.Role{txm.RoleAdmin}, inA)

	do := func(who, method, path string, body any) (int, []byte) {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, err := json.Marshal(body)
			require.NoError(t, err)
			rd = bytes.NewReader(b)
		}
		req, err := http.NewRequest(method, url+path, rd)
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+bearer[who])
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, raw
	}
	mk := func(who, rid string) txView {
		status, raw := do(who, http.MethodPost, "/v1/transactions", create(inB, rid, 1))
		require.Equal(t, http.StatusAccepted, status, "%s", raw)
		var v txView
		require.NoError(t, json.Unmarshal(raw, &v))
		return v
	}
	tx1, tx2 := mk("one", "r-1"), mk("two", "r-2")
	_, err = w.pools["b"].Exec(ctx, `INSERT INTO tx_completion (tx_id, chain_id, signer, state, type)
SELECT id, chain_id, signer, 'CONFIRMED', 'TxConfirmed' FROM managed_tx ORDER BY nonce`)
	require.NoError(t, err)

	ids := func(who, path string, feed bool) []string {
		t.Helper()
		status, raw := do(who, http.MethodGet, path, nil)
		require.Equal(t, http.StatusOK, status, "%s", raw)
		var page struct {
			Items []struct {
				ID   string `json:"id"`
				TxID string `json:"txId"`
			} `json:"items"`
		}
		require.NoError(t, json.Unmarshal(raw, &page))
		out := []string{}
		for _, it := range page.Items {
			if feed {
				out = append(out, it.TxID)
			} else {
				out = append(out, it.ID)
			}
		}
		return out
	}
	const ghost = "0190f7a2-0000-7000-8000-000000000000"
	notFound := func(who, method, path string, body any, ghostPath string) {
		t.Helper()
		want, wantRaw := do(who, method, ghostPath, body)
		got, raw := do(who, method, path, body)
		assert.Equal(t, http.StatusNotFound, want, "%s", wantRaw)
		assert.Equal(t, want, got, "%s %s: %s", who, path, raw)
		assert.JSONEq(t, string(wantRaw), string(raw), "%s %s answers as a transaction that does not exist", who, path)
	}
	for who, own := range map[string]txView{"one": tx1, "two": tx2} {
		other := map[string]txView{"one": tx2, "two": tx1}[who]
		status, raw := do(who, http.MethodGet, "/v1/transactions/"+own.ID, nil)
		assert.Equal(t, http.StatusOK, status, "%s", raw)
		notFound(who, http.MethodGet, "/v1/transactions/"+other.ID, nil, "/v1/transactions/"+ghost)
		notFound(who, http.MethodGet, "/v1/transactions/"+other.ID+"/actions", nil, "/v1/transactions/"+ghost+"/actions")
		notFound(who, http.MethodGet, "/v1/transactions?from="+inB.Hex()+"&requestId="+other.RequestID, nil,
			"/v1/transactions?from="+inB.Hex()+"&requestId=none")
		assert.Equal(t, []string{own.ID}, ids(who, "/v1/transactions", false), "%s lists its own across shards", who)
		assert.Equal(t, []string{own.ID}, ids(who, "/v1/completions?after=0", true), "%s's merged feed", who)
	}
	assert.ElementsMatch(t, []string{tx1.ID, tx2.ID}, ids("reader", "/v1/transactions", false))
	assert.ElementsMatch(t, []string{tx1.ID, tx2.ID}, ids("reader", "/v1/completions?after=0", true))

	body := map[string]any{"actionId": "out-of-scope", "reason": "another shard's signer"}
	for _, kind := range []string{"resubmit", "replace", "cancel"} {
		notFound("admin-a", http.MethodPost, "/v1/transactions/"+tx1.ID+"/"+kind, body, "/v1/transactions/"+ghost+"/"+kind)
	}
	notFound("admin-a", http.MethodGet, "/v1/transactions/"+tx1.ID, nil, "/v1/transactions/"+ghost)
	var actions int
	require.NoError(t, w.pools["b"].QueryRow(ctx, `SELECT count(*) FROM tx_action`).Scan(&actions))
	assert.Zero(t, actions, "no action recorded")
}
