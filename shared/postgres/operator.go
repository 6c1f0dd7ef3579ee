package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/txfence/txfence/shared/txm"
)

// openStates are the states of transactions that are not final.
const openStates = `('ALLOCATED', 'TRACKING', 'MINED', 'STUCK')`

// listSignersSQL is one page of signers with their lanes, in one statement:
// the page is chosen first (known signers, filtered, keyset after the
// cursor), then each row's counts, lane, lease and last error are read
// through the open-transactions index, so a page costs about the same with
// 10 or 10,000 signers. The total (every signer the filter keeps) comes on
// every row, and alone on one row when the page is empty.
const listSignersSQL = `
WITH known AS (
    SELECT chain_id, signer::text AS signer FROM signer_nonce_cursor
    UNION
    SELECT c, s FROM unnest($1::bigint[]) c CROSS JOIN unnest($2::text[]) s
), kept AS (
    SELECT chain_id, signer FROM known
    WHERE ($3::bigint = 0 OR chain_id = $3)
      AND ($4::text = '' OR signer LIKE $4 || '%')
      AND (NOT $5::boolean OR signer = ANY($6::text[]))
), page AS (
    SELECT chain_id, signer FROM kept
    WHERE (chain_id, signer) > ($7::bigint, $8::text)
    ORDER BY chain_id, signer
    LIMIT $9
)
SELECT p.chain_id, p.signer, c.next_nonce,
    coalesce(o.allocated, 0), coalesce(o.tracking, 0), coalesce(o.mined, 0), coalesce(o.stuck, 0),
    o.min_nonce, o.oldest_age, coalesce(o.need, 0)::text,
    coalesce(lane.ids, '{}'), coalesce(lane.nonces, '{}'), coalesce(lane.states, '{}'), coalesce(lane.subs, '{}'),
    l.owner, l.fencing_token, nullif(l.expires_at, '-infinity'), coalesce(l.expires_at > clock_timestamp(), false),
    e.last_error, e.updated_at,
    tot.n
FROM (SELECT count(*) AS n FROM kept) tot
LEFT JOIN page p ON true
LEFT JOIN signer_nonce_cursor c ON c.chain_id = p.chain_id AND c.signer = p.signer
LEFT JOIN LATERAL (
    SELECT count(*) FILTER (WHERE t.state = 'ALLOCATED') AS allocated,
           count(*) FILTER (WHERE t.state = 'TRACKING') AS tracking,
           count(*) FILTER (WHERE t.state = 'MINED') AS mined,
           count(*) FILTER (WHERE t.state = 'STUCK') AS stuck,
           min(t.nonce) AS min_nonce,
           extract(epoch FROM clock_timestamp() - min(t.created_at))::float8 AS oldest_age,
           sum(CASE WHEN t.state = 'MINED' THEN 0 ELSE
               t.value + coalesce(a.gas_limit, t.gas_limit, 0)::numeric
                       * coalesce(a.max_fee_per_gas, a.gas_price, t.max_fee_per_gas, t.gas_price, 0)
                       + coalesce(t.data_fee, 0) END) AS need
    FROM managed_tx t
    LEFT JOIN LATERAL (
        SELECT gas_limit, max_fee_per_gas, gas_price FROM tx_attempt
        WHERE tx_id = t.id ORDER BY attempt_no DESC LIMIT 1
    ) a ON true
    WHERE t.chain_id = p.chain_id AND t.signer = p.signer AND t.state IN ` + openStates + `
) o ON true
LEFT JOIN LATERAL (
    SELECT array_agg(x.id::text ORDER BY x.nonce) AS ids, array_agg(x.nonce ORDER BY x.nonce) AS nonces,
           array_agg(x.state ORDER BY x.nonce) AS states, array_agg(coalesce(x.sub_state, '') ORDER BY x.nonce) AS subs
    FROM (
        SELECT id, nonce, state, sub_state FROM managed_tx
        WHERE chain_id = p.chain_id AND signer = p.signer AND state IN ` + openStates + `
        ORDER BY nonce LIMIT $10
    ) x
) lane ON true
LEFT JOIN signer_lease l ON l.chain_id = p.chain_id AND l.signer = p.signer AND l.scope = 'chain'
LEFT JOIN LATERAL (
    SELECT last_error, updated_at FROM managed_tx
    WHERE chain_id = p.chain_id AND signer = p.signer AND state IN ` + openStates + ` AND last_error IS NOT NULL
    ORDER BY updated_at DESC LIMIT 1
) e ON true
ORDER BY p.chain_id, p.signer`

