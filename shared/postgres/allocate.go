package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"sort"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/txm"
)

// CursorState implements txm.Allocator.
func (s *Store) CursorState(ctx context.Context, chainID uint64, signer common.Address) (txm.CursorState, error) {
	var c txm.CursorState
	var next int64
	var age *float64
	err := s.pool.QueryRow(ctx, `
SELECT next_nonce, extract(epoch FROM clock_timestamp() - chain_synced_at)::float8
FROM signer_nonce_cursor WHERE chain_id = $1 AND signer = $2`,
		int64(chainID), txm.CanonicalAddress(signer)).Scan(&next, &age)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("read cursor: %w", translate(err))
	}
	c.Exists, c.Next = true, uint64(next)
	if age != nil {
		c.Synced, c.SyncAge = true, time.Duration(*age*float64(time.Second))
	}
	return c, nil
}

// Allocate implements txm.Allocator. Batches take their nonce leases in
// (chain, signer) order, so allocators that share signers cannot deadlock.
func (s *Store) Allocate(ctx context.Context, batches []txm.AllocationBatch) ([][]txm.Created, []int64, error) {
	order := make([]int, len(batches))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool {
		x, y := batches[order[a]], batches[order[b]]
		if x.ChainID != y.ChainID {
			return x.ChainID < y.ChainID
		}
		return bytes.Compare(x.Signer.Bytes(), y.Signer.Bytes()) < 0
	})
	results := make([][]txm.Created, len(batches))
	var outbox []int64
	err := WithTx(ctx, s.pool, func(tx pgx.Tx) error {
		for _, i := range order {
			b := batches[i]
			if len(b.Requests) == 0 {
				continue
			}
			res, ids, err := s.allocate(ctx, tx, b)
			if err != nil {
				return fmt.Errorf("allocate %d for %s: %w", len(b.Requests), txm.CanonicalAddress(b.Signer), err)
			}
			results[i] = res
			outbox = append(outbox, ids...)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return results, outbox, nil
}

// allocate writes one signer's part of a batch in two round trips: the
// first takes the nonce lease (its row lock serializes allocators for this
// signer across every instance until the transaction ends) and reads the
// cursor, the request ids that exist and the capped principals' usage; the
// second writes the rows, the usage, the submit prompt and the cursor and
// releases the lease. Every write is fenced; the round trips are what the
// signer's lock is held for, with the commit.
func (s *Store) allocate(ctx context.Context, tx pgx.Tx, b txm.AllocationBatch) ([]txm.Created, []int64, error) {
	key := txm.LeaseKey{ChainID: b.ChainID, Signer: b.Signer, Scope: txm.ScopeNonce}
	chainID, signer := int64(b.ChainID), txm.CanonicalAddress(b.Signer)

	var (
		lease    txm.Lease
		cur      txm.CursorState
		existing = map[string]*txm.Tx{}
		usage    = map[string]txm.Usage{}
	)
	read := &pgx.Batch{}
	// Waiting here behind other instances' allocations is the designed
	// queue, bounded by statement_timeout and the request's context, not a
	// stuck lock: lock_timeout is lifted for this one statement.
	read.Queue(`SET LOCAL lock_timeout = 0`)
	s.leases.queueAcquire(ctx, read, key, b.Owner, &lease)
	read.Queue(`SET LOCAL lock_timeout TO DEFAULT`)
	read.Queue(`SELECT next_nonce FROM signer_nonce_cursor WHERE chain_id = $1 AND signer = $2`, chainID, signer).
		QueryRow(func(row pgx.Row) error {
			var next int64
			switch err := row.Scan(&next); {
			case errors.Is(err, pgx.ErrNoRows):
			case err != nil:
				return fmt.Errorf("read cursor: %w", translate(err))
			default:
				cur.Exists, cur.Next = true, uint64(next)
			}
			return nil
		})
	// Idempotency re-check under the lease: request ids that exist now are
	// answered from the existing row and take no nonce.
	s.queueExisting(read, b, existing)
	// Rolling caps: what each capped principal sent from this signer, read
	// under the nonce lease, so that concurrent batches cannot both pass.
	s.queueUsage(read, b, usage)
	lctx, span := s.metrics.Start(ctx, "allocate.lease")
	err := tx.SendBatch(lctx, read).Close()
	span.End()
	if err != nil {
		return nil, nil, fmt.Errorf("lease and read: %w", translate(err))
	}
	if s.hooks.AfterNonceLease != nil {
		if err := s.hooks.AfterNonceLease(); err != nil {
			return nil, nil, err
		}
	}

	nonce := txm.NextNonce(cur, b.ChainPending)
	results := make([]txm.Created, len(b.Requests))
	var fresh []*txm.Tx
	for i, r := range b.Requests {
		fp := r.Fingerprint()
		if r.RequestID != "" {
			if e, ok := existing[r.RequestID]; ok {
				results[i] = txm.Resolve(e, fp)
				continue
			}
		}
		if pol, capped := b.Caps[r.Principal]; capped {
			u := usage[r.Principal]
			if err := pol.CheckUsage(r, u); err != nil {
				results[i] = txm.Created{Outcome: txm.OutcomeRefused, Refusal: err}
				continue
			}
			usage[r.Principal] = u.Add(r.Value)
		}
		id := ""
		if i < len(b.TxIDs) {
			id = b.TxIDs[i]
		}
		if id == "" {
			u, err := uuid.NewV7()
			if err != nil {
				return nil, nil, fmt.Errorf("new tx id: %w", err)
			}
			id = u.String()
		}
		t := &txm.Tx{ID: id, Request: *r, Nonce: nonce, Fingerprint: fp, State: txm.StateAllocated}
		nonce++
		fresh = append(fresh, t)
		results[i] = txm.Created{Outcome: txm.OutcomeCreated, Tx: t}
		if r.RequestID != "" {
			existing[r.RequestID] = t // a later duplicate in this batch replays this one
		}
	}

	write := &pgx.Batch{}
	var inserted, advanced, released int64 = -1, -1, -1
	var outboxID int64
	if len(fresh) > 0 {
		queueInsertAllocated(write, lease, fresh, &inserted)
		s.queueRecordUsage(write, b, fresh)
		queueOutbox(write, s.topics.Submit, lease.Key, &outboxID)
	}
	if len(fresh) > 0 || b.ChainPending != nil {
		// Last, and fenced: if the lease lapsed while the batch ran, this
		// matches nothing and the whole transaction rolls back.
		write.Queue(`
INSERT INTO signer_nonce_cursor AS c (chain_id, signer, next_nonce, chain_synced_at, fencing_token)
SELECT $1::bigint, $2::text, $6::bigint, CASE WHEN $7::bool THEN clock_timestamp() END, $5::bigint
WHERE `+fenceHeld+`
ON CONFLICT (chain_id, signer) DO UPDATE
SET next_nonce = EXCLUDED.next_nonce,
    chain_synced_at = coalesce(EXCLUDED.chain_synced_at, c.chain_synced_at),
    fencing_token = EXCLUDED.fencing_token,
    updated_at = clock_timestamp()
WHERE c.next_nonce <= EXCLUDED.next_nonce`, append(fenceArgs(lease), int64(nonce), b.ChainPending != nil)...).
			Exec(rowsInto(&advanced))
	}
	write.Queue(releaseSQL, fenceArgs(lease)...).Exec(rowsInto(&released))
	wctx, span := s.metrics.Start(ctx, "allocate.write")
	err = tx.SendBatch(wctx, write).Close()
	span.End()
	if err != nil {
		return nil, nil, fmt.Errorf("write allocated: %w", translate(err))
	}
	// A write that matched nothing: the lease was lost (fenced), or, for
	// the cursor, it would have moved backwards.
	op := ""
	switch {
	case inserted >= 0 && inserted != int64(len(fresh)):
		op = "allocate_insert"
	case advanced == 0:
		op = "allocate_cursor"
	case released == 0:
		op = "lease_release"
	}
	if op != "" {
		if err := s.leases.check(ctx, tx, lease, op, ""); err != nil {
			return nil, nil, err // fenced
		}
		switch op {
		case "allocate_insert":
			return nil, nil, fmt.Errorf("insert allocated: %d of %d rows written", inserted, len(fresh))
		case "allocate_cursor":
			return nil, nil, fmt.Errorf("advance cursor to %d: it would move backwards", nonce)
		default:
			return nil, nil, s.leases.fenced(ctx, lease, op, "")
		}
	}
	var outbox []int64
	if len(fresh) > 0 {
		outbox = append(outbox, outboxID)
		ids := make([]string, len(fresh))
		for i, t := range fresh {
			ids[i] = t.ID
		}
		s.log.DebugContext(ctx, "allocated", slog.String(logging.KeySigner, signer), slog.String(logging.KeyOwner, lease.Owner),
			slog.Int64(logging.KeyToken, lease.Token), slog.Uint64(logging.KeyNonce, fresh[0].Nonce), slog.Int("count", len(fresh)),
			slog.Any(logging.KeyTxID, ids))
	}
	return results, outbox, nil
}

// rowsInto is a batch callback that stores the rows a statement affected.
func rowsInto(n *int64) func(pgconn.CommandTag) error {
	return func(tag pgconn.CommandTag) error {
		*n = tag.RowsAffected()
		return nil
	}
}

// queueUsage queues the read, for each principal of b.Caps, of what it sent
// from b's signer in the last hour and day (minute buckets), into out.
func (s *Store) queueUsage(q *pgx.Batch, b txm.AllocationBatch, out map[string]txm.Usage) {
	if len(b.Caps) == 0 {
		return
	}
	principals := make([]string, 0, len(b.Caps))
	for p := range b.Caps {
		principals = append(principals, p)
	}
	q.Queue(`
SELECT principal,
    coalesce(sum(tx_count) FILTER (WHERE minute > clock_timestamp() - interval '1 hour'), 0),
    coalesce(sum(value) FILTER (WHERE minute > clock_timestamp() - interval '1 hour'), 0)::text,
    coalesce(sum(tx_count), 0), coalesce(sum(value), 0)::text
FROM principal_usage
WHERE principal = ANY($1::text[]) AND chain_id = $2 AND signer = $3 AND minute > clock_timestamp() - interval '24 hours'
GROUP BY principal`, principals, int64(b.ChainID), txm.CanonicalAddress(b.Signer)).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var p, hv, dv string
			var u txm.Usage
			if err := rows.Scan(&p, &u.HourCount, &hv, &u.DayCount, &dv); err != nil {
				return fmt.Errorf("read usage: %w", translate(err))
			}
			u.HourValue, u.DayValue = parseBig(&hv), parseBig(&dv)
			out[p] = u
		}
		return nil
	})
}

