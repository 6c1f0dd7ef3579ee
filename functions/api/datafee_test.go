package api_test

import (
	"context"
	"fmt"
	"math"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/params"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/functions/internal/browsertest"
	"github.com/txfence/txfence/functions/internal/stacktest"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/evm"
	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/txm"
)

// dataFeeWorld is a world whose chain carries the L2 predeploys in genesis
// and is of the chain profile kind that prices data fees as kind says.
func dataFeeWorld(t *testing.T, kind evm.DataFeeKind) *stacktest.World {
	t.Helper()
	profile := map[evm.DataFeeKind]config.ChainKind{evm.DataFeeOPStack: config.KindOPStack, evm.DataFeeArbitrum: config.KindArbitrum}[kind]
	require.NotEmpty(t, profile)
	return stacktest.NewWorldWithAlloc(t, 2, evmtest.InstallPredeploys, keyed, func(c *config.Config) {
		c.ChainProfiles = map[uint64]config.ProfileSpec{evmtest.ChainID: {Kind: profile}}
	})
}

// l1Fee is the GasPriceOracle predeploy's getL1Fee of raw.
func l1Fee(t *testing.T, w *stacktest.World, raw []byte) *big.Int {
	t.Helper()
	out, err := w.Chain.Backend.Client().CallContract(context.Background(), ethereum.CallMsg{To: &evmtest.GasPriceOracleAddress,
		Data: pack(t, evmtest.GasPriceOracle(), "getL1Fee", raw)}, nil)
	require.NoError(t, err)
	vals, err := evmtest.GasPriceOracle().ABI.Unpack("getL1Fee", out)
	require.NoError(t, err)
	return vals[0].(*big.Int)
}

// costOf is a transaction's cost as an answer shows it.
func costOf(t *testing.T, a simAnswer) (worstCase, executionFee, dataFee string) {
	t.Helper()
	c, ok := a.body["cost"].(map[string]any)
	require.True(t, ok, "the answer shows the cost: %v", a.body)
	worstCase, _ = c["worstCase"].(string)
	executionFee, _ = c["executionFee"].(string)
	dataFee, _ = c["dataFee"].(string)
	return worstCase, executionFee, dataFee
}

func sum(vs ...*big.Int) *big.Int {
	out := new(big.Int)
	for _, v := range vs {
		out.Add(out, v)
	}
	return out
}

