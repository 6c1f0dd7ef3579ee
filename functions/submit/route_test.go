package submit

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/functions/internal/stacktest"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/evm/rpcproxy"
	"github.com/txfence/txfence/shared/txm"
)

// TestIssue48_RequestRoute: a create may name the route of its
// transaction's broadcasts (sendVia). The chain has one read endpoint and
// two send-only ones, recorders in front of the chain: "protect", private
// (no fallback) and no signer's route, and "relay", with public fallback,
// which the default route takes beside the read endpoint. A create with
// sendVia "protect" is broadcast to protect only: the read endpoint and
// the relay never get its bytes; one without takes the default route and
// never reaches protect; both confirm. An admin's replacement of the
// private one goes the same way as its first attempt. The view returns the route; a
// replay naming another route is a conflict; a route the chain does not
// have is refused (naming the chain's routes, not their URLs) and writes
// nothing.
func TestIssue48_RequestRoute(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 1, stacktest.Lively)
	protect := rpcproxy.Start(t, w.Chain.URL)
	relay := rpcproxy.Start(t, w.Chain.URL)
	const key = "SECRETKEY0123456789"
	id := stacktest.ChainID().Uint64()
	w.Cfg.SendOnly = []config.SendOnly{{ChainID: id, Name: "protect", URL: protect.URL + "/v1/" + key},
		{ChainID: id, Name: "relay", URL: relay.URL, PublicFallback: true}}
	require.NoError(t, w.Cfg.Validate())
	n := w.Node(t, "n")
	ctx := context.Background()
	signer := w.Keys[0].Address

	post := func(body map[string]any) (int, []byte) {
		t.Helper()
		b, err := json.Marshal(body)
		require.NoError(t, err)
		resp, err := http.Post(n.APIURL+"/v1/transactions", "application/json", bytes.NewReader(b))
		require.NoError(t, err)
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, out
	}
	type view struct {
		ID      string `json:"id"`
		SendVia string `json:"sendVia"`
	}
	create := func(requestID, via string) view {
		t.Helper()
		body := map[string]any{"from": signer.Hex(), "to": stacktest.Dead.Hex(), "value": "1", "gasLimit": 21000, "requestId": requestID}
		if via != "" {
			body["sendVia"] = via
		}
		status, out := post(body)
		require.Equal(t, http.StatusAccepted, status, "%s", out)
		var v view
		require.NoError(t, json.Unmarshal(out, &v))
		assert.Equal(t, via, v.SendVia, "the view returns the route")
		return v
	}
	private := create("private", "protect")
	plain := create("plain", "")

	// A replay naming another route asks for another transaction.
	status, out := post(map[string]any{"from": signer.Hex(), "to": stacktest.Dead.Hex(), "value": "1", "gasLimit": 21000,
		"requestId": "private", "sendVia": "relay"})
	assert.Equal(t, http.StatusConflict, status, "%s", out)

	// A route the chain lacks: refused by name, nothing written.
	status, out = post(map[string]any{"from": signer.Hex(), "to": stacktest.Dead.Hex(), "value": "1", "gasLimit": 21000,
		"requestId": "nowhere", "sendVia": "nowhere"})
	require.Equal(t, http.StatusUnprocessableEntity, status, "%s", out)
	var prob struct {
		Errors []struct{ Field, Message string }
	}
	require.NoError(t, json.Unmarshal(out, &prob))
	require.Len(t, prob.Errors, 1)
	assert.Equal(t, "sendVia", prob.Errors[0].Field)
	assert.Contains(t, prob.Errors[0].Message, `"public", "protect", "relay"`)
	assert.NotContains(t, string(out), key)
	assert.NotContains(t, string(out), protect.URL)
	var rows int
	require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM managed_tx WHERE request_id = 'nowhere'`).Scan(&rows))
	assert.Zero(t, rows)

	// Sent, then replaced by an admin at three times its fees (no block is
	// sealed in between): the replacement takes the create's route too.
	_, err := n.Drain.Execute(ctx, stacktest.ChainID().Uint64(), signer)
	require.NoError(t, err)
	var fee, tip string
	require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT (max_fee_per_gas * 3)::text, (max_priority_fee_per_gas * 3)::text
		FROM tx_attempt WHERE tx_id = $1::uuid AND attempt_no = 1`, private.ID).Scan(&fee, &tip))
	b, err := json.Marshal(map[string]any{"actionId": "r1", "reason": "gas spike", "maxFeePerGas": fee, "maxPriorityFeePerGas": tip})
	require.NoError(t, err)
	resp, err := http.Post(n.APIURL+"/v1/transactions/"+private.ID+"/replace", "application/json", bytes.NewReader(b))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	_, err = n.Drain.Execute(ctx, stacktest.ChainID().Uint64(), signer)
	require.NoError(t, err)
	var replaced int
	require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM tx_attempt WHERE tx_id = $1::uuid AND kind = 'replace'`,
		private.ID).Scan(&replaced))
	require.Equal(t, 1, replaced, "the admin's replacement was signed")

	stop := w.Run(t, []*stacktest.Node{n}, stacktest.RunOptions{})
	for _, v := range []view{private, plain} {
		w.WaitState(t, v.ID, txm.StateConfirmed, 30*time.Second)
	}
	stop()

	sentTo := func(p *rpcproxy.Proxy) map[common.Hash]bool {
		out := map[common.Hash]bool{}
		for _, c := range p.Calls() {
			if c.Method == "eth_sendRawTransaction" {
				h, err := rpcproxy.TxHashOf(c.Params)
				require.NoError(t, err)
				out[h] = true
			}
		}
		return out
	}
	reads, toProtect, toRelay := sentTo(w.Proxy), sentTo(protect), sentTo(relay)
	hashesOf := func(id string) []common.Hash {
		rows, err := w.DB.Pool.Query(ctx, `SELECT tx_hash FROM tx_attempt WHERE tx_id = $1::uuid`, id)
		require.NoError(t, err)
		defer rows.Close()
		var out []common.Hash
		for rows.Next() {
			var h string
			require.NoError(t, rows.Scan(&h))
			out = append(out, common.HexToHash(h))
		}
		require.NoError(t, rows.Err())
		require.NotEmpty(t, out)
		return out
	}
	for _, h := range hashesOf(private.ID) {
		assert.True(t, toProtect[h], "attempt %s of the privately routed transaction reached protect", h)
		assert.False(t, reads[h], "attempt %s of the privately routed transaction never reached the read endpoint", h)
		assert.False(t, toRelay[h], "attempt %s of the privately routed transaction never reached the relay", h)
	}
	for _, h := range hashesOf(plain.ID) {
		assert.True(t, reads[h], "attempt %s of the default transaction reached the read endpoint", h)
		assert.True(t, toRelay[h], "attempt %s of the default transaction reached the relay", h)
		assert.False(t, toProtect[h], "attempt %s of the default transaction never reached protect", h)
	}
	for _, c := range protect.Calls() {
		assert.Equal(t, "eth_sendRawTransaction", c.Method, "a send-only endpoint is never read from")
	}
}
