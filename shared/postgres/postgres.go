// Package postgres is the PostgreSQL adapter: the connection pool (a plain DSN
// or the Cloud SQL dialer), the transaction helper, error translation, the
// lease store with its fencing predicate, and the stores that implement the
// ports of shared/txm. All of txfence's SQL lives here.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"cloud.google.com/go/cloudsqlconn"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/txm"
)

// DB is an open pool and, when Cloud SQL is used, the dialer behind it.
type DB struct {
	Pool   *pgxpool.Pool
	dialer *cloudsqlconn.Dialer
}

// Close closes the pool, then the dialer.
func (db *DB) Close() {
	db.Pool.Close()
	if db.dialer != nil {
		_ = db.dialer.Close()
	}
}

// Open connects to PostgreSQL and pings it: Connect, then a round trip.
func Open(ctx context.Context, cfg config.Database) (*DB, error) {
	db, err := Connect(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := db.Pool.Ping(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("ping database: %w", translate(err))
	}
	return db, nil
}

// Connect builds the pool without waiting for the database (connections are
// made on first use). With cfg.Instance set it dials through the Cloud SQL
// connector (lazy refresh, which suits instances whose CPU is throttled
// between requests; optional IAM database authentication); otherwise it uses
// the DSN as it is. Every connection gets the configured statement, lock and
// idle-in-transaction timeouts.
func Connect(ctx context.Context, cfg config.Database) (*DB, error) {
	pcfg, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	if cfg.MaxConns > 0 {
		pcfg.MaxConns = cfg.MaxConns
	}
	pcfg.MaxConnIdleTime = 5 * time.Minute
	// Nothing waits on the database for ever: a statement, a lock wait, an
	// idle transaction each end at their bound (zero leaves one unset).
	for name, d := range map[string]time.Duration{"statement_timeout": cfg.StatementTimeout, "lock_timeout": cfg.LockTimeout,
		"idle_in_transaction_session_timeout": cfg.IdleInTxTimeout} {
		if d > 0 {
			pcfg.ConnConfig.RuntimeParams[name] = strconv.FormatInt(d.Milliseconds(), 10)
		}
	}
	db := &DB{}
	if cfg.Instance != "" {
		opts := []cloudsqlconn.Option{cloudsqlconn.WithLazyRefresh()}
		if cfg.IAMAuth {
			opts = append(opts, cloudsqlconn.WithIAMAuthN())
		}
		var dialOpts []cloudsqlconn.DialOption
		if cfg.PrivateIP {
			dialOpts = append(dialOpts, cloudsqlconn.WithPrivateIP())
		}
		d, err := cloudsqlconn.NewDialer(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("cloud sql dialer: %w", err)
		}
		db.dialer = d
		instance := cfg.Instance
		pcfg.ConnConfig.DialFunc = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.Dial(ctx, instance, dialOpts...)
		}
		// The connector encrypts the connection itself.
		pcfg.ConnConfig.TLSConfig = nil
		pcfg.ConnConfig.Fallbacks = nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open pool: %w", translate(err))
	}
	db.Pool = pool
	return db, nil
}

// querier is what both a pool and a transaction offer.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// beginner starts transactions: a pool, a connection, or a transaction
// (which then starts a savepoint).
type beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// rollbackTimeout bounds a rollback that runs after the caller's context is gone.
const rollbackTimeout = 5 * time.Second

// WithTx runs fn in a transaction and commits it. If fn fails, or panics, the
// transaction is rolled back with a context that the caller's cancellation
// cannot reach, so a cancelled request never leaves a connection mid-
// transaction. A failed commit is returned as an error, never as success;
// a context that ended before the commit is the error, and nothing is
// committed.
func WithTx(ctx context.Context, db beginner, fn func(pgx.Tx) error) (err error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", translate(err))
	}
	committed := false
	defer func() {
		if committed {
			return
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()
	if err := fn(tx); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		// Ended before COMMIT was sent: nothing is committed. The deferred
		// ROLLBACK ends the transaction, and frees its locks, before this
		// returns; a COMMIT tried on the ended context would close the
		// connection instead, leaving the server session to end it some
		// time later, with its locks held meanwhile.
		return fmt.Errorf("commit: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) {
			// No answer from the server to COMMIT: it may have committed.
			return fmt.Errorf("commit: %w: %w", txm.ErrOutcomeUnknown, translate(err))
		}
		return fmt.Errorf("commit: %w", translate(err))
	}
	committed = true
	return nil
}
