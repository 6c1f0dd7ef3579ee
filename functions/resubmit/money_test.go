package resubmit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/params"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/functions/internal/stacktest"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/evm/rpcproxy"
	"github.com/txfence/txfence/shared/txm"
)

// answer is an API answer: its status and body, decoded as a problem and
// as a transaction.
type answer struct {
	status int
	raw    []byte
	rule   string
	errors []struct{ Field, Message string }
	tx     struct {
		ID    string `json:"id"`
		Nonce uint64 `json:"nonce"`
	}
}

// apiPost sends body to the node's API at path, with key as the bearer token
// ("" for none).
func apiPost(t *testing.T, n *stacktest.Node, path, key string, body map[string]any) answer {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, n.APIURL+path, bytes.NewReader(b))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var a answer
	a.status = resp.StatusCode
	var buf bytes.Buffer
	_, err = buf.ReadFrom(resp.Body)
	require.NoError(t, err)
	a.raw = buf.Bytes()
	var p struct {
		Rule   string                            `json:"rule"`
		Errors []struct{ Field, Message string } `json:"errors"`
	}
	_ = json.Unmarshal(a.raw, &p)
	a.rule, a.errors = p.Rule, p.Errors
	_ = json.Unmarshal(a.raw, &a.tx)
	return a
}

func transferBody(signer common.Address, value string) map[string]any {
	return map[string]any{"chainId": evmtest.ChainID, "from": signer.Hex(), "to": stacktest.Dead.Hex(), "value": value}
}

// rowCount counts managed_tx rows and cursors.
func rowCount(t *testing.T, w *stacktest.World) (txs, cursors int) {
	t.Helper()
	require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM managed_tx), (SELECT count(*) FROM signer_nonce_cursor)`).
		Scan(&txs, &cursors))
	return txs, cursors
}

// TestIssue44_FeesInCaps: a sender whose value cap is 0 cannot move a wei
// through fees: a large gas limit, a large max fee, both, or neither given
// (estimated, at the chain's fee cap) are 403 max_value, with no row, no
// nonce, and the signer's balance unchanged. A policy's maxGasLimit and
// maxFeePerGas refuse what passes them, naming their rule; what stays
// within them is created, with the policy's fee ceiling on the row.
func TestIssue44_FeesInCaps(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 1, stacktest.Lively, func(c *config.Config) { c.Auth.Methods = []string{"apikey"} })
	n := w.Node(t, "n")
	signer := w.Keys[0].Address
	zero := w.APIKey(t, txm.Policy{Principal: "zero@svc", Roles: []txm.Role{txm.RoleSender}, Signers: []common.Address{signer},
		MaxValue: big.NewInt(0)})
	balance := func() *big.Int {
		b, err := w.Chain.Backend.Client().BalanceAt(ctx, signer, nil)
		require.NoError(t, err)
		return b
	}
	before := balance()

	for name, extra := range map[string]map[string]any{
		"a large gas limit":   {"gasLimit": 10_000_000},
		"a large max fee":     {"gasLimit": 21000, "maxFeePerGas": gwei(1000), "maxPriorityFeePerGas": "1"},
		"both":                {"gasLimit": 10_000_000, "maxFeePerGas": gwei(1000), "maxPriorityFeePerGas": "1"},
		"a legacy gas price":  {"gasLimit": 10_000_000, "gasPrice": gwei(1000)},
		"estimated, no fees":  {},
		"a fee of 1 wei":      {"gasLimit": 21000, "maxFeePerGas": "1", "maxPriorityFeePerGas": "1"},
		"a value of 0 alone":  {"gasLimit": 21000},
		"a value and no data": {"gasLimit": 21000, "value": "1"},
	} {
		body := transferBody(signer, "0")
		for k, v := range extra {
			body[k] = v
		}
		a := apiPost(t, n, "/v1/transactions", zero, body)
		require.Equal(t, http.StatusForbidden, a.status, "%s: %s", name, a.raw)
		assert.Equal(t, txm.RuleMaxValue, a.rule, name)
	}
	txs, cursors := rowCount(t, w)
	assert.Zero(t, txs, "no row")
	assert.Zero(t, cursors, "no nonce")
	w.Mine(3)
	assert.Equal(t, before, balance(), "the signer's balance is unchanged")

	capped := w.APIKey(t, txm.Policy{Principal: "capped@svc", Roles: []txm.Role{txm.RoleSender}, Signers: []common.Address{signer},
		MaxValue: big.NewInt(params.Ether), MaxGasLimit: 100_000, MaxFeePerGas: big.NewInt(50 * params.GWei)})
	for _, c := range []struct {
		name, rule string
		extra      map[string]any
	}{
		{"a gas limit above maxGasLimit", txm.RuleMaxGasLimit, map[string]any{"gasLimit": 200_000}},
		{"a max fee above maxFeePerGas", txm.RuleMaxFee, map[string]any{"gasLimit": 21000, "maxFeePerGas": gwei(51),
			"maxPriorityFeePerGas": "1"}},
		{"a tip above maxFeePerGas", txm.RuleMaxFee, map[string]any{"gasLimit": 21000, "maxFeePerGas": gwei(60),
			"maxPriorityFeePerGas": gwei(60)}},
	} {
		body := transferBody(signer, "1")
		for k, v := range c.extra {
			body[k] = v
		}
		a := apiPost(t, n, "/v1/transactions", capped, body)
		require.Equal(t, http.StatusForbidden, a.status, "%s: %s", c.name, a.raw)
		assert.Equal(t, c.rule, a.rule, c.name)
	}
	txs, cursors = rowCount(t, w)
	assert.Zero(t, txs+cursors, "refusals write nothing")

	ok := apiPost(t, n, "/v1/transactions", capped, transferBody(signer, "1"))
	require.Equal(t, http.StatusAccepted, ok.status, "%s", ok.raw)
	var ceiling string
	require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT fee_ceiling::text FROM managed_tx WHERE id = $1`, ok.tx.ID).Scan(&ceiling))
	assert.Equal(t, gwei(50), ceiling, "every attempt of it stays at or below the policy's maxFeePerGas")
	assert.Zero(t, ok.tx.Nonce)
}

