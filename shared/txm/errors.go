package txm

import (
	"errors"
	"fmt"
)

// Sentinel errors, every one of the domain's. Adapters translate their own
// failures into these at the point where the failure enters the program;
// callers check them with errors.Is.
var (
	// ErrFenced means a write carried a fencing token that is no longer the
	// lease's current one, or the lease had expired by database time. The write
	// changed nothing and the caller must stop working on that signer.
	ErrFenced = errors.New("fenced: lease lost")

	// ErrLeaseHeld means another owner holds an unexpired lease.
	ErrLeaseHeld = errors.New("lease held by another owner")

	// ErrNotFound means the requested row does not exist.
	ErrNotFound = errors.New("not found")

	// ErrConflict means the write collides with an existing row (a unique key).
	ErrConflict = errors.New("conflict")

	// ErrUnavailable means the store could not be reached; the operation may be
	// retried and nothing was half-written.
	ErrUnavailable = errors.New("store unavailable")

	// ErrInvalid means the input was rejected before anything was written.
	ErrInvalid = errors.New("invalid input")

	// ErrIllegalTransition means a state change that the lifecycle forbids.
	ErrIllegalTransition = errors.New("illegal state transition")

	// ErrOutcomeUnknown means the database connection was lost during
	// COMMIT: the transaction may or may not have committed. It also
	// matches ErrUnavailable; callers that can look the outcome up do.
	ErrOutcomeUnknown = errors.New("outcome unknown")

	// ErrUnauthenticated means the call carried no credential txfence
	// accepts: none, a malformed one, a bad signature, an expired token, a
	// token for another audience, an unknown or revoked API key (HTTP 401).
	ErrUnauthenticated = errors.New("unauthenticated")

	// ErrForbidden means the caller is known but its policy does not allow
	// the call (HTTP 403). A *Refusal names the rule.
	ErrForbidden = errors.New("forbidden")

	// ErrRateLimited means the caller or the signer is over its rate (HTTP
	// 429). A *RateLimitError says when to retry.
	ErrRateLimited = errors.New("rate limited")

	// ErrActionNotAllowed means the action makes no sense for the
	// transaction's state (HTTP 409).
	ErrActionNotAllowed = errors.New("action not allowed in the transaction's state")

	// ErrFeeCapReached means a replacement cannot pay enough more than the
	// attempt it replaces without going past the chain's fee caps, or the
	// transaction was already replaced as often as allowed.
	ErrFeeCapReached = errors.New("fee cap reached")

	// ErrNoBlockReceipts means the node does not serve a block's receipts
	// in one call (eth_getBlockReceipts).
	ErrNoBlockReceipts = errors.New("the node does not serve block receipts")

	// ErrNoDataFeeOracle means the chain's data fee oracle (the OP Stack
	// GasPriceOracle, the Arbitrum NodeInterface) answered nothing where
	// the chain's kind says it is: the chain is not of that kind, or its
	// node does not serve it.
	ErrNoDataFeeOracle = errors.New("no data fee oracle on the chain")

	// ErrNodeBehind means no endpoint could answer for a block: each had
	// not reached it, or had another block at its height. Nothing is
	// concluded; the caller asks again later.
	ErrNodeBehind = errors.New("no endpoint has the block")

	// ErrChainUnreachable means no endpoint of the chain answered, each
	// failing at the transport level (refused, timed out, an HTTP error):
	// an outage of the chain's endpoints rather than a refusal. Work that
	// backs off because of it resumes as soon as the endpoints answer again.
	ErrChainUnreachable = errors.New("no endpoint of the chain answered")
)

// FieldError names one rejected input field.
type FieldError struct {
	Field   string
	Message string
}

// ValidationError carries every rejected field of one input. It matches
// ErrInvalid under errors.Is.
type ValidationError struct {
	Fields []FieldError
}

// Add records a rejected field.
func (e *ValidationError) Add(field, format string, args ...any) {
	e.Fields = append(e.Fields, FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}

// Err returns e when it holds at least one field, nil otherwise.
func (e *ValidationError) Err() error {
	if e == nil || len(e.Fields) == 0 {
		return nil
	}
	return e
}

func (e *ValidationError) Error() string {
	msg := "invalid input:"
	for i, f := range e.Fields {
		if i > 0 {
			msg += ";"
		}
		msg += " " + f.Field + ": " + f.Message
	}
	return msg
}

// Is makes a ValidationError match ErrInvalid.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }
