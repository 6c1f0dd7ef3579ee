package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ethereum/go-ethereum/common"
	"github.com/jackc/pgx/v5"

	"github.com/txfence/txfence/shared/txm"
)

var (
	_ txm.ActionStore = (*Store)(nil)
	_ txm.ActionQueue = (*Store)(nil)
)

// actionParams is tx_action.params.
type actionParams struct {
	MaxFeePerGas         *string `json:"maxFeePerGas,omitempty"`
	MaxPriorityFeePerGas *string `json:"maxPriorityFeePerGas,omitempty"`
	GasPrice             *string `json:"gasPrice,omitempty"`
}

const actionColumns = `a.tx_id::text, a.action_id, a.action, a.params, a.fingerprint, a.actor, a.reason, a.status,
    a.result, coalesce(a.fencing_token, 0), a.created_at, a.done_at`

func scanAction(row pgx.Row) (txm.Action, []byte, error) {
	var (
		a            txm.Action
		kind, status string
		raw, fp      []byte
		result       *string
		p            actionParams
	)
	if err := row.Scan(&a.TxID, &a.ActionID, &kind, &raw, &fp, &a.Actor, &a.Reason, &status, &result, &a.Token,
		&a.CreatedAt, &a.DoneAt); err != nil {
		return a, nil, err
	}
	a.Kind, a.Status, a.Result = txm.ActionKind(kind), txm.ActionStatus(status), deref(result)
	if err := json.Unmarshal(raw, &p); err != nil {
		return a, nil, fmt.Errorf("action params: %w", err)
	}
	if p.MaxFeePerGas != nil || p.MaxPriorityFeePerGas != nil || p.GasPrice != nil {
		a.Fees = &txm.Fees{MaxFeePerGas: parseBig(p.MaxFeePerGas), MaxPriorityFeePerGas: parseBig(p.MaxPriorityFeePerGas),
			GasPrice: parseBig(p.GasPrice)}
	}
	return a, fp, nil
}

// RecordAction implements txm.ActionStore.
func (s *Store) RecordAction(ctx context.Context, r txm.ActionRequest) (txm.Action, bool, []int64, error) {
	fp := r.Fingerprint()
	var params actionParams
	if r.Fees != nil {
		params = actionParams{MaxFeePerGas: bigText(r.Fees.MaxFeePerGas), MaxPriorityFeePerGas: bigText(r.Fees.MaxPriorityFeePerGas),
			GasPrice: bigText(r.Fees.GasPrice)}
	}
	rawParams, err := json.Marshal(params)
	if err != nil {
		return txm.Action{}, false, nil, fmt.Errorf("record action: %w", err)
	}
	var (
		out     txm.Action
		created bool
		outbox  []int64
	)
	err = WithTx(ctx, s.pool, func(tx pgx.Tx) error {
		existing := func() error {
			a, gotFP, err := scanAction(tx.QueryRow(ctx, `SELECT `+actionColumns+` FROM tx_action a
WHERE a.tx_id = $1::uuid AND a.action_id = $2`, r.TxID, r.ActionID))
			if err != nil {
				return fmt.Errorf("read action: %w", translate(err))
			}
			out = a
			if !bytes.Equal(gotFP, fp[:]) {
				return fmt.Errorf("action id %q: %w", r.ActionID, txm.ErrConflict)
			}
			return nil
		}
		var (
			state   string
			chainID int64
			signer  string
		)
		err := tx.QueryRow(ctx, `SELECT state, chain_id, signer::text FROM managed_tx WHERE id = $1::uuid`, r.TxID).
			Scan(&state, &chainID, &signer)
		if err != nil {
			return fmt.Errorf("record action: %w", translate(err))
		}
		var one int
		switch err := tx.QueryRow(ctx, `SELECT 1 FROM tx_action WHERE tx_id = $1::uuid AND action_id = $2`, r.TxID, r.ActionID).Scan(&one); {
		case err == nil:
			return existing()
		case !errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("record action: %w", translate(err))
		}
		if !r.Kind.AllowedIn(txm.State(state)) {
			return fmt.Errorf("%s a transaction that is %s: %w", r.Kind, state, txm.ErrActionNotAllowed)
		}
		a, _, err := scanAction(tx.QueryRow(ctx, `
INSERT INTO tx_action AS a (tx_id, action_id, action, params, fingerprint, actor, reason)
VALUES ($1::uuid, $2, $3, $4, $5, $6, $7)
ON CONFLICT (tx_id, action_id) DO NOTHING
RETURNING `+actionColumns, r.TxID, r.ActionID, string(r.Kind), rawParams, fp[:], r.Actor, r.Reason))
		if errors.Is(err, pgx.ErrNoRows) {
			return existing() // recorded by a concurrent replay
		}
		if err != nil {
			return fmt.Errorf("record action: %w", translate(err))
		}
		out, created = a, true
		key := txm.LeaseKey{ChainID: uint64(chainID), Signer: common.HexToAddress(signer), Scope: txm.ScopeChain}
		id, err := s.writeOutbox(ctx, tx, s.topics.Submit, key)
		outbox = append(outbox, id)
		return err
	})
	if err != nil && !errors.Is(err, txm.ErrConflict) {
		return txm.Action{}, false, nil, err
	}
	return out, created, outbox, err
}