// TestIssue48_DataFeeCost: on an op-stack chain (the GasPriceOracle
// predeploy in genesis, the L1 dear), a transfer's recorded worst-case
// cost is its value, its gas at the fee ceiling and exactly the
// predeploy's L1 fee of the transaction as it will be signed (at the nonce
// placeholder and the ceiling, before it has either); the create's answer,
// a get and the row say so. A per-transaction cap that the value and the
// L2 gas alone pass, but the total does not, refuses the create: 403
// naming max_value, the data fee said, nothing written; so does the
// nodes' cap on a transaction's fee (422). The transaction then confirms, and the L1 fee of the bytes it was sent as is within
// what was counted.
func TestIssue48_DataFeeCost(t *testing.T) {
	w := dataFeeWorld(t, evm.DataFeeOPStack)
	from, to := w.Keys[0].Address, common.HexToAddress("0x00000000000000000000000000000000000b0b48")
	// The L1 at 200 gwei: a transfer's data fee is about its execution's
	// at a 10 gwei ceiling.
	l1BaseFee := big.NewInt(200 * params.GWei)
	w.Chain.MustTransact(t, w.Keys[1], evmtest.GasPriceOracleAddress, nil, pack(t, evmtest.GasPriceOracle(), "setL1BaseFee", l1BaseFee))
	ceiling := big.NewInt(10 * params.GWei)
	value := big.NewInt(1000)
	open := w.APIKey(t, txm.Policy{Principal: "open@example.com", Roles: []txm.Role{txm.RoleSender, txm.RoleReader},
		Signers: []common.Address{from}, MaxFeePerGas: ceiling})
	a := w.Node(t, "a")
	url := a.APIURL + "/v1/transactions"

	created := postJSON(t, http.MethodPost, url, open, map[string]any{"chainId": evmtest.ChainID, "from": from, "to": to,
		"value": value.String()})
	require.Equal(t, http.StatusAccepted, created.status, "%v", created.body)
	id := created.body["id"].(string)
	gas := uint64(created.body["gasLimit"].(float64))
	execution := new(big.Int).Mul(new(big.Int).SetUint64(gas), ceiling)

	// The transaction as it was priced, signed for real: the signer's key
	// gives r and s of 32 bytes each here, so its length is the priced one.
	priced, err := types.SignTx(types.NewTx(&types.DynamicFeeTx{ChainID: big.NewInt(evmtest.ChainID), Nonce: math.MaxUint32,
		GasTipCap: ceiling, GasFeeCap: ceiling, Gas: gas, To: &to, Value: value}),
		types.LatestSignerForChainID(big.NewInt(evmtest.ChainID)), w.Keys[0].Key)
	require.NoError(t, err)
	raw, err := priced.MarshalBinary()
	require.NoError(t, err)
	dataFee := l1Fee(t, w, raw)
	require.Equal(t, new(big.Int).Mul(big.NewInt(int64(16*len(raw)+188)), l1BaseFee), dataFee, "the predeploy's formula")
	require.Positive(t, dataFee.Sign())

	worst := sum(value, execution, dataFee)
	for _, ans := range []simAnswer{created, postJSON(t, http.MethodGet, url+"/"+id, open, nil)} {
		gotWorst, gotExec, gotData := costOf(t, ans)
		assert.Equal(t, dataFee.String(), gotData, "exactly the predeploy's L1 fee")
		assert.Equal(t, execution.String(), gotExec, "the gas at the ceiling")
		assert.Equal(t, worst.String(), gotWorst, "value + execution + data")
	}
	var rowExec, rowData string
	require.NoError(t, w.DB.Pool.QueryRow(context.Background(), `SELECT execution_fee::text, data_fee::text FROM managed_tx WHERE id = $1`, id).
		Scan(&rowExec, &rowData))
	assert.Equal(t, execution.String(), rowExec)
	assert.Equal(t, dataFee.String(), rowData)

	// The signer's balance check counts the data fee with what the open
	// transaction may spend (unsigned, without fees of its own: its value).
	page := postJSON(t, http.MethodGet, a.APIURL+"/v1/signers?prefix="+txm.CanonicalAddress(from), open, nil)
	require.Equal(t, http.StatusOK, page.status, "%v", page.body)
	items, _ := page.body["items"].([]any)
	require.Len(t, items, 1, "%v", page.body)
	assert.Equal(t, sum(value, dataFee).String(), items[0].(map[string]any)["inFlightNeed"])

	// A cap between value + execution and the whole worst case.
	limit := sum(value, execution, new(big.Int).Div(dataFee, big.NewInt(2)))
	capped := w.APIKey(t, txm.Policy{Principal: "capped@example.com", Roles: []txm.Role{txm.RoleSender, txm.RoleReader},
		Signers: []common.Address{from}, MaxFeePerGas: ceiling, MaxValue: limit})
	rows := managedRows(t, w, from)
	refused := postJSON(t, http.MethodPost, url, capped, map[string]any{"chainId": evmtest.ChainID, "from": from, "to": to,
		"value": value.String()})
	require.Equal(t, http.StatusForbidden, refused.status, "the L2 gas alone passes the cap, the total does not: %v", refused.body)
	assert.Equal(t, txm.RuleMaxValue, refused.body["rule"])
	assert.Contains(t, refused.body["detail"], "L1 data fee of "+dataFee.String()+" wei")
	assert.Equal(t, rows, managedRows(t, w, from), "nothing written")

	// The nodes' cap on a transaction's fee counts it too: a create whose
	// own fee at its gas limit passes the cap, but not with its data fee,
	// is one no node would take (422), nothing written.
	w.Cfg.TxFeeCap = sum(execution, new(big.Int).Div(dataFee, big.NewInt(2)))
	b := w.Node(t, "b")
	overCap := postJSON(t, http.MethodPost, b.APIURL+"/v1/transactions", open, map[string]any{"chainId": evmtest.ChainID,
		"from": from, "to": to, "value": value.String(), "gasLimit": gas, "maxFeePerGas": ceiling.String(),
		"maxPriorityFeePerGas": ceiling.String()})
	require.Equal(t, http.StatusUnprocessableEntity, overCap.status, "%v", overCap.body)
	assert.Contains(t, fmt.Sprint(overCap.body["errors"]), "an L1 data fee of "+dataFee.String()+" wei included")
	assert.Equal(t, rows, managedRows(t, w, from), "nothing written")

	// Sent and confirmed: the bytes signed (a real nonce and the fees
	// chosen at signing) cost no more L1 fee than was counted.
	stop := w.Run(t, []*stacktest.Node{a}, stacktest.RunOptions{})
	w.WaitState(t, id, txm.StateConfirmed, 30*time.Second)
	stop()
	var sent []byte
	require.NoError(t, w.DB.Pool.QueryRow(context.Background(), `SELECT raw_tx FROM tx_attempt WHERE tx_id = $1 ORDER BY attempt_no LIMIT 1`, id).
		Scan(&sent))
	assert.LessOrEqual(t, l1Fee(t, w, sent).Cmp(dataFee), 0, "the signed bytes' fee is within the worst case")
}

