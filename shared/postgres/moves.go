package postgres

import (
	"fmt"
	"strings"

	"github.com/txfence/txfence/shared/txm"
)

// move is a state change a store method makes: the states a row may be in
// for the statement to touch it, and the states it may leave the row in.
// The SQL renders from as its guard, and a test checks every move against
// the domain's transition table, so the statements cannot allow a move the
// lifecycle forbids.
type move struct {
	from []txm.State
	to   []txm.State
}

var (
	moveBroadcast = move{from: []txm.State{txm.StateAllocated, txm.StateStuck, txm.StateTracking}, to: []txm.State{txm.StateTracking}}
	moveStuck     = move{from: []txm.State{txm.StateAllocated, txm.StateTracking, txm.StateStuck}, to: []txm.State{txm.StateStuck}}
	moveMined     = move{from: []txm.State{txm.StateTracking, txm.StateStuck}, to: []txm.State{txm.StateMined}}
	moveFinal     = move{from: []txm.State{txm.StateMined}, to: []txm.State{txm.StateConfirmed, txm.StateFailedFinal}}
	moveReorg     = move{from: []txm.State{txm.StateMined}, to: []txm.State{txm.StateTracking}}
	moveReopen    = move{from: []txm.State{txm.StateConfirmed, txm.StateFailedFinal}, to: []txm.State{txm.StateTracking}}
	moveConsumed  = move{from: []txm.State{txm.StateAllocated, txm.StateTracking, txm.StateStuck}, to: []txm.State{txm.StateFailedFinal}}
	// moveEndApproval ends a transaction that waits for approval, without
	// a nonce: rejected, expired, or refused when checked at approval. (Its
	// allocation, PENDING_APPROVAL → ALLOCATED, is txfence_allocate's.)
	moveEndApproval = move{from: []txm.State{txm.StatePendingApproval}, to: []txm.State{txm.StateFailedFinal}}
	// moveOpen is not a move: it touches an open transaction without
	// changing its state (backoff, rebroadcast stamps, replacement attempts),
	// so only its guard is used.
	moveOpen = move{from: []txm.State{txm.StateAllocated, txm.StateTracking, txm.StateStuck}}

	// moves lists every move, for the test.
	moves = map[string]move{"broadcast": moveBroadcast, "stuck": moveStuck, "mined": moveMined, "final": moveFinal,
		"reorg": moveReorg, "reopen": moveReopen, "consumed": moveConsumed, "end_approval": moveEndApproval}
)

// state is the SQL literal of target, one of the states the move may leave
// a row in: every statement writes its target states through it, so that
// what the SQL writes is what the table says (and the test checks against
// the domain). A target outside the move is a programming error: it panics
// when the statement is built, which the first test of that store method
// meets.
func (m move) state(target txm.State) string {
	for _, s := range m.to {
		if s == target {
			return "'" + string(s) + "'"
		}
	}
	panic(fmt.Sprintf("postgres: %s is not a target of the move %v → %v", target, m.from, m.to))
}

// source is the SQL literal of the one state the move starts from (for a
// history row whose statement moves from that state alone).
func (m move) source() string {
	if len(m.from) != 1 {
		panic(fmt.Sprintf("postgres: the move %v → %v has several sources", m.from, m.to))
	}
	return "'" + string(m.from[0]) + "'"
}

// guard is the SQL condition "t.state may make this move".
func (m move) guard() string {
	q := make([]string, len(m.from))
	for i, s := range m.from {
		q[i] = "'" + string(s) + "'"
	}
	return "t.state IN (" + strings.Join(q, ", ") + ")"
}
