package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sort"
	"strings"

	"github.com/txfence/txfence/shared/txm"
)

// Approvals decides on transactions that wait for approval:
// *app.ShardedApprovals, which routes each to its transaction's shard.
type Approvals interface {
	Approve(ctx context.Context, who txm.Principal, pol txm.Policy, txID, comment string) (*txm.Tx, error)
	Reject(ctx context.Context, who txm.Principal, pol txm.Policy, txID, reason string) (*txm.Tx, error)
}

// decideOn is who may approve or reject: a principal whose policy reads
// the transaction's signer (reader, admin, approver) passes the guard; the
// use case then admits only the approvers the transaction's rule names or
// whose role it names, never its requester.
var decideOn = access{roles: []txm.Role{txm.RoleApprover, txm.RoleReader}, sender: cellRole, reader: cellNotApprover,
	admin: cellNotApprover, approver: cellYes, outside: cell404}

// approve serves POST /v1/transactions/{id}/approve, body optional
// {"comment"}: 200 with the transaction as the approval left it (still
// waiting; ALLOCATED with its nonce at the last approval; FAILED_FINAL
// reverted_at_approval or refused_at_approval when that approval found it
// failing).
func (h *Handler) approve(w http.ResponseWriter, r *http.Request) {
	h.decide(w, r, txm.DecisionApprove)
}

// reject serves POST /v1/transactions/{id}/reject, body {"reason"}: 200
// with the transaction, FAILED_FINAL rejected.
func (h *Handler) reject(w http.ResponseWriter, r *http.Request) { h.decide(w, r, txm.DecisionReject) }

// decide answers an approval or a rejection: 403 self-approval or
// not-an-approver, 409 already-decided or not-pending-approval, 404 for a
// transaction the caller may not read (as one that does not exist), 422 a
// rejection without a reason.
func (h *Handler) decide(w http.ResponseWriter, r *http.Request, d txm.Decision) {
	id := r.PathValue("id")
	if !isUUID(id) {
		writeProblem(w, badRequest("the id must be a UUID", fieldError{Field: "id", Message: "must be a UUID"}))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 16*1024))
	if err != nil {
		writeProblem(w, badRequest("could not read the body (at most 16 KiB)"))
		return
	}
	text, p := decodeDecision(body, d)
	if p != nil {
		writeProblem(w, *p)
		return
	}
	c := callerOf(r)
	var t *txm.Tx
	if d == txm.DecisionApprove {
		t, err = h.deps.Approvals.Approve(r.Context(), c.who, c.pol, strings.ToLower(id), text)
	} else {
		t, err = h.deps.Approvals.Reject(r.Context(), c.who, c.pol, strings.ToLower(id), text)
	}
	if err != nil {
		writeProblem(w, decisionProblem(err))
		return
	}
	writeJSON(w, http.StatusOK, viewTx(t))
}

// decisionProblem is the answer to a decision that was not made.
func decisionProblem(err error) problem {
	switch {
	case errors.Is(err, txm.ErrSelfApproval):
		return probSelfApproval.problem("nobody approves or rejects their own request; nothing was written")
	case errors.Is(err, txm.ErrNotApprover):
		return probNotApprover.problem("the caller is not an approver of this transaction: its rule names other principals, " +
			"or a role the caller's policy does not grant on its signer; nothing was written")
	case errors.Is(err, txm.ErrAlreadyDecided):
		return probAlreadyDecided.problem("the caller has approved or rejected this transaction already; nothing was written")
	case errors.Is(err, txm.ErrNotPendingApproval):
		return probNotPendingApproval.problem("the transaction is not waiting for approval (it never needed one, or it was " +
			"approved, rejected or expired); nothing was written")
	}
	return problemFor(err)
}

// decodeDecision reads a decision's body: {"comment"} (optional, and so is
// the body) to approve, {"reason"} to reject (that it is given is the use
// case's to check, once it is known the caller may decide).
func decodeDecision(body []byte, d txm.Decision) (string, *problem) {
	field := "comment"
	if d == txm.DecisionReject {
		field = "reason"
	}
	var raw map[string]json.RawMessage
	if len(bytes.TrimSpace(body)) > 0 && json.Unmarshal(body, &raw) != nil {
		p := badRequest("the body must be one JSON object")
		return "", &p
	}
	var unknown []fieldError
	for k := range raw {
		if k != field {
			unknown = append(unknown, fieldError{Field: k, Message: "unknown field"})
		}
	}
	if len(unknown) > 0 {
		sort.Slice(unknown, func(i, j int) bool { return unknown[i].Field < unknown[j].Field })
		p := badRequest("the body has unknown fields", unknown...)
		return "", &p
	}
	v, ok := present(raw, field)
	if !ok {
		return "", nil
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		p := invalid([]fieldError{{Field: field, Message: "must be a string"}})
		return "", &p
	}
	return strings.TrimSpace(s), nil
}
