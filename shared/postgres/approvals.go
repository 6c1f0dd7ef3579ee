package postgres

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/txfence/txfence/shared/txm"
)

var _ txm.ApprovalStore = (*Store)(nil)

// approvalOwner is the history's owner of the moves the approval flow makes
// without a lease (held, rejected, expired, ended at approval): no fencing
// token guards them, since the rows hold no nonce; their guard is the
// PENDING_APPROVAL state and the row lock. The actor column names who.
const approvalOwner = "approval"

// Hold implements txm.ApprovalStore: the row (no nonce, no fencing token),
// its simulation, its approval and its history row, in one transaction,
// then read back; a request id that exists answers with that transaction
// instead.
func (s *Store) Hold(ctx context.Context, h txm.Hold) (*txm.Tx, bool, error) {
	r := h.Request
	fp := r.Fingerprint()
	var to *string
	if r.To != nil {
		to = optional(txm.CanonicalAddress(*r.To))
	}
	var gas *int64
	if g := int64(r.Gas()); g > 0 {
		gas = &g
	}
	var sim *txm.SimRecord
	if r.Simulation != "" {
		sim = &txm.SimRecord{Method: r.Simulation, Effects: r.Effects, Revert: r.SimulationRevert}
	}
	simMethod, simEffects, simRevert, err := simArgs(sim)
	if err != nil {
		return nil, false, fmt.Errorf("hold %s: %w", h.ID, err)
	}
	a := h.Approval
	var approvers []string
	if len(a.Approvers) > 0 {
		approvers = a.Approvers
	}
	value := bigText(r.Value)
	if value == nil {
		value = optional("0")
	}
	created := false
	chain, signer := int64(r.ChainID), txm.CanonicalAddress(r.From)
	if err := s.ensureLeaseRow(ctx, chain, signer); err != nil {
		return nil, false, fmt.Errorf("hold %s: %w", h.ID, err)
	}
	err = WithTx(ctx, s.pool, func(tx pgx.Tx) error {
		// The signer's nonce lease row, shared: an allocation, which locks
		// it for update while it looks request ids up and writes its rows,
		// never runs between this insert's look-up of its request id and
		// its commit, so one request id stays one transaction. Waiting here
		// is in an allocation's queue, bounded by statement_timeout.
		var lockTimeout string
		if err := tx.QueryRow(ctx, `SELECT current_setting('lock_timeout'), set_config('lock_timeout', '0', true)`).
			Scan(&lockTimeout, new(string)); err != nil {
			return fmt.Errorf("hold %s: %w", h.ID, translate(err))
		}
		if _, err := tx.Exec(ctx, `SELECT 1 FROM signer_lease WHERE chain_id = $1 AND signer = $2 AND scope = 'nonce' FOR SHARE`,
			chain, signer); err != nil {
			return fmt.Errorf("hold %s: lease row: %w", h.ID, translate(err))
		}
		if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, lockTimeout); err != nil {
			return fmt.Errorf("hold %s: %w", h.ID, translate(err))
		}
		tag, err := tx.Exec(ctx, `
WITH held AS (
    INSERT INTO managed_tx (id, chain_id, signer, nonce, request_id, payload_fingerprint, to_address, value, data, gas_limit,
        max_fee_per_gas, max_priority_fee_per_gas, gas_price, metadata, state, principal, fee_ceiling, execution_fee, data_fee,
        send_via, created_at, updated_at, version)
    VALUES ($1::uuid, $2, $3, NULL, $4, $5, $6, $7::numeric, coalesce($8, '\x'::bytea), $9, $10::numeric, $11::numeric, $12::numeric, $13::jsonb,
        $14, $15, $16::numeric, $29::numeric, $30::numeric, $31, now(), now(), 1)
    ON CONFLICT (chain_id, signer, request_id) WHERE request_id IS NOT NULL DO NOTHING
    RETURNING id, chain_id, signer, state, nonce, version
), event AS (
`+pendingInsert(`(SELECT id, chain_id, signer, state, NULL::text AS sub_state, nonce, false AS fork,
        '`+string(txm.EventPendingApproval)+`' AS type, version, true AS lifecycle, NULL::jsonb AS detail FROM held)`,
			"id", "$32::text")+`
), approval AS (
    INSERT INTO tx_approval (tx_id, asset, above, required, approvers, approver_role, expires_at, gas_estimated, error_abi)
    SELECT id, $17, $18::numeric, $19, $20::text[], nullif($21, ''), clock_timestamp() + $22::interval, $23, nullif($24, '')
    FROM held
), sim AS (
    INSERT INTO tx_simulation (tx_id, method, effects, revert)
    SELECT id, $25, $26::jsonb, $27 FROM held WHERE $25 <> ''
), hist AS (
    INSERT INTO tx_history (tx_id, from_state, to_state, reason, owner, fencing_token, action, actor)
    SELECT id, NULL, $14, 'held for approval', $28, 0, 'hold', $15 FROM held
)
SELECT 1 FROM held`,
			h.ID, chain, signer, optional(r.RequestID), fp[:], to, value, r.Data, gas,
			bigText(r.MaxFeePerGas), bigText(r.MaxPriorityFeePerGas), bigText(r.GasPrice), optional(string(r.Metadata)),
			string(txm.StatePendingApproval), optional(r.Principal), bigText(r.FeeCeiling),
			a.Asset, bigText(a.Above), a.Required, approvers, string(a.ApproverRole), h.ExpiresIn,
			a.GasEstimated, a.ErrorABI, simMethod, simEffects, simRevert, h.Owner, bigText(r.ExecutionFee), bigText(r.DataFee),
			optional(r.SendVia), s.shard)
		if err != nil {
			return fmt.Errorf("hold %s: %w", h.ID, translate(err))
		}
		created = tag.RowsAffected() == 1
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	if created {
		t, err := s.GetTx(ctx, h.ID)
		if err != nil {
			return nil, false, fmt.Errorf("hold %s: read back: %w", h.ID, err)
		}
		return t, true, nil
	}
	existing, err := s.FindByRequestID(ctx, r.ChainID, r.From, r.RequestID)
	if err != nil {
		return nil, false, fmt.Errorf("hold %s: %w", h.ID, err)
	}
	return existing, false, nil
}

// ensureLeaseRow inserts the signer's nonce lease row (released, token 1)
// unless this process knows it exists, as ensureLeaseRows does for an
// allocation.
func (s *Store) ensureLeaseRow(ctx context.Context, chain int64, signer string) error {
	key := leaseRowKey{chain, signer}
	if _, ok := s.leaseRows.Load(key); ok {
		return nil
	}
	_, err := s.pool.Exec(ctx, `
INSERT INTO signer_lease (chain_id, signer, scope, owner, fencing_token, expires_at, updated_at)
VALUES ($1, $2, 'nonce', 'txfence', 1, '-infinity', clock_timestamp())
ON CONFLICT DO NOTHING`, chain, signer)
	if err != nil {
		return fmt.Errorf("lease row: %w", translate(err))
	}
	s.leaseRows.Store(key, true)
	return nil
}

// simArgs are a simulation's columns: method ("" for none), effects as
// JSON, revert (NULL for none).
func simArgs(sim *txm.SimRecord) (string, string, *string, error) {
	if sim == nil {
		return "", "[]", nil, nil
	}
	effects := sim.Effects
	if effects == nil {
		effects = []txm.Effect{}
	}
	j, err := json.Marshal(effects)
	if err != nil {
		return "", "", nil, fmt.Errorf("effects: %w", err)
	}
	return string(sim.Method), string(j), optional(sim.Revert), nil
}

// waitingSQL is the row of the transaction whose id is the parameter id
// while it waits for approval and its approval has not expired, locked: a
// decision on it waits for an allocation of it in progress, and the other
// way round.
func waitingSQL(id string) string {
	return `
    SELECT t.id FROM managed_tx t JOIN tx_approval ap ON ap.tx_id = t.id
    WHERE t.id = ` + id + `::uuid AND ` + moveEndApproval.guard() + ` AND ap.expires_at > clock_timestamp()
    FOR UPDATE OF t`
}

// Decide implements txm.ApprovalStore: the approval is its own committed
// statement, so that the one that completes the approvals is never lost,
// whatever happens to the allocation that follows.
func (s *Store) Decide(ctx context.Context, txID, principal, comment string) error {
	tag, err := s.pool.Exec(ctx, `
WITH waiting AS (`+waitingSQL("$1")+`
)
INSERT INTO tx_approval_decision (tx_id, principal, decision, text)
SELECT id, $2, 'approve', nullif($3, '') FROM waiting
ON CONFLICT (tx_id, principal) DO NOTHING`, txID, principal, comment)
	if err != nil {
		return fmt.Errorf("approve %s: %w", txID, translate(err))
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	return s.whyUndecided(ctx, txID, principal)
}

// whyUndecided says why a decision was not recorded: the principal decided
// before, or the transaction no longer waits.
func (s *Store) whyUndecided(ctx context.Context, txID, principal string) error {
	var decided bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tx_approval_decision WHERE tx_id = $1::uuid AND principal = $2)`,
		txID, principal).Scan(&decided)
	switch {
	case err != nil:
		return fmt.Errorf("decision on %s: %w", txID, translate(err))
	case decided:
		return fmt.Errorf("decision on %s: %w", txID, txm.ErrAlreadyDecided)
	}
	return fmt.Errorf("decision on %s: %w", txID, txm.ErrNotPendingApproval)
}

// endApprovalSQL ends the rows of the relation `ending` (id, sub_state,
// last_error, actor, action, revert: the revert reason when known)
// FAILED_FINAL without a nonce, with their
// history and their pending outcomes ($1 is the shard's name); the
// statement that ends with it answers from moved.
var endApprovalSQL = `
moved AS (
    UPDATE managed_tx t SET state = ` + moveEndApproval.state(txm.StateFailedFinal) + `, sub_state = e.sub_state,
        last_error = e.last_error, finalized_at = clock_timestamp(), updated_at = clock_timestamp(), version = t.version + 1
    FROM ending e
    WHERE t.id = e.id AND ` + moveEndApproval.guard() + `
    RETURNING t.id, t.chain_id, t.signer::text AS signer, t.state, t.sub_state, t.nonce, t.last_error, e.actor, e.action,
        t.created_at, t.version, e.revert
), hist AS (
    INSERT INTO tx_history (tx_id, from_state, to_state, sub_state, reason, owner, fencing_token, action, actor)
    SELECT id, ` + moveEndApproval.source() + `, state, sub_state, last_error, '` + approvalOwner + `', 0, action, actor
    FROM moved
), pending AS (
` + pendingInsert(`(SELECT id, chain_id, signer, state, sub_state, nonce, false AS fork, NULL::text AS type, version,
        false AS lifecycle, jsonb_build_object('revertReason', nullif(revert, '')) AS detail, created_at FROM moved)`,
	"created_at", "$1::text") + `
)`

// Reject implements txm.ApprovalStore: the rejection and the end it makes,
// in one statement.
func (s *Store) Reject(ctx context.Context, txID, principal, reason string) ([]int64, error) {
	var moved int64
	err := s.pool.QueryRow(ctx, `
WITH waiting AS (`+waitingSQL("$2")+`
), decided AS (
    INSERT INTO tx_approval_decision (tx_id, principal, decision, text)
    SELECT id, $3, 'reject', $4 FROM waiting
    ON CONFLICT (tx_id, principal) DO NOTHING
    RETURNING tx_id
), ending AS (
    SELECT tx_id AS id, '`+txm.SubStateRejected+`'::text AS sub_state, 'rejected by ' || $3 || ': ' || $4 AS last_error,
        $3::text AS actor, 'reject'::text AS action, NULL::text AS revert
    FROM decided
), `+endApprovalSQL+`
SELECT count(*) FROM moved`, s.shard, txID, principal, reason).Scan(&moved)
	if err != nil {
		return nil, fmt.Errorf("reject %s: %w", txID, translate(err))
	}
	if moved == 0 {
		return nil, s.whyUndecided(ctx, txID, principal)
	}
	return s.numberAfter(ctx, "reject"), nil
}

// EndApproval implements txm.ApprovalStore: the end, and the simulation
// that made it, in one statement.
func (s *Store) EndApproval(ctx context.Context, txID, subState, lastError string, sim *txm.SimRecord) ([]int64, error) {
	method, effects, revert, err := simArgs(sim)
	if err != nil {
		return nil, fmt.Errorf("end approval of %s: %w", txID, err)
	}
	var moved int64
	err = s.pool.QueryRow(ctx, `
WITH ending AS (
    SELECT $2::uuid AS id, $3::text AS sub_state, $4::text AS last_error, 'txfence'::text AS actor, 'approve'::text AS action,
        $7::text AS revert
), `+endApprovalSQL+`, sim AS (
    INSERT INTO tx_simulation (tx_id, method, effects, revert)
    SELECT id, $5, $6::jsonb, $7 FROM moved WHERE $5 <> ''
    ON CONFLICT (tx_id) DO UPDATE SET method = EXCLUDED.method, effects = EXCLUDED.effects, revert = EXCLUDED.revert
)
SELECT count(*) FROM moved`, s.shard, txID, subState, lastError, method, effects, revert).Scan(&moved)
	if err != nil {
		return nil, fmt.Errorf("end approval of %s: %w", txID, translate(err))
	}
	if moved == 0 {
		return nil, nil
	}
	return s.numberAfter(ctx, "end_approval"), nil
}

// approvalsOf counts the approvals of the transaction t (an alias in the
// enclosing query).
const approvalsOf = `(SELECT count(*) FROM tx_approval_decision d WHERE d.tx_id = t.id AND d.decision = 'approve')`

// ApprovedPending implements txm.ApprovalStore.
func (s *Store) ApprovedPending(ctx context.Context, limit int) ([]string, error) {
	rows, err := s.pool.Query(ctx, `
SELECT t.id::text FROM managed_tx t JOIN tx_approval ap ON ap.tx_id = t.id
WHERE `+moveEndApproval.guard()+` AND `+approvalsOf+` >= ap.required
ORDER BY t.id LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("approved pending: %w", translate(err))
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("approved pending: %w", translate(err))
	}
	return ids, nil
}

