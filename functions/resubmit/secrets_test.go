package resubmit

import (
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/functions/internal/stacktest"
	"github.com/txfence/txfence/shared/evm"
	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/evm/rpcproxy"
	"github.com/txfence/txfence/shared/testsupport"
	"github.com/txfence/txfence/shared/txm"
)

// TestIssue11_SecretsRedacted: an RPC URL that carries a provider key in
// its path and its query never appears in logs, rows or answers, through a
// run full of RPC errors (dropped connections, timeouts, error answers).
func TestIssue11_SecretsRedacted(t *testing.T) {
	t.Parallel()
	const pathKey, queryKey = "PATHSECRET0123456789", "QUERYSECRET987654321"
	var logs stacktest.LogBuffer
	w := stacktest.NewWorld(t, 1, stacktest.Lively)
	w.LogTo = &logs
	w.EVM.CallTimeout = 2 * time.Second // the timeout fault below outlasts it
	w.Cfg.Chains[0].RPCURLs = []string{w.Proxy.URL + "/v2/" + pathKey + "?apikey=" + queryKey}
	n := w.Node(t, "n")
	signer := w.Keys[0].Address
	ids := []string{n.CreateTx(t, stacktest.Transfer(signer, big.NewInt(1))).ID, n.CreateTx(t, stacktest.Transfer(signer, big.NewInt(2))).ID}

	stop := w.Run(t, []*stacktest.Node{n}, stacktest.RunOptions{})
	for _, f := range []rpcproxy.Fault{
		{Drop: true},
		{HTTPStatus: http.StatusBadGateway},
		{RPCError: &rpcproxy.RPCError{Code: -32603, Message: "internal error"}},
		{Delay: 3 * time.Second},
	} {
		seen := len(w.Proxy.Calls())
		w.Proxy.FailAll(f)
		testsupport.Eventually(t, 20*time.Second, "the run to meet the fault", func() bool { return len(w.Proxy.Calls()) > seen })
		w.Proxy.Heal()
	}
	for _, id := range ids {
		w.WaitState(t, id, txm.StateConfirmed, 60*time.Second)
	}
	stop()

	require.Contains(t, logs.String(), "endpoint 0 (http://127.0.0.1", "the logs name the endpoint, redacted")
	sources := append(scanned(t, w, n, signer, ids), logs.String())
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

// scanned is what a run leaves for others to read: every row of the tables
// it writes, and the API's answers about its transactions and signer.
func scanned(t *testing.T, w *stacktest.World, n *stacktest.Node, signer common.Address, ids []string) []string {
	t.Helper()
	var out []string
	tables := []string{"managed_tx", "tx_attempt", "tx_history", "outbox", "tx_completion", "completion_pending", "tx_action", "audit_log", "signer_lease"}
	for _, table := range tables {
		rows, err := w.DB.Pool.Query(ctx, `SELECT row_to_json(x)::text FROM `+table+` x`)
		require.NoError(t, err)
		for rows.Next() {
			var row string
			require.NoError(t, rows.Scan(&row))
			out = append(out, row)
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
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", path, body)
		out = append(out, string(body))
	}
	return out
}

// TestIssue44_RedactRPCURL: an RPC URL with a user name and password, a key
// in its path and another in its query shows only its host, never those:
// not in the errors of a client that cannot reach or verify its endpoint
// (nothing listening, over HTTP and WebSocket; a server that refuses the
// call and echoes the request's path), not in the errors of single calls
// and batches against a proxy that drops connections, answers HTTP or
// JSON-RPC errors or times out, and not in the logs, rows or answers of a
// run through those faults.
func TestIssue44_RedactRPCURL(t *testing.T) {
	t.Parallel()
	secrets := []string{"user", "secret", "KEY", "KEY2"}
	keyed := func(scheme, host string) string { return scheme + "://user:secret@" + host + "/v3/KEY?apikey=KEY2" }
	var errs []string
	failed := func(what string, err error) {
		t.Helper()
		require.Error(t, err, what)
		errs = append(errs, err.Error())
	}
	opts := evm.DefaultOptions()
	opts.CallTimeout = 2 * time.Second

	// Clients that cannot start.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := l.Addr().String()
	require.NoError(t, l.Close())
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no project at "+r.URL.RequestURI(), http.StatusUnauthorized)
	}))
	t.Cleanup(echo.Close)
	echoed := strings.TrimPrefix(echo.URL, "http://")
	for _, host := range []string{closed, echoed} {
		for _, scheme := range []string{"http", "ws"} {
			_, err := evm.Dial(ctx, evmtest.ChainID, []string{keyed(scheme, host)}, opts)
			failed(scheme+" "+host, err)
			assert.Contains(t, err.Error(), scheme+"://"+host+"/...", "the endpoint is named by its host")
		}
	}
	_, err = evm.Dial(ctx, evmtest.ChainID, []string{"http://user:secret@" + closed + ":x/v3/KEY?apikey=KEY2"}, opts)
	failed("unparsable", err)

	// A run through faults, and calls made during them.
	var logs stacktest.LogBuffer
	w := stacktest.NewWorld(t, 1, stacktest.Lively)
	w.LogTo = &logs
	w.EVM.CallTimeout = opts.CallTimeout
	host := strings.TrimPrefix(w.Proxy.URL, "http://")
	w.Cfg.Chains[0].RPCURLs = []string{keyed("http", host)}
	n := w.Node(t, "n")
	signer := w.Keys[0].Address
	ids := []string{n.CreateTx(t, stacktest.Transfer(signer, big.NewInt(1))).ID, n.CreateTx(t, stacktest.Transfer(signer, big.NewInt(2))).ID}

	stop := w.Run(t, []*stacktest.Node{n}, stacktest.RunOptions{})
	for _, f := range []rpcproxy.Fault{
		{Drop: true},
		{HTTPStatus: http.StatusBadGateway},
		{HTTPStatus: http.StatusUnauthorized},
		{RPCError: &rpcproxy.RPCError{Code: -32603, Message: "internal error"}},
		{Delay: 3 * time.Second},
	} {
		w.Proxy.FailAll(f)
		_, err := n.Client.Head(ctx)
		failed("head", err)
		if f.Delay == 0 { // one timeout is enough
			_, err = n.Client.Receipts(ctx, []common.Hash{{1}, {2}})
			failed("receipts", err)
			for _, err := range n.Client.SendRawTransactions(ctx, [][]byte{{1}, {2}}) {
				failed("broadcast batch", err)
			}
		}
		seen := len(w.Proxy.Calls())
		testsupport.Eventually(t, 20*time.Second, "the run to meet the fault too", func() bool { return len(w.Proxy.Calls()) > seen })
		w.Proxy.Heal()
	}
	for _, id := range ids {
		w.WaitState(t, id, txm.StateConfirmed, 60*time.Second)
	}
	stop()

	require.Contains(t, logs.String(), "endpoint 0 (http://"+host+"/...)", "the logs name the endpoint by its host")
	sources := append(scanned(t, w, n, signer, ids), logs.String())
	sources = append(sources, errs...)
	for _, s := range sources {
		for _, secret := range secrets {
			if strings.Contains(s, secret) {
				t.Errorf("%q leaked: %.300s", secret, s[max(0, strings.Index(s, secret)-150):])
			}
		}
	}
	t.Logf("scanned %d KiB of logs, %d errors, %d rows and answers", len(logs.String())/1024, len(errs), len(sources)-len(errs)-1)
}