// queueRecordUsage queues adding the new rows of capped principals to this
// minute's usage.
func (s *Store) queueRecordUsage(q *pgx.Batch, b txm.AllocationBatch, fresh []*txm.Tx) {
	var principals, values []string
	for _, t := range fresh {
		if _, capped := b.Caps[t.Principal]; !capped {
			continue
		}
		v := "0"
		if t.Value != nil {
			v = t.Value.String()
		}
		principals, values = append(principals, t.Principal), append(values, v)
	}
	if len(principals) == 0 {
		return
	}
	q.Queue(`
INSERT INTO principal_usage AS p (principal, chain_id, signer, minute, tx_count, value)
SELECT u.principal, $1, $2, date_trunc('minute', clock_timestamp()), count(*), sum(u.value::numeric)
FROM unnest($3::text[], $4::text[]) AS u(principal, value)
GROUP BY u.principal
ON CONFLICT (principal, chain_id, signer, minute) DO UPDATE
SET tx_count = p.tx_count + EXCLUDED.tx_count, value = p.value + EXCLUDED.value`,
		int64(b.ChainID), txm.CanonicalAddress(b.Signer), principals, values)
}

// PruneUsage deletes usage older than the longest window (a day).
func (s *Store) PruneUsage(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM principal_usage WHERE minute < clock_timestamp() - interval '25 hours'`); err != nil {
		return fmt.Errorf("prune usage: %w", translate(err))
	}
	return nil
}

// queueExisting queues the read of the batch's request ids that already
// exist, into out. Ids txfence made up for this request cannot exist.
func (s *Store) queueExisting(q *pgx.Batch, b txm.AllocationBatch, out map[string]*txm.Tx) {
	var ids []string
	for _, r := range b.Requests {
		if r.RequestID != "" && !r.MadeUpID {
			ids = append(ids, r.RequestID)
		}
	}
	if len(ids) == 0 {
		return
	}
	q.Queue(`SELECT `+txColumns+` FROM `+txFrom+`
WHERE t.chain_id = $1 AND t.signer = $2 AND t.request_id = ANY($3::text[])`,
		int64(b.ChainID), txm.CanonicalAddress(b.Signer), ids).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			t, err := scanTx(rows)
			if err != nil {
				return fmt.Errorf("re-check request ids: %w", translate(err))
			}
			out[t.RequestID] = t
		}
		return nil
	})
}

// queueInsertAllocated queues writing the new rows and their history in one
// statement, fenced; inserted gets the number of rows written.
func queueInsertAllocated(q *pgx.Batch, lease txm.Lease, fresh []*txm.Tx, inserted *int64) {
	n := len(fresh)
	ids := make([]string, n)
	nonces := make([]int64, n)
	reqIDs := make([]*string, n)
	fps := make([][]byte, n)
	tos := make([]*string, n)
	values := make([]string, n)
	datas := make([][]byte, n)
	gas := make([]*int64, n)
	maxFees, maxPrios, gasPrices := make([]*string, n), make([]*string, n), make([]*string, n)
	metas := make([]*string, n)
	principals := make([]*string, n)
	for i, t := range fresh {
		if t.Principal != "" {
			principals[i] = &fresh[i].Principal
		}
		ids[i], nonces[i] = t.ID, int64(t.Nonce)
		if t.RequestID != "" {
			reqIDs[i] = &t.RequestID
		}
		fps[i] = t.Fingerprint[:]
		if t.To != nil {
			a := txm.CanonicalAddress(*t.To)
			tos[i] = &a
		}
		values[i] = "0"
		if t.Value != nil {
			values[i] = t.Value.String()
		}
		datas[i] = t.Data
		if datas[i] == nil {
			datas[i] = []byte{}
		}
		if t.Gas() > 0 {
			g := int64(t.Gas())
			gas[i] = &g
		}
		maxFees[i], maxPrios[i], gasPrices[i] = bigText(t.MaxFeePerGas), bigText(t.MaxPriorityFeePerGas), bigText(t.GasPrice)
		if len(t.Metadata) > 0 {
			m := string(t.Metadata)
			metas[i] = &m
		}
	}
	q.Queue(`
WITH ins AS (
    INSERT INTO managed_tx (id, chain_id, signer, nonce, request_id, payload_fingerprint, to_address, value,
        data, gas_limit, max_fee_per_gas, max_priority_fee_per_gas, gas_price, metadata, state, principal,
        fencing_token, created_at, updated_at)
    SELECT u.id, $1::bigint, $2::text, u.nonce, u.request_id, u.fp, u.to_address, u.value::numeric,
        u.data, u.gas, u.max_fee::numeric, u.max_prio::numeric, u.gas_price::numeric, u.meta::jsonb, 'ALLOCATED',
        u.principal, $5::bigint, now(), now()
    FROM unnest($6::uuid[], $7::bigint[], $8::text[], $9::bytea[], $10::text[], $11::text[], $12::bytea[],
        $13::bigint[], $14::text[], $15::text[], $16::text[], $17::text[], $18::text[])
        AS u(id, nonce, request_id, fp, to_address, value, data, gas, max_fee, max_prio, gas_price, meta, principal)
    WHERE `+fenceHeld+`
    RETURNING id, created_at
), hist AS (
    INSERT INTO tx_history (tx_id, to_state, reason, owner, fencing_token)
    SELECT id, 'ALLOCATED', 'created', $4::text, $5::bigint FROM ins
)
SELECT coalesce(max(created_at), 'epoch'), count(*) FROM ins`,
		append(fenceArgs(lease), ids, nonces, reqIDs, fps, tos, values, datas, gas, maxFees, maxPrios, gasPrices, metas, principals)...).
		QueryRow(func(row pgx.Row) error {
			var now time.Time
			if err := row.Scan(&now, inserted); err != nil {
				return fmt.Errorf("insert allocated: %w", translate(err))
			}
			for _, t := range fresh {
				t.CreatedAt, t.UpdatedAt = now, now
			}
			return nil
		})
}

func bigText(v *big.Int) *string {
	if v == nil {
		return nil
	}
	s := v.String()
	return &s
}
