package resubmit

import (
	"io"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/functions/internal/stacktest"
	"github.com/txfence/txfence/shared/evm/rpcproxy"
	"github.com/txfence/txfence/shared/txm"
)

// TestIssue11_SecretsRedacted: an RPC URL that carries a provider key in
// its path and its query never appears in logs, rows or answers, through a
// run full of RPC errors (dropped connections, timeouts, error answers).
func TestIssue11_SecretsRedacted(t *testing.T) {
	t.Parallel()
	const pathKey, queryKey = "PATHSECRET0123456789", "QUERYSECRET987654321"
	var logs stacktest.LogBuffer
	w := stacktest.NewWorld(t, 1, lively)
	w.LogTo = &logs
	w.EVM.CallTimeout = 2 * time.Second // the timeout fault below outlasts it
	w.Cfg.Chains[0].RPCURLs = []string{w.Proxy.URL + "/v2/" + pathKey + "?apikey=" + queryKey}
	n := w.Node(t, "n")
	signer := w.Keys[0].Address
	ids := []string{create(t, n, transfer(signer, big.NewInt(1))).ID, create(t, n, transfer(signer, big.NewInt(2))).ID}

	stop := w.Run(t, []*stacktest.Node{n}, stacktest.RunOptions{})
	for _, f := range []rpcproxy.Fault{
		{Drop: true},
		{HTTPStatus: http.StatusBadGateway},
		{RPCError: &rpcproxy.RPCError{Code: -32603, Message: "internal error"}},
		{Delay: 3 * time.Second},
	} {
		w.Proxy.FailAll(f)
		time.Sleep(1500 * time.Millisecond)
		w.Proxy.Heal()
	}
	for _, id := range ids {
		waitState(t, w, id, txm.StateConfirmed, 60*time.Second)
	}
	stop()

	var sources []string
	sources = append(sources, logs.String())
	require.Contains(t, logs.String(), "endpoint 0 (http://127.0.0.1", "the logs name the endpoint, redacted")
	tables := []string{"managed_tx", "tx_attempt", "tx_history", "outbox", "tx_completion", "completion_pending", "tx_action", "audit_log", "signer_lease"}
	for _, table := range tables {
		rows, err := w.DB.Pool.Query(ctx, `SELECT row_to_json(x)::text FROM `+table+` x`)
		require.NoError(t, err)
		for rows.Next() {
			var row string
			require.NoError(t, rows.Scan(&row))
			sources = append(sources, row)
		}
		require.NoError(t, rows.Err())
	}
	for _, path := range []string{"/v1/transactions/" + ids[0], "/v1/transactions?limit=10", "/v1/signers/" + signer.Hex(),
		"/v1/completions?after=0"} {
		resp, err := http.Get(n.APIURL + path)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		sources = append(sources, string(body))
	}
	for _, s := range sources {
		for _, secret := range []string{pathKey, queryKey} {
			if strings.Contains(s, secret) {
				t.Errorf("the key %s leaked: %.300s", secret, s[max(0, strings.Index(s, secret)-150):])
			}
		}
	}
	t.Logf("scanned %d KiB of logs, %d rows and 4 answers", len(logs.String())/1024, len(sources)-5)
	assert.NotEmpty(t, logs.String())
}
