package txm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"math/big"

	"github.com/ethereum/go-ethereum/common"
	"time"
)

// ActionKind is an admin action on one transaction (stuck resolution by
// hand).
type ActionKind string

const (
	// ActionResubmit broadcasts the transaction again now, ending its
	// backoff.
	ActionResubmit ActionKind = "resubmit"
	// ActionReplace replaces the latest attempt with higher fees: the
	// caller's, or a bump within the chain's caps.
	ActionReplace ActionKind = "replace"
	// ActionCancelTx replaces the transaction with a 0-value self-transfer
	// at its nonce; it ends FAILED_FINAL `cancelled` once that is final.
	ActionCancelTx ActionKind = "cancel"
)

// AllowedIn reports whether the action makes sense for a transaction in s:
// only open transactions that are not yet mined can be acted on, and a
// replacement needs an attempt a node has seen (TRACKING or STUCK).
func (k ActionKind) AllowedIn(s State) bool {
	switch k {
	case ActionResubmit, ActionCancelTx:
		return s == StateAllocated || s == StateTracking || s == StateStuck
	case ActionReplace:
		return s == StateTracking || s == StateStuck
	}
	return false
}

// ActionStatus is where an admin action stands.
type ActionStatus string

const (
	// ActionPending: recorded, not yet carried out.
	ActionPending ActionStatus = "pending"
	// ActionDone: carried out; Result says what it did.
	ActionDone ActionStatus = "done"
	// ActionFailed: could not be carried out (the transaction was mined
	// meanwhile, the fee cap...); Result says why. Nothing changed.
	ActionFailed ActionStatus = "failed"
)

// ActionRequest asks for an admin action.
type ActionRequest struct {
	TxID     string
	ActionID string // caller-chosen; a replay with the same payload returns the original
	Kind     ActionKind
	Fees     *Fees // replace only: the caller's new fees (nil: bump within the caps)
	Actor    string
	Reason   string
}

// Fingerprint identifies the request's payload: a replay of an action id
// with another payload is a conflict.
func (r ActionRequest) Fingerprint() [32]byte {
	var b bytes.Buffer
	b.WriteString("txfence/action/v1\x00")
	b.WriteString(r.TxID + "\x00" + string(r.Kind) + "\x00" + r.Reason + "\x00")
	if r.Fees != nil {
		for _, v := range []*big.Int{r.Fees.MaxFeePerGas, r.Fees.MaxPriorityFeePerGas, r.Fees.GasPrice} {
			if v != nil {
				b.WriteString(v.String())
			}
			b.WriteByte(0)
		}
	}
	return sha256.Sum256(b.Bytes())
}

// Action is a recorded admin action.
type Action struct {
	ActionRequest
	Status    ActionStatus
	Result    string
	Token     int64 // the fencing token it was carried out under
	CreatedAt time.Time
	DoneAt    *time.Time
}

// ActionStore records admin actions (the API side).
type ActionStore interface {
	// RecordAction records r unless its action id exists: then it returns
	// the existing action and created false (a replay), or ErrConflict with
	// the existing action when the payload differs. A transaction in a state
	// the action does not allow is ErrActionNotAllowed; a missing one
	// ErrNotFound. A new action is written with a `submit` prompt for the
	// transaction's signer; the outbox ids are returned.
	RecordAction(ctx context.Context, r ActionRequest) (Action, bool, []int64, error)
	// ListActions returns the transaction's actions, oldest first.
	ListActions(ctx context.Context, txID string) ([]Action, error)
}

// ActionQueue hands pending admin actions to the function that carries
// them out under the signer's chain lease.
type ActionQueue interface {
	// PendingActions returns the signer's pending actions, oldest first,
	// each with its transaction and attempts.
	PendingActions(ctx context.Context, chainID uint64, signer common.Address) ([]PendingAction, error)
	// FinishAction marks a pending action done or failed with its result,
	// fenced, when it changed nothing else (a failure, or a resubmit).
	FinishAction(ctx context.Context, l Lease, a Action) error
}

// PendingAction is an action to carry out and the transaction it is for.
type PendingAction struct {
	Action
	Tracked
}
