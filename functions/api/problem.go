package api

import (
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
	// retryAfter is the Retry-After of a 429 or 503, in seconds.
	retryAfter int
}

type fieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

const problemBase = "https://txfence.dev/problems/"

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
	return problem{Type: problemBase + "malformed-request", Title: "Malformed request", Status: http.StatusBadRequest, Detail: detail, Errors: fields}
}

func invalid(fields []fieldError) problem {
	return problem{Type: problemBase + "invalid-request", Title: "Invalid request", Status: http.StatusUnprocessableEntity,
		Detail: "one or more fields are invalid; nothing was written", Errors: fields}
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
	return problem{Type: problemBase + "execution-failed", Title: "Execution failed", Status: http.StatusUnprocessableEntity,
		Detail: msg + "; nothing was written", Errors: []fieldError{{Field: "data", Message: msg}}}
}

func notFound(detail string) problem {
	return problem{Type: problemBase + "not-found", Title: "Not found", Status: http.StatusNotFound, Detail: detail}
}

func unavailable(detail string) problem {
	return problem{Type: problemBase + "unavailable", Title: "Service unavailable", Status: http.StatusServiceUnavailable,
		Detail: detail + "; nothing was written, retry later"}
}

// problemFor maps an error from a use case to a problem. No answer carries
// an error's own text beyond a validation message written for the caller:
// never SQL, a driver's words or another caller's data.
func problemFor(err error) problem {
	var v *txm.ValidationError
	var failed *txm.ExecutionError
	switch {
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
		return problem{Type: problemBase + "outcome-unknown", Title: "Outcome unknown", Status: http.StatusServiceUnavailable,
			Detail: "the database connection was lost while committing: the transaction may or may not exist; " +
				"retry with the same requestId (it is safe) or look it up by requestId"}
	case isUnavailable(err):
		return unavailable("the database or chain is unavailable")
	default:
		return problem{Type: problemBase + "internal", Title: "Internal error", Status: http.StatusInternalServerError,
			Detail: "an unexpected error occurred; nothing was half-written"}
	}
}
