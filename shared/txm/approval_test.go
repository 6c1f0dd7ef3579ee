package txm

import (
	"encoding/json"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestIssue47_ApprovalRules: a request waits for approval when it exceeds
// a rule's threshold (native: its worst-case cost; a token: what its
// effects move of the token out of the signer, summed), on the rule's
// chain; where several match, the one requiring the most approvals
// governs.
func TestIssue47_ApprovalRules(t *testing.T) {
	t.Parallel()
	signer := common.HexToAddress("0x51")
	usdc := common.HexToAddress("0x20c0")
	other := common.HexToAddress("0x70")
	transfer := func(from common.Address, amount int64) Effect {
		return Effect{Kind: EffectERC20Transfer, Token: usdc, From: from, To: other, Amount: big.NewInt(amount)}
	}
	pol := Policy{Principal: "p", Approvals: []ApprovalRule{
		{Above: big.NewInt(1000), Required: 1, Approvers: []string{"a"}},
		{Above: big.NewInt(5000), Required: 3, Approvers: []string{"a", "b", "c"}},
		{Token: &usdc, ChainID: 1, Above: big.NewInt(100), Required: 2, ApproverRole: RoleApprover},
	}}
	for _, c := range []struct {
		name     string
		r        Request
		required int // 0: none
	}{
		{"below every threshold", Request{ChainID: 1, From: signer, Cost: big.NewInt(1000)}, 0},
		{"above the native one", Request{ChainID: 1, From: signer, Cost: big.NewInt(1001)}, 1},
		{"above two native ones: the larger M", Request{ChainID: 1, From: signer, Cost: big.NewInt(5001)}, 3},
		{"the token, summed over its transfers", Request{ChainID: 1, From: signer, Cost: big.NewInt(1),
			Effects: []Effect{transfer(signer, 60), transfer(signer, 41)}}, 2},
		{"the token at its threshold", Request{ChainID: 1, From: signer, Cost: big.NewInt(1),
			Effects: []Effect{transfer(signer, 60), transfer(signer, 40)}}, 0},
		{"another's transfer of the token", Request{ChainID: 1, From: signer, Cost: big.NewInt(1),
			Effects: []Effect{transfer(other, 500)}}, 0},
		{"the token on another chain", Request{ChainID: 5, From: signer, Cost: big.NewInt(1),
			Effects: []Effect{transfer(signer, 500)}}, 0},
		{"the token and the larger native rule", Request{ChainID: 1, From: signer, Cost: big.NewInt(9999),
			Effects: []Effect{transfer(signer, 500)}}, 3},
		{"no cost counted yet: the value", Request{ChainID: 1, From: signer, Value: big.NewInt(1500)}, 1},
	} {
		got := pol.ApprovalFor(&c.r)
		if c.required == 0 {
			assert.Nil(t, got, c.name)
			continue
		}
		if assert.NotNil(t, got, c.name) {
			assert.Equal(t, c.required, got.Required, c.name)
		}
	}
	onChain := Policy{Approvals: []ApprovalRule{{ChainID: 5, Above: big.NewInt(0), Required: 1, Approvers: []string{"a"}}}}
	assert.Nil(t, onChain.ApprovalFor(&Request{ChainID: 1, Cost: big.NewInt(10)}), "a native rule with a chain applies there only")
	assert.NotNil(t, onChain.ApprovalFor(&Request{ChainID: 5, Cost: big.NewInt(10)}))
}

// TestIssue47_ApprovalRulesValidate: a policy's approval rules are read
// from its JSON form and written back the same; a bad rule is refused,
// naming its field.
func TestIssue47_ApprovalRulesValidate(t *testing.T) {
	t.Parallel()
	var p Policy
	require.NoError(t, json.Unmarshal([]byte(`{"principal": "treasury", "roles": ["sender"], "approvals": [
  {"asset": "native", "above": "1000", "required": 2, "approvers": ["alice", "bob"], "expiresIn": "36h"},
  {"asset": "0x00000000000000000000000000000000000020C0", "chainId": 1, "above": "5", "required": 1, "approverRole": "approver"}]}`), &p))
	require.NoError(t, p.Validate())
	require.Len(t, p.Approvals, 2)
	assert.Nil(t, p.Approvals[0].Token)
	assert.Equal(t, 36*time.Hour, p.Approvals[0].Expiry())
	assert.Equal(t, DefaultApprovalExpiry, p.Approvals[1].Expiry())
	assert.Equal(t, "0x00000000000000000000000000000000000020c0", p.Approvals[1].Asset())
	raw, err := json.Marshal(p)
	require.NoError(t, err)
	var back Policy
	require.NoError(t, json.Unmarshal(raw, &back))
	assert.Equal(t, p.Approvals, back.Approvals, "written back the same: %s", raw)

	for rules, field := range map[string]string{
		`{"above": "1", "required": 1, "approvers": ["a"]}`:                                         "approvals[0].asset",
		`{"asset": "gold", "above": "1", "required": 1, "approvers": ["a"]}`:                        "approvals[0].asset",
		`{"asset": "native", "required": 1, "approvers": ["a"]}`:                                    "approvals[0].above",
		`{"asset": "native", "above": "-1", "required": 1, "approvers": ["a"]}`:                     "approvals[0].above",
		`{"asset": "native", "above": "1", "required": 1, "approvers": ["a"], "expiresIn": "x"}`:    "approvals[0].expiresIn",
		`{"asset": "native", "above": "1", "required": 1, "approvers": ["a"], "expiresIn": "31d"}`:  "approvals[0].expiresIn",
		`{"asset": "native", "above": "1", "required": 1, "approvers": ["a"], "expiresIn": "721h"}`: "approvals[0].expiresIn",
		`{"asset": "native", "above": "1", "required": 1, "approvers": ["a"], "expiresIn": "-1h"}`:  "approvals[0].expiresIn",
	} {
		err := json.Unmarshal([]byte(`{"principal": "treasury", "roles": ["sender"], "approvals": [`+rules+`]}`), &p)
		var v *ValidationError
		require.ErrorAs(t, err, &v, rules)
		assert.Equal(t, field, v.Fields[0].Field, rules)
	}

	usdc := common.HexToAddress("0x20c0")
	one := big.NewInt(1)
	for name, c := range map[string]struct {
		rule  ApprovalRule
		field string
	}{
		"a token without its chain": {ApprovalRule{Token: &usdc, Above: one, Required: 1, Approvers: []string{"a"}}, "approvals[0].chainId"},
		"no approval required":      {ApprovalRule{Above: one, Approvers: []string{"a"}}, "approvals[0].required"},
		"no approvers":              {ApprovalRule{Above: one, Required: 1}, "approvals[0]"},
		"approvers and a role":      {ApprovalRule{Above: one, Required: 1, Approvers: []string{"a"}, ApproverRole: RoleApprover}, "approvals[0]"},
		"a role that is not approver": {ApprovalRule{Above: one, Required: 1, ApproverRole: RoleAdmin},
			"approvals[0].approverRole"},
		"fewer approvers than required": {ApprovalRule{Above: one, Required: 3, Approvers: []string{"a", "b"}}, "approvals[0].approvers"},
		"the policy's own principal": {ApprovalRule{Above: one, Required: 1, Approvers: []string{"treasury"}},
			"approvals[0].approvers[0]"},
		"an approver named twice":  {ApprovalRule{Above: one, Required: 1, Approvers: []string{"a", "a"}}, "approvals[0].approvers[1]"},
		"an expiry beyond 30 days": {ApprovalRule{Above: one, Required: 1, Approvers: []string{"a"}, ExpiresIn: 31 * 24 * time.Hour}, "approvals[0].expiresIn"},
		"a negative threshold":     {ApprovalRule{Above: big.NewInt(-1), Required: 1, Approvers: []string{"a"}}, "approvals[0].above"},
	} {
		err := Policy{Principal: "treasury", Roles: []Role{RoleSender}, Approvals: []ApprovalRule{c.rule}}.Validate()
		var v *ValidationError
		require.ErrorAs(t, err, &v, name)
		assert.Equal(t, c.field, v.Fields[0].Field, name)
	}
}

// TestIssue47_ApprovalDeciders: who may decide on a waiting transaction:
// never its requester; a named approver, or a holder of the rule's role
// whose policy names the signer; each once; only while it waits. A
// rejection needs a reason, and a decision's text is bounded.
func TestIssue47_ApprovalDeciders(t *testing.T) {
	t.Parallel()
	signer, elsewhere := common.HexToAddress("0x51"), common.HexToAddress("0x52")
	named := &Tx{State: StatePendingApproval, Request: Request{From: signer, Principal: "treasury"},
		Approval: &Approval{Required: 2, Approvers: []string{"alice", "bob", "treasury"},
			Decisions: []ApprovalDecision{{Principal: "bob", Decision: DecisionApprove}}}}
	role := &Tx{State: StatePendingApproval, Request: Request{From: signer, Principal: "treasury"},
		Approval: &Approval{Required: 1, ApproverRole: RoleApprover}}
	reader := Policy{Roles: []Role{RoleReader}, Signers: []common.Address{signer}}
	approver := Policy{Roles: []Role{RoleApprover}, Signers: []common.Address{signer}}
	approverElsewhere := Policy{Roles: []Role{RoleApprover}, Signers: []common.Address{elsewhere}}

	assert.NoError(t, named.CheckDecider("alice", reader))
	assert.ErrorIs(t, named.CheckDecider("treasury", reader), ErrSelfApproval, "named or not, never its own request")
	assert.ErrorIs(t, named.CheckDecider("mallory", approver), ErrNotApprover, "the role does not approve a rule that names principals")
	assert.ErrorIs(t, named.CheckDecider("bob", reader), ErrAlreadyDecided)
	assert.NoError(t, role.CheckDecider("mallory", approver))
	assert.ErrorIs(t, role.CheckDecider("alice", reader), ErrNotApprover, "a reader does not hold the role")
	assert.ErrorIs(t, role.CheckDecider("mallory", approverElsewhere), ErrNotApprover, "the role on another signer")
	assert.ErrorIs(t, role.CheckDecider("treasury", approver), ErrSelfApproval)
	assert.True(t, approver.Has(RoleReader), "an approver reads what it decides on")

	done := *named
	done.State = StateFailedFinal
	assert.ErrorIs(t, done.CheckDecider("alice", reader), ErrNotPendingApproval)
	assert.ErrorIs(t, (&Tx{State: StateAllocated}).CheckDecider("alice", reader), ErrNotPendingApproval, "never needed approval")

	assert.NoError(t, CheckDecisionText(DecisionApprove, ""), "a comment is optional")
	assert.ErrorIs(t, CheckDecisionText(DecisionReject, ""), ErrInvalid, "a reason is not")
	assert.ErrorIs(t, CheckDecisionText(DecisionReject, strings.Repeat("x", MaxDecisionText+1)), ErrInvalid)
	assert.ErrorIs(t, CheckDecisionText(DecisionApprove, "\xff"), ErrInvalid)

	a := &Approval{Required: 2, Decisions: []ApprovalDecision{{Principal: "a", Decision: DecisionApprove},
		{Principal: "b", Decision: DecisionReject, Text: "no"}}}
	assert.Len(t, a.Approvals(), 1)
	assert.False(t, a.Complete())
	assert.Equal(t, "b", a.Rejection().Principal)
}

// TestIssue47_PendingApprovalMoves: a transaction that waits for approval
// is allocated or ends; nothing else.
func TestIssue47_PendingApprovalMoves(t *testing.T) {
	t.Parallel()
	for _, to := range States {
		assert.Equal(t, to == StateAllocated || to == StateFailedFinal, CanMove(StatePendingApproval, to), "PENDING_APPROVAL → %s", to)
		assert.False(t, CanMove(to, StatePendingApproval), "%s → PENDING_APPROVAL", to)
	}
	assert.False(t, StatePendingApproval.Terminal())
}
