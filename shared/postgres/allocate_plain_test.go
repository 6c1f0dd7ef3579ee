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

// TestAllocate_PlainAsTheGeneral: txfence_allocate_plain (00019) answers
// a plain batch (made-up request ids, no cap) and writes what
// txfence_allocate does, from the same state: a new signer, a signer with
// a cursor, a chain nonce ahead of the cursor or behind it, a lease
// renewed by its owner or taken over from another once expired, refused
// while another holds it or within the skew, a lease row gone, and
// batches of several signers with several requests each, one of them
// held. Each case runs on two sets of signers set up alike, one called
// through each function.
func TestAllocate_PlainAsTheGeneral(t *testing.T) {
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
	// call allocates n requests for each of signers, through the plain
	// function or the general one.
	call := func(t *testing.T, signers []common.Address, owner string, n int, chainPending *uint64, plain, ensure bool) []answer {
		t.Helper()
		var batches []txm.AllocationBatch
		for _, signer := range signers {
			var reqs []*txm.Request
			for range n {
				r := allocRequest(signer, "", "", 7)
				r.RequestID, r.MadeUpID = "txf-"+uuid.NewString(), true
				reqs = append(reqs, r)
			}
			batches = append(batches, txm.AllocationBatch{ChainID: 1, Signer: signer, Owner: owner, Requests: reqs,
				ChainPending: chainPending})
		}
		a := newAllocationArgs(batches)
		require.True(t, a.plain())
		if ensure {
			require.NoError(t, s.ensureLeaseRows(ctx, a, true))
		}
		sql := allocateSQL
		if plain {
			sql = allocatePlainSQL
		}
		rows, err := db.Pool.Query(ctx, sql, a.args(owner, s.leases.cfg, s.topics.Submit)...)
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
		}
		require.NoError(t, rows.Err())
		return got
	}
	// state is what the calls left for signers: their cursors, lease rows,
	// rows and prompts.
	state := func(t *testing.T, signers []common.Address) []string {
		t.Helper()
		var out []string
		for _, signer := range signers {
			for _, q := range []string{
				`SELECT next_nonce || ' ' || (chain_synced_at IS NOT NULL) || ' ' || fencing_token
				 FROM signer_nonce_cursor WHERE signer = $1`,
				`SELECT owner || ' ' || fencing_token || ' ' || CASE WHEN expires_at = '-infinity' THEN 'released'
				    WHEN expires_at > clock_timestamp() THEN 'live' ELSE 'expired' END || ' ' || (wanted_at IS NULL)
				 FROM signer_lease WHERE signer = $1`,
				`SELECT nonce || ' ' || state || ' ' || value || ' ' || fencing_token || ' ' || created_owner || ' '
				    || created_token || ' ' || to_address || ' ' || gas_limit || ' ' || (request_id LIKE 'txf-%') || ' '
				    || (principal IS NULL) || ' ' || coalesce(max_fee_per_gas::text, '-') || ' ' || encode(data, 'hex')
				    || ' ' || (metadata IS NULL) || ' ' || octet_length(payload_fingerprint)
				 FROM managed_tx WHERE signer = $1 ORDER BY nonce`,
				`SELECT topic || ' ' || (payload->>'chainId') || ' ' || (payload->>'signer' = ordering_key) || ' ' || attempts
				 FROM outbox WHERE ordering_key = $1 ORDER BY id`,
			} {
				rows, err := db.Pool.Query(ctx, q, txm.CanonicalAddress(signer))
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
		}
		return out
	}
	lease := func(t *testing.T, signer common.Address, set string) {
		t.Helper()
		_, err := db.Pool.Exec(ctx, `UPDATE signer_lease SET `+set+` WHERE signer = $1`, txm.CanonicalAddress(signer))
		require.NoError(t, err)
	}
	first := func(owner string, n int) func(t *testing.T, signers []common.Address) {
		return func(t *testing.T, signers []common.Address) {
			call(t, signers, owner, n, nil, false, true)
		}
	}

	cases := []struct {
		name    string
		signers int
		setUp   func(t *testing.T, signers []common.Address) // what comes before the compared call
		n       int                                          // requests a signer
		chain   *uint64
		gone    bool // the lease rows are deleted before the compared call
	}{
		{name: "new signer", signers: 1, n: 1},
		{name: "new signer, chain pending", signers: 1, n: 3, chain: pending(5)},
		{name: "cursor", signers: 1, n: 5, setUp: first("o", 3)},
		{name: "chain ahead of the cursor", signers: 1, n: 2, chain: pending(9), setUp: first("o", 3)},
		{name: "chain behind the cursor", signers: 1, n: 2, chain: pending(1), setUp: first("o", 3)},
		{name: "renewed", signers: 1, n: 2, setUp: func(t *testing.T, signers []common.Address) {
			first("o", 1)(t, signers)
			lease(t, signers[0], `owner = 'o', fencing_token = 5, expires_at = clock_timestamp() + interval '1 minute'`)
		}},
		{name: "taken over once expired", signers: 1, n: 2, setUp: func(t *testing.T, signers []common.Address) {
			first("x", 1)(t, signers)
			lease(t, signers[0], `owner = 'x', fencing_token = 3, expires_at = clock_timestamp() - interval '1 hour'`)
		}},
		{name: "held by another", signers: 1, n: 2, setUp: func(t *testing.T, signers []common.Address) {
			first("x", 1)(t, signers)
			lease(t, signers[0], `owner = 'x', fencing_token = 3, expires_at = clock_timestamp() + interval '1 minute'`)
		}},
		{name: "expired within the skew", signers: 1, n: 1, setUp: func(t *testing.T, signers []common.Address) {
			first("x", 1)(t, signers)
			lease(t, signers[0], `owner = 'x', expires_at = clock_timestamp() - interval '100 milliseconds'`)
		}},
		{name: "lease row gone", signers: 1, n: 1, gone: true, setUp: first("o", 2)},
		{name: "new signers", signers: 4, n: 3, chain: pending(2)},
		{name: "signers with cursors", signers: 5, n: 2, setUp: func(t *testing.T, signers []common.Address) {
			first("o", 1)(t, signers[:2])
			first("x", 4)(t, signers[3:])
		}},
		{name: "one of the signers held", signers: 3, n: 2, setUp: func(t *testing.T, signers []common.Address) {
			first("x", 1)(t, signers)
			lease(t, signers[2], `owner = 'x', expires_at = clock_timestamp() + interval '1 minute'`)
		}},
	}
	next := int64(1000)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var sets [2][]common.Address
			for k := range sets {
				for range c.signers {
					sets[k] = append(sets[k], common.BigToAddress(big.NewInt(next)))
					next++
				}
			}
			var answers [2][]answer
			var states [2][]string
			for k, signers := range sets {
				if c.setUp != nil {
					c.setUp(t, signers)
				}
				if c.gone {
					for _, signer := range signers {
						_, err := db.Pool.Exec(ctx, `DELETE FROM signer_lease WHERE signer = $1`, txm.CanonicalAddress(signer))
						require.NoError(t, err)
					}
				}
				answers[k] = call(t, signers, "o", c.n, c.chain, k == 0, !c.gone)
				states[k] = state(t, signers)
			}
			require.NotEmpty(t, answers[1])
			assert.Equal(t, answers[1], answers[0], "the answers")
			assert.Equal(t, states[1], states[0], "what the call left")
		})
	}
}

