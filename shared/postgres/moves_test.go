package postgres

import (
	"testing"

	"github.com/stretchr/testify/assert"

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
