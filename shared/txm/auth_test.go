package txm

import (
	"errors"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
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
