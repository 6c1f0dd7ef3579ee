package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/functions/internal/stacktest"
	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/testsupport/eventschema"
	"github.com/txfence/txfence/shared/txm"
)

// The principals of the approval tests.
const (
	treasury = "treasury@example.com" // sends; its payouts above 1 ether wait for 2 of the named approvers
	quick    = "quick@example.com"    // sends; everything it sends waits for alice, for a second
	alice    = "alice@example.com"    // named approvers: readers of the signer
	bob      = "bob@example.com"
	carol    = "carol@example.com"
	dave     = "dave@example.com"
	erin     = "erin@example.com"
	mallory  = "mallory@example.com"  // holds the approver role on the signer, named by no rule
	outsider = "outsider@example.com" // reads another signer
)

var (
	oneEther = new(big.Int).Exp(big.NewInt(10), big.NewInt(18), nil)
	twoEther = new(big.Int).Mul(big.NewInt(2), oneEther)
)

// approvalWorld is a chain, a database and API keys for the approval
// tests' principals, on one signer.
type approvalWorld struct {
	w      *stacktest.World
	signer common.Address
	keys   map[string]string
}

func newApprovalWorld(t *testing.T, pubsub bool, extra ...txm.Policy) *approvalWorld {
	t.Helper()
	w := stacktest.NewWorld(t, 2, keyed, stacktest.Lively)
	if pubsub {
		w.WithPubSub(t)
	}
	signer := w.Keys[0].Address
	on := []common.Address{signer}
	named := []string{alice, bob, carol, dave, erin}
	policies := []txm.Policy{
		{Principal: treasury, Roles: []txm.Role{txm.RoleSender, txm.RoleReader}, Signers: on,
			Approvals: []txm.ApprovalRule{{Above: oneEther, Required: 2, Approvers: named}}},
		{Principal: quick, Roles: []txm.Role{txm.RoleSender, txm.RoleReader}, Signers: on,
			Approvals: []txm.ApprovalRule{{Above: big.NewInt(0), Required: 1, Approvers: []string{alice}, ExpiresIn: time.Second}}},
		{Principal: mallory, Roles: []txm.Role{txm.RoleApprover}, Signers: on},
		{Principal: outsider, Roles: []txm.Role{txm.RoleReader, txm.RoleApprover}, Signers: []common.Address{w.Keys[1].Address}},
	}
	for _, p := range named {
		policies = append(policies, txm.Policy{Principal: p, Roles: []txm.Role{txm.RoleReader}, Signers: on})
	}
	aw := &approvalWorld{w: w, signer: signer, keys: map[string]string{}}
	for _, p := range append(policies, extra...) {
		aw.keys[p.Principal] = w.APIKey(t, p)
	}
	return aw
}

// send creates a plain transfer of value from the signer as who.
func (aw *approvalWorld) send(t testing.TB, nd *stacktest.Node, who string, value *big.Int, requestID string) simAnswer {
	t.Helper()
	body := map[string]any{"chainId": evmtest.ChainID, "from": aw.signer, "to": stacktest.Dead, "value": value.String()}
	if requestID != "" {
		body["requestId"] = requestID
	}
	return postJSON(t, http.MethodPost, nd.APIURL+"/v1/transactions", aw.keys[who], body)
}

// decide approves or rejects id as who, with body.
func (aw *approvalWorld) decide(t testing.TB, nd *stacktest.Node, who, id, kind string, body any) simAnswer {
	t.Helper()
	return postJSON(t, http.MethodPost, nd.APIURL+"/v1/transactions/"+id+"/"+kind, aw.keys[who], body)
}

func (aw *approvalWorld) get(t testing.TB, nd *stacktest.Node, who, id string) simAnswer {
	t.Helper()
	return postJSON(t, http.MethodGet, nd.APIURL+"/v1/transactions/"+id, aw.keys[who], nil)
}