// ListSigners implements txm.OperatorQueries.
func (s *Store) ListSigners(ctx context.Context, f txm.SignerListFilter) (txm.SignerPage, error) {
	var page txm.SignerPage
	chains := make([]int64, len(f.Chains))
	for i, c := range f.Chains {
		chains[i] = int64(c)
	}
	addrs := func(as []common.Address) []string {
		out := make([]string, len(as))
		for i, a := range as {
			out[i] = txm.CanonicalAddress(a)
		}
		return out
	}
	afterChain, afterSigner := int64(-1), ""
	if f.After != nil {
		afterChain, afterSigner = int64(f.After.ChainID), txm.CanonicalAddress(f.After.Signer)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 50
	}
	rows, err := s.pool.Query(ctx, listSignersSQL, chains, addrs(f.Configured), int64(f.ChainID), f.Prefix,
		f.Only != nil, addrs(f.Only), afterChain, afterSigner, limit, txm.LaneLength)
	if err != nil {
		return page, fmt.Errorf("list signers: %w", translate(err))
	}
	defer rows.Close()
	for rows.Next() {
		var (
			r                                 txm.SignerLanes
			chainID                           *int64
			signer, need                      *string
			next, minNonce, token             *int64
			oldest                            *float64
			ids, states, subs                 []string
			nonces                            []int64
			owner, lastErr                    *string
			expires, lastErrAt                *time.Time
			allocated, tracking, mined, stuck int64
			total                             int64
		)
		if err := rows.Scan(&chainID, &signer, &next, &allocated, &tracking, &mined, &stuck, &minNonce, &oldest, &need,
			&ids, &nonces, &states, &subs, &owner, &token, &expires, &r.ChainLeaseLive, &lastErr, &lastErrAt, &total); err != nil {
			return page, fmt.Errorf("list signers: %w", translate(err))
		}
		page.Total = int(total)
		if chainID == nil { // the page is empty: the one row carries the total alone
			continue
		}
		r.ChainID, r.Signer = uint64(*chainID), common.HexToAddress(*signer)
		r.Allocated, r.Tracking, r.Mined, r.Stuck = int(allocated), int(tracking), int(mined), int(stuck)
		if next != nil {
			n := uint64(*next)
			r.NextNonce = &n
			r.FinalBelow = n
		}
		if minNonce != nil {
			r.FinalBelow = uint64(*minNonce)
		}
		if oldest != nil {
			d := time.Duration(*oldest * float64(time.Second))
			r.OldestPendingAge = &d
		}
		r.InFlightNeed = parseBig(need)
		for i := range ids {
			r.Lane = append(r.Lane, txm.LaneTx{ID: ids[i], Nonce: uint64(nonces[i]), State: txm.State(states[i]), SubState: subs[i]})
		}
		if owner != nil && token != nil {
			l := &txm.Lease{Key: txm.LeaseKey{ChainID: r.ChainID, Signer: r.Signer, Scope: txm.ScopeChain}, Owner: *owner, Token: *token}
			if expires != nil {
				l.ExpiresAt = *expires
			}
			r.ChainLease = l
		}
		r.LastError, r.LastErrorAt = deref(lastErr), lastErrAt
		page.Items = append(page.Items, r)
	}
	if err := rows.Err(); err != nil {
		return page, fmt.Errorf("list signers: %w", translate(err))
	}
	return page, nil
}

