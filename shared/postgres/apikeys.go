package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txfence/txfence/shared/txm"
)

// APIKeys implements txm.APIKeyStore over the api_key table. Only the hash
// of each key is stored; creating and revoking a key each write an audit
// row in the same transaction.
type APIKeys struct {
	pool *pgxpool.Pool
}

var _ txm.APIKeyStore = (*APIKeys)(nil)

// NewAPIKeys returns the key store over pool.
func NewAPIKeys(pool *pgxpool.Pool) (*APIKeys, error) {
	if pool == nil {
		return nil, errors.New("new api keys: a pool is required")
	}
	return &APIKeys{pool: pool}, nil
}

// Audit actions of the key store.
const (
	AuditAPIKeyCreate = "apikey.create"
	AuditAPIKeyRevoke = "apikey.revoke"
)

// APIKey implements txm.APIKeyStore.
func (s *APIKeys) APIKey(ctx context.Context, id string) (txm.APIKey, error) {
	var k txm.APIKey
	err := s.pool.QueryRow(ctx, `SELECT id, principal, hash, created_at, created_by, revoked_at FROM api_key WHERE id = $1`, id).
		Scan(&k.ID, &k.Principal, &k.Hash, &k.CreatedAt, &k.CreatedBy, &k.RevokedAt)
	if err != nil {
		return txm.APIKey{}, fmt.Errorf("api key %s: %w", id, translate(err))
	}
	return k, nil
}

// CreateAPIKey implements txm.APIKeyStore: the key's row and an audit row
// naming k.CreatedBy. An id already taken is txm.ErrConflict.
func (s *APIKeys) CreateAPIKey(ctx context.Context, k txm.APIKey) error {
	if k.CreatedBy == "" {
		return fmt.Errorf("%w: create api key: CreatedBy is required", txm.ErrInvalid)
	}
	err := WithTx(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO api_key (id, principal, hash, created_by) VALUES ($1, $2, $3, $4)`,
			k.ID, k.Principal, k.Hash, k.CreatedBy); err != nil {
			return translate(err)
		}
		return insertAudit(ctx, tx, txm.AuditEntry{Principal: k.CreatedBy, Action: AuditAPIKeyCreate, Target: k.ID, Outcome: "ok",
			Detail: "for principal " + k.Principal})
	})
	if err != nil {
		return fmt.Errorf("create api key %s: %w", k.ID, err)
	}
	return nil
}

// RevokeAPIKey implements txm.APIKeyStore. Revoking a revoked key keeps
// the first revocation (and is audited as such).
func (s *APIKeys) RevokeAPIKey(ctx context.Context, id, by string) error {
	if by == "" {
		return fmt.Errorf("%w: revoke api key: by is required", txm.ErrInvalid)
	}
	err := WithTx(ctx, s.pool, func(tx pgx.Tx) error {
		var already bool
		err := tx.QueryRow(ctx, `
UPDATE api_key k SET revoked_at = coalesce(k.revoked_at, clock_timestamp()), revoked_by = coalesce(k.revoked_by, $2)
FROM (SELECT id, revoked_at IS NOT NULL AS already FROM api_key WHERE id = $1 FOR UPDATE) old
WHERE k.id = old.id
RETURNING old.already`, id, by).Scan(&already)
		if err != nil {
			return translate(err)
		}
		detail := ""
		if already {
			detail = "already revoked"
		}
		return insertAudit(ctx, tx, txm.AuditEntry{Principal: by, Action: AuditAPIKeyRevoke, Target: id, Outcome: "ok", Detail: detail})
	})
	if err != nil {
		return fmt.Errorf("revoke api key %s: %w", id, err)
	}
	return nil
}

// ListAPIKeys implements txm.APIKeyStore, oldest first. Hash is left out:
// a listing never needs it.
func (s *APIKeys) ListAPIKeys(ctx context.Context, principal string) ([]txm.APIKey, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, principal, created_at, created_by, revoked_at FROM api_key
WHERE $1 = '' OR principal = $1 ORDER BY created_at, id`, principal)
	if err != nil {
		return nil, fmt.Errorf("list api keys: %w", translate(err))
	}
	defer rows.Close()
	var out []txm.APIKey
	for rows.Next() {
		var k txm.APIKey
		if err := rows.Scan(&k.ID, &k.Principal, &k.CreatedAt, &k.CreatedBy, &k.RevokedAt); err != nil {
			return nil, fmt.Errorf("list api keys: %w", translate(err))
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list api keys: %w", translate(err))
	}
	return out, nil
}
