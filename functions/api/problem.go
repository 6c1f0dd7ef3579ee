package api

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/txfence/txfence/shared/txm"
)

// problem is an RFC 9457 problem document.
type problem struct {
	Type       string       `json:"type"`
	Title      string       `json:"title"`
	Status     int          `json:"status"`
	Detail     string       `json:"detail,omitempty"`
	Errors     []fieldError `json:"errors,omitempty"`
	ExistingID string       `json:"existingId,omitempty"`
	// Rule names the policy rule behind a 403.
	Rule string `json:"rule,omitempty"`
	// RequestID is the create's request id behind an outcome-unknown 503:
	// retrying with it is safe.
	RequestID string `json:"requestId,omitempty"`
	// Revert is the decoded reason of a create whose simulation reverts.
	Revert *revertView `json:"revert,omitempty"`
	// retryAfter is the Retry-After of a 429 or 503, in seconds.
	retryAfter int
}

type fieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

const problemBase = "https://txfence.dev/problems/"

// problemType is one kind of problem the API answers with: its type URI's
// last segment, its title and status. Every one is in problemTypes and in
// the OpenAPI document's Problem schema (TestProblemTypesDocumented).
type problemType struct {
	slug, title string
	status      int
}

// The problem types.
var (
	probMalformed        = problemType{"malformed-request", "Malformed request", http.StatusBadRequest}
	probUnauthenticated  = problemType{"unauthenticated", "Unauthenticated", http.StatusUnauthorized}
	probForbidden        = problemType{"forbidden", "Forbidden", http.StatusForbidden}
	probNotFound         = problemType{"not-found", "Not found", http.StatusNotFound}
	probRequestIDUsed    = problemType{"idempotency-conflict", "Request id already used", http.StatusConflict}
	probActionIDUsed     = problemType{"idempotency-conflict", "Action id already used", http.StatusConflict}
	probActionNotAllowed = problemType{"action-not-allowed", "Action not allowed in this state", http.StatusConflict}
	probTooLarge         = problemType{"too-large", "Request too large", http.StatusRequestEntityTooLarge}
	probUnsupportedMedia = problemType{"unsupported-media-type", "Unsupported media type", http.StatusUnsupportedMediaType}
	probInvalid          = problemType{"invalid-request", "Invalid request", http.StatusUnprocessableEntity}
	probExecutionFailed  = problemType{"execution-failed", "Execution failed", http.StatusUnprocessableEntity}
	probReverted         = problemType{"execution-reverted", "Execution reverted", http.StatusUnprocessableEntity}
	probRateLimited      = problemType{"rate-limited", "Too many requests", http.StatusTooManyRequests}
	probInternal         = problemType{"internal", "Internal error", http.StatusInternalServerError}
	probUnavailable      = problemType{"unavailable", "Service unavailable", http.StatusServiceUnavailable}
	probOutcomeUnknown   = problemType{"outcome-unknown", "Outcome unknown", http.StatusServiceUnavailable}

	// The answers of an approval or a rejection that is not made.
	probSelfApproval       = problemType{"self-approval", "Own request", http.StatusForbidden}
	probNotApprover        = problemType{"not-an-approver", "Not an approver", http.StatusForbidden}
	probAlreadyDecided     = problemType{"already-decided", "Already decided", http.StatusConflict}
	probNotPendingApproval = problemType{"not-pending-approval", "Not waiting for approval", http.StatusConflict}
)

// problemTypes lists every problem type.
var problemTypes = []problemType{probMalformed, probUnauthenticated, probForbidden, probNotFound, probRequestIDUsed,
	probActionIDUsed, probActionNotAllowed, probTooLarge, probUnsupportedMedia, probInvalid, probExecutionFailed,
	probReverted, probRateLimited, probInternal, probUnavailable, probOutcomeUnknown,
	probSelfApproval, probNotApprover, probAlreadyDecided, probNotPendingApproval}

// problem is a problem of type k, with detail.
func (k problemType) problem(detail string) problem {
	return problem{Type: problemBase + k.slug, Title: k.title, Status: k.status, Detail: detail}
}

func writeProblem(w http.ResponseWriter, p problem) {
	if p.Errors == nil && p.Status == http.StatusUnprocessableEntity {
		p.Errors = []fieldError{}
	}
	w.Header().Set("Content-Type", "application/problem+json")
	if p.Status == http.StatusServiceUnavailable || p.Status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", strconv.Itoa(max(p.retryAfter, retryAfterSeconds)))
	}
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// retryAfterSeconds is what a 503 tells clients to wait.
const retryAfterSeconds = 1