// ListActions implements txm.ActionStore.
func (s *Store) ListActions(ctx context.Context, txID string) ([]txm.Action, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+actionColumns+` FROM tx_action a WHERE a.tx_id = $1::uuid ORDER BY a.created_at, a.action_id`, txID)
	if err != nil {
		return nil, fmt.Errorf("list actions: %w", translate(err))
	}
	defer rows.Close()
	var out []txm.Action
	for rows.Next() {
		a, _, err := scanAction(rows)
		if err != nil {
			return nil, fmt.Errorf("list actions: %w", translate(err))
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list actions: %w", translate(err))
	}
	return out, nil
}

// PendingActions implements txm.ActionQueue.
func (s *Store) PendingActions(ctx context.Context, chainID uint64, signer common.Address) ([]txm.PendingAction, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+actionColumns+` FROM tx_action a JOIN managed_tx t ON t.id = a.tx_id
WHERE a.status = 'pending' AND t.chain_id = $1 AND t.signer = $2
ORDER BY a.created_at, a.action_id`, int64(chainID), txm.CanonicalAddress(signer))
	if err != nil {
		return nil, fmt.Errorf("pending actions: %w", translate(err))
	}
	var actions []txm.Action
	var ids []string
	for rows.Next() {
		a, _, err := scanAction(rows)
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("pending actions: %w", translate(err))
		}
		actions = append(actions, a)
		ids = append(ids, a.TxID)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pending actions: %w", translate(err))
	}
	if len(actions) == 0 {
		return nil, nil
	}
	txs, err := s.trackedTxs(ctx, `t.id = ANY($1::uuid[])`, 0, ids)
	if err != nil {
		return nil, err
	}
	byID := map[string]txm.Tracked{}
	for _, t := range txs {
		byID[t.Tx.ID] = t
	}
	out := make([]txm.PendingAction, len(actions))
	for i, a := range actions {
		out[i] = txm.PendingAction{Action: a, Tracked: byID[a.TxID]}
	}
	return out, nil
}

// FinishAction implements txm.ActionQueue: the action's status and result
// and an audit row in tx_history, fenced.
func (s *Store) FinishAction(ctx context.Context, l txm.Lease, a txm.Action) error {
	return WithTx(ctx, s.pool, func(tx pgx.Tx) error {
		return s.finishAction(ctx, tx, l, a.TxID, a.ActionID, a.Status, a.Result, true)
	})
}

// finishAction marks a pending action done or failed, fenced, with an
// audit row in tx_history unless the caller wrote one (a replacement).
func (s *Store) finishAction(ctx context.Context, tx pgx.Tx, l txm.Lease, txID, actionID string, status txm.ActionStatus, result string,
	audit bool) error {
	var got int
	err := tx.QueryRow(ctx, `
WITH done AS (
    UPDATE tx_action a SET status = $8, result = $9, fencing_token = $5::bigint, done_at = clock_timestamp()
    WHERE a.tx_id = $6::uuid AND a.action_id = $7 AND a.status = 'pending' AND `+fenceHeld+`
    RETURNING a.tx_id, a.action, a.actor, a.reason
), resubmitted AS (
    -- a resubmit ends the backoff of a transaction still waiting to be sent
    UPDATE managed_tx t SET next_attempt_at = NULL, updated_at = clock_timestamp()
    FROM done d WHERE t.id = d.tx_id AND d.action = 'resubmit' AND $8 = 'done' AND t.state = 'ALLOCATED'
), audited AS (
    INSERT INTO tx_history (tx_id, from_state, to_state, sub_state, reason, owner, fencing_token, action, actor)
    SELECT d.tx_id, t.state, t.state, t.sub_state, d.reason || ' (' || $8 || ': ' || $9 || ')', $4::text, $5::bigint, d.action, d.actor
    FROM done d JOIN managed_tx t ON t.id = d.tx_id WHERE $10
)
SELECT count(*) FROM done`, append(fenceArgs(l), txID, actionID, string(status), result, audit)...).Scan(&got)
	if err != nil {
		return fmt.Errorf("finish action: %w", translate(err))
	}
	if got != 1 {
		if err := s.leases.check(ctx, tx, l, "finish_action", txID); err != nil {
			return err
		}
		return fmt.Errorf("finish action %s/%s: not pending", txID, actionID)
	}
	return nil
}
