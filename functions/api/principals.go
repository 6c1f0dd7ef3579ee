package api

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/txfence/txfence/shared/txm"
)

// errWiderPolicy refuses a policy, stored for another principal, that names
// signers the caller's does not; which ones is that principal's business.
var errWiderPolicy = &txm.Refusal{Rule: txm.RuleSigner, Detail: "the principal's policy names signers outside the caller's"}

// getPolicy serves GET /v1/principals/{principal}/policy: the principal's
// current policy (admins only, and only a policy within the admin's
// signers: 403 rule signer otherwise).
func (h *Handler) getPolicy(w http.ResponseWriter, r *http.Request) {
	principal := r.PathValue("principal")
	p, err := h.deps.PolicyStore.Policy(r.Context(), principal)
	if errors.Is(err, txm.ErrNotFound) {
		writeProblem(w, notFound("no policy for "+principal+": it may do nothing"))
		return
	}
	if err != nil {
		writeProblem(w, problemFor(err))
		return
	}
	if callerOf(r).pol.CheckGrant(p) != nil {
		h.refuse(w, r, errWiderPolicy)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// putPolicy serves PUT /v1/principals/{principal}/policy: the body becomes
// the principal's next policy version (admins only; audited). Both the new
// policy and the one it replaces must lie within the caller's signers (403
// rule signer, nothing written): an admin cannot widen its own or another's
// rights past its own, nor rewrite a wider principal's policy.
func (h *Handler) putPolicy(w http.ResponseWriter, r *http.Request) {
	principal := r.PathValue("principal")
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64*1024))
	if err != nil {
		writeProblem(w, badRequest("could not read the body (at most 64 KiB)"))
		return
	}
	var p txm.Policy
	if err := json.Unmarshal(body, &p); err != nil {
		var v *txm.ValidationError
		if errors.As(err, &v) {
			writeProblem(w, problemFor(v))
			return
		}
		writeProblem(w, badRequest("the body must be a policy: a JSON object"))
		return
	}
	if p.Principal == "" {
		p.Principal = principal
	}
	if p.Principal != principal {
		writeProblem(w, invalid([]fieldError{{Field: "principal", Message: "differs from the path"}}))
		return
	}
	if err := p.Validate(); err != nil {
		writeProblem(w, problemFor(err))
		return
	}
	c := callerOf(r)
	if err := c.pol.CheckGrant(p); err != nil {
		h.refuse(w, r, err)
		return
	}
	switch current, err := h.deps.PolicyStore.Policy(r.Context(), principal); {
	case errors.Is(err, txm.ErrNotFound):
	case err != nil:
		writeProblem(w, problemFor(err))
		return
	default:
		if c.pol.CheckGrant(current) != nil {
			h.refuse(w, r, errWiderPolicy)
			return
		}
	}
	stored, err := h.deps.PolicyStore.PutPolicy(r.Context(), p, c.who.ID)
	if err != nil {
		writeProblem(w, problemFor(err))
		return
	}
	h.deps.Policies.Forget(principal)
	writeJSON(w, http.StatusOK, stored)
}
