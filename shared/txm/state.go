package txm

import "fmt"

// State is where a managed transaction stands in its lifecycle.
type State string

const (
	// StatePendingApproval: the transaction passed every check and waits
	// for the approvals its creator's policy requires above a threshold
	// (Approval). It holds no nonce, so it holds up none of its signer's
	// other transactions: at its last approval it is simulated and checked
	// again and allocated the signer's next nonce (ALLOCATED); a rejection,
	// an expiry or a failure of those checks ends it FAILED_FINAL without a
	// nonce.
	StatePendingApproval State = "PENDING_APPROVAL"
	// StateAllocated: a nonce is assigned and the transaction is stored; it has
	// not been signed or broadcast yet.
	StateAllocated State = "ALLOCATED"
	// StateTracking: at least one signed attempt was persisted and broadcast;
	// txfence is waiting for a receipt.
	StateTracking State = "TRACKING"
	// StateMined: a receipt was seen for one of the attempts; the block is not
	// yet deep enough (or finalized) to be trusted.
	StateMined State = "MINED"
	// StateConfirmed: the receipt (status 1) is on a canonical block at the
	// required depth. Terminal.
	StateConfirmed State = "CONFIRMED"
	// StateFailedFinal: the receipt has status 0 and is final. Terminal.
	StateFailedFinal State = "FAILED_FINAL"
	// StateStuck: progress stopped (a fee cap, a funding dip, a signer that
	// keeps failing, a deterministic broadcast rejection, pending too long)
	// and operators were told (TxStuck). Not terminal and never a dead end:
	// the stuck-resolution policy keeps working it with backoff, and a stuck
	// transaction that gets mined still confirms.
	StateStuck State = "STUCK"
)

// States lists every state, in lifecycle order.
var States = []State{StatePendingApproval, StateAllocated, StateTracking, StateMined, StateConfirmed, StateFailedFinal, StateStuck}

// Valid reports whether s is a declared state.
func (s State) Valid() bool {
	for _, v := range States {
		if s == v {
			return true
		}
	}
	return false
}

// Terminal reports whether s is a reported final outcome. Only a reorg
// deeper than the confirmation depth (seen while the finality sweep still
// watches the block) can move a terminal transaction, back to TRACKING.
func (s State) Terminal() bool { return s == StateConfirmed || s == StateFailedFinal }

// transitions lists the legal moves. A reorg moves MINED (or, deeper than
// the confirmation depth, a reported outcome) back to TRACKING. An open
// transaction whose nonce another transaction took (the key was used outside
// txfence) ends FAILED_FINAL without a receipt of its own. A transaction
// waiting for approval is allocated a nonce, or ends without one.
var transitions = map[State][]State{
	StatePendingApproval: {StateAllocated, StateFailedFinal},
	StateAllocated:       {StateTracking, StateStuck, StateFailedFinal},
	StateTracking:        {StateTracking, StateMined, StateStuck, StateFailedFinal},
	StateMined:           {StateConfirmed, StateFailedFinal, StateTracking},
	StateStuck:           {StateTracking, StateMined, StateStuck, StateFailedFinal},
	StateConfirmed:       {StateTracking},
	StateFailedFinal:     {StateTracking},
}

// CanMove reports whether from → to is a legal transition.
func CanMove(from, to State) bool {
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// CheckMove returns ErrIllegalTransition, wrapped with both states, when
// from → to is not legal.
func CheckMove(from, to State) error {
	if !CanMove(from, to) {
		return fmt.Errorf("%w: %s → %s", ErrIllegalTransition, from, to)
	}
	return nil
}
