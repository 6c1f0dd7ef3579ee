package submit

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/functions/internal/stacktest"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/txm"
)

// TestIssue48_ProfileInPipeline: a chain's profile, not the global
// setting, bounds its signers' transactions in flight: the world's global
// limit is 10,000, the chain's profile says 2, and of eight transfers
// created at once never more than two are at the node unmined when one is
// sent; all confirm.
func TestIssue48_ProfileInPipeline(t *testing.T) {
	t.Parallel()
	const limit = 2
	w := stacktest.NewWorld(t, 1, func(c *config.Config) {
		c.ChainProfiles = map[uint64]config.ProfileSpec{evmtest.ChainID: {Kind: config.KindGeneric, MaxInFlight: ptrTo(limit)}}
	})
	require.Equal(t, limit, w.Cfg.Profile(evmtest.ChainID).MaxInFlight)
	require.Greater(t, w.Cfg.MaxInFlight, limit)
	signer := w.Keys[0].Address
	n := w.Node(t, "n0")

	var sent inFlightAtSend
	sent.watch(w, signer)
	ids := n.Allocate(t, signer, 8)
	stop := w.Run(t, []*stacktest.Node{n}, stacktest.RunOptions{BlockEvery: 150 * time.Millisecond})
	for _, id := range ids {
		w.WaitState(t, id, txm.StateConfirmed, 60*time.Second)
	}
	stop()

	sent.mu.Lock()
	defer sent.mu.Unlock()
	assert.LessOrEqual(t, sent.most, uint64(limit), "never more than the profile's limit in flight when one was sent")
	assert.GreaterOrEqual(t, sent.sends, 8)
}

func ptrTo[T any](v T) *T { return &v }
