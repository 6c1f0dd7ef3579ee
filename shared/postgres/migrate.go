package postgres

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/txfence/txfence/migrations"
)

// Migrator applies txfence's embedded migrations with goose.
type Migrator struct {
	provider *goose.Provider
	db       *sql.DB
	close    func() error
}

// NewMigrator returns a Migrator over the database pool points at. It
// holds goose's PostgreSQL session lock (an advisory lock) while it
// migrates, so that two migrations started close together (two deploys,
// two migrate jobs) run one after the other instead of racing.
func NewMigrator(pool *pgxpool.Pool) (*Migrator, error) {
	db := stdlib.OpenDBFromPool(pool)
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("goose session locker: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS, goose.WithSessionLocker(locker))
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("goose provider: %w", err)
	}
	return &Migrator{provider: p, db: db, close: db.Close}, nil
}

// Up applies every pending migration, then every SQL function
// (migrations.ApplyFunctions).
func (m *Migrator) Up(ctx context.Context) error {
	if _, err := m.provider.Up(ctx); err != nil {
		return fmt.Errorf("migrate up: %w", err)
	}
	return migrations.ApplyFunctions(ctx, m.db)
}

// DownTo rolls back to version (0 = empty schema).
func (m *Migrator) DownTo(ctx context.Context, version int64) error {
	if _, err := m.provider.DownTo(ctx, version); err != nil {
		return fmt.Errorf("migrate down to %d: %w", version, err)
	}
	return nil
}

// Version returns the current schema version.
func (m *Migrator) Version(ctx context.Context) (int64, error) {
	return m.provider.GetDBVersion(ctx)
}

// Close releases the migrator's handle (not the pool).
func (m *Migrator) Close() error { return m.close() }

// MigrateUp is the one-call form used by the migration job and the emulator.
func MigrateUp(ctx context.Context, pool *pgxpool.Pool) error {
	m, err := NewMigrator(pool)
	if err != nil {
		return err
	}
	defer m.Close()
	return m.Up(ctx)
}