// feed is every outcome the feed holds for id, as alice reads it.
func (aw *approvalWorld) feed(t testing.TB, nd *stacktest.Node, id string) []map[string]any {
	t.Helper()
	a := postJSON(t, http.MethodGet, nd.APIURL+"/v1/completions?after=0&limit=1000", aw.keys[alice], nil)
	require.Equal(t, http.StatusOK, a.status, "%v", a.body)
	var out []map[string]any
	for _, it := range a.body["items"].([]any) {
		if m := it.(map[string]any); m["txId"] == id {
			out = append(out, m)
		}
	}
	return out
}

// problemType is a problem answer's type, without the base.
func problemType(a simAnswer) string {
	s, _ := a.body["type"].(string)
	return strings.TrimPrefix(s, "https://txfence.dev/problems/")
}

// approvalOf is the answer's approval object.
func approvalOf(t testing.TB, a simAnswer) map[string]any {
	t.Helper()
	ap, ok := a.body["approval"].(map[string]any)
	require.True(t, ok, "the transaction has its approval: %v", a.body)
	return ap
}

func (aw *approvalWorld) count(t testing.TB, q string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, aw.w.DB.Pool.QueryRow(context.Background(), q, args...).Scan(&n))
	return n
}

// TestIssue47_ApprovalFlow: a payout above its creator's threshold answers
// 202 PENDING_APPROVAL without a nonce, with its approval and effects; a
// replay answers it; the signer's later creates are allocated and
// confirmed meanwhile, their nonces contiguous; the requester's own
// approval is 403; two approvals of two named approvers simulate it
// again and allocate it the signer's next nonce (the second approval's
// answer is ALLOCATED with it), and it is confirmed, with one outcome on
// the feed. Each decision is audited.
func TestIssue47_ApprovalFlow(t *testing.T) {
	aw := newApprovalWorld(t, false)
	w := aw.w
	nd := w.Node(t, "a")

	held := aw.send(t, nd, treasury, twoEther, "payout-1")
	require.Equal(t, http.StatusAccepted, held.status, "%v", held.body)
	id := held.body["id"].(string)
	assert.Equal(t, string(txm.StatePendingApproval), held.body["state"])
	assert.NotContains(t, held.body, "nonce", "a transaction waiting for approval holds no nonce")
	ap := approvalOf(t, held)
	assert.EqualValues(t, 2, ap["required"])
	assert.Equal(t, []any{alice, bob, carol, dave, erin}, ap["approvers"])
	assert.Empty(t, ap["approvals"])
	assert.NotContains(t, ap, "rejection")
	expires, err := time.Parse(time.RFC3339Nano, ap["expiresAt"].(string))
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now().Add(txm.DefaultApprovalExpiry), expires, time.Minute)
	assert.Equal(t, []any{map[string]any{"kind": "native", "from": txm.CanonicalAddress(aw.signer),
		"to": txm.CanonicalAddress(stacktest.Dead), "amount": twoEther.String()}}, held.body["effects"])

	replay := aw.send(t, nd, treasury, twoEther, "payout-1")
	require.Equal(t, http.StatusOK, replay.status, "a replay answers the waiting transaction: %v", replay.body)
	assert.Equal(t, id, replay.body["id"])
	assert.Equal(t, string(txm.StatePendingApproval), replay.body["state"])

	// The signer's later creates are allocated and confirmed meanwhile.
	stop := w.Run(t, []*stacktest.Node{nd}, stacktest.RunOptions{})
	var small []string
	for i := 0; i < 3; i++ {
		a := aw.send(t, nd, treasury, big.NewInt(int64(i+1)), "")
		require.Equal(t, http.StatusAccepted, a.status, "%v", a.body)
		assert.EqualValues(t, i, a.body["nonce"], "the waiting transaction holds none of the signer's nonces")
		small = append(small, a.body["id"].(string))
	}
	for _, s := range small {
		w.WaitState(t, s, txm.StateConfirmed, 30*time.Second)
	}
	stop()
	got := aw.get(t, nd, alice, id)
	require.Equal(t, http.StatusOK, got.status, "%v", got.body)
	assert.Equal(t, string(txm.StatePendingApproval), got.body["state"], "it still waits")
	assert.NotContains(t, got.body, "nonce")

	// Nobody approves their own request.
	self := aw.decide(t, nd, treasury, id, "approve", nil)
	require.Equal(t, http.StatusForbidden, self.status, "%v", self.body)
	assert.Equal(t, "self-approval", problemType(self))

	// The approvers' queue: what waits, with its effects and approval.
	queue := postJSON(t, http.MethodGet, nd.APIURL+"/v1/transactions?state=PENDING_APPROVAL", aw.keys[alice], nil)
	require.Equal(t, http.StatusOK, queue.status, "%v", queue.body)
	items := queue.body["items"].([]any)
	require.Len(t, items, 1)
	item := items[0].(map[string]any)
	assert.Equal(t, id, item["id"])
	assert.NotEmpty(t, item["effects"])
	assert.EqualValues(t, 2, item["approval"].(map[string]any)["required"])

	first := aw.decide(t, nd, alice, id, "approve", map[string]any{"comment": "invoice 42"})
	require.Equal(t, http.StatusOK, first.status, "%v", first.body)
	assert.Equal(t, string(txm.StatePendingApproval), first.body["state"], "one of two approvals")
	approvals := approvalOf(t, first)["approvals"].([]any)
	require.Len(t, approvals, 1)
	assert.Equal(t, alice, approvals[0].(map[string]any)["principal"])
	assert.Equal(t, "invoice 42", approvals[0].(map[string]any)["comment"])

	second := aw.decide(t, nd, bob, id, "approve", nil)
	require.Equal(t, http.StatusOK, second.status, "%v", second.body)
	assert.Equal(t, string(txm.StateAllocated), second.body["state"], "the last approval allocates it: %v", second.body)
	assert.EqualValues(t, 3, second.body["nonce"], "the signer's next nonce, at that moment")
	assert.Len(t, approvalOf(t, second)["approvals"], 2)
	assert.Equal(t, 1, aw.count(t, `SELECT count(*) FROM tx_history WHERE tx_id = $1 AND reason = 'held for approval'`, id), "held")
	assert.Equal(t, 1, aw.count(t, `SELECT count(*) FROM tx_history WHERE tx_id = $1 AND reason = 'approved'
		AND from_state = 'PENDING_APPROVAL' AND to_state = 'ALLOCATED'`, id), "then allocated, once")

	stop = w.Run(t, []*stacktest.Node{nd}, stacktest.RunOptions{})
	w.WaitState(t, id, txm.StateConfirmed, 30*time.Second)
	stop()
	outcomes := aw.feed(t, nd, id)
	require.Len(t, outcomes, 1, "one outcome on the feed")
	assert.Equal(t, "TxConfirmed", outcomes[0]["type"])
	assert.EqualValues(t, 3, outcomes[0]["nonce"])
	n, err := w.Chain.Backend.Client().NonceAt(context.Background(), aw.signer, nil)
	require.NoError(t, err)
	assert.EqualValues(t, 4, n, "nonces 0 to 3, contiguous")

	assert.Equal(t, 1, aw.count(t, `SELECT count(*) FROM audit_log WHERE principal = $1 AND action = 'approve' AND target = $2 AND outcome = 'ok'
		AND detail = 'invoice 42'`, alice, id))
	assert.Equal(t, 1, aw.count(t, `SELECT count(*) FROM audit_log WHERE principal = $1 AND action = 'approve' AND target = $2 AND outcome = 'ok'`,
		bob, id))
	assert.Equal(t, 1, aw.count(t, `SELECT count(*) FROM audit_log WHERE principal = $1 AND action = 'approve' AND target = $2
		AND outcome = 'refused:self_approval'`, treasury, id))
}

