package api_test

import (
	"context"
	"math/big"
	"net/http"
	"strings"
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

// queueRow is a row of the approvals queue as the page shows it.
type queueRow struct {
	Requester string   `json:"requester"`
	Signer    string   `json:"signer"`
	Effects   string   `json:"effects"`
	Kinds     []string `json:"kinds"`
	Approval  string   `json:"approval"`
	Given     int      `json:"given"`
	Required  string   `json:"required"`
	Approve   bool     `json:"approve"` // the Approve button is enabled
	Reject    bool     `json:"reject"`  // the Reject button is enabled
	Why       string   `json:"why"`     // the Approve button's title when it is not
	Outcome   string   `json:"outcome"`
}

// readQueueRow reads the queue's row of one transaction (null when the
// queue has none).
func readQueueRow(id string) string {
	return `(() => { const tr = document.querySelector('#approval-rows tr[data-tx="` + id + `"]'); if (!tr) return null;
  const b = tr.querySelector('button[data-action^="approve:"]'), r = tr.querySelector('button[data-action^="reject:"]'), ap = tr.querySelector('[data-approvals]');
  return {requester: tr.cells[1].textContent.trim(), signer: tr.cells[2].querySelector('[title]')?.title ?? '',
    effects: tr.cells[5].textContent.trim(), kinds: Array.from(tr.cells[5].querySelectorAll('[data-kind]')).map(e => e.dataset.kind),
    approval: tr.cells[6].textContent.trim(), given: Number(ap.dataset.approvals), required: ap.dataset.required,
    approve: !b.disabled, reject: !r.disabled, why: b.title, outcome: tr.querySelector('[data-outcome]')?.textContent ?? ''}; })()`
}

// signInAs opens the console and gives it token, then waits until the
// console knows the caller as principal (the tab may hold another's).
func signInAs(t *testing.T, ctx context.Context, apiURL, token, principal string) {
	t.Helper()
	browsertest.Run(t, ctx, 20*time.Second,
		chromedp.Navigate(apiURL+"/console/#/approvals"),
		chromedp.WaitVisible(`#token`, chromedp.ByQuery),
		chromedp.SendKeys(`#token`, token, chromedp.ByQuery),
		chromedp.Click(`#auth button[type="submit"]`, chromedp.ByQuery),
	)
	browsertest.Poll(t, ctx, "the console to know "+principal,
		`document.getElementById('who').textContent.startsWith('`+principal+` ·')`, 10*time.Second)
}

// TestIssue47_ConsoleApprovalsQueue: against the real API, an ERC-20
// payout above its creator's token threshold waits for 2 of the named
// approvers. The queue shows it to an approver with its requester, signer,
// simulated effects, "0 of 2" and expiry; Approve from the queue makes it 1
// of 2; the requester cannot decide on its own (the buttons are disabled);
// a reader the rule does not name is refused with the server's detail on
// the row; a second approver's
// Approve takes it out of the queue, allocated its nonce. A second payout
// rejected from the queue through the reason dialog ends FAILED_FINAL
// rejected with that reason. Screenshots are saved as artifacts.
func TestIssue47_ConsoleApprovalsQueue(t *testing.T) {
	w := stacktest.NewWorld(t, 2, keyed, stacktest.Lively)
	from, to := w.Keys[0].Address, common.HexToAddress("0x00000000000000000000000000000000000a11ce")
	token := w.Chain.MustDeploy(t, w.Keys[1], evmtest.ERC20(), "Test", "TST", from, big.NewInt(10_000_000))
	on := []common.Address{from}
	keys := map[string]string{}
	for _, p := range []txm.Policy{
		{Principal: treasury, Roles: []txm.Role{txm.RoleSender, txm.RoleReader}, Signers: on,
			Approvals: []txm.ApprovalRule{{Token: &token, ChainID: evmtest.ChainID, Above: big.NewInt(1_000_000), Required: 2,
				Approvers: []string{alice, bob, carol}}}},
		{Principal: alice, Roles: []txm.Role{txm.RoleReader}, Signers: on},
		{Principal: bob, Roles: []txm.Role{txm.RoleReader}, Signers: on},
		{Principal: dave, Roles: []txm.Role{txm.RoleReader}, Signers: on}, // reads the signer, named by no rule
	} {
		keys[p.Principal] = w.APIKey(t, p)
	}
	a := w.Node(t, "a")
	url := a.APIURL + "/v1/transactions"
	payout := func(amount int64) string {
		t.Helper()
		r := postJSON(t, http.MethodPost, url, keys[treasury], map[string]any{"chainId": evmtest.ChainID, "from": from, "to": token,
			"data": hexData(pack(t, evmtest.ERC20(), "transfer", to, big.NewInt(amount)))})
		require.Equal(t, http.StatusAccepted, r.status, "%v", r.body)
		require.Equal(t, string(txm.StatePendingApproval), r.body["state"], "held: %v", r.body)
		return r.body["id"].(string)
	}
	held, doomed := payout(1_250_000), payout(2_000_000)

	// Alice, a named approver, sees both in the queue, with what they move.
	ctx := browsertest.New(t)
	signInAs(t, ctx, a.APIURL, keys[alice], alice)
	browsertest.Poll(t, ctx, "the queue's two rows", `document.querySelectorAll('#approval-rows tr[data-tx]').length === 2`, 10*time.Second)
	row := browsertest.Eval[*queueRow](t, ctx, readQueueRow(held))
	require.NotNil(t, row, "the held payout is in the queue")
	assert.Equal(t, treasury, row.Requester, "the requester")
	assert.Equal(t, txm.CanonicalAddress(from), row.Signer, "the signer")
	assert.Equal(t, []string{"erc20_transfer"}, row.Kinds, "its simulated effect")
	assert.Contains(t, row.Effects, "ERC-20 transfer: 1,250,000 units of")
	assert.Equal(t, 0, row.Given)
	assert.Equal(t, "2", row.Required)
	assert.Contains(t, row.Approval, "0 of 2 from "+alice+", "+bob+", "+carol)
	got := postJSON(t, http.MethodGet, url+"/"+held, keys[alice], nil)
	expires, err := time.Parse(time.RFC3339Nano, got.body["approval"].(map[string]any)["expiresAt"].(string))
	require.NoError(t, err)
	assert.Contains(t, row.Approval, "expires: ", "its expiry")
	assert.Contains(t, row.Approval, "(in 23h ", "its expiry, %s, as a time left", expires)
	assert.True(t, row.Approve, "an approver may approve: %s", row.Why)
	assert.True(t, row.Reject, "an approver may reject")
	var png []byte
	browsertest.Run(t, ctx, 20*time.Second, chromedp.FullScreenshot(&png, 100))
	artifact(t, "issue47-approvals-queue.png", png)

	// Approve from the queue: 1 of 2, and alice may not approve again.
	browsertest.Run(t, ctx, 5*time.Second, chromedp.Click(`button[data-action="approve:`+held+`"]`, chromedp.ByQuery))
	browsertest.Poll(t, ctx, "1 of 2", `document.querySelector('#approval-rows tr[data-tx="`+held+`"] [data-approvals="1"]') !== null`, 10*time.Second)
	row = browsertest.Eval[*queueRow](t, ctx, readQueueRow(held))
	require.NotNil(t, row)
	assert.Contains(t, row.Approval, "1 of 2")
	assert.Contains(t, row.Approval, "approved by: "+alice)
	assert.False(t, row.Approve, "alice approved it already")
	assert.False(t, row.Reject, "an approver decides once")
	assert.Contains(t, browsertest.Eval[string](t, ctx, `document.getElementById('decision').textContent`), "(1 of 2)")
	got = postJSON(t, http.MethodGet, url+"/"+held, keys[alice], nil)
	assert.Equal(t, string(txm.StatePendingApproval), got.body["state"])
	assert.Len(t, got.body["approval"].(map[string]any)["approvals"], 1, "the server has alice's approval")

	// Reject the other through the reason dialog.
	const why = "wrong recipient, see ticket 7"
	browsertest.Run(t, ctx, 10*time.Second,
		chromedp.Click(`button[data-action="reject:`+doomed+`"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#act-reason`, chromedp.ByQuery),
		chromedp.SendKeys(`#act-reason`, why, chromedp.ByQuery),
		chromedp.Click(`#act-submit`, chromedp.ByQuery),
	)
	browsertest.Poll(t, ctx, "the rejected payout to leave the queue",
		`document.querySelector('#approval-rows tr[data-tx="`+doomed+`"]') === null`, 10*time.Second)
	assert.Contains(t, browsertest.Eval[string](t, ctx, `document.getElementById('decision').textContent`), "Rejected "+doomed)
	got = postJSON(t, http.MethodGet, url+"/"+doomed, keys[alice], nil)
	assert.Equal(t, string(txm.StateFailedFinal), got.body["state"])
	assert.Equal(t, "rejected", got.body["subState"])
	assert.NotContains(t, got.body, "nonce")
	rej, _ := got.body["approval"].(map[string]any)["rejection"].(map[string]any)
	assert.Equal(t, map[string]any{"principal": alice, "reason": why}, map[string]any{"principal": rej["principal"], "reason": rej["reason"]},
		"the reason given in the dialog")
	browsertest.Run(t, ctx, 20*time.Second, chromedp.FullScreenshot(&png, 100))
	artifact(t, "issue47-approvals-rejected.png", png)

	// The requester sees its own request and cannot decide on it.
	signInAs(t, ctx, a.APIURL, keys[treasury], treasury)
	browsertest.Poll(t, ctx, "the queue's row", `document.querySelector('#approval-rows tr[data-tx="`+held+`"]') !== null`, 10*time.Second)
	row = browsertest.Eval[*queueRow](t, ctx, readQueueRow(held))
	require.NotNil(t, row)
	assert.Equal(t, treasury+" you", row.Requester, "the requester is told it is its own")
	assert.False(t, row.Approve, "nobody approves their own request")
	assert.False(t, row.Reject, "nor rejects it")
	assert.Contains(t, row.Why, "your own request")

	// A reader the rule does not name gets the server's refusal on the row.
	signInAs(t, ctx, a.APIURL, keys[dave], dave)
	browsertest.Poll(t, ctx, "the queue's row", `document.querySelector('#approval-rows tr[data-tx="`+held+`"]') !== null`, 10*time.Second)
	browsertest.Run(t, ctx, 5*time.Second, chromedp.Click(`button[data-action="approve:`+held+`"]`, chromedp.ByQuery))
	browsertest.Poll(t, ctx, "the refusal on the row",
		`document.querySelector('#approval-rows tr[data-tx="`+held+`"] [data-outcome]') !== null`, 10*time.Second)
	row = browsertest.Eval[*queueRow](t, ctx, readQueueRow(held))
	require.NotNil(t, row)
	assert.Contains(t, row.Outcome, "Approval refused: the caller is not an approver of this transaction", "the server's 403 detail")
	assert.True(t, browsertest.Eval[bool](t, ctx, `document.getElementById('notice').hidden`), "a refusal is the row's, not an error")
	got = postJSON(t, http.MethodGet, url+"/"+held, keys[alice], nil)
	assert.Equal(t, string(txm.StatePendingApproval), got.body["state"])
	assert.Len(t, got.body["approval"].(map[string]any)["approvals"], 1, "the refused approval changed nothing")

	// Bob's approval is the second: it leaves the queue with a nonce.
	signInAs(t, ctx, a.APIURL, keys[bob], bob)
	browsertest.Poll(t, ctx, "the queue's row", `document.querySelector('#approval-rows tr[data-tx="`+held+`"]') !== null`, 10*time.Second)
	browsertest.Run(t, ctx, 5*time.Second, chromedp.Click(`button[data-action="approve:`+held+`"]`, chromedp.ByQuery))
	browsertest.Poll(t, ctx, "the approved payout to leave the queue",
		`document.querySelector('#approval-rows tr[data-tx="`+held+`"]') === null`, 10*time.Second)
	decision := browsertest.Eval[string](t, ctx, `document.getElementById('decision').textContent`)
	assert.Contains(t, decision, "(2 of 2); now ALLOCATED")
	assert.Contains(t, browsertest.Eval[string](t, ctx, `document.getElementById('approval-rows').textContent`), "No transaction waits for approval")

	browsertest.Run(t, ctx, 5*time.Second, chromedp.Evaluate(`location.hash = '#/tx/`+held+`'`, nil))
	browsertest.Poll(t, ctx, "the transaction view", `document.getElementById('tx-state') !== null`, 10*time.Second)
	state := browsertest.Eval[string](t, ctx, `document.getElementById('tx-state').dataset.state`)
	assert.Contains(t, []string{"ALLOCATED", "TRACKING", "MINED", "CONFIRMED"}, state, "allocated, or later")
	nonce := browsertest.Eval[string](t, ctx, `Array.from(document.querySelectorAll('#tx-body dt')).find(d => d.textContent === 'Nonce').nextElementSibling.textContent`)
	assert.Equal(t, "0", strings.TrimSpace(nonce), "the signer's next nonce")
	assert.Contains(t, browsertest.Eval[string](t, ctx, `document.getElementById('tx-approval').textContent`), "2 of 2")
}
