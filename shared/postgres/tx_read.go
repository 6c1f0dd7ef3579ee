package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/jackc/pgx/v5"

	"github.com/txfence/txfence/shared/txm"
)

// txColumns is the column list scanTx reads, in order.
const txColumns = `t.id::text, t.chain_id, t.signer, t.nonce, t.request_id, t.payload_fingerprint,
    t.to_address, t.value::text, t.data, t.gas_limit, t.max_fee_per_gas::text,
    t.max_priority_fee_per_gas::text, t.gas_price::text, t.metadata, t.state, t.sub_state,
    t.last_error, t.reorg_count, t.receipt_block_number, t.receipt_block_hash, t.receipt_status,
    t.receipt_gas_used, t.receipt_effective_gas_price::text, t.created_at, t.updated_at,
    a.tx_hash, coalesce(a.attempt_no, 0), t.broadcast_count, t.failures, t.failing_since, t.next_attempt_at,
    t.stuck_since, t.last_broadcast_at, coalesce(t.principal, ''), t.fee_ceiling::text, t.execution_fee::text,
    t.data_fee::text, coalesce(t.send_via, '')`

// txFrom joins the latest attempt of each transaction.
const txFrom = `managed_tx t
LEFT JOIN LATERAL (
    SELECT tx_hash, attempt_no FROM tx_attempt WHERE tx_id = t.id ORDER BY attempt_no DESC LIMIT 1
) a ON true`

func scanTx(row pgx.Row, extra ...any) (*txm.Tx, error) {
	var (
		t                                          txm.Tx
		chainID                                    int64
		nonce                                      *int64 // NULL while (or because) it waits for approval
		signer                                     string
		requestID, to, subState, lastErr, bhash    *string
		value                                      string
		maxFee, maxPrio, gasPrice, effPrice, thash *string
		feeCeiling, executionFee, dataFee          *string
		fp                                         []byte
		gasLimit, bnum, gasUsed                    *int64
		status                                     *int16
		attempts                                   int32
		state                                      string
	)
	err := row.Scan(append([]any{&t.ID, &chainID, &signer, &nonce, &requestID, &fp, &to, &value, &t.Data, &gasLimit,
		&maxFee, &maxPrio, &gasPrice, &t.Metadata, &state, &subState, &lastErr, &t.ReorgCount,
		&bnum, &bhash, &status, &gasUsed, &effPrice, &t.CreatedAt, &t.UpdatedAt, &thash, &attempts, &t.BroadcastCount,
		&t.Failures, &t.FailingSince, &t.NextAttemptAt, &t.StuckSince, &t.LastBroadcastAt, &t.Principal,
		&feeCeiling, &executionFee, &dataFee, &t.SendVia}, extra...)...)
	if err != nil {
		return nil, err
	}
	t.ChainID = uint64(chainID)
	if nonce != nil {
		t.Nonce = uint64(*nonce)
	} else {
		t.NoNonce = true
	}
	t.From = common.HexToAddress(signer)
	if to != nil {
		a := common.HexToAddress(*to)
		t.To = &a
	}
	t.Value = parseBig(&value)
	t.MaxFeePerGas, t.MaxPriorityFeePerGas, t.GasPrice = parseBig(maxFee), parseBig(maxPrio), parseBig(gasPrice)
	t.FeeCeiling = parseBig(feeCeiling)
	t.ExecutionFee, t.DataFee = parseBig(executionFee), parseBig(dataFee)
	if gasLimit != nil {
		t.GasLimit = uint64(*gasLimit)
	}
	copy(t.Fingerprint[:], fp)
	t.State = txm.State(state)
	t.RequestID, t.SubState, t.LastError = deref(requestID), deref(subState), deref(lastErr)
	t.Attempts = int(attempts)
	if thash != nil {
		h := common.HexToHash(*thash)
		t.Hash = &h
	}
	if bnum != nil && bhash != nil {
		r := &txm.Receipt{BlockNumber: uint64(*bnum), BlockHash: common.HexToHash(*bhash), EffectiveGasPrice: parseBig(effPrice)}
		if status != nil {
			r.Status = uint64(*status)
		}
		if gasUsed != nil {
			r.GasUsed = uint64(*gasUsed)
		}
		t.Receipt = r
	}
	return &t, nil
}

