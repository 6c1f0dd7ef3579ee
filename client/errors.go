package client

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Kinds of answers a caller commonly tells apart, for errors.Is on an
// *Error.
var (
	// ErrRateLimited is a 429: the caller's or the signer's rate, or its
	// concurrent long polls.
	ErrRateLimited = errors.New("txfence: rate limited")
	// ErrNotFound is a 404: no such transaction, or one the caller may not
	// read.
	ErrNotFound = errors.New("txfence: not found")
	// ErrForbidden is a 403: a role or policy rule refused the call (Rule
	// names it); nothing was written.
	ErrForbidden = errors.New("txfence: refused by policy")
	// ErrConflict is a 409: a request or action id used with another
	// payload, or an action the transaction's state does not allow.
	ErrConflict = errors.New("txfence: conflict")
	// ErrInvalid is a 400 or 422: the request is wrong as sent; do not
	// retry it unchanged.
	ErrInvalid = errors.New("txfence: invalid request")
	// ErrUnauthenticated is a 401: no, bad, expired or revoked credential.
	ErrUnauthenticated = errors.New("txfence: unauthenticated")
	// ErrUnavailable is a 5xx other than outcome-unknown.
	ErrUnavailable = errors.New("txfence: unavailable")
	// ErrOutcomeUnknown is a 503 outcome-unknown: the create may or may
	// not exist; retrying with RequestID is safe.
	ErrOutcomeUnknown = errors.New("txfence: outcome unknown")
)

// problemBase is the prefix of every problem type the API answers with.
const problemBase = "https://txfence.dev/problems/"

// FieldError names one field of a request that was refused.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Error is an answer of the API other than a success: its
// application/problem+json document.
type Error struct {
	Status int    `json:"status"`
	Type   string `json:"type"`
	Title  string `json:"title"`
	Detail string `json:"detail,omitempty"`
	// Rule names the policy rule behind a 403.
	Rule string `json:"rule,omitempty"`
	// RequestID is the create's request id behind an outcome-unknown 503.
	RequestID string `json:"requestId,omitempty"`
	// ExistingID is the transaction a 409 request id already names.
	ExistingID string       `json:"existingId,omitempty"`
	Fields     []FieldError `json:"errors,omitempty"`
	// RetryAfter is the answer's Retry-After (429 and 503), zero without.
	RetryAfter time.Duration `json:"-"`
}

// Kind is the last segment of the problem's type URI ("rate-limited",
// "outcome-unknown", ...), empty when the answer was not a problem.
func (e *Error) Kind() string {
	return strings.TrimPrefix(e.Type, problemBase)
}

func (e *Error) Error() string {
	s := fmt.Sprintf("txfence: %d %s", e.Status, e.Title)
	if e.Title == "" {
		s = fmt.Sprintf("txfence: %d %s", e.Status, http.StatusText(e.Status))
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.Rule != "" {
		s += " (rule " + e.Rule + ")"
	}
	return s
}

// Is reports whether e is of the kind target names.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrRateLimited:
		return e.Status == http.StatusTooManyRequests
	case ErrNotFound:
		return e.Status == http.StatusNotFound
	case ErrForbidden:
		return e.Status == http.StatusForbidden
	case ErrConflict:
		return e.Status == http.StatusConflict
	case ErrInvalid:
		return e.Status == http.StatusBadRequest || e.Status == http.StatusUnprocessableEntity
	case ErrUnauthenticated:
		return e.Status == http.StatusUnauthorized
	case ErrOutcomeUnknown:
		return e.Kind() == "outcome-unknown"
	case ErrUnavailable:
		return e.Status >= 500 && e.Kind() != "outcome-unknown"
	}
	return false
}

// retryable says whether an answer may be retried as it was sent: 429 and
// every 5xx (an outcome-unknown create with the same request id).
func (e *Error) retryable() bool {
	return e.Status == http.StatusTooManyRequests || e.Status >= 500
}