// TestIssue44_TxFeeCapAtCreate: a create whose own fee at its gas limit
// is above the nodes' cap on a transaction's fee (geth's 1 ether) is 422,
// with no row and no nonce; below it, it is created.
func TestIssue44_TxFeeCapAtCreate(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 1, stacktest.Lively)
	n := w.Node(t, "n")
	signer := w.Keys[0].Address
	for _, body := range []map[string]any{
		{"gasLimit": 1_000_000, "maxFeePerGas": gwei(2000), "maxPriorityFeePerGas": "1"},
		{"gasLimit": 1_000_000, "gasPrice": gwei(2000)},
	} {
		b := transferBody(signer, "1")
		for k, v := range body {
			b[k] = v
		}
		a := apiPost(t, n, "/v1/transactions", "", b)
		require.Equal(t, http.StatusUnprocessableEntity, a.status, "%s", a.raw)
		require.NotEmpty(t, a.errors)
		assert.Contains(t, a.errors[0].Message, "cap", "%s", a.raw)
	}
	txs, cursors := rowCount(t, w)
	assert.Zero(t, txs+cursors, "no row, no nonce")
	a := apiPost(t, n, "/v1/transactions", "", map[string]any{"chainId": evmtest.ChainID, "from": signer.Hex(), "to": stacktest.Dead.Hex(), "value": "1",
		"gasLimit": 21000, "maxFeePerGas": gwei(2000), "maxPriorityFeePerGas": "1"})
	require.Equal(t, http.StatusAccepted, a.status, "0.042 ether of fees at most: %s", a.raw)
}

// permanentRefusals are the node's answers that no waiting changes, as
// geth words them (shared/evm tests each node's wording).
var permanentRefusals = []struct {
	reason  txm.BroadcastReason
	message string
}{
	{txm.ReasonTxFeeCap, "tx fee (2.10 ether) exceeds the configured cap (1.00 ether)"},
	{txm.ReasonOversized, "oversized data: transaction size 140117, limit 131072"},
	{txm.ReasonInvalidSignature, "invalid sender: invalid transaction v, r, s values"},
	{txm.ReasonWrongChainID, "invalid sender: invalid chain id for signer: have 1 want 1337"},
	{txm.ReasonExceedsBlockGasLimit, "exceeds block gas limit"},
	{txm.ReasonIntrinsicGas, "intrinsic gas too low: gas 20000, minimum needed 21000"},
}

