package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txfence/txfence/shared/txm"
)

// AuditLog implements txm.AuditLog over the audit_log table.
type AuditLog struct {
	pool *pgxpool.Pool
}

var _ txm.AuditLog = (*AuditLog)(nil)

// NewAuditLog returns the audit log over pool.
func NewAuditLog(pool *pgxpool.Pool) (*AuditLog, error) {
	if pool == nil {
		return nil, errors.New("new audit log: a pool is required")
	}
	return &AuditLog{pool: pool}, nil
}

// Audit implements txm.AuditLog: one row, written now.
func (a *AuditLog) Audit(ctx context.Context, e txm.AuditEntry) error {
	if err := insertAudit(ctx, a.pool, e); err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	return nil
}

// AuditRecord is a written audit row.
type AuditRecord struct {
	ID int64
	At time.Time
	txm.AuditEntry
}

// ListAudit returns the newest audit rows, newest first: the principal's
// (every principal's when ""), at most limit (1 to 1000).
func (a *AuditLog) ListAudit(ctx context.Context, principal string, limit int) ([]AuditRecord, error) {
	if limit < 1 || limit > 1000 {
		return nil, fmt.Errorf("%w: list audit: limit must be between 1 and 1000, got %d", txm.ErrInvalid, limit)
	}
	rows, err := a.pool.Query(ctx, `SELECT id, at, principal, action, target, outcome, detail FROM audit_log
WHERE $1 = '' OR principal = $1 ORDER BY id DESC LIMIT $2`, principal, limit)
	if err != nil {
		return nil, fmt.Errorf("list audit: %w", translate(err))
	}
	defer rows.Close()
	var out []AuditRecord
	for rows.Next() {
		var r AuditRecord
		if err := rows.Scan(&r.ID, &r.At, &r.Principal, &r.Action, &r.Target, &r.Outcome, &r.Detail); err != nil {
			return nil, fmt.Errorf("list audit: %w", translate(err))
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list audit: %w", translate(err))
	}
	return out, nil
}

// insertAudit writes e with q: the pool, or the transaction whose change
// it records (so the change and its audit row commit together).
func insertAudit(ctx context.Context, q querier, e txm.AuditEntry) error {
	if e.Principal == "" || e.Action == "" || e.Outcome == "" {
		return fmt.Errorf("%w: an audit entry needs a principal, an action and an outcome", txm.ErrInvalid)
	}
	_, err := q.Exec(ctx, `INSERT INTO audit_log (principal, action, target, outcome, detail) VALUES ($1, $2, $3, $4, $5)`,
		e.Principal, e.Action, e.Target, e.Outcome, e.Detail)
	return translate(err)
}
