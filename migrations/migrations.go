// Package migrations holds txfence's schema as goose SQL migrations, and
// its SQL functions, each in one file of functions/ (its one current
// source), embedded so that the binary that runs them carries them.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"sort"
)

// FS holds every NNNNN_name.sql migration.
//
//go:embed *.sql
var FS embed.FS

// Functions holds the SQL functions, one CREATE OR REPLACE FUNCTION a file.
//
//go:embed functions/*.sql
var Functions embed.FS

// functionsLock is the advisory lock key ApplyFunctions holds ("txfence f"
// in ASCII).
const functionsLock int64 = 0x7478666e63652066

// ApplyFunctions creates or replaces every SQL function of Functions, in
// one transaction, in the order of their file names. Migrations change the
// schema; the functions are applied after them, so that a function's body
// is written once, in its file, and never copied into a migration. The
// transaction holds an advisory lock first: appliers that run at once
// (migrate jobs of deploys close together) take their turns instead of
// failing on each other's CREATE OR REPLACE.
func ApplyFunctions(ctx context.Context, db *sql.DB) error {
	names, err := fs.Glob(Functions, "functions/*.sql")
	if err != nil {
		return fmt.Errorf("apply functions: %w", err)
	}
	sort.Strings(names)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("apply functions: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, functionsLock); err != nil {
		return fmt.Errorf("apply functions: lock: %w", err)
	}
	for _, name := range names {
		body, err := Functions.ReadFile(name)
		if err != nil {
			return fmt.Errorf("apply functions: %w", err)
		}
		if _, err := tx.ExecContext(ctx, string(body)); err != nil {
			return fmt.Errorf("apply %s: %w", name, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("apply functions: commit: %w", err)
	}
	return nil
}