func parseBig(s *string) *big.Int {
	if s == nil {
		return nil
	}
	v, ok := new(big.Int).SetString(*s, 10)
	if !ok {
		return nil
	}
	return v
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// detailColumns are what the API shows of a transaction beyond
// txColumns: its simulation, when it had one, and its approval, when it
// needed one, with the decisions so far (detailFrom joins them).
const detailColumns = txColumns + `, sim.method, sim.effects, sim.revert,
    ap.asset, ap.above::text, ap.required, ap.approvers, ap.approver_role, ap.expires_at, ap.gas_estimated,
    coalesce(ap.error_abi, ''),
    CASE WHEN ap.tx_id IS NOT NULL THEN (
        SELECT jsonb_agg(jsonb_build_object('principal', d.principal, 'decision', d.decision, 'text', coalesce(d.text, ''),
            'at', d.at) ORDER BY d.at, d.principal)
        FROM tx_approval_decision d WHERE d.tx_id = t.id)
    END`

// detailFrom is txFrom with the simulation and the approval.
const detailFrom = txFrom + `
LEFT JOIN tx_simulation sim ON sim.tx_id = t.id
LEFT JOIN tx_approval ap ON ap.tx_id = t.id`

// scanDetail reads a row of detailColumns.
func scanDetail(row pgx.Row) (*txm.Tx, error) {
	var (
		method, revert, asset, above, role, errorABI *string
		effects, decisions                           []byte
		required                                     *int32
		approvers                                    []string
		expires                                      *time.Time
		estimated                                    *bool
	)
	t, err := scanTx(row, &method, &effects, &revert, &asset, &above, &required, &approvers, &role, &expires, &estimated,
		&errorABI, &decisions)
	if err != nil {
		return nil, err
	}
	if method != nil {
		t.Simulation, t.SimulationRevert = txm.SimMethod(*method), deref(revert)
		t.Effects = []txm.Effect{}
		if err := json.Unmarshal(effects, &t.Effects); err != nil {
			return nil, fmt.Errorf("tx %s: effects: %w", t.ID, err)
		}
	}
	if required != nil {
		a := &txm.Approval{Asset: deref(asset), Above: parseBig(above), Required: int(*required), Approvers: approvers,
			ApproverRole: txm.Role(deref(role)), ErrorABI: deref(errorABI)}
		if expires != nil {
			a.ExpiresAt = *expires
		}
		if estimated != nil {
			a.GasEstimated = *estimated
		}
		if len(decisions) > 0 {
			var ds []struct {
				Principal string    `json:"principal"`
				Decision  string    `json:"decision"`
				Text      string    `json:"text"`
				At        time.Time `json:"at"`
			}
			if err := json.Unmarshal(decisions, &ds); err != nil {
				return nil, fmt.Errorf("tx %s: approval decisions: %w", t.ID, err)
			}
			for _, d := range ds {
				a.Decisions = append(a.Decisions, txm.ApprovalDecision{Principal: d.Principal, Decision: txm.Decision(d.Decision),
					Text: d.Text, At: d.At})
			}
		}
		t.Approval = a
	}
	return t, nil
}

// GetTx implements txm.TxQueries: the transaction with its simulation,
// when it had one, and its approval, when it needed one.
func (s *Store) GetTx(ctx context.Context, id string) (*txm.Tx, error) {
	t, err := scanDetail(s.pool.QueryRow(ctx, `SELECT `+detailColumns+` FROM `+detailFrom+` WHERE t.id = $1::uuid`, id))
	if err != nil {
		return nil, fmt.Errorf("get tx %s: %w", id, translate(err))
	}
	return t, nil
}

// txsByID reads the transactions of ids that exist, with their
// simulations.
func (s *Store) txsByID(ctx context.Context, ids []string) ([]*txm.Tx, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+detailColumns+` FROM `+detailFrom+` WHERE t.id = ANY($1::uuid[])`, ids)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var out []*txm.Tx
	for rows.Next() {
		t, err := scanDetail(rows)
		if err != nil {
			return nil, translate(err)
		}
		out = append(out, t)
	}
	return out, translate(rows.Err())
}

// FindByRequestID implements txm.TxQueries: the transaction with its
// simulation, which a replay's answer shows.
func (s *Store) FindByRequestID(ctx context.Context, chainID uint64, signer common.Address, requestID string) (*txm.Tx, error) {
	t, err := scanDetail(s.pool.QueryRow(ctx, `SELECT `+detailColumns+` FROM `+detailFrom+`
WHERE t.chain_id = $1 AND t.signer = $2 AND t.request_id = $3`, int64(chainID), txm.CanonicalAddress(signer), requestID))
	if err != nil {
		return nil, fmt.Errorf("find tx by request id: %w", translate(err))
	}
	return t, nil
}

