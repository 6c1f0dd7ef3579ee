package finality

import (
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/functions/internal/stacktest"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/testsupport"
	"github.com/txfence/txfence/shared/testsupport/eventschema"
	"github.com/txfence/txfence/shared/txm"
)

// eventItem is one item of the events=lifecycle feed.
type eventItem struct {
	Seq          int64          `json:"seq"`
	Type         txm.EventType  `json:"type"`
	Version      int64          `json:"version"`
	TxID         string         `json:"txId"`
	State        txm.State      `json:"state"`
	NewFork      bool           `json:"newFork"`
	Nonce        *uint64        `json:"nonce"`
	Hash         *string        `json:"hash"`
	Attempt      int            `json:"attempt"`
	Fees         *txm.EventFees `json:"fees"`
	PreviousHash string         `json:"previousHash"`
	PreviousFees *txm.EventFees `json:"previousFees"`
	Reason       string         `json:"reason"`
	Block        *uint64        `json:"block"`
	BlockHash    string         `json:"blockHash"`
}

// getFeed reads one page of the feed with query, as the holder of key ("":
// the stack's dev caller): the status and the body.
func getFeed(t *testing.T, n *stacktest.Node, key, query string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, n.APIURL+"/v1/completions?"+query, nil)
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b
}

// events reads the whole events=lifecycle feed as key.
func events(t *testing.T, n *stacktest.Node, key string) []eventItem {
	t.Helper()
	status, body := getFeed(t, n, key, "events=lifecycle&after=0&limit=1000")
	require.Equal(t, http.StatusOK, status, string(body))
	var page struct {
		Items []eventItem `json:"items"`
	}
	require.NoError(t, json.Unmarshal(body, &page))
	return page.Items
}

