package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/txfence/txfence/shared/txm"
)

// actionFields are the members an action body may have.
var actionFields = map[string]bool{
	"actionId": true, "reason": true, "maxFeePerGas": true, "maxPriorityFeePerGas": true, "gasPrice": true,
}

// actionView is an admin action on the wire.
type actionView struct {
	TxID                 string     `json:"txId"`
	ActionID             string     `json:"actionId"`
	Action               string     `json:"action"`
	Status               string     `json:"status"`
	Result               string     `json:"result,omitempty"`
	Reason               string     `json:"reason"`
	Actor                string     `json:"actor"`
	MaxFeePerGas         *string    `json:"maxFeePerGas,omitempty"`
	MaxPriorityFeePerGas *string    `json:"maxPriorityFeePerGas,omitempty"`
	GasPrice             *string    `json:"gasPrice,omitempty"`
	Token                int64      `json:"token,omitempty"`
	CreatedAt            time.Time  `json:"createdAt"`
	DoneAt               *time.Time `json:"doneAt,omitempty"`
}

func viewAction(a txm.Action) actionView {
	v := actionView{TxID: a.TxID, ActionID: a.ActionID, Action: string(a.Kind), Status: string(a.Status), Result: a.Result,
		Reason: a.Reason, Actor: a.Actor, Token: a.Token, CreatedAt: a.CreatedAt.UTC(), DoneAt: a.DoneAt}
	if a.Fees != nil {
		v.MaxFeePerGas, v.MaxPriorityFeePerGas, v.GasPrice = bigString(a.Fees.MaxFeePerGas), bigString(a.Fees.MaxPriorityFeePerGas), bigString(a.Fees.GasPrice)
	}
	return v
}

// actionRoute serves POST /v1/transactions/{id}/{resubmit|replace|cancel}: 202
// recorded (carried out shortly by the function that holds the key), 200 a
// replay of the same action id, 409 another payload under that id or a
// state where the action makes no sense, 404 no such transaction — or one
// of a signer the admin's policy does not name, which it cannot tell from
// one that does not exist (the refusal is audited).
func actionRoute(kind txm.ActionKind) func(h *Handler, w http.ResponseWriter, r *http.Request) {
	return func(h *Handler, w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if !isUUID(id) {
			writeProblem(w, badRequest("the id must be a UUID", fieldError{Field: "id", Message: "must be a UUID"}))
			return
		}
		// Scope before anything else, so that no answer about the body
		// tells a transaction out of scope from one that does not exist.
		t, err := h.deps.Queries.GetTx(r.Context(), strings.ToLower(id))
		if err == nil && !callerOf(r).pol.CoversSigner(t.From) {
			h.deps.Policies.Refused(r.Context(), callerOf(r).who, routeOf(r), r.URL.Path,
				&txm.Refusal{Rule: txm.RuleSigner, Detail: "the caller may not act on " + txm.CanonicalAddress(t.From)})
			err = fmt.Errorf("get tx %s: %w", id, txm.ErrNotFound)
		}
		if err != nil {
			writeProblem(w, problemFor(err))
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 16*1024))
		if err != nil {
			writeProblem(w, badRequest("could not read the body (at most 16 KiB)"))
			return
		}
		req, p := decodeAction(body, strings.TrimSpace(r.Header.Get("Idempotency-Key")))
		if p != nil {
			writeProblem(w, *p)
			return
		}
		req.TxID, req.Kind, req.Actor = strings.ToLower(id), kind, callerOf(r).who.ID
		a, created, err := h.deps.Actions.Execute(r.Context(), req)
		switch {
		case errors.Is(err, txm.ErrConflict):
			p := probActionIDUsed.problem("actionId " + req.ActionID + " already names a " + string(a.Kind) + " action with another payload")
			p.Errors = []fieldError{{Field: "actionId", Message: "already used with another payload"}}
			writeProblem(w, p)
		case errors.Is(err, txm.ErrActionNotAllowed):
			writeProblem(w, probActionNotAllowed.problem(err.Error()))
		case err != nil:
			writeProblem(w, problemFor(err))
		case created:
			writeJSON(w, http.StatusAccepted, viewAction(a))
		default:
			writeJSON(w, http.StatusOK, viewAction(a))
		}
	}
}

// decodeAction reads an action body: {"actionId", "reason", and for replace
// the optional fees}.
func decodeAction(body []byte, idemKey string) (txm.ActionRequest, *problem) {
	var r txm.ActionRequest
	var raw map[string]json.RawMessage
	if len(bytes.TrimSpace(body)) > 0 {
		// Unmarshal refuses anything after the object, even a stray
		// closing brace, which a stream decoder's More does not see.
		if json.Unmarshal(body, &raw) != nil {
			p := badRequest("the body must be one JSON object")
			return r, &p
		}
	}
	var unknown []fieldError
	for k := range raw {
		if !actionFields[k] {
			unknown = append(unknown, fieldError{Field: k, Message: "unknown field"})
		}
	}
	if len(unknown) > 0 {
		sort.Slice(unknown, func(i, j int) bool { return unknown[i].Field < unknown[j].Field })
		p := badRequest("the body has unknown fields", unknown...)
		return r, &p
	}
	var errs []fieldError
	str := func(k string) string {
		v, ok := present(raw, k)
		if !ok {
			return ""
		}
		var s string
		if json.Unmarshal(v, &s) != nil {
			errs = append(errs, fieldError{Field: k, Message: "must be a string"})
		}
		return s
	}
	r.ActionID, r.Reason = str("actionId"), str("reason")
	switch {
	case r.ActionID != "" && idemKey != "" && r.ActionID != idemKey:
		errs = append(errs, fieldError{Field: "actionId", Message: "differs from the Idempotency-Key header"})
	case r.ActionID == "":
		r.ActionID = idemKey
	}
	var fees txm.Fees
	given := false
	for _, f := range []struct {
		name string
		dst  **big.Int
	}{{"maxFeePerGas", &fees.MaxFeePerGas}, {"maxPriorityFeePerGas", &fees.MaxPriorityFeePerGas}, {"gasPrice", &fees.GasPrice}} {
		if v, ok := present(raw, f.name); ok {
			q, err := quantityField(v)
			if err != nil {
				errs = append(errs, fieldError{Field: f.name, Message: err.Error()})
				continue
			}
			*f.dst, given = q, true
		}
	}
	if given {
		r.Fees = &fees
	}
	if len(errs) > 0 {
		p := invalid(errs)
		return r, &p
	}
	return r, nil
}

// actions serves GET /v1/transactions/{id}/actions: the transaction's admin
// actions, oldest first.
func (h *Handler) actions(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !isUUID(id) {
		writeProblem(w, badRequest("the id must be a UUID", fieldError{Field: "id", Message: "must be a UUID"}))
		return
	}
	t, err := h.readable(r, id)
	if err != nil {
		writeProblem(w, problemFor(err))
		return
	}
	list, err := h.deps.ActionLog.ListActions(r.Context(), t.ID)
	if err != nil {
		writeProblem(w, problemFor(err))
		return
	}
	out := struct {
		Items []actionView `json:"items"`
	}{Items: make([]actionView, len(list))}
	for i, a := range list {
		out.Items[i] = viewAction(a)
	}
	writeJSON(w, http.StatusOK, out)
}
