package clienttest_test

import (
	"context"
	"errors"
	"math/big"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/client"
	"github.com/txfence/txfence/functions/internal/stacktest"
	"github.com/txfence/txfence/shared/app"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/txm"
)

// TestIssue49_FollowReorgAndRedelivery follows the lifecycle feed over a
// run in which every transaction is mined, its block is reorged away, it
// is mined again and confirmed; the first client stops half way and a
// second one resumes from the cursor the first stored. Together they see
// every event the database numbered exactly once, each transaction's in
// growing versions, ending in its final state. The completion topic
// carries the same events; delivered again (nacked, then pulled once
// more), each is handled once, in version order per transaction.
func TestIssue49_FollowReorgAndRedelivery(t *testing.T) {
	w := stacktest.NewWorld(t, 2, stacktest.Lively, func(c *config.Config) { c.TopicLifecycle = true }).WithPubSub(t)
	nd := w.Node(t, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	chain := stacktest.ChainID().Uint64()

	const perSigner = 5
	ids := map[string]bool{}
	creator, err := client.New(nd.APIURL, client.WithRetryPolicy(fastRetries))
	require.NoError(t, err)
	for i := range 2 * perSigner {
		tx, err := creator.Create(ctx, client.CreateRequest{From: w.Keys[i%2].Address.Hex(), To: stacktest.Dead.Hex(),
			Value: big.NewInt(int64(i + 1)), GasLimit: 21000})
		require.NoError(t, err)
		ids[tx.ID] = true
	}

	// The first client follows from the start and stops (its process
	// ends) half way through what the run writes: it stores its cursor.
	type seen struct {
		client.Completion
		by int // which client yielded it
	}
	var got []seen
	first, err := client.New(nd.APIURL, client.WithRetryPolicy(fastRetries))
	require.NoError(t, err)
	stored := make(chan client.Cursor, 1)
	firstDone := make(chan struct{})
	go func() {
		defer close(firstDone)
		fctx, stop := context.WithCancel(ctx)
		defer stop()
		var at client.Cursor
		defer func() { stored <- at }()
		for it, err := range first.Follow(fctx, "", client.FollowOptions{Events: client.EventsLifecycle, Wait: time.Second, Limit: 3}) {
			if err != nil {
				return
			}
			got = append(got, seen{it.Completion, 1})
			at = it.Cursor
			if len(got) == 4*perSigner { // past the broadcasts, before the reorg's events
				return
			}
		}
	}()

	// Broadcast every one and mine them in one block per signer's turn,
	// then fork below those blocks: the transactions return from the
	// pool into blocks of the new branch.
	for w.States(t)["ALLOCATED"] > 0 {
		for _, k := range w.Keys {
			if _, err := nd.Drain.Execute(ctx, chain, k.Address); err != nil && !errors.Is(err, txm.ErrFenced) && !errors.Is(err, app.ErrNoLease) {
				require.NoError(t, err)
			}
		}
	}
	head, err := w.Chain.Backend.Client().HeaderByNumber(ctx, nil)
	require.NoError(t, err)
	for _, k := range w.Keys {
		w.MineAll(t, k.Address, perSigner)
	}
	for _, k := range w.Keys {
		stacktest.WaitFor(t, "receipts", func() bool {
			_, err := nd.Receipts.Execute(ctx, chain, k.Address)
			return err == nil
		})
	}
	require.Equal(t, map[string]int{"MINED": 2 * perSigner}, w.States(t))
	require.NoError(t, w.Chain.Fork(head.Hash()))
	w.Mine(2)
	stop := w.Run(t, []*stacktest.Node{nd}, stacktest.RunOptions{})
	defer stop()

	<-firstDone
	cursor := <-stored
	require.NotEmpty(t, cursor, "the first client stored a cursor")
	n1 := len(got)

	// The second client resumes from the stored cursor until every
	// transaction's last event is final.
	second, err := client.New(nd.APIURL, client.WithRetryPolicy(fastRetries))
	require.NoError(t, err)
	last := map[string]client.Completion{}
	for _, s := range got {
		last[s.TxID] = s.Completion
	}
	final := func() bool {
		for id := range ids {
			if l, ok := last[id]; !ok || l.Type != client.EventConfirmed {
				return false
			}
		}
		return true
	}
	sctx, sstop := context.WithTimeout(ctx, time.Minute)
	defer sstop()
	for it, err := range second.Follow(sctx, cursor, client.FollowOptions{Events: client.EventsLifecycle, Wait: time.Second}) {
		require.NoError(t, err)
		got = append(got, seen{it.Completion, 2})
		last[it.TxID] = it.Completion
		if final() {
			break
		}
	}
	stop()
	require.Greater(t, len(got), n1, "the second client went on")
	t.Logf("first client: %d events; second, from its cursor: %d", n1, len(got)-n1)

	// Every numbered event exactly once, across the restart.
	var numbered []int64
	rows, err := w.DB.Pool.Query(ctx, `SELECT seq FROM tx_completion ORDER BY seq`)
	require.NoError(t, err)
	for rows.Next() {
		var s int64
		require.NoError(t, rows.Scan(&s))
		numbered = append(numbered, s)
	}
	require.NoError(t, rows.Err())
	var seqs []int64
	for _, s := range got {
		seqs = append(seqs, s.Seq)
	}
	assert.Equal(t, numbered, seqs, "each numbered event once, in seq order, none missed across the restart")

	// Per transaction: growing versions, the reorg seen, and its final
	// state last.
	byTx := map[string][]client.Completion{}
	for _, s := range got {
		byTx[s.TxID] = append(byTx[s.TxID], s.Completion)
	}
	require.Len(t, byTx, len(ids))
	for id, evs := range byTx {
		for i := 1; i < len(evs); i++ {
			assert.Greater(t, evs[i].Version, evs[i-1].Version, "%s: versions grow", id)
		}
		types := make([]string, len(evs))
		for i, e := range evs {
			types[i] = e.Type
		}
		assert.Contains(t, types, client.EventReorged, "%s was reorged", id)
		assert.Equal(t, client.EventAccepted, types[0], id)
		assert.Equal(t, client.EventConfirmed, types[len(types)-1], id)
		state, _ := w.TxState(t, id)
		assert.Equal(t, string(txm.StateConfirmed), state)
		assert.Equal(t, client.StateConfirmed, evs[len(evs)-1].State)
	}

	// The topic: every message nacked once and delivered again; handled
	// once each through Seen, in version order per transaction, and the
	// same events as the feed.
	msgs := pullRedelivered(t, ctx, w, len(numbered))
	var handled client.Seen
	var unique []client.Completion
	for _, m := range msgs {
		c, err := client.DecodeCompletion(m.data, m.attrs)
		require.NoError(t, err)
		if handled.First(c) {
			unique = append(unique, c)
		}
	}
	assert.Greater(t, len(msgs), len(unique), "some messages were delivered more than once")
	require.Len(t, unique, len(numbered), "each event published, handled once")
	lastVersion := map[string]int64{}
	feedBySeq := map[int64]client.Completion{}
	for _, s := range got {
		feedBySeq[s.Seq] = s.Completion
	}
	for _, c := range unique {
		assert.Greater(t, c.Version, lastVersion[c.TxID], "%s: topic versions grow", c.TxID)
		lastVersion[c.TxID] = c.Version
		f := feedBySeq[c.Seq]
		assert.Equal(t, f.Type, c.Type, "seq %d", c.Seq)
		assert.Equal(t, f.Version, c.Version, "seq %d", c.Seq)
		assert.Equal(t, f.TxID, c.TxID, "seq %d", c.Seq)
	}
}

type delivered struct {
	data  []byte
	attrs map[string]string
}

// pullRedelivered pulls the completion subscription until want distinct
// messages have been acknowledged; each message is first nacked (its ack
// deadline set to zero) so that Pub/Sub delivers it again, as it does to a
// subscriber that crashed before acknowledging.
func pullRedelivered(t *testing.T, ctx context.Context, w *stacktest.World, want int) []delivered {
	t.Helper()
	sub := w.PubSub.SubscriptionName(w.Cfg.TopicCompletion + "-sub")
	admin := w.PubSub.Client.SubscriptionAdminClient
	nacked := map[string]bool{}
	acked := map[string]bool{}
	var out []delivered
	for deadline := time.Now().Add(30 * time.Second); len(acked) < want && time.Now().Before(deadline); {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		res, err := admin.Pull(pctx, &pubsubpb.PullRequest{Subscription: sub, MaxMessages: 100})
		cancel()
		if err != nil {
			continue // nothing within the wait
		}
		var ack, nack []string
		for _, rm := range res.GetReceivedMessages() {
			m := rm.GetMessage()
			out = append(out, delivered{m.GetData(), m.GetAttributes()})
			if !nacked[m.GetMessageId()] {
				nacked[m.GetMessageId()] = true
				nack = append(nack, rm.GetAckId())
				continue
			}
			acked[m.GetMessageId()] = true
			ack = append(ack, rm.GetAckId())
		}
		if len(nack) > 0 {
			require.NoError(t, admin.ModifyAckDeadline(ctx, &pubsubpb.ModifyAckDeadlineRequest{Subscription: sub, AckIds: nack, AckDeadlineSeconds: 0}))
		}
		if len(ack) > 0 {
			require.NoError(t, admin.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: sub, AckIds: ack}))
		}
	}
	require.Len(t, acked, want, "every message acknowledged after its redelivery")
	return out
}