// TestIssue49_Lifecycle (acceptance 3): one transaction bumped twice and
// reorged once shows, on the events=lifecycle feed, exactly accepted,
// broadcast, replaced, replaced, mined, reorged, mined, confirmed, with
// growing versions and seqs; the replacements name the attempts they
// replace, and the confirmation the hash mined. With
// TXFENCE_TOPIC_LIFECYCLE the completion topic carries the same events,
// the lifecycle ones with the attribute lifecycle=true, each valid under
// both schemas of schemas/; without it, only the outcome.
func TestIssue49_Lifecycle(t *testing.T) {
	t.Parallel()
	want := []txm.EventType{txm.EventAccepted, txm.EventBroadcast, txm.EventReplaced, txm.EventReplaced, txm.EventMined,
		txm.EventReorged, txm.EventMined, txm.EventConfirmed}
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("topic lifecycle %v", on), func(t *testing.T) {
			t.Parallel()
			w := stacktest.NewWorld(t, 1, stacktest.Lively, func(c *config.Config) {
				c.BumpAfter = 200 * time.Millisecond
				c.TopicLifecycle = on
			}).WithPubSub(t)
			n := w.Node(t, "n0")
			signer := w.Keys[0].Address
			id := n.CreateTx(t, stacktest.Transfer(signer, big.NewInt(1))).ID
			_, err := n.Drain.Execute(ctx, evmtest.ChainID, signer) // no block is sealed: it waits in the pool
			require.NoError(t, err)

			// Two bumps: the resubmit sweep replaces an attempt that waited.
			for bumps := 1; bumps <= 2; bumps++ {
				testsupport.Eventually(t, 30*time.Second, fmt.Sprintf("bump %d", bumps), func() bool {
					st, err := n.Resubmit.Pass(ctx)
					require.NoError(t, err)
					return st.Replaced == 1
				})
			}
			hashes := attemptHashes(t, w, id)
			require.Len(t, hashes, 3, "the original and two replacements")

			// Mined, then its block leaves the chain, then mined again and
			// confirmed.
			w.MineAll(t, signer, 1)
			_, err = n.Receipts.Execute(ctx, evmtest.ChainID, signer)
			require.NoError(t, err)
			tx, err := n.Store.GetTx(ctx, id)
			require.NoError(t, err)
			require.Equal(t, txm.StateMined, tx.State)
			firstBlock := tx.Receipt.BlockHash
			h, err := w.Chain.Backend.Client().HeaderByHash(ctx, firstBlock)
			require.NoError(t, err)
			require.NoError(t, w.Chain.Fork(h.ParentHash))
			w.Mine(2) // the transaction returns from the pool into a block of the new branch
			reconfirm(t, w, n, signer, 0)

			items := events(t, n, "")
			types := make([]txm.EventType, len(items))
			for i, it := range items {
				types[i] = it.Type
				assert.Equal(t, id, it.TxID)
				if i > 0 {
					assert.Greater(t, it.Seq, items[i-1].Seq, "seqs grow")
					assert.Greater(t, it.Version, items[i-1].Version, "versions grow")
				}
			}
			require.Equal(t, want, types)
			require.NotNil(t, items[0].Nonce)
			assert.Zero(t, *items[0].Nonce, "accepted with its nonce")
			assert.Equal(t, txm.StateAllocated, items[0].State)
			assert.Equal(t, hashes[0], *items[1].Hash, "broadcast: the first attempt")
			require.NotNil(t, items[1].Fees)
			assert.NotEmpty(t, items[1].Fees.MaxFeePerGas)
			for k, r := range items[2:4] {
				assert.Equal(t, hashes[k], r.PreviousHash, "replaced: the attempt before")
				assert.Equal(t, hashes[k+1], *r.Hash, "replaced: the new attempt")
				assert.Equal(t, k+2, r.Attempt)
				assert.Equal(t, txm.ReplacedBump, r.Reason)
				require.NotNil(t, r.Fees)
				require.NotNil(t, r.PreviousFees)
				assert.NotEqual(t, r.PreviousFees.MaxPriorityFeePerGas, r.Fees.MaxPriorityFeePerGas, "the fees were bumped")
			}
			mined, reorged, again, confirmed := items[4], items[5], items[6], items[7]
			assert.Equal(t, hashes[2], *mined.Hash, "mined: the last replacement")
			assert.Equal(t, firstBlock.Hex(), mined.BlockHash)
			assert.Equal(t, txm.StateTracking, reorged.State)
			assert.Equal(t, firstBlock.Hex(), reorged.BlockHash, "reorged: the block it left")
			assert.Equal(t, *mined.Hash, *reorged.Hash)
			assert.NotEqual(t, firstBlock.Hex(), again.BlockHash, "mined again, in the new branch")
			assert.Equal(t, *again.Hash, *confirmed.Hash, "the confirmed hash is the mined one")
			assert.Equal(t, again.BlockHash, confirmed.BlockHash)
			assert.True(t, confirmed.NewFork, "the outcome of a reorged transaction carries newFork")
			for _, it := range items[:7] {
				assert.False(t, it.NewFork, "a lifecycle event is not a new fork")
			}

			// The default feed: the outcome only.
			outcomes := feed(t, n, 0, 100)
			require.Len(t, outcomes, 1)
			assert.Equal(t, confirmed.Seq, outcomes[0].Seq)

			// The topic.
			wantMsgs := 1
			if on {
				wantMsgs = len(want)
			}
			msgs := pullCompletions(t, w, wantMsgs)
			require.Len(t, msgs, wantMsgs)
			type got struct {
				body  txm.CompletionMessage
				attrs map[string]string
			}
			var bodies []got
			for _, m := range msgs {
				var b txm.CompletionMessage
				require.NoError(t, json.Unmarshal(m.Data, &b))
				assert.NoError(t, eventschema.ValidateJSON(m.Data), "the JSON Schema accepts %s", m.Data)
				assert.NoError(t, eventschema.ValidateProto(m.Data), "the proto accepts %s (Pub/Sub would publish it)", m.Data)
				assert.Equal(t, txm.CanonicalAddress(signer), m.OrderingKey)
				bodies = append(bodies, got{b, m.Attributes})
			}
			sort.Slice(bodies, func(i, j int) bool { return bodies[i].body.Seq < bodies[j].body.Seq })
			feedItems := items
			if !on {
				feedItems = items[7:]
			}
			for i, b := range bodies {
				it := feedItems[i]
				assert.Equal(t, it.Seq, b.body.Seq)
				assert.Equal(t, it.Type, b.body.Type)
				assert.Equal(t, it.Version, b.body.Version)
				assert.Equal(t, string(it.Type), b.attrs["type"])
				assert.Equal(t, fmt.Sprint(it.Version), b.attrs["version"])
				if it.Type.IsOutcome() {
					assert.NotContains(t, b.attrs, "lifecycle", "an outcome has no lifecycle attribute")
				} else {
					assert.Equal(t, "true", b.attrs["lifecycle"])
				}
				if it.Hash != nil {
					assert.Equal(t, *it.Hash, b.body.Hash)
				}
				assert.Equal(t, it.PreviousHash, b.body.PreviousHash)
				assert.Equal(t, it.BlockHash, b.body.BlockHash)
			}
		})
	}
}

