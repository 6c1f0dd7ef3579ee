package stack

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txfence/txfence/shared/auth"
	"github.com/txfence/txfence/shared/postgres"
	"github.com/txfence/txfence/shared/txm"
)

// DevAPIKey creates an API key for principal with the given roles on every
// signer, as `admin apikey create` and `admin policy put` would, so the
// local stack can show how a caller outside Google Cloud authenticates. The
// key is printed once by the caller; only its hash is stored.
func (s *Stack) DevAPIKey(ctx context.Context, principal string, roles ...txm.Role) (string, error) {
	pool, err := pgxpool.New(ctx, s.DatabaseURL)
	if err != nil {
		return "", fmt.Errorf("dev api key: %w", err)
	}
	defer pool.Close()
	policies, err := postgres.NewPolicies(pool)
	if err != nil {
		return "", err
	}
	keys, err := postgres.NewAPIKeys(pool)
	if err != nil {
		return "", err
	}
	if _, err := policies.PutPolicy(ctx, txm.Policy{Principal: principal, Roles: roles, AllSigners: true, SkipEstimation: true}, "emulator"); err != nil {
		return "", fmt.Errorf("dev api key: %w", err)
	}
	key, id, hash := auth.NewAPIKey()
	if err := keys.CreateAPIKey(ctx, txm.APIKey{ID: id, Principal: principal, Hash: hash, CreatedBy: "emulator"}); err != nil {
		return "", fmt.Errorf("dev api key: %w", err)
	}
	return key, nil
}