// TestIssue44_PermanentRefusal: a transaction the node refuses for good
// (each refusal answered by the fault proxy to its payload, whatever fees
// it is signed with) ends FAILED_FINAL with the reason, its nonce filled
// by a 21,000-gas placeholder, and the signer's next ten transactions are
// CONFIRMED, with no operator action.
func TestIssue44_PermanentRefusal(t *testing.T) {
	t.Parallel()
	for _, c := range permanentRefusals {
		t.Run(string(c.reason), func(t *testing.T) {
			t.Parallel()
			w := stacktest.NewWorld(t, 1, stacktest.Lively)
			n := w.Node(t, "n")
			signer := w.Keys[0].Address
			victim := apiPost(t, n, "/v1/transactions", "", map[string]any{"chainId": evmtest.ChainID, "from": signer.Hex(),
				"to": stacktest.Dead.Hex(), "value": "7", "gasLimit": 50_000})
			require.Equal(t, http.StatusAccepted, victim.status, "%s", victim.raw)
			var later []string
			for i := range 10 {
				a := apiPost(t, n, "/v1/transactions", "", map[string]any{"chainId": evmtest.ChainID, "from": signer.Hex(),
					"to": stacktest.Dead.Hex(), "value": fmt.Sprint(i + 1), "gasLimit": 21000})
				require.Equal(t, http.StatusAccepted, a.status, "%s", a.raw)
				later = append(later, a.tx.ID)
			}
			// The node refuses the victim's payload (a transfer to 0xdead at
			// its nonce), however it is signed; its placeholder passes.
			var refusals atomic.Int64
			w.Proxy.Before("eth_sendRawTransaction", func(p json.RawMessage) *rpcproxy.Fault {
				tx, err := rawTxOf(p)
				if err != nil || tx.Nonce() != victim.tx.Nonce || tx.To() == nil || *tx.To() != stacktest.Dead {
					return nil
				}
				refusals.Add(1)
				return &rpcproxy.Fault{RPCError: &rpcproxy.RPCError{Code: -32000, Message: c.message}}
			})
			stop := w.Run(t, []*stacktest.Node{n}, stacktest.RunOptions{})
			defer stop()
			w.WaitState(t, victim.tx.ID, txm.StateFailedFinal, 30*time.Second)
			for _, id := range later {
				w.WaitState(t, id, txm.StateConfirmed, 30*time.Second)
			}
			stop()
			assert.Positive(t, refusals.Load())
			_, sub := w.TxState(t, victim.tx.ID)
			assert.Equal(t, string(c.reason), sub, "it ends with the node's reason")
			assert.Equal(t, []reported{{"FAILED_FINAL", false, string(c.reason)}}, reports(t, w, victim.tx.ID))
			as := attempts(t, w, victim.tx.ID)
			require.Len(t, as, 2, "the payload and the placeholder")
			assert.Equal(t, string(txm.AttemptPlaceholder), as[1].Kind)
			assert.Equal(t, "mined", as[1].Outcome)
			var gas int64
			require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT gas_limit FROM tx_attempt WHERE tx_id = $1 AND attempt_no = 2`,
				victim.tx.ID).Scan(&gas))
			assert.EqualValues(t, 21000, gas)
		})
	}
}

// TestIssue44_CancelGas: a cancel is a 21,000-gas self-transfer whatever
// the payload's gas limit. An admin cancels a 30M-gas transaction before
// it was ever sent, and a 10M-gas one the node keeps but never mines (its
// fee is below what the miner takes); a 30M-gas payload, which the real
// node refuses for good (above its per-transaction gas cap), gets a
// 21,000-gas placeholder. Each ends FAILED_FINAL, and the later nonce is
// CONFIRMED.
func TestIssue44_CancelGas(t *testing.T) {
	t.Parallel()
	// No automatic bump of the payloads: the admin's cancels are what fill
	// their nonces.
	w := stacktest.NewWorld(t, 1, stacktest.Lively, func(c *config.Config) { c.BumpAfter = time.Hour })
	n := w.Node(t, "n")
	signer := w.Keys[0].Address
	create := func(body map[string]any) answer {
		t.Helper()
		b := transferBody(signer, "1")
		for k, v := range body {
			b[k] = v
		}
		a := apiPost(t, n, "/v1/transactions", "", b)
		require.Equal(t, http.StatusAccepted, a.status, "%s", a.raw)
		return a
	}
	cancel := func(a answer, id string) {
		t.Helper()
		got := apiPost(t, n, "/v1/transactions/"+a.tx.ID+"/cancel", "", map[string]any{"actionId": id, "reason": "test"})
		require.Equal(t, http.StatusAccepted, got.status, "%s", got.raw)
	}

	unsent := create(map[string]any{"gasLimit": 30_000_000})
	cancel(unsent, "cancel-unsent")
	_, err := n.Resubmit.Pass(ctx) // carries out the admin's action
	require.NoError(t, err)
	kept := create(map[string]any{"gasLimit": 10_000_000, "maxFeePerGas": "1", "maxPriorityFeePerGas": "1"})
	refused := create(map[string]any{"gasLimit": 30_000_000})
	next := create(map[string]any{"gasLimit": 21000})
	_, err = n.Drain.Execute(ctx, evmtest.ChainID, signer)
	require.NoError(t, err)
	s, _ := w.TxState(t, kept.tx.ID)
	require.Equal(t, string(txm.StateTracking), s, "the node keeps it, and never mines it")
	cancel(kept, "cancel-kept")

	stop := w.Run(t, []*stacktest.Node{n}, stacktest.RunOptions{})
	defer stop()
	for _, a := range []answer{unsent, kept, refused} {
		w.WaitState(t, a.tx.ID, txm.StateFailedFinal, 30*time.Second)
	}
	w.WaitState(t, next.tx.ID, txm.StateConfirmed, 30*time.Second)
	stop()
	for id, want := range map[string]string{unsent.tx.ID: txm.SubStateCancelled, kept.tx.ID: txm.SubStateCancelled,
		refused.tx.ID: string(txm.ReasonExceedsBlockGasLimit)} {
		_, sub := w.TxState(t, id)
		assert.Equal(t, want, sub, "tx %s", id)
	}
	ids := []string{unsent.tx.ID, kept.tx.ID, refused.tx.ID}
	rows, err := w.DB.Pool.Query(ctx, `SELECT tx_id::text, kind, gas_limit FROM tx_attempt
WHERE tx_id = ANY($1::uuid[]) AND kind IN ('cancel', 'placeholder') AND outcome = 'mined'`, ids)
	require.NoError(t, err)
	defer rows.Close()
	seen := map[string]string{}
	for rows.Next() {
		var id, kind string
		var gas int64
		require.NoError(t, rows.Scan(&id, &kind, &gas))
		assert.EqualValues(t, 21000, gas, "%s of %s", kind, id)
		seen[id] = kind
	}
	require.NoError(t, rows.Err())
	assert.Equal(t, map[string]string{unsent.tx.ID: "cancel", kept.tx.ID: "cancel", refused.tx.ID: "placeholder"}, seen)
}

// gwei is n gwei in wei, as the API takes it.
func gwei(n int64) string { return new(big.Int).Mul(big.NewInt(n), big.NewInt(params.GWei)).String() }

// rawTxOf decodes the signed transaction of an eth_sendRawTransaction call.
func rawTxOf(params json.RawMessage) (*types.Transaction, error) {
	var args []string
	if err := json.Unmarshal(params, &args); err != nil || len(args) != 1 {
		return nil, fmt.Errorf("params %s", params)
	}
	b := common.FromHex(strings.TrimSpace(args[0]))
	tx := new(types.Transaction)
	return tx, tx.UnmarshalBinary(b)
}