// ExpireApprovals implements txm.ApprovalStore: one statement, which skips
// the rows a decision or an allocation holds at that moment (the next
// sweep sees them again).
func (s *Store) ExpireApprovals(ctx context.Context, limit int) (int, []int64, error) {
	var moved int64
	err := s.pool.QueryRow(ctx, `
WITH due AS (
    SELECT t.id, `+approvalsOf+` AS approvals, ap.required
    FROM managed_tx t JOIN tx_approval ap ON ap.tx_id = t.id
    WHERE `+moveEndApproval.guard()+` AND ap.expires_at <= clock_timestamp() AND `+approvalsOf+` < ap.required
    ORDER BY ap.expires_at LIMIT $2
    FOR UPDATE OF t SKIP LOCKED
), ending AS (
    SELECT id, '`+txm.SubStateApprovalExpired+`'::text AS sub_state,
        format('the approval expired with %s of %s approvals', approvals, required) AS last_error,
        'txfence'::text AS actor, 'expire'::text AS action, NULL::text AS revert
    FROM due
), `+endApprovalSQL+`
SELECT count(*) FROM moved`, s.shard, limit).Scan(&moved)
	if err != nil {
		return 0, nil, fmt.Errorf("expire approvals: %w", translate(err))
	}
	if moved == 0 {
		return 0, nil, nil
	}
	return int(moved), s.numberAfter(ctx, "expire_approvals"), nil
}