// TxAttempts implements txm.OperatorQueries: every attempt, oldest first,
// without its raw bytes.
func (s *Store) TxAttempts(ctx context.Context, txID string) ([]txm.AttemptView, error) {
	rows, err := s.pool.Query(ctx, `
SELECT attempt_no, kind, tx_hash, nonce, gas_limit, max_fee_per_gas::text, max_priority_fee_per_gas::text, gas_price::text,
    created_at, broadcast_at, broadcast_count, coalesce(outcome, ''), coalesce(last_error, ''), fencing_token
FROM tx_attempt WHERE tx_id = $1::uuid ORDER BY attempt_no`, txID)
	if err != nil {
		return nil, fmt.Errorf("tx attempts: %w", translate(err))
	}
	defer rows.Close()
	var out []txm.AttemptView
	for rows.Next() {
		var (
			a                         txm.AttemptView
			kind, hash                string
			nonce, gas                int64
			maxFee, maxPrio, gasPrice *string
		)
		if err := rows.Scan(&a.No, &kind, &hash, &nonce, &gas, &maxFee, &maxPrio, &gasPrice, &a.CreatedAt, &a.BroadcastAt,
			&a.BroadcastCount, &a.Outcome, &a.LastError, &a.Token); err != nil {
			return nil, fmt.Errorf("tx attempts: %w", translate(err))
		}
		a.TxID, a.Kind, a.Hash = txID, txm.AttemptKind(kind), common.HexToHash(hash)
		a.Nonce, a.GasLimit = uint64(nonce), uint64(gas)
		a.MaxFeePerGas, a.MaxPriorityFeePerGas, a.GasPrice = parseBig(maxFee), parseBig(maxPrio), parseBig(gasPrice)
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("tx attempts: %w", translate(err))
	}
	return out, nil
}

// historySQL is a transaction's state changes, oldest first: its creation,
// read from the row (migration 00010; older rows, and rows a migration down
// and up again saw, have a history row for it instead), then tx_history.
// The creation's time is the allocating transaction's start, so it sorts
// before every later change.
const historySQL = `
SELECT from_state, to_state, sub_state, reason, owner, fencing_token, action, actor, created_at
FROM (
    SELECT '' AS from_state, 'ALLOCATED' AS to_state, '' AS sub_state, 'created' AS reason, created_owner AS owner,
        created_token AS fencing_token, '' AS action, '' AS actor, created_at, 0::bigint AS id
    FROM managed_tx WHERE id = $1::uuid AND created_owner IS NOT NULL
    UNION ALL
    SELECT coalesce(from_state, ''), to_state, coalesce(sub_state, ''), coalesce(reason, ''), owner, fencing_token,
        coalesce(action, ''), coalesce(actor, ''), created_at, id
    FROM tx_history WHERE tx_id = $1::uuid) h
ORDER BY created_at, id`

// TxHistory implements txm.OperatorQueries: every state change, oldest
// first.
func (s *Store) TxHistory(ctx context.Context, txID string) ([]txm.HistoryEntry, error) {
	rows, err := s.pool.Query(ctx, historySQL, txID)
	if err != nil {
		return nil, fmt.Errorf("tx history: %w", translate(err))
	}
	defer rows.Close()
	var out []txm.HistoryEntry
	for rows.Next() {
		var h txm.HistoryEntry
		var from, to string
		if err := rows.Scan(&from, &to, &h.SubState, &h.Reason, &h.Owner, &h.Token, &h.Action, &h.Actor, &h.CreatedAt); err != nil {
			return nil, fmt.Errorf("tx history: %w", translate(err))
		}
		h.From, h.To = txm.State(from), txm.State(to)
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("tx history: %w", translate(err))
	}
	return out, nil
}
