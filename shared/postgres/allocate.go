package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txfence/txfence/shared/config"
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

// allocateSQL calls txfence_allocate (migrations/functions/txfence_allocate.sql):
// the whole allocation of a batch, every signer's, in one statement.
// allocatePlainSQL calls txfence_allocate_plain (its file beside it), the
// same for a plain batch (nothing to look up, no cap: every batch whose
// request ids were all made up), which costs the server less.
const (
	allocateSQL = `SELECT o_idx, o_outcome, o_tx_id::text, o_nonce, o_rule, o_group, o_token, o_acquired, o_outbox_id, o_created_at,
    o_contended
FROM txfence_allocate($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20,
    $21, $22, $23, $24, $25, $26, $27, $28, $29, $30, $31, $32, $33, $34, $35, $36, $37, $38, $39)`
	allocatePlainSQL = `SELECT o_idx, o_outcome, o_tx_id::text, o_nonce, o_rule, o_group, o_token, o_acquired, o_outbox_id,
    o_created_at, o_contended
FROM txfence_allocate_plain($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20,
    $21, $22, $23, $24, $25, $26, $27, $28, $29, $30, $31, $32, $33, $34, $35, $36, $37, $38, $39)`
)

// Allocate implements txm.Allocator with one call of txfence_allocate (or
// txfence_allocate_plain, for a plain batch), sent as one statement in an
// implicit transaction: it takes every signer's nonce lease (the lease rows'
// locks serialize allocators for those signers across every instance, taken
// in (chain, signer) order, so allocators that share signers cannot
// deadlock), re-checks the request ids, applies the rolling caps, numbers,
// writes every signer's rows, history, usage, submit prompt and cursor,
// fenced, and releases the leases. No client round trip happens while the
// locks are held: concurrent allocators for a hot signer queue on the lease
// row and each goes through in the server's time. Before, a batch held the
// lock across three round trips (reads, writes, COMMIT).
//
// When the connection is lost with the call sent, the outcome is unknown:
// the server session that ran it is ended first (settle), so that what it
// committed, or not, can be read back (ErrOutcomeUnknown).
func (s *Store) Allocate(ctx context.Context, batches []txm.AllocationBatch) ([][]txm.Created, []int64, error) {
	a := newAllocationArgs(batches)
	results := make([][]txm.Created, len(batches))
	for i, b := range batches {
		results[i] = make([]txm.Created, len(b.Requests))
	}
	if len(a.group) == 0 {
		return results, nil, nil
	}
	if err := s.ensureLeaseRows(ctx, a, false); err != nil {
		return nil, nil, err
	}
	got, err := s.callAllocate(ctx, a, batches)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "TF004" {
		// A lease row this process knew of is gone (a database restored or
		// emptied): make them again and allocate once more.
		if err := s.ensureLeaseRows(ctx, a, true); err != nil {
			return nil, nil, err
		}
		got, err = s.callAllocate(ctx, a, batches)
	}
	if err != nil {
		return nil, nil, err
	}
	return s.allocated(ctx, a, batches, got, results)
}

