package api_test

import (
	"math/big"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/functions/internal/browsertest"
	"github.com/txfence/txfence/functions/internal/stacktest"
	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/txm"
)

// effectCells is an effect row as the transaction view shows it.
type effectCells struct {
	Kind  string   `json:"kind"`
	Cells []string `json:"cells"`
	Title []string `json:"titles"` // the full addresses behind the shortened ones
}

const readEffects = `Array.from(document.querySelectorAll('#tx-effects tr[data-kind]')).map(tr => ({kind: tr.dataset.kind,
  cells: Array.from(tr.cells).map(c => c.textContent.trim()),
  titles: Array.from(tr.querySelectorAll('[title]')).map(e => e.title)}))`

// TestIssue47_ConsoleEffects: the transaction view shows what the
// simulation at create showed: an ERC-20 transfer's effect row (kind,
// token, from labelled as the signer, to, amount; addresses shortened as
// elsewhere, the full ones in their titles) and the method; a call whose
// advisory simulation reverted shows its decoded reason. Screenshots are
// saved as artifacts.
func TestIssue47_ConsoleEffects(t *testing.T) {
	w := stacktest.NewWorld(t, 2, keyed)
	from, to := w.Keys[0].Address, common.HexToAddress("0x00000000000000000000000000000000000a11ce")
	token := w.Chain.MustDeploy(t, w.Keys[1], evmtest.ERC20(), "Test", "TST", from, big.NewInt(10_000_000))
	rev := w.Chain.MustDeploy(t, w.Keys[1], evmtest.Reverter())
	key := w.APIKey(t, txm.Policy{Principal: "treasury@example.com", Roles: []txm.Role{txm.RoleSender, txm.RoleReader},
		Signers: []common.Address{from}, SimulationAdvisory: true})
	a := w.Node(t, "a")
	url := a.APIURL + "/v1/transactions"
	transfer := postJSON(t, http.MethodPost, url, key, map[string]any{"chainId": evmtest.ChainID, "from": from, "to": token,
		"data": hexData(pack(t, evmtest.ERC20(), "transfer", to, big.NewInt(1_250_000)))})
	require.Equal(t, http.StatusAccepted, transfer.status, "%v", transfer.body)
	reverts := postJSON(t, http.MethodPost, url, key, map[string]any{"chainId": evmtest.ChainID, "from": from, "to": rev,
		"data": hexData(pack(t, evmtest.Reverter(), "failWithReason")), "gasLimit": 100_000})
	require.Equal(t, http.StatusAccepted, reverts.status, "%v", reverts.body)

	ctx := browsertest.New(t)
	signIn(t, ctx, a.APIURL, key)
	browsertest.Run(t, ctx, 5*time.Second, chromedp.Evaluate(`location.hash = '#/tx/`+transfer.body["id"].(string)+`'`, nil))
	browsertest.Poll(t, ctx, "the transaction's effects", `document.querySelectorAll('#tx-effects tr[data-kind]').length > 0`, 10*time.Second)
	var rows []effectCells
	browsertest.Run(t, ctx, 5*time.Second, chromedp.Evaluate(readEffects, &rows))
	require.Len(t, rows, 1, "one effect: the transfer")
	short := func(a common.Address) string { s := txm.CanonicalAddress(a); return s[:8] + "…" + s[len(s)-6:] }
	assert.Equal(t, "erc20_transfer", rows[0].Kind)
	assert.Equal(t, []string{"ERC-20 transfer", short(token), short(from) + " signer", short(to), "1,250,000 units", "—"}, rows[0].Cells,
		"kind, token, from (the signer, labelled), to, amount, no token id")
	assert.Subset(t, rows[0].Title, []string{txm.CanonicalAddress(token), txm.CanonicalAddress(from), txm.CanonicalAddress(to)},
		"the full addresses are in the titles")
	assert.Equal(t, "simulateV1", browsertest.Eval[string](t, ctx, `document.getElementById('tx-simulation').dataset.simulation`))
	assert.Contains(t, browsertest.Eval[string](t, ctx, `document.getElementById('tx-simulation').textContent`), "eth_simulateV1")
	assert.Zero(t, browsertest.Eval[int](t, ctx, `document.querySelectorAll('#tx-effects .revert').length`), "it did not revert")
	var png []byte
	browsertest.Run(t, ctx, 20*time.Second, chromedp.FullScreenshot(&png, 100))
	artifact(t, "issue47-effects.png", png)

	// The reverted one: no effect, the decoded reason said.
	browsertest.Run(t, ctx, 5*time.Second, chromedp.Evaluate(`location.hash = '#/tx/`+reverts.body["id"].(string)+`'`, nil))
	browsertest.Poll(t, ctx, "the revert", `document.querySelector('#tx-effects .revert') !== null`, 10*time.Second)
	revert := browsertest.Eval[string](t, ctx, `document.querySelector('#tx-effects .revert').textContent`)
	assert.Contains(t, revert, "The simulation reverted")
	got := postJSON(t, http.MethodGet, url+"/"+reverts.body["id"].(string), key, nil)
	require.NotEmpty(t, got.body["simulationRevert"])
	assert.Contains(t, revert, got.body["simulationRevert"], "the decoded reason, as the API gives it")
	assert.Contains(t, revert, "advisory")
	assert.Zero(t, browsertest.Eval[int](t, ctx, `document.querySelectorAll('#tx-effects tr[data-kind]').length`), "a revert moves nothing")
	browsertest.Run(t, ctx, 20*time.Second, chromedp.FullScreenshot(&png, 100))
	artifact(t, "issue47-effects-revert.png", png)
}

// TestConsole_ApprovalsQueueEmpty: the approvals queue opens from the
// header and, with nothing held for approval, says so without an error.
func TestConsole_ApprovalsQueueEmpty(t *testing.T) {
	w := stacktest.NewWorld(t, 1, keyed)
	a := w.Node(t, "a")
	a.CreateTx(t, stacktest.Transfer(w.Keys[0].Address, big.NewInt(1))) // allocated at once: not in the queue
	admin := w.APIKey(t, txm.Policy{Principal: "ops@example.com", Roles: []txm.Role{txm.RoleAdmin}, AllSigners: true})
	ctx := browsertest.New(t)
	signIn(t, ctx, a.APIURL, admin)
	browsertest.Run(t, ctx, 10*time.Second, chromedp.Click(`#nav-approvals`, chromedp.ByQuery))
	browsertest.Poll(t, ctx, "the queue", `document.getElementById('approval-rows')?.textContent.includes('No transaction waits for approval')`, 10*time.Second)
	assert.True(t, browsertest.Eval[bool](t, ctx, `document.getElementById('notice').hidden`), "no error is shown")
	assert.Zero(t, browsertest.Eval[int](t, ctx, `document.querySelectorAll('#approval-rows tr[data-tx]').length`))
}
