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

// Allocate implements txm.Allocator, in one transaction of two round trips
// whatever the number of signers: the first takes every signer's nonce
// lease (their row locks serialize allocators for those signers across
// every instance until the transaction ends) and reads their cursors, the
// request ids that exist and the capped principals' usage; the second
// writes every signer's rows, usage, submit prompt and cursor and releases
// the leases. Every write is fenced. Leases are taken in (chain, signer)
// order, so allocators that share signers cannot deadlock. A batch spread
// over many signers used to make two round trips per signer while it held
// the locks of the ones before.
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
		parts := make([]*signerAllocation, 0, len(order))
		for _, i := range order {
			if len(batches[i].Requests) > 0 {
				parts = append(parts, &signerAllocation{index: i, b: batches[i]})
			}
		}
		if len(parts) == 0 {
			return nil
		}
		read := &pgx.Batch{}
		for _, p := range parts {
			s.queueRead(ctx, read, p)
		}
		lctx, span := s.metrics.Start(ctx, "allocate.lease")
		err := tx.SendBatch(lctx, read).Close()
		span.End()
		if err != nil {
			return fmt.Errorf("lease and read: %w", translate(err))
		}
		if s.hooks.AfterNonceLease != nil {
			if err := s.hooks.AfterNonceLease(); err != nil {
				return err
			}
		}

		write := &pgx.Batch{}
		for _, p := range parts {
			if err := p.assign(); err != nil {
				return err
			}
			s.queueWrite(write, p)
		}
		wctx, span := s.metrics.Start(ctx, "allocate.write")
		err = tx.SendBatch(wctx, write).Close()
		span.End()
		if err != nil {
			return fmt.Errorf("write allocated: %w", translate(err))
		}
		for _, p := range parts {
			if err := s.checkWritten(ctx, tx, p); err != nil {
				return fmt.Errorf("allocate %d for %s: %w", len(p.b.Requests), txm.CanonicalAddress(p.b.Signer), err)
			}
			results[p.index] = p.results
			if len(p.fresh) > 0 {
				outbox = append(outbox, p.outboxID)
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return results, outbox, nil
}

// signerAllocation is one signer's part of an allocation transaction: what
// its reads found, the nonces it assigns, and what its writes did.
type signerAllocation struct {
	index    int // in Allocate's batches
	b        txm.AllocationBatch
	lease    txm.Lease
	cur      txm.CursorState
	existing map[string]*txm.Tx
	usage    map[string]txm.Usage

	results []txm.Created
	fresh   []*txm.Tx
	next    uint64 // the cursor after fresh

	inserted, advanced, released int64 // rows each write affected; -1 when not sent
	outboxID                     int64
}

// queueRead queues taking p's nonce lease and reading its cursor, the
// request ids that exist (the idempotency re-check under the lease:
// request ids that exist now are answered from the existing row and take
// no nonce) and its capped principals' usage (read under the lease, so
// that concurrent batches cannot both pass a cap).
func (s *Store) queueRead(ctx context.Context, read *pgx.Batch, p *signerAllocation) {
	p.existing, p.usage = map[string]*txm.Tx{}, map[string]txm.Usage{}
	key := txm.LeaseKey{ChainID: p.b.ChainID, Signer: p.b.Signer, Scope: txm.ScopeNonce}
	// Waiting for the lease behind other instances' allocations is the
	// designed queue, bounded by statement_timeout and the request's
	// context, not a stuck lock: lock_timeout is lifted for that one
	// statement.
	read.Queue(`SET LOCAL lock_timeout = 0`)
	s.leases.queueAcquire(ctx, read, key, p.b.Owner, &p.lease)
	read.Queue(`SET LOCAL lock_timeout TO DEFAULT`)
	read.Queue(`SELECT next_nonce FROM signer_nonce_cursor WHERE chain_id = $1 AND signer = $2`,
		int64(p.b.ChainID), txm.CanonicalAddress(p.b.Signer)).
		QueryRow(func(row pgx.Row) error {
			var next int64
			switch err := row.Scan(&next); {
			case errors.Is(err, pgx.ErrNoRows):
			case err != nil:
				return fmt.Errorf("read cursor: %w", translate(err))
			default:
				p.cur.Exists, p.cur.Next = true, uint64(next)
			}
			return nil
		})
	s.queueExisting(read, p.b, p.existing)
	s.queueUsage(read, p.b, p.usage)
}

// assign answers p's requests: replays from the rows that exist, refusals
// of capped principals past their caps, and nonces in order for the rest.
func (p *signerAllocation) assign() error {
	nonce := txm.NextNonce(p.cur, p.b.ChainPending)
	p.results = make([]txm.Created, len(p.b.Requests))
	for i, r := range p.b.Requests {
		fp := r.Fingerprint()
		if r.RequestID != "" {
			if e, ok := p.existing[r.RequestID]; ok {
				p.results[i] = txm.Resolve(e, fp)
				continue
			}
		}
		if pol, capped := p.b.Caps[r.Principal]; capped {
			u := p.usage[r.Principal]
			if err := pol.CheckUsage(r, u); err != nil {
				p.results[i] = txm.Created{Outcome: txm.OutcomeRefused, Refusal: err}
				continue
			}
			p.usage[r.Principal] = u.Add(r.Value)
		}
		id := ""
		if i < len(p.b.TxIDs) {
			id = p.b.TxIDs[i]
		}
		if id == "" {
			u, err := uuid.NewV7()
			if err != nil {
				return fmt.Errorf("new tx id: %w", err)
			}
			id = u.String()
		}
		t := &txm.Tx{ID: id, Request: *r, Nonce: nonce, Fingerprint: fp, State: txm.StateAllocated}
		nonce++
		p.fresh = append(p.fresh, t)
		p.results[i] = txm.Created{Outcome: txm.OutcomeCreated, Tx: t}
		if r.RequestID != "" {
			p.existing[r.RequestID] = t // a later duplicate in this batch replays this one
		}
	}
	p.next = nonce
	return nil
}

// queueWrite queues p's rows, usage, submit prompt and cursor, all fenced,
// and the release of its lease.
func (s *Store) queueWrite(write *pgx.Batch, p *signerAllocation) {
	p.inserted, p.advanced, p.released = -1, -1, -1
	if len(p.fresh) > 0 {
		queueInsertAllocated(write, p.lease, p.fresh, &p.inserted)
		s.queueRecordUsage(write, p.b, p.fresh)
		queueOutbox(write, s.topics.Submit, p.lease.Key, &p.outboxID)
	}
	if len(p.fresh) > 0 || p.b.ChainPending != nil {
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
WHERE c.next_nonce <= EXCLUDED.next_nonce`, append(fenceArgs(p.lease), int64(p.next), p.b.ChainPending != nil)...).
			Exec(rowsInto(&p.advanced))
	}
	write.Queue(releaseSQL, fenceArgs(p.lease)...).Exec(rowsInto(&p.released))
}

// checkWritten fails when one of p's writes matched nothing: the lease was
// lost (fenced), or, for the cursor, it would have moved backwards.
func (s *Store) checkWritten(ctx context.Context, tx pgx.Tx, p *signerAllocation) error {
	op := ""
	switch {
	case p.inserted >= 0 && p.inserted != int64(len(p.fresh)):
		op = "allocate_insert"
	case p.advanced == 0:
		op = "allocate_cursor"
	case p.released == 0:
		op = "lease_release"
	}
	if op != "" {
		if err := s.leases.check(ctx, tx, p.lease, op, ""); err != nil {
			return err // fenced
		}
		switch op {
		case "allocate_insert":
			return fmt.Errorf("insert allocated: %d of %d rows written", p.inserted, len(p.fresh))
		case "allocate_cursor":
			return fmt.Errorf("advance cursor to %d: it would move backwards", p.next)
		default:
			return s.leases.fenced(ctx, p.lease, op, "")
		}
	}
	if len(p.fresh) > 0 {
		ids := make([]string, len(p.fresh))
		for i, t := range p.fresh {
			ids[i] = t.ID
		}
		s.log.DebugContext(ctx, "allocated", slog.String(logging.KeySigner, txm.CanonicalAddress(p.b.Signer)),
			slog.String(logging.KeyOwner, p.lease.Owner), slog.Int64(logging.KeyToken, p.lease.Token),
			slog.Uint64(logging.KeyNonce, p.fresh[0].Nonce), slog.Int("count", len(p.fresh)), slog.Any(logging.KeyTxID, ids))
	}
	return nil
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
