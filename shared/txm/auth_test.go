package txm

import (
	"encoding/json"
	"errors"
	"math/big"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPolicy_CanRead(t *testing.T) {
	a, b := common.HexToAddress("0xa"), common.HexToAddress("0xb")
	mine := &Tx{Request: Request{From: a, Principal: "me"}}
	theirs := &Tx{Request: Request{From: a, Principal: "them"}}
	unowned := &Tx{Request: Request{From: a}}
	onB := &Tx{Request: Request{From: b, Principal: "me"}}
	for _, c := range []struct {
		name  string
		roles []Role
		want  [4]bool // mine, theirs, unowned, onB
	}{
		{"sender", []Role{RoleSender}, [4]bool{true, false, false, false}},
		{"reader", []Role{RoleReader}, [4]bool{true, true, true, false}},
		{"admin", []Role{RoleAdmin}, [4]bool{true, true, true, false}},
		{"sender and reader", []Role{RoleSender, RoleReader}, [4]bool{true, true, true, false}},
		{"no role", nil, [4]bool{false, false, false, false}},
	} {
		p := Policy{Principal: "me", Roles: c.roles, Signers: []common.Address{a}}
		got := [4]bool{p.CanRead("me", mine), p.CanRead("me", theirs), p.CanRead("me", unowned), p.CanRead("me", onB)}
		assert.Equal(t, c.want, got, c.name)
		if c.roles != nil {
			assert.Equal(t, !c.want[1], p.ReadsOwnOnly(), "%s: lists and feed narrowed to its own", c.name)
		}
	}
	assert.False(t, Policy{Roles: []Role{RoleSender}}.Has(RoleReader), "sender does not imply reader")
	assert.True(t, Policy{Roles: []Role{RoleAdmin}}.Has(RoleReader), "admin implies reader")
}

func TestPolicy_CheckGrant(t *testing.T) {
	a, b := common.HexToAddress("0xa"), common.HexToAddress("0xb")
	scoped := Policy{Roles: []Role{RoleAdmin}, Signers: []common.Address{a}}
	every := Policy{Roles: []Role{RoleAdmin}, AllSigners: true}
	for _, c := range []struct {
		name   string
		by, to Policy
		ok     bool
	}{
		{"within", scoped, Policy{Signers: []common.Address{a}}, true},
		{"no signers", scoped, Policy{}, true},
		{"another signer", scoped, Policy{Signers: []common.Address{a, b}}, false},
		{"every signer", scoped, Policy{AllSigners: true}, false},
		{"every by every", every, Policy{AllSigners: true}, true},
		{"any by every", every, Policy{Signers: []common.Address{b}}, true},
	} {
		err := c.by.CheckGrant(c.to)
		assert.Equal(t, c.ok, err == nil, "%s: %v", c.name, err)
		if err != nil {
			var r *Refusal
			assert.True(t, errors.As(err, &r) && r.Rule == RuleSigner && errors.Is(err, ErrForbidden), c.name)
		}
	}
}

func TestPolicy_RequireOneOf(t *testing.T) {
	p := Policy{Roles: []Role{RoleSender}}
	assert.NoError(t, p.Require(RoleSender, RoleReader))
	assert.ErrorIs(t, p.Require(RoleReader), ErrForbidden)
	err := Policy{}.Require(RoleSender, RoleReader)
	assert.EqualError(t, err, "forbidden by rule role: one of the roles sender, reader is required")
}

func TestCompletionFilter_Selects(t *testing.T) {
	a, b := common.HexToAddress("0xa"), common.HexToAddress("0xb")
	c := Completion{Signer: a, Principal: "me"}
	assert.True(t, CompletionFilter{}.Selects(c))
	assert.True(t, CompletionFilter{Signers: []common.Address{a}, Principal: "me"}.Selects(c))
	assert.False(t, CompletionFilter{Signers: []common.Address{}}.Selects(c), "an empty list is no signer")
	assert.False(t, CompletionFilter{Signers: []common.Address{b}}.Selects(c))
	assert.False(t, CompletionFilter{Principal: "them"}.Selects(c))
}

// TestIssue44_CostRules: the worst-case cost is the value and the gas
// limit at the lower of the fee ceiling and the chain's cap; CheckSend
// refuses a caller's gas limit or fees above the policy's, CheckCost a gas
// limit (estimated too) above maxGasLimit and a cost above maxValue.
func TestIssue44_CostRules(t *testing.T) {
	t.Parallel()
	to := common.HexToAddress("0xdead")
	signer := common.HexToAddress("0xa1")
	req := func(value, gas int64) *Request {
		return &Request{From: signer, To: &to, Value: big.NewInt(value), GasEstimate: uint64(gas)}
	}
	chainCap := big.NewInt(100)
	r := req(5, 21000)
	assert.Equal(t, big.NewInt(5+21000*100), r.WorstCaseCost(chainCap), "the chain's cap")
	r.FeeCeiling = big.NewInt(2)
	assert.Equal(t, big.NewInt(5+21000*2), r.WorstCaseCost(chainCap), "the lower ceiling")
	r.FeeCeiling = big.NewInt(1000)
	assert.Equal(t, big.NewInt(5+21000*100), r.WorstCaseCost(chainCap), "a ceiling above the chain's cap counts the cap")
	assert.Equal(t, big.NewInt(5+21000*1000), r.WorstCaseCost(nil))
	assert.Equal(t, big.NewInt(21000*100), r.ExecutionFeeBound(chainCap))
	r.DataFee = big.NewInt(7)
	assert.Equal(t, big.NewInt(5+21000*100+7), r.WorstCaseCost(chainCap), "the data fee counts")
	r.FeeCeiling = nil
	assert.Nil(t, r.ExecutionFeeBound(nil), "nothing bounds the fee")
	assert.Equal(t, big.NewInt(5+7), r.WorstCaseCost(nil), "the value and the data fee")

	p := Policy{Roles: []Role{RoleSender}, AllSigners: true, MaxValue: big.NewInt(50_000), MaxGasLimit: 30_000, MaxFeePerGas: big.NewInt(2)}
	rule := func(err error) string {
		var ref *Refusal
		if errors.As(err, &ref) {
			return ref.Rule
		}
		return ""
	}
	given := req(1, 0)
	given.GasLimit = 40_000
	assert.Equal(t, RuleMaxGasLimit, rule(p.CheckSend(given)))
	fees := req(1, 0)
	fees.MaxFeePerGas, fees.MaxPriorityFeePerGas = big.NewInt(3), big.NewInt(1)
	assert.Equal(t, RuleMaxFee, rule(p.CheckSend(fees)))
	fees.MaxFeePerGas, fees.MaxPriorityFeePerGas, fees.GasPrice = nil, nil, big.NewInt(3)
	assert.Equal(t, RuleMaxFee, rule(p.CheckSend(fees)))
	assert.NoError(t, p.CheckSend(req(1, 0)))

	estimated := req(1, 35_000)
	estimated.Cost = big.NewInt(1)
	assert.Equal(t, RuleMaxGasLimit, rule(p.CheckCost(estimated)), "an estimate above maxGasLimit")
	within := req(1, 21000)
	within.FeeCeiling = p.MaxFeePerGas
	within.Cost = within.WorstCaseCost(chainCap)
	assert.NoError(t, p.CheckCost(within), "42,001 wei")
	over := req(8_001, 21000)
	over.FeeCeiling = p.MaxFeePerGas
	over.Cost = over.WorstCaseCost(chainCap)
	assert.Equal(t, RuleMaxValue, rule(p.CheckCost(over)), "50,001 wei of value and fees, above 50,000")
	within.DataFee = big.NewInt(8_000)
	within.Cost = within.WorstCaseCost(chainCap)
	err := p.CheckCost(within)
	assert.Equal(t, RuleMaxValue, rule(err), "50,001 wei with the data fee, above 50,000")
	assert.ErrorContains(t, err, "an L1 data fee of 8000 wei")
}

func TestPolicySimulationMode(t *testing.T) {
	for _, c := range []struct {
		in       string
		advisory bool
		bad      bool
	}{
		{`{"principal":"p","roles":[]}`, false, false},
		{`{"principal":"p","roles":[],"simulation":"enforce"}`, false, false},
		{`{"principal":"p","roles":[],"simulation":"advisory"}`, true, false},
		{`{"principal":"p","roles":[],"simulation":"skip"}`, false, true},
	} {
		var p Policy
		err := json.Unmarshal([]byte(c.in), &p)
		if c.bad {
			require.ErrorIs(t, err, ErrInvalid, c.in)
			continue
		}
		require.NoError(t, err, c.in)
		assert.Equal(t, c.advisory, p.SimulationAdvisory, c.in)
		out, err := json.Marshal(p)
		require.NoError(t, err)
		assert.Equal(t, c.advisory, strings.Contains(string(out), `"simulation":"advisory"`), "%s", out)
	}
}