// TestIssue47_ApprovalRejectExpire: a rejection (which needs a reason)
// ends the transaction FAILED_FINAL rejected, and an approval that does
// not come in time ends it FAILED_FINAL approval_expired when the resubmit
// sweep passes; each gives exactly one outcome on the feed and one
// completion-topic message, without a nonce, and neither holds a nonce
// of the signer.
func TestIssue47_ApprovalRejectExpire(t *testing.T) {
	aw := newApprovalWorld(t, true)
	w := aw.w
	nd := w.Node(t, "a")
	ctx := context.Background()

	held := aw.send(t, nd, treasury, twoEther, "")
	require.Equal(t, http.StatusAccepted, held.status, "%v", held.body)
	rejected := held.body["id"].(string)
	for _, body := range []any{nil, map[string]any{}, map[string]any{"reason": "  "}} {
		a := aw.decide(t, nd, carol, rejected, "reject", body)
		require.Equal(t, http.StatusUnprocessableEntity, a.status, "a rejection needs a reason: %v", a.body)
		assert.Equal(t, "reason", a.body["errors"].([]any)[0].(map[string]any)["field"])
	}
	a := aw.decide(t, nd, carol, rejected, "reject", map[string]any{"reason": "wrong amount"})
	require.Equal(t, http.StatusOK, a.status, "%v", a.body)
	assert.Equal(t, string(txm.StateFailedFinal), a.body["state"])
	assert.Equal(t, txm.SubStateRejected, a.body["subState"])
	assert.NotContains(t, a.body, "nonce")
	rej := approvalOf(t, a)["rejection"].(map[string]any)
	assert.Equal(t, carol, rej["principal"])
	assert.Equal(t, "wrong amount", rej["reason"])
	again := aw.decide(t, nd, alice, rejected, "approve", nil)
	assert.Equal(t, http.StatusConflict, again.status, "%v", again.body)
	assert.Equal(t, "not-pending-approval", problemType(again))

	short := aw.send(t, nd, quick, big.NewInt(1), "")
	require.Equal(t, http.StatusAccepted, short.status, "%v", short.body)
	expired := short.body["id"].(string)
	require.Equal(t, string(txm.StatePendingApproval), short.body["state"])
	// sleep: the approval's expiry (a second) must pass in database time
	time.Sleep(1500 * time.Millisecond)
	late := aw.decide(t, nd, alice, expired, "approve", nil)
	require.Equal(t, http.StatusConflict, late.status, "an expired approval takes no decision: %v", late.body)
	assert.Equal(t, "not-pending-approval", problemType(late))
	st, err := nd.Resubmit.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, st.ApprovalsExpired, "the resubmit sweep ends it")
	st, err = nd.Resubmit.Pass(ctx)
	require.NoError(t, err)
	assert.Zero(t, st.ApprovalsExpired, "once")
	got := aw.get(t, nd, alice, expired)
	assert.Equal(t, string(txm.StateFailedFinal), got.body["state"])
	assert.Equal(t, txm.SubStateApprovalExpired, got.body["subState"])
	assert.Contains(t, got.body["lastError"], "0 of 1 approvals")
	assert.NotContains(t, got.body, "nonce")

	for id, sub := range map[string]string{rejected: txm.SubStateRejected, expired: txm.SubStateApprovalExpired} {
		w.WaitState(t, id, txm.StateFailedFinal, 10*time.Second)
		outcomes := aw.feed(t, nd, id)
		require.Len(t, outcomes, 1, "one outcome on the feed for %s", sub)
		assert.Equal(t, "TxFailed", outcomes[0]["type"])
		assert.Equal(t, sub, outcomes[0]["subState"])
		assert.NotContains(t, outcomes[0], "nonce", "it never had one")
	}
	msgs := pullCompletionsFor(t, w, 2)
	by := map[string][]map[string]any{}
	for _, m := range msgs {
		var body map[string]any
		require.NoError(t, json.Unmarshal(m.Data, &body))
		by[body["txId"].(string)] = append(by[body["txId"].(string)], body)
		// A TxFailed without a nonce or a hash is what the topic's schemas describe.
		assert.NoError(t, eventschema.Validate(m.Data), "%s", m.Data)
	}
	for id, sub := range map[string]string{rejected: txm.SubStateRejected, expired: txm.SubStateApprovalExpired} {
		require.Len(t, by[id], 1, "one completion-topic message for %s", sub)
		assert.Equal(t, sub, by[id][0]["subState"])
		assert.Equal(t, "TxFailed", by[id][0]["type"])
		assert.NotContains(t, by[id][0], "nonce")
	}

	// Neither took a nonce: the next create gets the signer's first.
	next := aw.send(t, nd, treasury, big.NewInt(1), "")
	require.Equal(t, http.StatusAccepted, next.status, "%v", next.body)
	assert.EqualValues(t, 0, next.body["nonce"])
	assert.Equal(t, 1, aw.count(t, `SELECT count(*) FROM audit_log WHERE principal = $1 AND action = 'reject' AND target = $2
		AND outcome = 'ok' AND detail = 'wrong amount'`, carol, rejected))
}