// TestIssue48_DataFeeArbitrum: on an arbitrum chain (the NodeInterface in
// genesis), a create whose simulation prices its gas gets its data fee from
// gasEstimateL1Component, in L2 gas, at the fee ceiling, in the one batch
// its allocation batch's calls are priced in; the cap counts it.
func TestIssue48_DataFeeArbitrum(t *testing.T) {
	w := dataFeeWorld(t, evm.DataFeeArbitrum)
	from, to := w.Keys[0].Address, common.HexToAddress("0x00000000000000000000000000000000000a4b14")
	ceiling := big.NewInt(10 * params.GWei)
	data := make([]byte, 100)
	for i := range data {
		data[i] = byte(i + 1)
	}
	l1Gas := big.NewInt(int64((len(data) + 140)) * evmtest.GenesisGasPerByte.Int64())
	dataFee := new(big.Int).Mul(l1Gas, ceiling)
	open := w.APIKey(t, txm.Policy{Principal: "open@example.com", Roles: []txm.Role{txm.RoleSender, txm.RoleReader},
		Signers: []common.Address{from}, MaxFeePerGas: ceiling})
	a := w.Node(t, "a")
	url := a.APIURL + "/v1/transactions"

	w.Proxy.Reset()
	created := postJSON(t, http.MethodPost, url, open, map[string]any{"chainId": evmtest.ChainID, "from": from, "to": to,
		"data": hexData(data)})
	require.Equal(t, http.StatusAccepted, created.status, "%v", created.body)
	require.NotEmpty(t, created.body["simulation"], "a call with data is simulated")
	gas := uint64(created.body["gasLimit"].(float64))
	execution := new(big.Int).Mul(new(big.Int).SetUint64(gas), ceiling)
	worst, exec, fee := costOf(t, created)
	assert.Equal(t, dataFee.String(), fee, "(100 + 140) bytes × 16 gas, at the ceiling")
	assert.Equal(t, execution.String(), exec)
	assert.Equal(t, sum(execution, dataFee).String(), worst)
	var oracle int
	for _, c := range w.Proxy.Calls() {
		if c.Method == "eth_call" && len(c.Params) > 0 && strings.Contains(strings.ToLower(string(c.Params)), strings.ToLower(evmtest.NodeInterfaceAddress.Hex()[2:])) {
			oracle++
		}
	}
	assert.Equal(t, 1, oracle, "one call of the NodeInterface")

	capped := w.APIKey(t, txm.Policy{Principal: "capped@example.com", Roles: []txm.Role{txm.RoleSender, txm.RoleReader},
		Signers: []common.Address{from}, MaxFeePerGas: ceiling, MaxValue: sum(execution, new(big.Int).Div(dataFee, big.NewInt(2)))})
	refused := postJSON(t, http.MethodPost, url, capped, map[string]any{"chainId": evmtest.ChainID, "from": from, "to": to,
		"data": hexData(data)})
	require.Equal(t, http.StatusForbidden, refused.status, "%v", refused.body)
	assert.Equal(t, txm.RuleMaxValue, refused.body["rule"])
	assert.Contains(t, refused.body["detail"], "L1 data fee")
}

