package postgres

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/txm"
)

// TestMovesFollowTheLifecycle: every state change the SQL can make is one
// the domain's transition table allows.
func TestMovesFollowTheLifecycle(t *testing.T) {
	for name, m := range moves {
		assert.NotEmpty(t, m.from, name)
		for _, from := range m.from {
			for _, to := range m.to {
				assert.NoError(t, txm.CheckMove(from, to), "%s: %s → %s", name, from, to)
			}
		}
	}
	assert.Equal(t, "t.state IN ('ALLOCATED', 'STUCK', 'TRACKING')", moveBroadcast.guard())
	for _, s := range moveOpen.from {
		assert.False(t, s.Terminal(), "moveOpen keeps the state of open transactions only")
	}
}

// TestIssue46_TargetStatesFromTheMoveTable: no statement of the adapter
// writes a state as a literal; each writes the states its move's table
// entry allows (move.state), which TestMovesFollowTheLifecycle checks against the
// domain's transitions.
func TestIssue46_TargetStatesFromTheMoveTable(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	literal := regexp.MustCompile(`(SET|,)\s*state\s*=\s*'[A-Z_]+'|THEN\s+'(ALLOCATED|TRACKING|MINED|CONFIRMED|FAILED_FINAL|STUCK)'`)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range literal.FindAll(b, -1) {
			t.Errorf("%s writes a state as a literal: %q; use the move's state()", f, m)
		}
	}
}

// TestMoveStatePanicsOutsideTheMove: a statement that asks a move for a
// state it may not write fails at once, not in production.
func TestMoveStatePanicsOutsideTheMove(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "'MINED'", moveMined.state(txm.StateMined))
	assert.Panics(t, func() { moveMined.state(txm.StateConfirmed) })
	assert.Equal(t, "'MINED'", moveFinal.source())
	assert.Panics(t, func() { moveBroadcast.source() })
}