// pullCompletionsFor pulls the completion topic until want messages came
// or 30 s passed, and looks once more, so that a message sent twice counts.
func pullCompletionsFor(t *testing.T, w *stacktest.World, want int) []pubsubMessage {
	t.Helper()
	ctx := context.Background()
	var out []pubsubMessage
	for deadline := time.Now().Add(30 * time.Second); len(out) < want && time.Now().Before(deadline); {
		more, err := w.PubSub.Pull(ctx, w.Cfg.TopicCompletion+"-sub", 1000, 2*time.Second)
		require.NoError(t, err)
		for _, m := range more {
			out = append(out, pubsubMessage{Data: m.Data})
		}
	}
	more, err := w.PubSub.Pull(ctx, w.Cfg.TopicCompletion+"-sub", 1000, 500*time.Millisecond)
	require.NoError(t, err)
	for _, m := range more {
		out = append(out, pubsubMessage{Data: m.Data})
	}
	return out
}

type pubsubMessage struct{ Data []byte }

// TestIssue47_ApprovalRace: approvers race for the last approval through
// two instances; the transaction is allocated exactly once, the nonce the
// signer's next, every answer that took a decision shows it, and the
// signer's nonces stay contiguous.
func TestIssue47_ApprovalRace(t *testing.T) {
	aw := newApprovalWorld(t, false)
	w := aw.w
	nodes := []*stacktest.Node{w.Node(t, "a"), w.Node(t, "b")}
	const rounds = 4
	for round := 0; round < rounds; round++ {
		held := aw.send(t, nodes[round%2], treasury, twoEther, fmt.Sprintf("race-%d", round))
		require.Equal(t, http.StatusAccepted, held.status, "%v", held.body)
		id := held.body["id"].(string)
		require.Equal(t, http.StatusOK, aw.decide(t, nodes[0], alice, id, "approve", nil).status)

		racers := []string{bob, carol, dave, erin}
		answers := make([]simAnswer, len(racers))
		var wg sync.WaitGroup
		for i, who := range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				answers[i] = aw.decide(t, nodes[i%2], who, id, "approve", nil)
			}()
		}
		wg.Wait()
		decided := 0
		for i, a := range answers {
			switch a.status {
			case http.StatusOK:
				decided++
				assert.NotEqual(t, string(txm.StatePendingApproval), a.body["state"], "%s: %v", racers[i], a.body)
				assert.EqualValues(t, round, a.body["nonce"], "%s sees the one allocation: %v", racers[i], a.body)
			case http.StatusConflict:
				assert.Equal(t, "not-pending-approval", problemType(a), "%s came after the allocation: %v", racers[i], a.body)
			default:
				t.Errorf("%s: %d %v", racers[i], a.status, a.body)
			}
		}
		assert.GreaterOrEqual(t, decided, 1, "the last approval was taken")
		assert.Equal(t, 1, aw.count(t, `SELECT count(*) FROM tx_history WHERE tx_id = $1 AND reason = 'approved'`, id),
			"round %d: allocated once", round)
	}
	assert.Equal(t, rounds, aw.count(t, `SELECT next_nonce FROM signer_nonce_cursor WHERE signer = $1`, txm.CanonicalAddress(aw.signer)),
		"one nonce per approved transaction")
	assert.Equal(t, rounds, aw.count(t, `SELECT count(DISTINCT nonce) FROM managed_tx WHERE signer = $1 AND nonce < $2`,
		txm.CanonicalAddress(aw.signer), rounds))
	next := aw.send(t, nodes[1], treasury, big.NewInt(1), "")
	require.Equal(t, http.StatusAccepted, next.status, "%v", next.body)
	assert.EqualValues(t, rounds, next.body["nonce"], "contiguous")
}

