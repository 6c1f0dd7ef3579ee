package api

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestIssue48_AuthorizationListRefused: a create that carries an EIP-7702
// authorization list is refused with an error that says so, and writes
// nothing; txfence does not build set-code transactions.
func TestIssue48_AuthorizationListRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	before := b.counts(t)
	body := transfer(signers(1)[0], 1, "with-auth")
	body["authorizationList"] = []map[string]any{{
		"chainId": testChain, "address": "0x000000000000000000000000000000000000dEaD", "nonce": "0x1",
		"yParity": "0x0", "r": "0x01", "s": "0x01",
	}}
	r := b.do(t, b.insts[0], http.MethodPost, "/v1/transactions", mustJSON(body))
	require.Equal(t, http.StatusUnprocessableEntity, r.status, r.raw)
	assert.Equal(t, "application/problem+json", r.header.Get("Content-Type"))
	assert.Contains(t, r.prob.Detail, "EIP-7702 authorizations are not supported")
	require.Len(t, r.prob.Errors, 1)
	assert.Equal(t, "authorizationList", r.prob.Errors[0].Field)
	assert.Contains(t, r.prob.Errors[0].Message, "not supported")
	assert.Equal(t, before, b.counts(t), "the refusal writes nothing")

	// The same body without it is created.
	delete(body, "authorizationList")
	assert.Equal(t, http.StatusAccepted, b.create(t, b.insts[0], body).status)
}