// ListTxs implements txm.TxQueries: ordered by id (time-ordered UUIDv7),
// each with its simulation and approval.
func (s *Store) ListTxs(ctx context.Context, f txm.TxFilter) ([]*txm.Tx, error) {
	var where []string
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, strings.ReplaceAll(cond, "?", fmt.Sprintf("$%d", len(args))))
	}
	if f.ChainID != 0 {
		add("t.chain_id = ?", int64(f.ChainID))
	}
	if f.Signer != nil {
		add("t.signer = ?", txm.CanonicalAddress(*f.Signer))
	}
	if f.Signers != nil {
		only := make([]string, len(f.Signers))
		for i, a := range f.Signers {
			only[i] = txm.CanonicalAddress(a)
		}
		add("t.signer = ANY(?::text[])", only)
	}
	if f.Principal != "" {
		add("t.principal = ?", f.Principal)
	}
	if f.State != "" {
		add("t.state = ?", string(f.State))
	}
	if !f.CreatedAfter.IsZero() {
		add("t.created_at >= ?", f.CreatedAfter)
	}
	if !f.CreatedBefore.IsZero() {
		add("t.created_at < ?", f.CreatedBefore)
	}
	if f.AfterID != "" {
		add("t.id > ?::uuid", f.AfterID)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 50
	}
	q := `SELECT ` + detailColumns + ` FROM ` + detailFrom
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	args = append(args, limit)
	q += fmt.Sprintf(" ORDER BY t.id LIMIT $%d", len(args))
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list txs: %w", translate(err))
	}
	defer rows.Close()
	var out []*txm.Tx
	for rows.Next() {
		t, err := scanDetail(rows)
		if err != nil {
			return nil, fmt.Errorf("list txs: %w", translate(err))
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list txs: %w", translate(err))
	}
	return out, nil
}

// SignerStatus implements txm.TxQueries.
func (s *Store) SignerStatus(ctx context.Context, chainID uint64, signer common.Address) (txm.SignerStatus, error) {
	st := txm.SignerStatus{ChainID: chainID, Signer: signer}
	addr := txm.CanonicalAddress(signer)
	var next *int64
	var oldest *float64
	err := s.pool.QueryRow(ctx, `
SELECT
    (SELECT next_nonce FROM signer_nonce_cursor WHERE chain_id = $1 AND signer = $2),
    (SELECT chain_synced_at FROM signer_nonce_cursor WHERE chain_id = $1 AND signer = $2),
    count(*) FILTER (WHERE state = 'ALLOCATED'),
    count(*) FILTER (WHERE state = 'TRACKING'),
    count(*) FILTER (WHERE state = 'MINED'),
    count(*) FILTER (WHERE state = 'STUCK'),
    extract(epoch FROM clock_timestamp() - min(created_at))::float8
FROM managed_tx
WHERE chain_id = $1 AND signer = $2 AND state IN ('ALLOCATED', 'TRACKING', 'MINED', 'STUCK')`,
		int64(chainID), addr).Scan(&next, &st.ChainSyncedAt, &st.Allocated, &st.InFlight, &st.Mined, &st.Stuck, &oldest)
	if err != nil {
		return st, fmt.Errorf("signer status: %w", translate(err))
	}
	if next != nil {
		n := uint64(*next)
		st.NextNonce = &n
	}
	if oldest != nil {
		d := time.Duration(*oldest * float64(time.Second))
		st.OldestPendingAge = &d
	}
	var l txm.Lease
	var expires *time.Time // NULL when released
	err = s.pool.QueryRow(ctx, `
SELECT owner, fencing_token, nullif(expires_at, '-infinity'), expires_at > clock_timestamp()
FROM signer_lease WHERE chain_id = $1 AND signer = $2 AND scope = 'chain'`, int64(chainID), addr).
		Scan(&l.Owner, &l.Token, &expires, &st.ChainLeaseLive)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return st, fmt.Errorf("signer status lease: %w", translate(err))
	default:
		l.Key = txm.LeaseKey{ChainID: chainID, Signer: signer, Scope: txm.ScopeChain}
		if expires != nil {
			l.ExpiresAt = *expires
		}
		st.ChainLease = &l
	}
	return st, nil
}