// TestIssue47_ApprovalBadInput: what may not be decided is refused, and
// nothing is written: a rejection without a reason or with one too long
// (422), a body that is not the decision's (400), an unknown transaction
// or one of a signer the caller does not read (404, the same answer), a
// principal the rule does not name (403 not-an-approver, audited), a second
// decision of one approver (409 already-decided), a transaction that does
// not wait (409 not-pending-approval).
func TestIssue47_ApprovalBadInput(t *testing.T) {
	aw := newApprovalWorld(t, false)
	nd := aw.w.Node(t, "a")
	held := aw.send(t, nd, treasury, twoEther, "")
	require.Equal(t, http.StatusAccepted, held.status, "%v", held.body)
	id := held.body["id"].(string)
	plain := aw.send(t, nd, treasury, big.NewInt(1), "")
	require.Equal(t, http.StatusAccepted, plain.status, "%v", plain.body)

	const unknown = "0190f7a2-0000-7000-8000-000000000000"
	cases := []struct {
		name, who, id, kind string
		body                any
		status              int
		problem             string
	}{
		{"a rejection without a reason", alice, id, "reject", map[string]any{}, 422, "invalid-request"},
		{"a rejection with an empty reason", alice, id, "reject", map[string]any{"reason": ""}, 422, "invalid-request"},
		{"a reason too long", alice, id, "reject", map[string]any{"reason": strings.Repeat("x", txm.MaxDecisionText+1)}, 422, "invalid-request"},
		{"a comment that is not a string", alice, id, "approve", map[string]any{"comment": 7}, 422, "invalid-request"},
		{"an unknown field", alice, id, "approve", map[string]any{"reason": "approve has comments"}, 400, "malformed-request"},
		{"a body that is not JSON", alice, id, "approve", "not json", 400, "malformed-request"},
		{"an id that is not a UUID", alice, "not-a-uuid", "approve", nil, 400, "malformed-request"},
		{"an unknown transaction", alice, unknown, "approve", nil, 404, "not-found"},
		{"a signer the caller does not read", outsider, id, "approve", nil, 404, "not-found"},
		{"a principal the rule does not name", mallory, id, "approve", nil, 403, "not-an-approver"},
		{"a principal the rule does not name, rejecting", mallory, id, "reject", map[string]any{"reason": "no"}, 403, "not-an-approver"},
		{"the requester rejecting", treasury, id, "reject", map[string]any{"reason": "changed my mind"}, 403, "self-approval"},
		{"a transaction that does not wait", alice, plain.body["id"].(string), "approve", nil, 409, "not-pending-approval"},
	}
	for _, c := range cases {
		var a simAnswer
		if s, ok := c.body.(string); ok {
			a = rawPost(t, nd.APIURL+"/v1/transactions/"+c.id+"/"+c.kind, aw.keys[c.who], s)
		} else {
			a = aw.decide(t, nd, c.who, c.id, c.kind, c.body)
		}
		assert.Equal(t, c.status, a.status, "%s: %v", c.name, a.body)
		assert.Equal(t, c.problem, problemType(a), "%s: %v", c.name, a.body)
	}
	ghost := aw.decide(t, nd, outsider, unknown, "approve", nil)
	hidden := aw.decide(t, nd, outsider, id, "approve", nil)
	assert.Equal(t, ghost.body, hidden.body, "a transaction the caller may not read answers as one that does not exist")
	assert.Zero(t, aw.count(t, `SELECT count(*) FROM tx_approval_decision`), "no decision was written")
	assert.Equal(t, 2, aw.count(t, `SELECT count(*) FROM audit_log WHERE principal = $1 AND outcome = 'refused:not_approver'`, mallory))

	require.Equal(t, http.StatusOK, aw.decide(t, nd, alice, id, "approve", nil).status)
	twice := aw.decide(t, nd, alice, id, "approve", nil)
	assert.Equal(t, http.StatusConflict, twice.status, "%v", twice.body)
	assert.Equal(t, "already-decided", problemType(twice))
	rejectAfter := aw.decide(t, nd, alice, id, "reject", map[string]any{"reason": "second thoughts"})
	assert.Equal(t, "already-decided", problemType(rejectAfter), "one decision per approver")
	assert.Equal(t, 1, aw.count(t, `SELECT count(*) FROM tx_approval_decision`))
	got := aw.get(t, nd, alice, id)
	assert.Equal(t, string(txm.StatePendingApproval), got.body["state"], "one approval of two: it still waits")
}

