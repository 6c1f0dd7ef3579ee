package pgtest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx" for goose
	"github.com/pressly/goose/v3"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/txfence/txfence/migrations"
)

// Environment variables that choose where test databases live.
const (
	// EnvURL names an existing server (a superuser or CREATEDB role) to use
	// instead of starting one.
	EnvURL = "TEST_DATABASE_URL"
	// EnvContainers=1 starts PostgreSQL with testcontainers-go; tests skip
	// cleanly when no Docker engine is reachable.
	EnvContainers = "TXFENCE_TEST_CONTAINERS"
)

// harness is the per-process state: one server, one migrated template.
var harness struct {
	mainCalled atomic.Bool
	once       sync.Once
	err        error
	skip       string
	adminURL   func(db string) string
	template   string
	stop       func()
	counter    atomic.Int64
	mu         sync.Mutex // serializes CREATE DATABASE ... TEMPLATE
}

// Main runs the package's tests and then stops the server, if one was
// started. Call it from TestMain: func TestMain(m *testing.M) { pgtest.Main(m) }.
func Main(m *testing.M) {
	harness.mainCalled.Store(true)
	code := m.Run()
	if harness.stop != nil {
		harness.stop()
	}
	os.Exit(code)
}

// DB is a fresh, migrated database for one test.
type DB struct {
	// URL connects to the test's database.
	URL string
	// Pool is a pool on that database, closed at the end of the test.
	Pool *pgxpool.Pool
}

// New returns a fresh database with every migration applied, dropped at the
// end of the test.
func New(t testing.TB) *DB {
	t.Helper()
	url := NewDatabase(t, true)
	return &DB{URL: url, Pool: Pool(t, url)}
}

// NewDatabase creates a fresh database (migrated when migrated is true) and
// returns its URL; the database is dropped at the end of the test.
func NewDatabase(t testing.TB, migrated bool) string {
	t.Helper()
	if !harness.mainCalled.Load() {
		t.Fatal("pgtest: call pgtest.Main(m) from the package's TestMain so the server is stopped")
	}
	harness.once.Do(setup)
	if harness.skip != "" {
		t.Skip(harness.skip)
	}
	if harness.err != nil {
		t.Fatalf("pgtest: %v", harness.err)
	}
	name := fmt.Sprintf("txfence_t%d_%d", os.Getpid(), harness.counter.Add(1))
	ctx := context.Background()
	stmt := "CREATE DATABASE " + quoteIdent(name)
	if migrated {
		stmt += " TEMPLATE " + quoteIdent(harness.template)
	}
	harness.mu.Lock()
	err := adminExec(ctx, stmt)
	harness.mu.Unlock()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		_ = adminExec(context.Background(), "DROP DATABASE IF EXISTS "+quoteIdent(name)+" WITH (FORCE)")
	})
	return harness.adminURL(name)
}

// Pool opens another pool on url (another "instance" of txfence), closed at
// the end of the test.
func Pool(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("pgtest: parse url: %v", err)
	}
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgtest: open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func adminExec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, harness.adminURL("postgres"))
	if err != nil {
		return fmt.Errorf("connect as admin: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s: %w", sql, err)
	}
	return nil
}

// setup starts (or finds) the server and builds the migrated template.
func setup() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	switch {
	case os.Getenv(EnvURL) != "":
		base := os.Getenv(EnvURL)
		cfg, err := pgx.ParseConfig(base)
		if err != nil {
			harness.err = fmt.Errorf("%s: %w", EnvURL, err)
			return
		}
		harness.adminURL = func(db string) string { return withDatabase(cfg, db) }
	case os.Getenv(EnvContainers) == "1":
		skip, err := startContainer(ctx)
		if skip != "" || err != nil {
			harness.skip, harness.err = skip, err
			return
		}
	default:
		srv, err := Start(ctx, Options{})
		if err != nil {
			harness.err = err
			return
		}
		harness.adminURL = srv.URL
		harness.stop = func() { _ = srv.Stop() }
	}
	harness.template = fmt.Sprintf("txfence_tpl%d", os.Getpid())
	if err := adminExec(ctx, "CREATE DATABASE "+quoteIdent(harness.template)); err != nil {
		harness.err = err
		return
	}
	prevStop := harness.stop
	harness.stop = func() {
		_ = adminExec(context.Background(), "DROP DATABASE IF EXISTS "+quoteIdent(harness.template)+" WITH (FORCE)")
		if prevStop != nil {
			prevStop()
		}
	}
	harness.err = migrateUp(ctx, harness.adminURL(harness.template))
}

