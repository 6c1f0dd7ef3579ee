package txm

import (
	"context"
	"fmt"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum/common"
)

// Sub-states that say why a transaction is STUCK or how it ended. A
// broadcast rejection's sub-state is its BroadcastReason.
const (
	// SubStateFeeCapReached: no replacement can beat the last attempt within
	// the chain's fee caps (or the replacement limit was reached); the best
	// attempt keeps being rebroadcast.
	SubStateFeeCapReached = "fee_cap_reached"
	// SubStateTooManyRebroadcasts: the next nonce to be mined was
	// rebroadcast more than the limit without a receipt.
	SubStateTooManyRebroadcasts = "too_many_rebroadcasts"
	// SubStatePendingTooLong: not mined within stuckAfter of its creation.
	SubStatePendingTooLong = "pending_too_long"
	// SubStateSigningFailed: the signer (a local key or Cloud KMS) kept
	// failing for stuckAfter.
	SubStateSigningFailed = "signing_failed"
	// SubStateBroadcastFailing: broadcasting the first attempt kept failing
	// for stuckAfter.
	SubStateBroadcastFailing = "broadcast_failing"
	// SubStateCancelled: a 0-value self-transfer took the nonce instead
	// (FAILED_FINAL).
	SubStateCancelled = "cancelled"
	// SubStatePlaceholder: a placeholder filled the nonce (FAILED_FINAL).
	SubStatePlaceholder = "placeholder"
	// SubStateNonceConsumedExternally: the signer's key was used outside
	// txfence and another transaction took the nonce (FAILED_FINAL).
	SubStateNonceConsumedExternally = "nonce_consumed_externally"
	// SubStateReverted: mined with receipt status 0 (FAILED_FINAL).
	SubStateReverted = "reverted"
)

// StuckAction is what a stuck-resolution policy decides for a STUCK
// transaction.
type StuckAction string

const (
	// ActionNoop keeps the default work going: rebroadcast with backoff,
	// re-sign with fresh fees where the fault was fees or funds.
	ActionNoop StuckAction = "noop"
	// ActionBump replaces the attempt with higher fees, within the caps.
	ActionBump StuckAction = "bump"
	// ActionCancel replaces it with a 0-value self-transfer at the nonce with
	// bumped fees; the transaction ends FAILED_FINAL `cancelled` when that is
	// mined.
	ActionCancel StuckAction = "cancel"
	// ActionPlaceholder fills the nonce with a 0-value self-transfer at fresh
	// fees, for a transaction that will never be sent; it ends FAILED_FINAL
	// `placeholder`.
	ActionPlaceholder StuckAction = "placeholder"
)

// StuckActions lists every action.
var StuckActions = []StuckAction{ActionNoop, ActionBump, ActionCancel, ActionPlaceholder}

// ParseStuckAction reads an action name.
func ParseStuckAction(s string) (StuckAction, error) {
	for _, a := range StuckActions {
		if string(a) == s {
			return a, nil
		}
	}
	return "", fmt.Errorf("%w: action %q is not one of noop, bump, cancel, placeholder", ErrInvalid, s)
}

// AttemptKind is the kind of attempt the action signs; "" for noop and bump
// (which keep the latest attempt's kind).
func (a StuckAction) AttemptKind() AttemptKind {
	switch a {
	case ActionCancel:
		return AttemptCancel
	case ActionPlaceholder:
		return AttemptPlaceholder
	}
	return ""
}

// StuckTx is what a stuck-resolution policy is told about a STUCK
// transaction.
type StuckTx struct {
	TxID        string
	ChainID     uint64
	Signer      common.Address
	Nonce       uint64
	To          *common.Address
	Value       *big.Int
	RequestID   string
	SubState    string // why it is stuck
	LastError   string
	Attempts    int      // signed attempts so far
	LatestFees  Fees     // of the latest attempt (zero when none)
	BaseFee     *big.Int // the chain's current base fee, when known
	Failures    int      // rounds of work that did not move it
	CreatedAt   time.Time
	StuckSince  time.Time
	ChainNonce  uint64 // the chain's latest nonce for the signer
	FeeCapsLeft bool   // a bump is still possible within the caps
}

// Resolution is a policy's decision.
type Resolution struct {
	Action StuckAction
	Reason string // free text for the audit trail
	// By names the policy that decided (e.g. "static", "webhook"), for the
	// audit trail.
	By string
}

// StuckResolutionHook decides what happens to a STUCK transaction each time
// its backoff is due. An error means the policy could not decide (the
// webhook is down, its answer was refused): the default work goes on, and
// nothing else changes.
type StuckResolutionHook interface {
	Resolve(ctx context.Context, t StuckTx) (Resolution, error)
}