// rawPost sends body as it is.
func rawPost(t testing.TB, url, token, body string) simAnswer {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	a := simAnswer{status: resp.StatusCode}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&a.body))
	return a
}

// TestIssue47_ApprovalRecheck: the last approval judges the transaction
// again. A token transfer that the signer's balance no longer covers (it
// sent tokens meanwhile) reverts in its new simulation and ends FAILED_FINAL
// reverted_at_approval with the decoded revert; a payout that a rolling
// cap refuses now (the principal's other sends filled it meanwhile) ends
// FAILED_FINAL refused_at_approval naming the rule. Neither takes a nonce,
// each has one outcome.
func TestIssue47_ApprovalRecheck(t *testing.T) {
	const (
		tokenSender = "tokens@example.com"
		capped      = "capped@example.com"
	)
	aw := newApprovalWorld(t, false)
	w := aw.w
	token := w.Chain.MustDeploy(t, w.Keys[1], evmtest.ERC20(), "Test", "TST", aw.signer, big.NewInt(120))
	on := []common.Address{aw.signer}
	for _, p := range []txm.Policy{
		{Principal: tokenSender, Roles: []txm.Role{txm.RoleSender, txm.RoleReader}, Signers: on,
			Approvals: []txm.ApprovalRule{{Token: &token, ChainID: evmtest.ChainID, Above: big.NewInt(50), Required: 1, Approvers: []string{alice}}}},
		{Principal: capped, Roles: []txm.Role{txm.RoleSender, txm.RoleReader}, Signers: on, Daily: txm.Limit{Count: 1},
			Approvals: []txm.ApprovalRule{{Above: oneEther, Required: 1, Approvers: []string{alice}}}},
	} {
		aw.keys[p.Principal] = w.APIKey(t, p)
	}
	nd := w.Node(t, "a")
	transfer := func(amount int64) simAnswer {
		return postJSON(t, http.MethodPost, nd.APIURL+"/v1/transactions", aw.keys[tokenSender], map[string]any{"chainId": evmtest.ChainID,
			"from": aw.signer, "to": token, "data": hexData(pack(t, evmtest.ERC20(), "transfer", stacktest.Dead, big.NewInt(amount)))})
	}

	big100 := transfer(100)
	require.Equal(t, http.StatusAccepted, big100.status, "%v", big100.body)
	require.Equal(t, string(txm.StatePendingApproval), big100.body["state"], "100 tokens is above the rule's 50: %v", big100.body)
	reverting := big100.body["id"].(string)
	small := transfer(30)
	require.Equal(t, http.StatusAccepted, small.status, "%v", small.body)
	require.EqualValues(t, 0, small.body["nonce"])
	stop := w.Run(t, []*stacktest.Node{nd}, stacktest.RunOptions{})
	w.WaitState(t, small.body["id"].(string), txm.StateConfirmed, 30*time.Second)
	stop()
	a := aw.decide(t, nd, alice, reverting, "approve", nil)
	require.Equal(t, http.StatusOK, a.status, "%v", a.body)
	assert.Equal(t, string(txm.StateFailedFinal), a.body["state"], "%v", a.body)
	assert.Equal(t, txm.SubStateRevertedAtApproval, a.body["subState"])
	assert.Contains(t, a.body["lastError"], "ERC20: transfer amount exceeds balance")
	assert.Contains(t, a.body["simulationRevert"], "ERC20: transfer amount exceeds balance")
	assert.NotContains(t, a.body, "nonce")

	held := aw.send(t, nd, capped, twoEther, "")
	require.Equal(t, http.StatusAccepted, held.status, "%v", held.body)
	refused := held.body["id"].(string)
	other := aw.send(t, nd, capped, big.NewInt(1), "")
	require.Equal(t, http.StatusAccepted, other.status, "a waiting transaction counts in no rolling cap: %v", other.body)
	require.EqualValues(t, 1, other.body["nonce"])
	a = aw.decide(t, nd, alice, refused, "approve", nil)
	require.Equal(t, http.StatusOK, a.status, "%v", a.body)
	assert.Equal(t, string(txm.StateFailedFinal), a.body["state"], "%v", a.body)
	assert.Equal(t, txm.SubStateRefusedAtApproval, a.body["subState"])
	assert.Contains(t, a.body["lastError"], txm.RuleDailyCount)
	assert.NotContains(t, a.body, "nonce")

	for _, id := range []string{reverting, refused} {
		w.WaitState(t, id, txm.StateFailedFinal, 10*time.Second)
		assert.Len(t, aw.feed(t, nd, id), 1, "one outcome")
	}
	assert.Equal(t, 2, aw.count(t, `SELECT next_nonce FROM signer_nonce_cursor WHERE signer = $1`, txm.CanonicalAddress(aw.signer)),
		"only the two sent took nonces")
}