// TestAllocate_PlainOnlyForPlainBatches: Allocate calls the plain function
// for a batch whose request ids were all made up and no principal capped,
// and the general one otherwise; the plain function refuses any other
// batch (22023), so that none is answered without its look-ups or caps,
// and a made-up id repeated in a batch fails on the request id's unique
// index there (the general function answers the copy as existing; made-up
// ids cannot repeat).
func TestAllocate_PlainOnlyForPlainBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := testStore(t, db.Pool)
	a1, a2 := common.HexToAddress("0xa1"), common.HexToAddress("0xa2")
	madeUp := func(signer common.Address) *txm.Request {
		r := allocRequest(signer, "", "", 1)
		r.RequestID, r.MadeUpID = "txf-"+uuid.NewString(), true
		return r
	}
	batch := func(reqs ...*txm.Request) []txm.AllocationBatch {
		var bs []txm.AllocationBatch
		for _, r := range reqs {
			if len(bs) > 0 && bs[len(bs)-1].Signer == r.From {
				bs[len(bs)-1].Requests = append(bs[len(bs)-1].Requests, r)
				continue
			}
			bs = append(bs, txm.AllocationBatch{ChainID: 1, Signer: r.From, Owner: "o", Requests: []*txm.Request{r}})
		}
		return bs
	}
	capped := batch(madeUp(a1))
	capped[0].Caps = map[string]txm.Policy{"": {Hourly: txm.Limit{Count: 5}}}

	plain := newAllocationArgs(batch(madeUp(a1), madeUp(a1), madeUp(a2)))
	assert.True(t, plain.plain(), "made-up ids, no caps")
	assert.Equal(t, allocatePlainSQL, plain.sql())
	approvedReq := madeUp(a1)
	approvedReq.Approved = true
	for name, a := range map[string]*allocationArgs{
		"a request id of the caller's": newAllocationArgs(batch(madeUp(a1), allocRequest(a1, "", "mine", 1))),
		"a capped principal":           newAllocationArgs(capped),
		"an approved request":          newAllocationArgs(batch(madeUp(a1), approvedReq)),
	} {
		assert.False(t, a.plain(), name)
		assert.Equal(t, allocateSQL, a.sql(), name)
		require.NoError(t, s.ensureLeaseRows(ctx, a, true))
		_, err := db.Pool.Exec(ctx, allocatePlainSQL, a.args("o", s.leases.cfg, s.topics.Submit)...)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, name)
		assert.Equal(t, "22023", pgErr.Code, name)
	}
	// Each signer's requests together, signer 1's first: anything else is
	// refused.
	require.NoError(t, s.ensureLeaseRows(ctx, plain, true))
	for name, groups := range map[string][]int32{"apart": {1, 2, 1}, "not from 1": {2, 2, 1}, "a signer left out": {1, 1, 1}} {
		plain.group = groups
		_, err := db.Pool.Exec(ctx, allocatePlainSQL, plain.args("o", s.leases.cfg, s.topics.Submit)...)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, name)
		assert.Equal(t, "22023", pgErr.Code, name)
	}
	var rows int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM managed_tx`).Scan(&rows))
	assert.Zero(t, rows, "nothing written by a refused call")

	// Through Allocate: a plain batch goes to the plain function, where a
	// repeated made-up id fails on the index.
	r := madeUp(a1)
	_, _, err := s.Allocate(ctx, batch(r, r))
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	assert.Equal(t, "23505", pgErr.Code, "the plain function: the index refuses the repeat")
	r.MadeUpID = false // now looked up: the general function
	got, _, err := s.Allocate(ctx, batch(r, r))
	require.NoError(t, err)
	assert.Equal(t, txm.OutcomeCreated, got[0][0].Outcome)
	assert.Equal(t, got[0][0].Tx.ID, got[0][1].Tx.ID, "the copy answered as the same transaction")
}