func badRequest(detail string, fields ...fieldError) problem {
	p := probMalformed.problem(detail)
	p.Errors = fields
	return p
}

func invalid(fields []fieldError) problem {
	p := probInvalid.problem("one or more fields are invalid; nothing was written")
	p.Errors = fields
	return p
}

// executionFailed is a create whose call the node ran and found failing in
// the EVM (out of gas at any limit, an invalid opcode, a stack underflow,
// ...): the caller's to fix, so 422 and never Retry-After. The node's words
// are the caller's own call's outcome.
func executionFailed(e *txm.ExecutionError) problem {
	msg := "the call fails on chain"
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	p := probExecutionFailed.problem(msg + "; nothing was written")
	p.Errors = []fieldError{{Field: "data", Message: msg}}
	return p
}

// revertView is a revert's decoded reason on the wire.
type revertView struct {
	// Kind is error (Error(string)), panic (Panic(uint256)), custom (a
	// custom error) or unknown (no data, or data none of them reads).
	Kind txm.RevertKind `json:"kind"`
	// Reason is the text to show: the message, the panic code's meaning,
	// the custom error with its arguments when its ABI was given.
	Reason    string    `json:"reason"`
	PanicCode *uint64   `json:"panicCode,omitempty"`
	Selector  string    `json:"selector,omitempty"`
	Name      string    `json:"name,omitempty"`
	Args      []argView `json:"args,omitempty"`
	// Data is the raw revert data, 0x-hex.
	Data string `json:"data,omitempty"`
}

type argView struct {
	Name  string `json:"name,omitempty"`
	Type  string `json:"type"`
	Value string `json:"value"`
}

// reverted is a create whose simulation reverts: the caller's call fails
// on chain, so 422 with the decoded reason and never Retry-After.
func reverted(e *txm.RevertedError) problem {
	r := e.Revert
	v := &revertView{Kind: r.Kind, Reason: r.Reason, Selector: r.SelectorHex(), Name: r.Name}
	if r.Kind == txm.RevertKindPanic {
		code := r.PanicCode
		v.PanicCode = &code
	}
	for _, a := range r.Args {
		v.Args = append(v.Args, argView{Name: a.Name, Type: a.Type, Value: a.Value})
	}
	if len(r.Data) > 0 {
		v.Data = "0x" + hex.EncodeToString(r.Data)
	}
	msg := "the call would revert: " + r.String()
	p := probReverted.problem(msg + "; nothing was written")
	p.Errors = []fieldError{{Field: "data", Message: msg}}
	p.Revert = v
	return p
}

func notFound(detail string) problem {
	return probNotFound.problem(detail)
}

func unavailable(detail string) problem {
	return probUnavailable.problem(detail + "; nothing was written, retry later")
}

// problemFor maps an error from a use case to a problem. No answer carries
// an error's own text beyond a validation message written for the caller:
// never SQL, a driver's words or another caller's data.
func problemFor(err error) problem {
	var v *txm.ValidationError
	var failed *txm.ExecutionError
	var rev *txm.RevertedError
	switch {
	case errors.As(err, &rev):
		return reverted(rev)
	case errors.As(err, &failed):
		return executionFailed(failed)
	case errors.As(err, &v):
		fields := make([]fieldError, len(v.Fields))
		for i, f := range v.Fields {
			fields[i] = fieldError{Field: f.Field, Message: f.Message}
		}
		return invalid(fields)
	case errors.Is(err, txm.ErrForbidden):
		return forbidden(err)
	case errors.Is(err, txm.ErrRateLimited):
		return tooManyRequests(err)
	case errors.Is(err, txm.ErrNotFound):
		return notFound("no such transaction")
	case errors.Is(err, txm.ErrInvalid):
		return invalid([]fieldError{{Field: "", Message: "the request's values were refused; nothing was written"}})
	case errors.Is(err, txm.ErrOutcomeUnknown):
		return probOutcomeUnknown.problem("the database connection was lost while committing: the transaction may or may not exist; " +
			"retry with the same requestId (it is safe) or look it up by requestId")
	case isUnavailable(err):
		return unavailable("the database or chain is unavailable")
	default:
		return probInternal.problem("an unexpected error occurred; nothing was half-written")
	}
}
