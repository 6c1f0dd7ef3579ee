package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"math/big"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/functions/internal/stacktest"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/txm"
)

// simAnswer is what the tests read of a create's or a get's answer.
type simAnswer struct {
	status int
	body   map[string]any
}

// postJSON sends body to url (with token as a bearer token when not empty)
// and decodes the answer.
func postJSON(t testing.TB, method, url, token string, body any) simAnswer {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, url, rd)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	a := simAnswer{status: resp.StatusCode}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&a.body))
	return a
}

func hexData(b []byte) string { return "0x" + common.Bytes2Hex(b) }

func pack(t testing.TB, c *evmtest.Contract, method string, args ...any) []byte {
	t.Helper()
	data, err := c.Pack(method, args...)
	require.NoError(t, err)
	return data
}

// managedRows counts the transactions of signer.
func managedRows(t testing.TB, w *stacktest.World, signer common.Address) int {
	t.Helper()
	var n int
	require.NoError(t, w.DB.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM managed_tx WHERE signer = $1`, txm.CanonicalAddress(signer)).Scan(&n))
	return n
}

func TestIssue47_RevertKinds422(t *testing.T) {
	w := stacktest.NewWorld(t, 2)
	deployer, from := w.Keys[1], w.Keys[0].Address
	rev := w.Chain.MustDeploy(t, deployer, evmtest.Reverter())
	nd := w.Node(t, "a")
	url := nd.APIURL + "/v1/transactions"
	call := func(data []byte, extra map[string]any) simAnswer {
		body := map[string]any{"chainId": evmtest.ChainID, "from": from, "to": rev, "data": hexData(data)}
		for k, v := range extra {
			body[k] = v
		}
		return postJSON(t, http.MethodPost, url, "", body)
	}
	first := postJSON(t, http.MethodPost, url, "", map[string]any{"chainId": evmtest.ChainID, "from": from,
		"to": stacktest.Dead, "value": "1"})
	require.Equal(t, http.StatusAccepted, first.status, "%v", first.body)
	require.EqualValues(t, 0, first.body["nonce"])

	revertOf := func(a simAnswer) map[string]any {
		t.Helper()
		require.Equal(t, http.StatusUnprocessableEntity, a.status, "%v", a.body)
		assert.Equal(t, "https://txfence.dev/problems/execution-reverted", a.body["type"])
		r, ok := a.body["revert"].(map[string]any)
		require.True(t, ok, "the problem has the decoded revert: %v", a.body)
		return r
	}
	reverter := evmtest.Reverter()

	r := revertOf(call(pack(t, reverter, "failWithReason"), nil))
	assert.Equal(t, "error", r["kind"])
	assert.NotEmpty(t, r["reason"])
	assert.Equal(t, "0x08c379a0", r["selector"])

	r = revertOf(call(pack(t, reverter, "failWithPanic", big.NewInt(0)), nil))
	assert.Equal(t, "panic", r["kind"])
	assert.EqualValues(t, 0x12, r["panicCode"])
	assert.Equal(t, "division or modulo by zero", r["reason"])

	custom := pack(t, reverter, "failWithCustom", big.NewInt(5))
	r = revertOf(call(custom, nil))
	assert.Equal(t, "custom", r["kind"])
	sel := reverter.ABI.Errors["InsufficientBalance"].ID
	assert.Equal(t, hexData(sel[:4]), r["selector"])
	assert.Nil(t, r["args"], "no arguments without the error's ABI")

	for _, abi := range []any{
		"InsufficientBalance(address,uint256,uint256)",
		map[string]any{"type": "error", "name": "InsufficientBalance", "inputs": []map[string]any{
			{"name": "who", "type": "address"}, {"name": "need", "type": "uint256"}, {"name": "have", "type": "uint256"}}},
	} {
		r = revertOf(call(custom, map[string]any{"errorAbi": abi}))
		assert.Equal(t, "InsufficientBalance", r["name"])
		args, ok := r["args"].([]any)
		require.True(t, ok, "%v", r)
		require.Len(t, args, 3)
		assert.Equal(t, from.Hex(), args[0].(map[string]any)["value"])
		assert.Equal(t, "5", args[1].(map[string]any)["value"])
	}
	bad := call(custom, map[string]any{"errorAbi": "not a signature"})
	require.Equal(t, http.StatusUnprocessableEntity, bad.status, "%v", bad.body)
	assert.Contains(t, bad.body["errors"].([]any)[0].(map[string]any)["field"], "errorAbi")

	// No row and no nonce: the next create gets the nonce after the first.
	assert.Equal(t, 1, managedRows(t, w, from))
	next := postJSON(t, http.MethodPost, url, "", map[string]any{"chainId": evmtest.ChainID, "from": from,
		"to": stacktest.Dead, "value": "1"})
	require.Equal(t, http.StatusAccepted, next.status, "%v", next.body)
	assert.EqualValues(t, 1, next.body["nonce"])
}

func TestIssue47_EffectsShown(t *testing.T) {
	w := stacktest.NewWorld(t, 2)
	from, to := w.Keys[0].Address, common.HexToAddress("0x00000000000000000000000000000000000a11ce")
	token := w.Chain.MustDeploy(t, w.Keys[1], evmtest.ERC20(), "Test", "TST", from, big.NewInt(1_000_000))
	nd := w.Node(t, "a")
	created := postJSON(t, http.MethodPost, nd.APIURL+"/v1/transactions", "", map[string]any{"chainId": evmtest.ChainID,
		"from": from, "to": token, "data": hexData(pack(t, evmtest.ERC20(), "transfer", to, big.NewInt(250)))})
	require.Equal(t, http.StatusAccepted, created.status, "%v", created.body)
	want := map[string]any{"kind": "erc20_transfer", "token": txm.CanonicalAddress(token), "from": txm.CanonicalAddress(from),
		"to": txm.CanonicalAddress(to), "amount": "250"}
	assert.Equal(t, []any{want}, created.body["effects"], "the 202 shows the effects")

	got := postJSON(t, http.MethodGet, nd.APIURL+"/v1/transactions/"+created.body["id"].(string), "", nil)
	require.Equal(t, http.StatusOK, got.status, "%v", got.body)
	assert.Equal(t, []any{want}, got.body["effects"], "the stored transaction shows its effects")
	assert.Equal(t, "simulateV1", got.body["simulation"])
	assert.NotNil(t, got.body["gasLimit"], "the simulation's estimate is the gas limit")
	status := postJSON(t, http.MethodGet, nd.APIURL+"/v1/signers/"+from.Hex(), "", nil)
	require.Equal(t, http.StatusOK, status.status, "%v", status.body)
	assert.Equal(t, "simulateV1", status.body["simulation"], "the signer status says how its chain simulates")

	// A plain transfer is not simulated: its effect is its value.
	plain := postJSON(t, http.MethodPost, nd.APIURL+"/v1/transactions", "", map[string]any{"chainId": evmtest.ChainID,
		"from": from, "to": to, "value": "7"})
	require.Equal(t, http.StatusAccepted, plain.status, "%v", plain.body)
	got = postJSON(t, http.MethodGet, nd.APIURL+"/v1/transactions/"+plain.body["id"].(string), "", nil)
	assert.Equal(t, []any{map[string]any{"kind": "native", "from": txm.CanonicalAddress(from), "to": txm.CanonicalAddress(to),
		"amount": "7"}}, got.body["effects"])
	assert.Nil(t, got.body["simulation"])
}

func TestIssue47_PlainTransferNoSimulation(t *testing.T) {
	w := stacktest.NewWorld(t, 1)
	from := w.Keys[0].Address
	nd := w.Node(t, "a")
	w.Proxy.Reset()
	for i := 0; i < 5; i++ {
		body := map[string]any{"chainId": evmtest.ChainID, "from": from, "to": stacktest.Dead, "value": "1"}
		if i%2 == 1 {
			body["gasLimit"] = 21000
		}
		a := postJSON(t, http.MethodPost, nd.APIURL+"/v1/transactions", "", body)
		require.Equal(t, http.StatusAccepted, a.status, "%v", a.body)
	}
	assert.Zero(t, w.Proxy.Count("eth_simulateV1"), "a plain transfer is not simulated")
	assert.Zero(t, w.Proxy.Count("eth_call"), "a plain transfer is not simulated")
	assert.LessOrEqual(t, w.Proxy.Count("eth_getCode"), 1, "the code check is cached per address")
}

func TestIssue47_BatchOneSimulation(t *testing.T) {
	const n = 6
	w := stacktest.NewWorld(t, n+1, func(c *config.Config) { c.BatchWait = 500 * time.Millisecond; c.Workers = 1 })
	rev := w.Chain.MustDeploy(t, w.Keys[n], evmtest.Reverter())
	token := w.Chain.MustDeploy(t, w.Keys[n], evmtest.ERC20(), "Test", "TST", common.Address{}, big.NewInt(0))
	nd := w.Node(t, "a")
	w.Proxy.Reset()
	var wg sync.WaitGroup
	answers := make([]simAnswer, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			from := w.Keys[i].Address
			to, data := token, pack(t, evmtest.ERC20(), "mint", from, big.NewInt(int64(i+1)))
			if i == 0 {
				to, data = rev, pack(t, evmtest.Reverter(), "failWithReason")
			}
			answers[i] = postJSON(t, http.MethodPost, nd.APIURL+"/v1/transactions", "", map[string]any{
				"chainId": evmtest.ChainID, "from": from, "to": to, "data": hexData(data)})
		}()
	}
	wg.Wait()
	assert.Equal(t, http.StatusUnprocessableEntity, answers[0].status, "%v", answers[0].body)
	for i := 1; i < n; i++ {
		assert.Equal(t, http.StatusAccepted, answers[i].status, "%v", answers[i].body)
	}
	requests := map[int]bool{}
	sims := 0
	for _, c := range w.Proxy.Calls() {
		if c.Method == "eth_simulateV1" || c.Method == "eth_call" {
			requests[c.Request] = true
			sims++
		}
	}
	assert.Equal(t, n, sims, "each create is simulated once")
	assert.Len(t, requests, 1, "the creates of one batch are simulated in one request")
}

func TestIssue47_Advisory(t *testing.T) {
	w := stacktest.NewWorld(t, 2, func(c *config.Config) { c.Auth.Methods = []string{"apikey"} })
	from := w.Keys[0].Address
	rev := w.Chain.MustDeploy(t, w.Keys[1], evmtest.Reverter())
	advisory := w.APIKey(t, txm.Policy{Principal: "flow", Roles: []txm.Role{txm.RoleSender, txm.RoleReader},
		Signers: []common.Address{from}, SimulationAdvisory: true})
	enforced := w.APIKey(t, txm.Policy{Principal: "strict", Roles: []txm.Role{txm.RoleSender, txm.RoleReader},
		Signers: []common.Address{from}})
	nd := w.Node(t, "a")
	url := nd.APIURL + "/v1/transactions"
	body := map[string]any{"chainId": evmtest.ChainID, "from": from, "to": rev,
		"data": hexData(pack(t, evmtest.Reverter(), "failWithReason")), "gasLimit": 100_000}

	refused := postJSON(t, http.MethodPost, url, enforced, body)
	require.Equal(t, http.StatusUnprocessableEntity, refused.status, "an enforcing policy refuses: %v", refused.body)

	accepted := postJSON(t, http.MethodPost, url, advisory, body)
	require.Equal(t, http.StatusAccepted, accepted.status, "an advisory policy accepts: %v", accepted.body)
	got := postJSON(t, http.MethodGet, url+"/"+accepted.body["id"].(string), advisory, nil)
	require.Equal(t, http.StatusOK, got.status, "%v", got.body)
	assert.NotEmpty(t, got.body["simulationRevert"], "the revert is recorded: %v", got.body)
	assert.Equal(t, "simulateV1", got.body["simulation"])

	delete(body, "gasLimit")
	noGas := postJSON(t, http.MethodPost, url, advisory, body)
	assert.Equal(t, http.StatusUnprocessableEntity, noGas.status, "without a gas limit there is nothing to sign with: %v", noGas.body)
}

// TestIssue47_TokenPolicies: the creator's policy judges what the simulated
// transaction moves: an ERC-20 transfer above the token's cap, an approval
// of an unlimited allowance and a transfer to a recipient off the token
// recipients' list are 403 naming the rule, with no row; a transfer within
// them is 202 with its effects.
func TestIssue47_TokenPolicies(t *testing.T) {
	w := stacktest.NewWorld(t, 2, func(c *config.Config) { c.Auth.Methods = []string{"apikey"} })
	from, ok := w.Keys[0].Address, w.Keys[1].Address
	token := w.Chain.MustDeploy(t, w.Keys[1], evmtest.ERC20(), "Test", "TST", from, big.NewInt(1_000_000))
	key := w.APIKey(t, txm.Policy{Principal: "treasury", Roles: []txm.Role{txm.RoleSender, txm.RoleReader},
		Signers:              []common.Address{from},
		Tokens:               []txm.TokenRule{{ChainID: evmtest.ChainID, Token: token, MaxPerTx: big.NewInt(100)}},
		TokenRecipients:      []common.Address{ok},
		NoUnlimitedApprovals: true})
	url := w.Node(t, "a").APIURL + "/v1/transactions"
	send := func(data []byte) simAnswer {
		return postJSON(t, http.MethodPost, url, key, map[string]any{
			"chainId": evmtest.ChainID, "from": from, "to": token, "data": hexData(data)})
	}
	erc20 := evmtest.ERC20()
	refused := func(a simAnswer, rule string) {
		t.Helper()
		require.Equal(t, http.StatusForbidden, a.status, "%v", a.body)
		assert.Equal(t, rule, a.body["rule"], "%v", a.body)
	}

	refused(send(pack(t, erc20, "transfer", ok, big.NewInt(101))), txm.RuleTokenMaxPerTx)
	refused(send(pack(t, erc20, "transfer", stacktest.Dead, big.NewInt(5))), txm.RuleTokenRecipients)
	max := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1))
	refused(send(pack(t, erc20, "approve", ok, max)), txm.RuleUnlimitedApprovals)
	assert.Zero(t, managedRows(t, w, from), "a refusal writes nothing")

	a := send(pack(t, erc20, "transfer", ok, big.NewInt(100)))
	require.Equal(t, http.StatusAccepted, a.status, "%v", a.body)
	effects, _ := a.body["effects"].([]any)
	require.Len(t, effects, 1, "%v", a.body)
	e := effects[0].(map[string]any)
	assert.Equal(t, "erc20_transfer", e["kind"])
	assert.Equal(t, "100", e["amount"])
	assert.EqualValues(t, 0, a.body["nonce"])
}

// TestIssue47_EffectsInListAndReplay: the effects, the simulation method
// and an advisory simulation's revert are in every answer that shows the
// transaction, not only GET by id: a page of the list, the list by request
// id, and the 200 of an idempotent replay.
func TestIssue47_EffectsInListAndReplay(t *testing.T) {
	w := stacktest.NewWorld(t, 2, func(c *config.Config) { c.Auth.Methods = []string{"apikey"} })
	from, to := w.Keys[0].Address, common.HexToAddress("0x00000000000000000000000000000000000a11ce")
	token := w.Chain.MustDeploy(t, w.Keys[1], evmtest.ERC20(), "Test", "TST", from, big.NewInt(1_000_000))
	rev := w.Chain.MustDeploy(t, w.Keys[1], evmtest.Reverter())
	key := w.APIKey(t, txm.Policy{Principal: "flow", Roles: []txm.Role{txm.RoleSender, txm.RoleReader},
		Signers: []common.Address{from}, SimulationAdvisory: true})
	url := w.Node(t, "a").APIURL + "/v1/transactions"

	bodies := []map[string]any{
		{"requestId": "erc20", "to": token, "data": hexData(pack(t, evmtest.ERC20(), "transfer", to, big.NewInt(250)))},
		{"requestId": "plain", "to": to, "value": "7"},
		{"requestId": "reverts", "to": rev, "data": hexData(pack(t, evmtest.Reverter(), "failWithReason")), "gasLimit": 100_000},
	}
	for _, b := range bodies {
		b["chainId"], b["from"] = evmtest.ChainID, from
	}
	erc20 := []any{map[string]any{"kind": "erc20_transfer", "token": txm.CanonicalAddress(token), "from": txm.CanonicalAddress(from),
		"to": txm.CanonicalAddress(to), "amount": "250"}}
	plain := []any{map[string]any{"kind": "native", "from": txm.CanonicalAddress(from), "to": txm.CanonicalAddress(to), "amount": "7"}}
	// check says what an answer must show of each transaction.
	check := func(what string, got map[string]any) {
		t.Helper()
		switch got["requestId"] {
		case "erc20":
			assert.Equal(t, erc20, got["effects"], "%s: the ERC-20 transfer's effects", what)
			assert.Equal(t, "simulateV1", got["simulation"], what)
			assert.Nil(t, got["simulationRevert"], what)
		case "plain":
			assert.Equal(t, plain, got["effects"], "%s: a plain transfer's effect is its value", what)
			assert.Nil(t, got["simulation"], what)
		case "reverts":
			assert.Equal(t, []any{}, got["effects"], "%s: a reverted simulation moves nothing", what)
			assert.Equal(t, "simulateV1", got["simulation"], what)
			assert.NotEmpty(t, got["simulationRevert"], "%s: the advisory simulation's revert", what)
		default:
			t.Fatalf("%s: unexpected transaction %v", what, got)
		}
	}
	for _, b := range bodies {
		a := postJSON(t, http.MethodPost, url, key, b)
		require.Equal(t, http.StatusAccepted, a.status, "%v", a.body)
		again := postJSON(t, http.MethodPost, url, key, b)
		require.Equal(t, http.StatusOK, again.status, "a replay: %v", again.body)
		require.Equal(t, a.body["id"], again.body["id"])
		check("the replay's 200", again.body)

		one := postJSON(t, http.MethodGet, url+"?from="+from.Hex()+"&requestId="+b["requestId"].(string), key, nil)
		require.Equal(t, http.StatusOK, one.status, "%v", one.body)
		check("the list by request id", one.body)
	}
	page := postJSON(t, http.MethodGet, url+"?from="+from.Hex(), key, nil)
	require.Equal(t, http.StatusOK, page.status, "%v", page.body)
	items, _ := page.body["items"].([]any)
	require.Len(t, items, len(bodies), "%v", page.body)
	for _, it := range items {
		check("a page of the list", it.(map[string]any))
	}
}