// TestIssue47_ApprovalFinishedBySweep: a transaction whose last approval
// was written but whose allocation never ran (the instance stopped in
// between) is allocated by the resubmit sweep, once; the approvals are
// never lost.
func TestIssue47_ApprovalFinishedBySweep(t *testing.T) {
	aw := newApprovalWorld(t, false)
	nd := aw.w.Node(t, "a")
	ctx := context.Background()
	held := aw.send(t, nd, treasury, twoEther, "")
	require.Equal(t, http.StatusAccepted, held.status, "%v", held.body)
	id := held.body["id"].(string)
	// The decisions as ApproveTx writes them, before the allocation that
	// does not come.
	require.NoError(t, nd.Store.Decide(ctx, id, alice, ""))
	require.NoError(t, nd.Store.Decide(ctx, id, bob, ""))
	assert.Equal(t, string(txm.StatePendingApproval), aw.get(t, nd, alice, id).body["state"])

	st, err := nd.Resubmit.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, st.ApprovalsFinished)
	got := aw.get(t, nd, alice, id)
	assert.Equal(t, string(txm.StateAllocated), got.body["state"], "%v", got.body)
	assert.EqualValues(t, 0, got.body["nonce"])
	st, err = nd.Resubmit.Pass(ctx)
	require.NoError(t, err)
	assert.Zero(t, st.ApprovalsFinished, "once")
	assert.Equal(t, 1, aw.count(t, `SELECT count(*) FROM tx_history WHERE tx_id = $1 AND reason = 'approved'`, id))
}

