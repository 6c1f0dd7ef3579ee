package app

import (
	"context"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/txm"
)

// answeringChain answers Blocks as two nodes would: the pass's own call
// (no numbers) from one whose head is head (and finalized block
// finalized), every later call from one whose blocks under the tags are
// behind (its headers are the same blocks).
type answeringChain struct {
	txm.Chain
	head, finalized, behind uint64
}

func (c answeringChain) Blocks(_ context.Context, numbers []uint64, tags []string) ([]*txm.Header, []*txm.Header, error) {
	hs := make([]*txm.Header, len(numbers))
	for i, n := range numbers {
		hs[i] = &txm.Header{Number: n, Hash: common.Hash{byte(n)}}
	}
	tagged := make([]*txm.Header, len(tags))
	for i, tag := range tags {
		n := c.behind
		if len(numbers) == 0 {
			n = map[string]uint64{"latest": c.head, "finalized": c.finalized}[tag]
		}
		tagged[i] = &txm.Header{Number: n, Hash: common.Hash{byte(n)}}
	}
	return hs, tagged, nil
}

type noReceiptStore struct{ txm.ReceiptStore }
type noLeases struct{ txm.LeaseStore }

// TestIssue44_FinalByTheAnswersOwnHead: a block is final only by the head
// (or finalized block) of the node that gave its header, in the same
// answer: a header read from a node behind is not counted deep on the word
// of the node that gave the pass's head.
func TestIssue44_FinalByTheAnswersOwnHead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, mode := range []config.FinalityMode{config.FinalityConfirmations, config.FinalityFinalized} {
		cfg := config.Defaults()
		cfg.Confirmations = 5
		cfg.FinalityMode = mode
		s, err := NewSweepFinality(noReceiptStore{}, noLeases{}, nil, nil, cfg.Finality(), nil, logging.Discard())
		require.NoError(t, err)
		// The pass's head is 100 (finalized 95); a later load comes from a
		// node whose head is 92 (finalized 87).
		view, err := s.view(ctx, 1, answeringChain{head: 100, finalized: 95, behind: map[config.FinalityMode]uint64{
			config.FinalityConfirmations: 92, config.FinalityFinalized: 87}[mode]})
		require.NoError(t, err)
		require.NoError(t, view.load(ctx, []uint64{80, 90}))
		assert.True(t, s.isFinal(view, 80), "%s: deep below the answering node's own head", mode)
		assert.False(t, s.isFinal(view, 90), "%s: the pass's head would count it final; the node that gave it would not", mode)
		assert.False(t, s.isFinal(view, 85), "%s: a height never read is final to no one", mode)
	}
}
