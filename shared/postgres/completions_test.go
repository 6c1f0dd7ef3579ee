package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/pgtest"
	"github.com/txfence/txfence/shared/txm"
)

// TestCompletions_SeqsBecomeVisibleInOrder: two instances (own pools and
// owners) confirm many signers' transactions at once, a few per call, while
// a reader follows the feed with its cursor. Every outcome reaches the
// reader exactly once: no seq becomes visible after a larger one was read
// (the reader would skip it for good). Each outcome's outbox message
// carries the seq and newFork its completion row was given.
func TestCompletions_SeqsBecomeVisibleInOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	const signers, perSigner, chunk = 16, 24, 3
	var stores []*Store
	for i := 0; i < 2; i++ {
		cfg := config.Defaults()
		cfg.TopicSubmit, cfg.TopicReceipt, cfg.TopicCompletion = "s", "r", "c"
		s, err := NewStoreFromConfig(pgtest.Pool(t, db.URL), cfg, nil, logging.Discard())
		require.NoError(t, err)
		stores = append(stores, s)
	}
	type work struct {
		store *Store
		lease txm.Lease
		ids   []string
	}
	var jobs []work
	for g := 0; g < signers; g++ {
		addr := common.HexToAddress(fmt.Sprintf("0x%040x", 0x1000+g))
		var ids []string
		for n := 0; n < perSigner; n++ {
			var id string
			require.NoError(t, db.Pool.QueryRow(ctx, `
WITH t AS (
    INSERT INTO managed_tx (id, chain_id, signer, nonce, payload_fingerprint, state, fencing_token,
                            receipt_attempt_no, receipt_status, receipt_block_number, receipt_block_hash)
    VALUES (gen_random_uuid(), 1, $1::text, $2::bigint, sha256(($1::text || $2::bigint::text)::bytea), 'MINED', 1,
            1, 1, 10, '0x' || repeat('a', 64))
    RETURNING id)
INSERT INTO tx_attempt (tx_id, attempt_no, tx_hash, raw_tx, nonce, gas_limit, fencing_token)
SELECT id, 1, '0x' || encode(sha256(($1::text || $2::bigint::text)::bytea), 'hex'), '\x01', $2::bigint, 21000, 1 FROM t
RETURNING tx_id::text`, txm.CanonicalAddress(addr), n).Scan(&id))
			ids = append(ids, id)
		}
		s := stores[g%2]
		l, _, err := s.Leases().Acquire(ctx, txm.LeaseKey{ChainID: 1, Signer: addr, Scope: txm.ScopeChain}, fmt.Sprintf("owner-%d", g%2))
		require.NoError(t, err)
		for i := 0; i < len(ids); i += chunk {
			jobs = append(jobs, work{s, l, ids[i:min(i+chunk, len(ids))]})
		}
	}

	total := signers * perSigner
	var seen []txm.Completion
	stop := make(chan struct{})
	readerDone := make(chan error, 1)
	go func() {
		var after int64
		for {
			got, err := stores[0].CompletionsAfter(ctx, after, 50, nil)
			if err != nil {
				readerDone <- err
				return
			}
			for _, c := range got {
				seen = append(seen, c)
				after = c.Seq
			}
			if len(got) == 0 {
				select {
				case <-stop:
					readerDone <- nil
					return
				case <-time.After(time.Millisecond):
				}
			}
		}
	}()
	// Each signer's calls go in order (they share its lease); signers run
	// at once, eight at a time over the two instances.
	bySigner := map[string][]work{}
	var order []string
	for _, j := range jobs {
		k := txm.CanonicalAddress(j.lease.Key.Signer)
		if bySigner[k] == nil {
			order = append(order, k)
		}
		bySigner[k] = append(bySigner[k], j)
	}
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for _, k := range order {
		wg.Add(1)
		sem <- struct{}{}
		go func(js []work) {
			defer wg.Done()
			defer func() { <-sem }()
			for _, j := range js {
				out, err := j.store.Finalize(ctx, j.lease, j.ids)
				if !assert.NoError(t, err) {
					return
				}
				assert.Len(t, out, len(j.ids), "one outbox row per outcome")
			}
		}(bySigner[k])
	}
	wg.Wait()
	// The reader catches up with what is committed, then stops.
	var last int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT coalesce(max(seq), 0) FROM tx_completion`).Scan(&last))
	close(stop)
	require.NoError(t, <-readerDone)

	require.Equal(t, total, len(seen), "every outcome read once: none appeared behind the cursor")
	ids := map[string]bool{}
	for i, c := range seen {
		assert.False(t, ids[c.TxID], "%s read twice", c.TxID)
		ids[c.TxID] = true
		if i > 0 {
			assert.Greater(t, c.Seq, seen[i-1].Seq)
		}
		assert.Equal(t, txm.StateConfirmed, c.State)
	}
	assert.Equal(t, last, seen[len(seen)-1].Seq)

	// The outbox messages carry the seqs and newFork of the rows.
	rows, err := db.Pool.Query(ctx, `
SELECT o.payload, o.attributes, c.seq, c.new_fork
FROM outbox o JOIN tx_completion c ON c.tx_id = (o.payload->>'txId')::uuid
WHERE o.topic = 'c'`)
	require.NoError(t, err)
	n := 0
	for rows.Next() {
		var payload, attrs []byte
		var seq int64
		var fork bool
		require.NoError(t, rows.Scan(&payload, &attrs, &seq, &fork))
		var msg txm.CompletionMessage
		require.NoError(t, json.Unmarshal(payload, &msg))
		var attr map[string]string
		require.NoError(t, json.Unmarshal(attrs, &attr))
		assert.Equal(t, seq, msg.Seq)
		assert.Equal(t, fork, msg.NewFork)
		assert.Equal(t, fmt.Sprint(seq), attr["seq"])
		assert.Equal(t, fmt.Sprint(fork), attr["newFork"])
		assert.Equal(t, txm.EventFor(txm.StateConfirmed), msg.Type)
		n++
	}
	require.NoError(t, rows.Err())
	assert.Equal(t, total, n)
}
