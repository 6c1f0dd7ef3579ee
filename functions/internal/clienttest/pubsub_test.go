package clienttest_test

import (
	"context"
	"math/big"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/client"
	"github.com/txfence/txfence/functions/internal/stacktest"
)

// TestClient_DecodeCompletionMessages: the completion topic's messages, as
// a subscriber pulls them from Pub/Sub (pstest), decode into the same
// Completion the feed gives for each outcome; a message delivered twice is
// handled once through Seen; a message that is not a completion is
// refused.
func TestClient_DecodeCompletionMessages(t *testing.T) {
	w := stacktest.NewWorld(t, 1, stacktest.Lively).WithPubSub(t)
	nd := w.Node(t, "a")
	c, err := client.New(nd.APIURL, client.WithRetryPolicy(fastRetries))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 3
	for i := range n {
		_, err := c.Create(ctx, client.CreateRequest{From: w.Keys[0].Address.Hex(), To: stacktest.Dead.Hex(), Value: big.NewInt(int64(i + 1)),
			GasLimit: 21000})
		require.NoError(t, err)
	}
	stop := w.Run(t, []*stacktest.Node{nd}, stacktest.RunOptions{})
	defer stop()

	var msgs []client.Completion
	var seen client.Seen
	for deadline := time.Now().Add(30 * time.Second); len(msgs) < n && time.Now().Before(deadline); {
		got, err := w.PubSub.Pull(ctx, w.Cfg.TopicCompletion+"-sub", 100, 2*time.Second)
		require.NoError(t, err)
		for _, m := range got {
			comp, err := client.DecodeCompletion(m.Data, m.Attributes)
			require.NoError(t, err)
			require.True(t, seen.First(comp), "each outcome published once")
			assert.False(t, seen.First(comp), "a redelivery of it is seen as one")
			msgs = append(msgs, comp)
		}
	}
	require.Len(t, msgs, n)

	page, err := c.Completions(ctx, "", 100, 0)
	require.NoError(t, err)
	require.Len(t, page.Items, n)
	bySeq := map[int64]client.Completion{}
	for _, it := range page.Items {
		bySeq[it.Seq] = it
	}
	for _, m := range msgs {
		feed, ok := bySeq[m.Seq]
		require.True(t, ok, "seq %d is on the feed", m.Seq)
		assert.Equal(t, feed.TxID, m.TxID)
		assert.Equal(t, feed.Type, m.Type)
		assert.Equal(t, feed.State, m.State)
		assert.Equal(t, feed.Nonce, m.Nonce)
		assert.Equal(t, feed.Hash, m.Hash)
		assert.Equal(t, client.StateConfirmed, m.State)
	}

	_, err = client.DecodeCompletion([]byte(`{"signer":"0x01"}`), nil)
	require.Error(t, err, "not a completion")
	_, err = client.DecodeCompletion([]byte(`{`), nil)
	require.Error(t, err)
}