// attemptHashes lists a transaction's attempts' hashes in attempt order.
func attemptHashes(t *testing.T, w *stacktest.World, id string) []string {
	t.Helper()
	rows, err := w.DB.Pool.Query(ctx, `SELECT tx_hash FROM tx_attempt WHERE tx_id = $1 ORDER BY attempt_no`, id)
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		var h string
		require.NoError(t, rows.Scan(&h))
		out = append(out, common.HexToHash(h).Hex())
	}
	require.NoError(t, rows.Err())
	return out
}

// TestIssue49_EventsOptIn: the default feed is the outcomes only, with the
// fields it always had (and a version); events=lifecycle gives every
// event; a bad value is refused naming the field and changes nothing; a
// sender still reads only its own transactions' events, a reader all.
func TestIssue49_EventsOptIn(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 1, stacktest.Lively, func(c *config.Config) { c.Auth.Methods = []string{"apikey"} })
	n := w.Node(t, "n0")
	signer := w.Keys[0].Address
	sender := func(p string) string {
		return w.APIKey(t, txm.Policy{Principal: p, Roles: []txm.Role{txm.RoleSender}, Signers: []common.Address{signer}})
	}
	alice, bob := sender("alice@svc"), sender("bob@svc")
	reader := w.APIKey(t, txm.Policy{Principal: "reader@svc", Roles: []txm.Role{txm.RoleReader}, AllSigners: true})
	transfer := func(int) *txm.Request { return stacktest.Transfer(signer, big.NewInt(1)) }
	aliceTx := n.AllocateRequestsAs(t, txm.Principal{ID: "alice@svc"}, 1, transfer)[0]
	bobTx := n.AllocateRequestsAs(t, txm.Principal{ID: "bob@svc"}, 1, transfer)[0]
	broadcastAndMine(t, w, n, signer, 2)
	w.Mine(int(w.Cfg.Confirmations))
	_, err := n.Finality.Pass(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"CONFIRMED": 2}, w.States(t))

	// The default feed, and events=outcomes: the outcome, with the fields
	// the feed always had and a version.
	for _, q := range []string{"after=0", "after=0&events=outcomes"} {
		status, body := getFeed(t, n, alice, q)
		require.Equal(t, http.StatusOK, status, string(body))
		var page struct {
			Items []map[string]any `json:"items"`
		}
		require.NoError(t, json.Unmarshal(body, &page))
		require.Len(t, page.Items, 1, q)
		it := page.Items[0]
		var keys []string
		for k := range it {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		assert.Equal(t, []string{"chainId", "createdAt", "hash", "newFork", "nonce", "seq", "signer", "state", "txId", "type",
			"version"}, keys, q)
		assert.Equal(t, aliceTx, it["txId"])
		assert.Equal(t, "TxConfirmed", it["type"])
		assert.EqualValues(t, 4, it["version"], "accepted, broadcast, mined, confirmed")
	}

	// events=lifecycle: every event of alice's transaction, and only hers.
	var types []txm.EventType
	for _, it := range events(t, n, alice) {
		assert.Equal(t, aliceTx, it.TxID, "a sender reads only its own transactions' events")
		types = append(types, it.Type)
	}
	assert.Equal(t, []txm.EventType{txm.EventAccepted, txm.EventBroadcast, txm.EventMined, txm.EventConfirmed}, types)
	for _, it := range events(t, n, bob) {
		assert.Equal(t, bobTx, it.TxID)
	}
	all := events(t, n, reader)
	assert.Len(t, all, 8, "a reader reads both transactions' events")

	// A bad value: 400 naming the field, and nothing written or moved.
	var before, after int64
	count := `SELECT (SELECT count(*) FROM tx_completion) + (SELECT sum(version) FROM managed_tx) + (SELECT count(*) FROM outbox)`
	require.NoError(t, w.DB.Pool.QueryRow(ctx, count).Scan(&before))
	for _, bad := range []string{"events=all", "events=", "events=LIFECYCLE"} {
		status, body := getFeed(t, n, reader, "after=0&"+bad)
		if bad == "events=" {
			// An empty value is the default, as for the other parameters.
			assert.Equal(t, http.StatusOK, status)
			continue
		}
		require.Equal(t, http.StatusBadRequest, status, bad)
		var problem struct {
			Errors []struct{ Field, Message string } `json:"errors"`
		}
		require.NoError(t, json.Unmarshal(body, &problem))
		require.Len(t, problem.Errors, 1)
		assert.Equal(t, "events", problem.Errors[0].Field)
		assert.NotContains(t, string(body), "SELECT")
	}
	require.NoError(t, w.DB.Pool.QueryRow(ctx, count).Scan(&after))
	assert.Equal(t, before, after, "a refused read changes nothing")
}