// TestIssue48_ConsoleShowsDataFee: the console's transaction view shows
// the worst-case cost and its two parts, the L2 execution fee bound and
// the L1 data fee, as the API gives them. A screenshot is saved as an
// artifact.
func TestIssue48_ConsoleShowsDataFee(t *testing.T) {
	w := dataFeeWorld(t, evm.DataFeeOPStack)
	from, to := w.Keys[0].Address, common.HexToAddress("0x00000000000000000000000000000000000c0c48")
	w.Chain.MustTransact(t, w.Keys[1], evmtest.GasPriceOracleAddress, nil,
		pack(t, evmtest.GasPriceOracle(), "setL1BaseFee", big.NewInt(200*params.GWei)))
	key := w.APIKey(t, txm.Policy{Principal: "treasury@example.com", Roles: []txm.Role{txm.RoleSender, txm.RoleReader},
		Signers: []common.Address{from}, MaxFeePerGas: big.NewInt(10 * params.GWei)})
	a := w.Node(t, "a")
	created := postJSON(t, http.MethodPost, a.APIURL+"/v1/transactions", key, map[string]any{"chainId": evmtest.ChainID,
		"from": from, "to": to, "value": "1000"})
	require.Equal(t, http.StatusAccepted, created.status, "%v", created.body)
	worst, exec, fee := costOf(t, created)
	require.NotEqual(t, "0", fee)

	ctx := browsertest.New(t)
	signIn(t, ctx, a.APIURL, key)
	browsertest.Run(t, ctx, 5*time.Second, chromedp.Evaluate(`location.hash = '#/tx/`+created.body["id"].(string)+`'`, nil))
	browsertest.Poll(t, ctx, "the transaction's cost", `document.getElementById('tx-data-fee') !== null`, 10*time.Second)
	wei := func(id string) string {
		return browsertest.Eval[string](t, ctx, `document.getElementById('`+id+`').dataset.wei`)
	}
	assert.Equal(t, worst, wei("tx-cost"))
	assert.Equal(t, exec, wei("tx-execution-fee"))
	assert.Equal(t, fee, wei("tx-data-fee"))
	labels := browsertest.Eval[string](t, ctx, `document.querySelector('#tx-body dl').textContent`)
	assert.Contains(t, labels, "Worst-case cost")
	assert.Contains(t, labels, "L2 execution fee")
	assert.Contains(t, labels, "L1 data fee")
	dataFee, ok := new(big.Int).SetString(fee, 10)
	require.True(t, ok)
	assert.Contains(t, browsertest.Eval[string](t, ctx, `document.getElementById('tx-data-fee').textContent`),
		"("+commas(dataFee)+" wei)", "the data fee in wei, as the page writes amounts")
	var png []byte
	browsertest.Run(t, ctx, 20*time.Second, chromedp.FullScreenshot(&png, 100))
	artifact(t, "issue48-data-fee.png", png)
}

// commas writes v with thousands separators, as the console does.
func commas(v *big.Int) string {
	s := v.String()
	out := make([]byte, 0, len(s)+len(s)/3)
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}