// migrateUp applies the embedded migrations. (pgtest cannot use
// postgres.Migrator: the postgres package's own tests import pgtest.)
func migrateUp(ctx context.Context, url string) error {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return fmt.Errorf("open %s: %w", url, err)
	}
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS)
	if err != nil {
		return fmt.Errorf("goose provider: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrate template: %w", err)
	}
	return migrations.ApplyFunctions(ctx, db)
}

// withDatabase renders cfg as a URL naming database db.
func withDatabase(cfg *pgx.ConnConfig, db string) string {
	host := cfg.Host
	if len(host) > 0 && host[0] == '/' {
		return fmt.Sprintf("host=%s port=%d user=%s password=%s dbname=%s sslmode=disable",
			host, cfg.Port, cfg.User, cfg.Password, db)
	}
	sslmode := "disable"
	if cfg.TLSConfig != nil {
		sslmode = "require"
	}
	return fmt.Sprintf("postgres://%s:%s@%s:%d/%s?sslmode=%s", cfg.User, cfg.Password, host, cfg.Port, db, sslmode)
}

// startContainer runs postgres:15 under testcontainers-go. It returns a skip
// message when no Docker engine is reachable.
func startContainer(ctx context.Context) (skip string, err error) {
	provider, err := testcontainers.NewDockerProvider()
	if err != nil {
		return "pgtest: " + EnvContainers + "=1 but no Docker engine: " + err.Error(), nil
	}
	defer provider.Close()
	if err := provider.Health(ctx); err != nil {
		return "pgtest: " + EnvContainers + "=1 but the Docker engine is not reachable: " + err.Error(), nil
	}
	ctr, err := testcontainers.Run(ctx, "postgres:15-alpine",
		testcontainers.WithExposedPorts("5432/tcp"),
		testcontainers.WithEnv(map[string]string{"POSTGRES_PASSWORD": "postgres", "POSTGRES_HOST_AUTH_METHOD": "trust"}),
		testcontainers.WithCmd("postgres", "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "max_connections=300"),
		testcontainers.WithWaitStrategy(wait.ForLog("database system is ready to accept connections").WithOccurrence(2).WithStartupTimeout(time.Minute)),
	)
	if err != nil {
		return "", fmt.Errorf("start postgres container: %w", err)
	}
	host, err := ctr.Host(ctx)
	if err != nil {
		return "", fmt.Errorf("postgres container host: %w", err)
	}
	port, err := ctr.MappedPort(ctx, "5432/tcp")
	if err != nil {
		return "", fmt.Errorf("postgres container port: %w", err)
	}
	harness.adminURL = func(db string) string {
		return fmt.Sprintf("postgres://postgres:postgres@%s:%s/%s?sslmode=disable", host, port.Port(), db)
	}
	harness.stop = func() { _ = testcontainers.TerminateContainer(ctr) }
	return "", nil
}

// NewServer starts a PostgreSQL server of its own, independent of the one
// every other test shares (its own data directory, socket and process:
// what a second Cloud SQL primary is to txfence), with one migrated
// database; it is stopped at the end of the test. It needs the server
// binaries even when TEST_DATABASE_URL names a server.
func NewServer(t testing.TB) (*Server, *DB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := Start(ctx, Options{})
	if err != nil {
		t.Fatalf("pgtest: another server: %v", err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	conn, err := pgx.Connect(ctx, srv.URL("postgres"))
	if err != nil {
		t.Fatalf("pgtest: connect to another server: %v", err)
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE txfence")
	_ = conn.Close(ctx)
	if err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	url := srv.URL("txfence")
	if err := migrateUp(ctx, url); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return srv, &DB{URL: url, Pool: Pool(t, url)}
}