// callAllocate runs txfence_allocate (or txfence_allocate_plain) for a and
// returns its answer.
func (s *Store) callAllocate(ctx context.Context, a *allocationArgs, batches []txm.AllocationBatch) ([]allocated, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("allocate: %w", translate(err))
	}
	defer conn.Release()
	backend := conn.Conn().PgConn().PID()
	owner := batches[a.batch[0]].Owner
	qctx, span := s.metrics.Start(ctx, "allocate.call")
	var rows pgx.Rows
	var br pgx.BatchResults
	sims, err := simulationRows(batches)
	if err != nil {
		span.End()
		return nil, fmt.Errorf("allocate: %w", err)
	}
	if sims == nil {
		rows, err = conn.Query(qctx, a.sql(), a.args(owner, s.leases.cfg, s.topics.Submit)...)
	} else {
		// Sent together, so run in one implicit transaction: the
		// simulations are written with their rows, or neither is.
		b := &pgx.Batch{}
		b.Queue(a.sql(), a.args(owner, s.leases.cfg, s.topics.Submit)...)
		b.Queue(insertSimulationsSQL, sims.ids, sims.methods, sims.effects, sims.reverts)
		br = conn.SendBatch(qctx, b)
		rows, err = br.Query()
	}
	var got []allocated
	if err == nil {
		for rows.Next() {
			var r allocated
			if err = rows.Scan(&r.idx, &r.outcome, &r.txID, &r.nonce, &r.rule, &r.group, &r.token, &r.acquired,
				&r.outboxID, &r.createdAt, &r.contended); err != nil {
				break
			}
			got = append(got, r)
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	if br != nil {
		if err == nil {
			_, err = br.Exec()
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}
	span.End()
	if err != nil {
		return nil, s.allocateFailed(ctx, a, batches, backend, err)
	}
	if len(got) != len(a.group) {
		return nil, fmt.Errorf("allocate: %d answers for %d requests", len(got), len(a.group))
	}
	return got, nil
}

// insertSimulationsSQL writes the simulations of a batch's requests whose
// rows the allocation created (not the replays and refusals). An approved
// request's row keeps the simulation it has unless the allocation numbered
// it, which removed the one it was held with.
const insertSimulationsSQL = `INSERT INTO tx_simulation (tx_id, method, effects, revert)
SELECT u.id, u.method, u.effects::jsonb, u.revert
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[]) AS u(id, method, effects, revert)
WHERE EXISTS (SELECT 1 FROM managed_tx t WHERE t.id = u.id)
ON CONFLICT (tx_id) DO NOTHING`

// simulations are tx_simulation's rows for a batch, as arrays.
type simulations struct {
	ids, methods, effects []string
	reverts               []*string
}

// simulationRows are the simulations of batches' requests; nil when none
// was simulated.
func simulationRows(batches []txm.AllocationBatch) (*simulations, error) {
	var out *simulations
	for _, b := range batches {
		for i, r := range b.Requests {
			if r.Simulation == "" {
				continue
			}
			effects := r.Effects
			if effects == nil {
				effects = []txm.Effect{}
			}
			j, err := json.Marshal(effects)
			if err != nil {
				return nil, fmt.Errorf("effects of %s: %w", b.TxIDs[i], err)
			}
			if out == nil {
				out = &simulations{}
			}
			out.ids = append(out.ids, b.TxIDs[i])
			out.methods = append(out.methods, string(r.Simulation))
			out.effects = append(out.effects, string(j))
			out.reverts = append(out.reverts, optional(r.SimulationRevert))
		}
	}
	return out, nil
}

// ensureLeaseRows inserts the nonce lease rows (released, token 1) of a's
// signers that this process has not seen yet (all of them when again), in
// their own statement and in (chain, signer) order: txfence_allocate only
// locks rows, so that its locks are always taken in one order.
func (s *Store) ensureLeaseRows(ctx context.Context, a *allocationArgs, again bool) error {
	var chains []int64
	var signers []string
	for g := range a.sChain {
		key := leaseRowKey{a.sChain[g], a.sSigner[g]}
		if _, ok := s.leaseRows.Load(key); !ok || again {
			chains, signers = append(chains, key.chain), append(signers, key.signer)
		}
	}
	if len(chains) == 0 {
		return nil
	}
	_, err := s.pool.Exec(ctx, `
INSERT INTO signer_lease (chain_id, signer, scope, owner, fencing_token, expires_at, updated_at)
SELECT u.c, u.s, 'nonce', 'txfence', 1, '-infinity', clock_timestamp()
FROM unnest($1::bigint[], $2::text[]) AS u(c, s)
ORDER BY u.c, u.s
ON CONFLICT DO NOTHING`, chains, signers)
	if err != nil {
		return fmt.Errorf("allocate: lease rows: %w", translate(err))
	}
	for i := range chains {
		s.leaseRows.Store(leaseRowKey{chains[i], signers[i]}, true)
	}
	return nil
}

// leaseRowKey names a signer whose nonce lease row exists.
type leaseRowKey struct {
	chain  int64
	signer string
}

// allocated is one row of txfence_allocate's answer.
type allocated struct {
	idx       int32 // 1-based, in the request arrays
	outcome   string
	txID      string
	nonce     *int64
	rule      *string
	group     int32 // 1-based, in the signer arrays
	token     int64
	acquired  string
	outboxID  *int64
	createdAt time.Time
	contended bool // the signer's lease row was released by another allocation during the call
}

// allocated turns the function's answer into results: new rows, replays of
// rows that exist (read afterwards, in one query, when the database held
// them), refusals; it counts each signer's lease and logs its allocation.
func (s *Store) allocated(ctx context.Context, a *allocationArgs, batches []txm.AllocationBatch, got []allocated,
	results [][]txm.Created) ([][]txm.Created, []int64, error) {
	fresh := map[string]*txm.Tx{}
	var outbox []int64
	seen := map[int32]bool{}
	var stored []string // ids of existing rows to read
	for _, r := range got {
		b, k := a.batch[r.idx-1], a.index[r.idx-1]
		req := batches[b].Requests[k]
		switch r.outcome {
		case "created":
			var fp [32]byte // computed once, for the call's arguments
			copy(fp[:], a.fp[r.idx-1])
			t := &txm.Tx{ID: r.txID, Request: *req, Nonce: uint64(*r.nonce), Fingerprint: fp,
				State: txm.StateAllocated, CreatedAt: r.createdAt, UpdatedAt: r.createdAt}
			fresh[t.ID] = t
			results[b][k] = txm.Created{Outcome: txm.OutcomeCreated, Tx: t}
		case "refused":
			pol := batches[b].Caps[req.Principal]
			refusal := pol.UsageRefusal(*r.rule)
			if rule, index, ok := windowRule(*r.rule); ok {
				refusal = pol.WindowRefusal(rule, index)
			}
			results[b][k] = txm.Created{Outcome: txm.OutcomeRefused, Refusal: refusal}
		case "existing":
			stored = append(stored, r.txID)
		default:
			return nil, nil, fmt.Errorf("allocate: unknown outcome %q", r.outcome)
		}
		if !seen[r.group] {
			seen[r.group] = true
			s.metrics.LeaseAcquire(ctx, r.acquired)
			if r.outboxID != nil {
				outbox = append(outbox, *r.outboxID)
			}
		}
	}
	existing := map[string]*txm.Tx{}
	if len(stored) > 0 {
		txs, err := s.txsByID(ctx, stored)
		if err != nil {
			return nil, nil, fmt.Errorf("read replayed: %w", err)
		}
		for _, t := range txs {
			existing[t.ID] = t
		}
	}
	for _, r := range got {
		if r.outcome != "existing" {
			continue
		}
		b, k := a.batch[r.idx-1], a.index[r.idx-1]
		t := fresh[r.txID] // an earlier request of this batch with the same id
		if t == nil {
			t = existing[r.txID]
		}
		if t == nil {
			return nil, nil, fmt.Errorf("allocate: replayed transaction %s not found", r.txID)
		}
		results[b][k] = txm.Resolve(t, batches[b].Requests[k].Fingerprint())
	}
	for _, r := range got {
		results[a.batch[r.idx-1]][a.index[r.idx-1]].Contended = r.contended
	}
	s.logAllocated(ctx, a, batches, got)
	return results, outbox, nil
}

// logAllocated logs each signer's new rows with the lease token they were
// written under.
func (s *Store) logAllocated(ctx context.Context, a *allocationArgs, batches []txm.AllocationBatch, got []allocated) {
	if !s.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	type signer struct {
		first uint64
		token int64
		ids   []string
	}
	by := map[int32]*signer{}
	for _, r := range got {
		if r.outcome != "created" {
			continue
		}
		g := by[r.group]
		if g == nil {
			g = &signer{first: uint64(*r.nonce), token: r.token}
			by[r.group] = g
		}
		g.ids = append(g.ids, r.txID)
	}
	for g, v := range by {
		b := batches[a.batch[a.signerRequest[g-1]]]
		s.log.DebugContext(ctx, "allocated", slog.String(logging.KeySigner, txm.CanonicalAddress(b.Signer)),
			slog.String(logging.KeyOwner, b.Owner), slog.Int64(logging.KeyToken, v.token),
			slog.Uint64(logging.KeyNonce, v.first), slog.Int("count", len(v.ids)), slog.Any(logging.KeyTxID, v.ids))
	}
}

// allocateFailed translates a failed call: fenced, a backwards cursor or a
// held lease (raised by the function, naming the signer), a refusal of the
// values (ErrInvalid), or a lost connection, which is settled first.
func (s *Store) allocateFailed(ctx context.Context, a *allocationArgs, batches []txm.AllocationBatch, backend uint32, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		var b txm.AllocationBatch
		if g, _ := strconv.Atoi(pgErr.Hint); g >= 1 && g <= len(a.signerRequest) {
			b = batches[a.batch[a.signerRequest[g-1]]]
		}
		key := txm.LeaseKey{ChainID: b.ChainID, Signer: b.Signer, Scope: txm.ScopeNonce}
		switch pgErr.Code {
		case "TF001":
			return s.leases.fenced(ctx, txm.Lease{Key: key, Owner: b.Owner}, pgErr.Message, "")
		case "TF002":
			return fmt.Errorf("allocate for %s: advance cursor: it would move backwards", key)
		case "TF003":
			s.metrics.LeaseAcquire(ctx, "held")
			return fmt.Errorf("acquire lease %s: %w", key, txm.ErrLeaseHeld)
		case "TF004":
			return err // a lease row is missing: Allocate makes it and tries again
		}
		return fmt.Errorf("allocate: %w", translate(err))
	}
	if pgconn.SafeToRetry(err) {
		return fmt.Errorf("allocate: %w", translate(err)) // nothing was sent
	}
	// The call was sent and its answer is lost: it may have committed.
	if serr := s.settle(ctx, backend); serr != nil {
		s.log.WarnContext(ctx, "allocation outcome unknown and its session could not be ended; reading it back may not tell",
			slog.Any("error", serr))
	}
	return fmt.Errorf("allocate: %w: %w", txm.ErrOutcomeUnknown, translate(err))
}

// settle ends the server session (backend process) that ran a call whose
// answer was lost, and waits until it is gone, so that whatever it
// committed is final and can be read back: the server may not have noticed
// the connection go, and may still be waiting for a lock, running, or
// committing. A session that is idle or runs something else has finished
// the call. It gives up after settleTimeout (the database unreachable).
func (s *Store) settle(ctx context.Context, backend uint32) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	for {
		var ended bool
		err := s.pool.QueryRow(ctx, `
SELECT coalesce((SELECT pg_terminate_backend(pid, 1000) FROM pg_stat_activity
                 WHERE pid = $1 AND state <> 'idle' AND query LIKE '%txfence_allocate%(%'), true)`, int64(backend)).Scan(&ended)
		if err == nil && ended {
			return nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = errors.New("the session did not end")
			}
			return fmt.Errorf("settle session %d: %w", backend, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// settleTimeout bounds settle.
const settleTimeout = 2 * time.Second

// allocationArgs are txfence_allocate's arrays: signers (s*, one per batch
// with requests) and requests (in batch order).
type allocationArgs struct {
	sChain   []int64
	sSigner  []string
	sPending []*int64

	group                                      []int32 // per request: its signer, 1-based
	id, requestID, to, value                   []*string
	lookup                                     []bool
	fp, data                                   [][]byte
	gas                                        []*int64
	maxFee, maxPrio, gasPrice, meta, principal []*string
	hourCount, dayCount                        []*int32
	hourValue, dayValue                        []*string
	feeCeiling, cost                           []*string
	executionFee, dataFee                      []*string // the two fees of the cost, written on the row
	sendVia                                    []*string // the route the create named; nil: the signer's

	// The windows: one element per window a request counts in (a check,
	// with a period) and per token it moves out of its signer (a record,
	// without), in request order.
	wReq                []int32
	wScope, wAsset      []string
	wPeriod, wMaxAmount []*string
	wAmount, wLabel     []string
	wMaxCount           []*int32
	pending             []bool // per request: an approved transaction's held row, numbered in place

	batch, index  []int // per request: its batch and its index there
	signerRequest []int // per signer: the index of its first request
}

func newAllocationArgs(batches []txm.AllocationBatch) *allocationArgs {
	a := &allocationArgs{}
	for bi, b := range batches {
		if len(b.Requests) == 0 {
			continue
		}
		a.sChain = append(a.sChain, int64(b.ChainID))
		a.sSigner = append(a.sSigner, txm.CanonicalAddress(b.Signer))
		var pending *int64
		if b.ChainPending != nil {
			p := int64(*b.ChainPending)
			pending = &p
		}
		a.sPending = append(a.sPending, pending)
		a.signerRequest = append(a.signerRequest, len(a.group))
		g := int32(len(a.sChain))
		for k, r := range b.Requests {
			a.group = append(a.group, g)
			a.batch, a.index = append(a.batch, bi), append(a.index, k)
			id := ""
			if k < len(b.TxIDs) {
				id = b.TxIDs[k]
			}
			if id == "" {
				id = uuid.Must(uuid.NewV7()).String()
			}
			a.id = append(a.id, &id)
			if r.Approved {
				// Its row is named by id and has the request id already: no
				// look-up, and no other request of the batch may be taken
				// for a copy of it.
				a.requestID, a.lookup = append(a.requestID, nil), append(a.lookup, false)
			} else {
				a.requestID = append(a.requestID, optional(r.RequestID))
				a.lookup = append(a.lookup, r.RequestID != "" && !r.MadeUpID)
			}
			a.pending = append(a.pending, r.Approved)
			fp := r.Fingerprint()
			a.fp = append(a.fp, fp[:])
			var to *string
			if r.To != nil {
				to = optional(txm.CanonicalAddress(*r.To))
			}
			a.to = append(a.to, to)
			a.value = append(a.value, bigText(r.Value))
			a.data = append(a.data, r.Data)
			var gas *int64
			if g := int64(r.Gas()); g > 0 {
				gas = &g
			}
			a.gas = append(a.gas, gas)
			a.maxFee = append(a.maxFee, bigText(r.MaxFeePerGas))
			a.maxPrio = append(a.maxPrio, bigText(r.MaxPriorityFeePerGas))
			a.gasPrice = append(a.gasPrice, bigText(r.GasPrice))
			a.meta = append(a.meta, optional(string(r.Metadata)))
			a.principal = append(a.principal, optional(r.Principal))
			a.feeCeiling, a.cost = append(a.feeCeiling, bigText(r.FeeCeiling)), append(a.cost, bigText(r.Cost))
			a.executionFee, a.dataFee = append(a.executionFee, bigText(r.ExecutionFee)), append(a.dataFee, bigText(r.DataFee))
			a.sendVia = append(a.sendVia, optional(r.SendVia))
			var hc, dc *int32
			var hv, dv *string
			if pol, capped := b.Caps[r.Principal]; capped {
				if pol.Hourly.Count > 0 {
					c := int32(pol.Hourly.Count)
					hc = &c
				}
				if pol.Daily.Count > 0 {
					c := int32(pol.Daily.Count)
					dc = &c
				}
				hv, dv = bigText(pol.Hourly.Value), bigText(pol.Daily.Value)
			}
			a.hourCount, a.hourValue = append(a.hourCount, hc), append(a.hourValue, hv)
			a.dayCount, a.dayValue = append(a.dayCount, dc), append(a.dayValue, dv)
			a.addWindows(int32(len(a.group)), r, b.Caps)
		}
	}
	return a
}

// addWindows adds the window elements of request idx (1-based): a check
// per window of its creator's policy it counts in, and a record per token
// it moves out of its signer, which counts in the signer's windows when a
// policy watches the signer (the database knows which do).
func (a *allocationArgs) addWindows(idx int32, r *txm.Request, caps map[string]txm.Policy) {
	if pol, ok := caps[r.Principal]; ok {
		for _, c := range pol.WindowChecks(r) {
			scope, asset := "p", txm.WindowNative
			if c.Window.Scope == txm.WindowSigner {
				scope = "s"
			}
			if !c.Window.Native() {
				asset = txm.CanonicalAddress(c.Window.Token)
			}
			period := txm.WindowDay
			if !c.Window.Day {
				period = strconv.FormatInt(int64(c.Window.Period/time.Minute), 10) + " minutes"
			}
			var count *int32
			if c.Window.MaxCount > 0 {
				n := int32(c.Window.MaxCount)
				count = &n
			}
			a.wReq, a.wScope, a.wAsset = append(a.wReq, idx), append(a.wScope, scope), append(a.wAsset, asset)
			a.wPeriod, a.wAmount = append(a.wPeriod, &period), append(a.wAmount, c.Amount.String())
			a.wMaxAmount, a.wMaxCount = append(a.wMaxAmount, bigText(c.Window.MaxAmount)), append(a.wMaxCount, count)
			a.wLabel = append(a.wLabel, strconv.Itoa(c.Index))
		}
	}
	out := txm.TokensOut(r.From, r.Effects)
	tokens := make([]common.Address, 0, len(out))
	for t := range out {
		tokens = append(tokens, t)
	}
	slices.SortFunc(tokens, func(x, y common.Address) int { return bytes.Compare(x[:], y[:]) })
	for _, t := range tokens {
		a.wReq, a.wScope, a.wAsset = append(a.wReq, idx), append(a.wScope, "s"), append(a.wAsset, txm.CanonicalAddress(t))
		a.wPeriod, a.wAmount = append(a.wPeriod, nil), append(a.wAmount, out[t].String())
		a.wMaxAmount, a.wMaxCount, a.wLabel = append(a.wMaxAmount, nil), append(a.wMaxCount, nil), append(a.wLabel, "")
	}
}

// windowRule reads a window's refusal as txfence_allocate answers it,
// "<rule>:<the window's index>".
func windowRule(s string) (rule string, index int, ok bool) {
	rule, label, found := strings.Cut(s, ":")
	if !found || rule != txm.RuleWindowAmount && rule != txm.RuleWindowCount {
		return "", 0, false
	}
	index, err := strconv.Atoi(label)
	return rule, index, err == nil
}

// plain says whether the batch is plain: no request id to look up, no
// principal capped, no window to check and no approved request (each
// signer's requests are together, as newAllocationArgs puts them).
func (a *allocationArgs) plain() bool {
	for i := range a.group {
		if a.lookup[i] || a.hourCount[i] != nil || a.hourValue[i] != nil || a.dayCount[i] != nil || a.dayValue[i] != nil {
			return false
		}
		if a.pending[i] {
			return false
		}
	}
	for _, p := range a.wPeriod {
		if p != nil {
			return false
		}
	}
	return true
}

// sql is the statement that allocates a: txfence_allocate_plain for a
// plain batch, txfence_allocate for any other.
func (a *allocationArgs) sql() string {
	if a.plain() {
		return allocatePlainSQL
	}
	return allocateSQL
}

// args are allocateSQL's (and allocatePlainSQL's) parameters.
func (a *allocationArgs) args(owner string, lease config.Lease, topic string) []any {
	return []any{owner, lease.Duration, lease.ClockSkew, topic, a.sChain, a.sSigner, a.sPending,
		a.group, a.id, a.requestID, a.lookup, a.fp, a.to, a.value, a.data, a.gas, a.maxFee, a.maxPrio, a.gasPrice,
		a.meta, a.principal, a.hourCount, a.hourValue, a.dayCount, a.dayValue, a.feeCeiling, a.cost,
		a.wReq, a.wScope, a.wAsset, a.wPeriod, a.wAmount, a.wMaxAmount, a.wMaxCount, a.wLabel,
		a.pending, a.executionFee, a.dataFee, a.sendVia}
}

// optional is s, nil when empty (a NULL).
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// PruneUsage deletes usage older than the longest window: the rolling caps'
// (a day, with an hour to spare) and the windows' (31 days, with a day).
func (s *Store) PruneUsage(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, `WITH windows AS (DELETE FROM window_usage WHERE minute < clock_timestamp() - interval '32 days')
DELETE FROM principal_usage WHERE minute < clock_timestamp() - interval '25 hours'`); err != nil {
		return fmt.Errorf("prune usage: %w", translate(err))
	}
	return nil
}

func bigText(v *big.Int) *string {
	if v == nil {
		return nil
	}
	s := v.String()
	return &s
}
