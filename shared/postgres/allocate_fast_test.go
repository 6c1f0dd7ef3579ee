package postgres

import (
	"context"
	"errors"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/pgtest"
	"github.com/txfence/txfence/shared/txm"
)

// TestAllocate_FastWayAsTheGeneralWay: txfence_allocate's fast way (one
// signer, nothing to look up, no cap; migrations/00019) answers and writes
// what its general way does, from the same state: a new signer, a signer
// with a cursor, a chain nonce ahead of the cursor or behind it, a lease
// renewed by its owner or taken over from another once expired, refused
// while another holds it, and a lease row gone. Each case runs on two
// signers set up alike; the first is called as the create path calls for
// made-up request ids (the fast way), the second with its first request
// marked for look-up (the general way, which finds nothing and so
// creates it too).
func TestAllocate_FastWayAsTheGeneralWay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := testStore(t, db.Pool)
	pending := func(n uint64) *uint64 { return &n }

	type answer struct {
		Idx, Group               int32
		Outcome, Acquired        string
		Nonce                    *int64
		Rule                     *string
		Token                    int64
		Outbox, Contended        bool
		ErrCode, ErrHint, ErrMsg string
	}
	// call allocates n requests for signer, by the fast way or the general.
	call := func(t *testing.T, signer common.Address, owner string, n int, chainPending *uint64, fast, ensure bool) []answer {
		t.Helper()
		var reqs []*txm.Request
		for range n {
			r := allocRequest(signer, "", "", 7)
			r.RequestID, r.MadeUpID = "txf-"+uuid.NewString(), true
			reqs = append(reqs, r)
		}
		a := newAllocationArgs([]txm.AllocationBatch{{ChainID: 1, Signer: signer, Owner: owner, Requests: reqs,
			ChainPending: chainPending}})
		if !fast {
			a.lookup[0] = true
		}
		if ensure {
			require.NoError(t, s.ensureLeaseRows(ctx, a, true))
		}
		rows, err := db.Pool.Query(ctx, allocateSQL, a.args(owner, s.leases.cfg, s.topics.Submit)...)
		require.NoError(t, err)
		var got []answer
		for rows.Next() {
			var r allocated
			require.NoError(t, rows.Scan(&r.idx, &r.outcome, &r.txID, &r.nonce, &r.rule, &r.group, &r.token, &r.acquired,
				&r.outboxID, &r.createdAt, &r.contended))
			got = append(got, answer{Idx: r.idx, Group: r.group, Outcome: r.outcome, Acquired: r.acquired, Nonce: r.nonce,
				Rule: r.rule, Token: r.token, Outbox: r.outboxID != nil, Contended: r.contended})
		}
		var pgErr *pgconn.PgError
		if err := rows.Err(); errors.As(err, &pgErr) {
			return []answer{{ErrCode: pgErr.Code, ErrHint: pgErr.Hint, ErrMsg: pgErr.Message}}
		} else {
			require.NoError(t, err)
		}
		return got
	}
	// state is what the calls left for signer: its cursor, lease row, rows
	// and prompts.
	state := func(t *testing.T, signer common.Address) []string {
		t.Helper()
		addr := txm.CanonicalAddress(signer)
		var out []string
		for _, q := range []string{
			`SELECT next_nonce || ' ' || (chain_synced_at IS NOT NULL) || ' ' || fencing_token FROM signer_nonce_cursor WHERE signer = $1`,
			`SELECT owner || ' ' || fencing_token || ' ' || CASE WHEN expires_at = '-infinity' THEN 'released'
			    WHEN expires_at > clock_timestamp() THEN 'live' ELSE 'expired' END || ' ' || (wanted_at IS NULL)
			 FROM signer_lease WHERE signer = $1`,
			`SELECT nonce || ' ' || state || ' ' || value || ' ' || fencing_token || ' ' || created_owner || ' ' || created_token
			    || ' ' || to_address || ' ' || gas_limit || ' ' || (request_id LIKE 'txf-%') || ' ' || (principal IS NULL)
			    || ' ' || coalesce(max_fee_per_gas::text, '-') || ' ' || encode(data, 'hex') || ' ' || (metadata IS NULL)
			    || ' ' || octet_length(payload_fingerprint) FROM managed_tx WHERE signer = $1 ORDER BY nonce`,
			`SELECT topic || ' ' || (payload->>'chainId') || ' ' || (payload->>'signer' = ordering_key) || ' ' || attempts
			 FROM outbox WHERE ordering_key = $1 ORDER BY id`,
		} {
			rows, err := db.Pool.Query(ctx, q, addr)
			require.NoError(t, err)
			for rows.Next() {
				var v *string
				require.NoError(t, rows.Scan(&v))
				if v == nil {
					out = append(out, "<null>")
				} else {
					out = append(out, *v)
				}
			}
			require.NoError(t, rows.Err())
			out = append(out, "|")
		}
		return out
	}
	exec := func(t *testing.T, sql string, args ...any) {
		t.Helper()
		_, err := db.Pool.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}

	cases := []struct {
		name  string
		setUp func(t *testing.T, signer common.Address) // the calls and writes before the compared call
		owner string
		n     int
		chain *uint64
		gone  bool // the lease row is deleted before the compared call
	}{
		{name: "new signer", owner: "o", n: 1},
		{name: "new signer, chain pending", owner: "o", n: 3, chain: pending(5)},
		{name: "cursor", owner: "o", n: 5, setUp: func(t *testing.T, signer common.Address) {
			call(t, signer, "o", 3, nil, true, true)
		}},
		{name: "chain ahead of the cursor", owner: "o", n: 2, chain: pending(9), setUp: func(t *testing.T, signer common.Address) {
			call(t, signer, "o", 3, nil, true, true)
		}},
		{name: "chain behind the cursor", owner: "o", n: 2, chain: pending(1), setUp: func(t *testing.T, signer common.Address) {
			call(t, signer, "o", 3, nil, true, true)
		}},
		{name: "renewed", owner: "o", n: 2, setUp: func(t *testing.T, signer common.Address) {
			call(t, signer, "o", 1, nil, true, true)
			exec(t, `UPDATE signer_lease SET owner = 'o', fencing_token = 5, expires_at = clock_timestamp() + interval '1 minute'
				WHERE signer = $1`, txm.CanonicalAddress(signer))
		}},
		{name: "taken over once expired", owner: "o", n: 2, setUp: func(t *testing.T, signer common.Address) {
			call(t, signer, "x", 1, nil, true, true)
			exec(t, `UPDATE signer_lease SET owner = 'x', fencing_token = 3, expires_at = clock_timestamp() - interval '1 hour'
				WHERE signer = $1`, txm.CanonicalAddress(signer))
		}},
		{name: "held by another", owner: "o", n: 2, setUp: func(t *testing.T, signer common.Address) {
			call(t, signer, "x", 1, nil, true, true)
			exec(t, `UPDATE signer_lease SET owner = 'x', fencing_token = 3, expires_at = clock_timestamp() + interval '1 minute'
				WHERE signer = $1`, txm.CanonicalAddress(signer))
		}},
		{name: "expired within the skew", owner: "o", n: 1, setUp: func(t *testing.T, signer common.Address) {
			call(t, signer, "x", 1, nil, true, true)
			exec(t, `UPDATE signer_lease SET owner = 'x', expires_at = clock_timestamp() - interval '100 milliseconds'
				WHERE signer = $1`, txm.CanonicalAddress(signer))
		}},
		{name: "lease row gone", owner: "o", n: 1, gone: true, setUp: func(t *testing.T, signer common.Address) {
			call(t, signer, "o", 2, nil, true, true)
		}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fast, general := common.BigToAddress(big.NewInt(int64(1000+2*i))), common.BigToAddress(big.NewInt(int64(1001+2*i)))
			var answers [2][]answer
			var states [2][]string
			for k, signer := range []common.Address{fast, general} {
				if c.setUp != nil {
					c.setUp(t, signer)
				}
				if c.gone {
					exec(t, `DELETE FROM signer_lease WHERE signer = $1`, txm.CanonicalAddress(signer))
				}
				answers[k] = call(t, signer, c.owner, c.n, c.chain, k == 0, !c.gone && c.setUp == nil)
				states[k] = state(t, signer)
			}
			assert.Equal(t, answers[1], answers[0], "the answers")
			assert.Equal(t, states[1], states[0], "what the call left")
			assert.NotEmpty(t, answers[0])
		})
	}

	// The fast way is the one taken for made-up ids: it numbers the batch
	// without looking for repeats, which made-up ids cannot have, and a
	// batch that repeats one fails on the request id's unique index (the
	// general way answers the copy as existing).
	signer := common.HexToAddress("0xfa57")
	r := allocRequest(signer, "", "", 1)
	r.RequestID, r.MadeUpID = "txf-repeated", true
	a := newAllocationArgs([]txm.AllocationBatch{{ChainID: 1, Signer: signer, Owner: "o", Requests: []*txm.Request{r, r}}})
	require.NoError(t, s.ensureLeaseRows(ctx, a, true))
	_, err := db.Pool.Exec(ctx, allocateSQL, a.args("o", s.leases.cfg, s.topics.Submit)...)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	assert.Equal(t, "23505", pgErr.Code, "the fast way: the index refuses the repeat")
	a.lookup[0] = true
	_, err = db.Pool.Exec(ctx, allocateSQL, a.args("o", s.leases.cfg, s.topics.Submit)...)
	require.NoError(t, err, "the general way answers the repeat as existing")
}
