package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txfence/txfence/shared/txm"
)

// Policies implements txm.PolicyStore over the principal_policy table: one
// row per version, the highest in force, the policy as its JSON wire form
// (txm.Policy's MarshalJSON; version, creation time and author live in
// their columns). Every write has its audit row in the same transaction.
type Policies struct {
	pool *pgxpool.Pool
}

var _ txm.PolicyStore = (*Policies)(nil)

// NewPolicies returns the policy store over pool.
func NewPolicies(pool *pgxpool.Pool) (*Policies, error) {
	if pool == nil {
		return nil, errors.New("new policies: a pool is required")
	}
	return &Policies{pool: pool}, nil
}

// Audit actions and the author of seeded policies.
const (
	AuditPolicyPut  = "policy.put"
	AuditPolicySeed = "policy.seed"
	// PolicySeedAuthor is created_by of the policies SeedPolicies writes.
	PolicySeedAuthor = "seed"
)

// Policy implements txm.PolicyStore.
func (s *Policies) Policy(ctx context.Context, principal string) (txm.Policy, error) {
	var (
		raw       []byte
		version   int
		createdAt time.Time
		createdBy string
	)
	err := s.pool.QueryRow(ctx, `SELECT policy, version, created_at, created_by FROM principal_policy
WHERE principal = $1 ORDER BY version DESC LIMIT 1`, principal).Scan(&raw, &version, &createdAt, &createdBy)
	if err != nil {
		return txm.Policy{}, fmt.Errorf("policy of %q: %w", principal, translate(err))
	}
	var p txm.Policy
	if err := json.Unmarshal(raw, &p); err != nil {
		return txm.Policy{}, fmt.Errorf("policy of %q, version %d: stored policy: %w", principal, version, err)
	}
	p.Principal, p.Version, p.CreatedAt, p.CreatedBy = principal, version, createdAt, createdBy
	return p, nil
}

// PutPolicy implements txm.PolicyStore. Writers of one principal's policy
// are serialized by a transaction-scoped advisory lock, so the version the
// insert computes (the highest + 1) is never taken twice: concurrent puts
// get consecutive versions.
func (s *Policies) PutPolicy(ctx context.Context, p txm.Policy, by string) (txm.Policy, error) {
	if by == "" {
		return txm.Policy{}, fmt.Errorf("%w: put policy: by is required", txm.ErrInvalid)
	}
	if err := p.Validate(); err != nil {
		return txm.Policy{}, fmt.Errorf("put policy: %w", err)
	}
	raw, err := wireForm(p)
	if err != nil {
		return txm.Policy{}, fmt.Errorf("put policy: %w", err)
	}
	out := p
	err = WithTx(ctx, s.pool, func(tx pgx.Tx) error {
		if err := lockPrincipal(ctx, tx, p.Principal); err != nil {
			return err
		}
		if err := watchSigners(ctx, tx, p); err != nil {
			return err
		}
		return translate(tx.QueryRow(ctx, `
WITH put AS (
    INSERT INTO principal_policy (principal, version, policy, created_by)
    SELECT $1::text, coalesce(max(version), 0) + 1, $2::jsonb, $3::text FROM principal_policy WHERE principal = $1
    RETURNING version, created_at
), audited AS (
    INSERT INTO audit_log (principal, action, target, outcome, detail)
    SELECT $3, $4, $1, 'ok', 'version ' || version FROM put
)
SELECT version, created_at FROM put`, p.Principal, raw, by, AuditPolicyPut).Scan(&out.Version, &out.CreatedAt))
	})
	if err != nil {
		return txm.Policy{}, fmt.Errorf("put policy of %q: %w", p.Principal, err)
	}
	out.CreatedBy = by
	return out, nil
}

// SeedPolicies implements txm.PolicyStore: version 1 of each policy whose
// principal has none, by PolicySeedAuthor, audited, all in one
// transaction. Every policy is validated first: one bad policy writes
// nothing. A principal listed twice gets the first.
func (s *Policies) SeedPolicies(ctx context.Context, ps []txm.Policy) error {
	raws := make(map[string][]byte, len(ps))
	policies := make(map[string]txm.Policy, len(ps))
	var order []string
	for _, p := range ps {
		if err := p.Validate(); err != nil {
			return fmt.Errorf("seed policy of %q: %w", p.Principal, err)
		}
		if _, dup := raws[p.Principal]; dup {
			continue
		}
		raw, err := wireForm(p)
		if err != nil {
			return fmt.Errorf("seed policy of %q: %w", p.Principal, err)
		}
		raws[p.Principal], policies[p.Principal] = raw, p
		order = append(order, p.Principal)
	}
	if len(order) == 0 {
		return nil
	}
	// One lock order for every seeding instance: no deadlock between them.
	slices.Sort(order)
	err := WithTx(ctx, s.pool, func(tx pgx.Tx) error {
		for _, principal := range order {
			if err := lockPrincipal(ctx, tx, principal); err != nil {
				return err
			}
			tag, err := tx.Exec(ctx, `
WITH seeded AS (
    INSERT INTO principal_policy (principal, version, policy, created_by)
    SELECT $1::text, 1, $2::jsonb, $3::text WHERE NOT EXISTS (SELECT 1 FROM principal_policy WHERE principal = $1)
    ON CONFLICT (principal, version) DO NOTHING
    RETURNING principal
)
INSERT INTO audit_log (principal, action, target, outcome, detail)
SELECT $3, $4, principal, 'ok', 'version 1' FROM seeded`, principal, raws[principal], PolicySeedAuthor, AuditPolicySeed)
			if err != nil {
				return fmt.Errorf("seed policy of %q: %w", principal, translate(err))
			}
			if tag.RowsAffected() > 0 { // seeded: its audit row was written
				if err := watchSigners(ctx, tx, policies[principal]); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("seed policies: %w", err)
	}
	return nil
}

// watchSigners marks the signers p names (or every signer) as watched
// when p has a signer's window: from then on what they send is counted in
// the window usage, whoever creates it (window_watch).
func watchSigners(ctx context.Context, tx pgx.Tx, p txm.Policy) error {
	if !p.WatchesSigners() {
		return nil
	}
	signers := []string{"*"}
	if !p.AllSigners {
		signers = signers[:0]
		for _, s := range p.Signers {
			signers = append(signers, txm.CanonicalAddress(s))
		}
		slices.Sort(signers)
	}
	_, err := tx.Exec(ctx, `INSERT INTO window_watch (signer) SELECT unnest($1::text[]) ON CONFLICT DO NOTHING`, signers)
	if err != nil {
		return fmt.Errorf("watch signers: %w", translate(err))
	}
	return nil
}

// lockPrincipal serializes, until the transaction ends, the writers of one
// principal's policy versions.
func lockPrincipal(ctx context.Context, tx pgx.Tx, principal string) error {
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('principal_policy:' || $1, 0))`, principal)
	return translate(err)
}

// wireForm is the stored jsonb: the policy's wire form without version,
// creation time and author, which are columns.
func wireForm(p txm.Policy) ([]byte, error) {
	p.Version, p.CreatedAt, p.CreatedBy = 0, time.Time{}, ""
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("policy wire form: %w", err)
	}
	return b, nil
}