// TestApprovals_HeldRequestIDRace: one request id sent at once as a payout
// that waits for approval and as a small transfer that does not (another
// payload), through two instances: exactly one of them is the
// transaction, the other is 409, and no create fails otherwise (the hold
// and the allocation's look-up of request ids never interleave).
func TestApprovals_HeldRequestIDRace(t *testing.T) {
	aw := newApprovalWorld(t, false)
	nodes := []*stacktest.Node{aw.w.Node(t, "a"), aw.w.Node(t, "b")}
	const rounds = 30
	var wg sync.WaitGroup
	answers := make([][2]simAnswer, rounds)
	for i := 0; i < rounds; i++ {
		for k, value := range []*big.Int{twoEther, big.NewInt(1)} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				answers[i][k] = aw.send(t, nodes[(i+k)%2], treasury, value, fmt.Sprintf("same-%d", i))
			}()
		}
	}
	wg.Wait()
	for i, pair := range answers {
		created := 0
		for _, a := range pair {
			switch a.status {
			case http.StatusAccepted:
				created++
			case http.StatusConflict:
				assert.Equal(t, "idempotency-conflict", problemType(a), "round %d: %v", i, a.body)
			default:
				t.Errorf("round %d: %d %v", i, a.status, a.body)
			}
		}
		assert.Equal(t, 1, created, "round %d: one transaction per request id", i)
	}
	assert.Equal(t, rounds, aw.count(t, `SELECT count(*) FROM managed_tx`))
}
