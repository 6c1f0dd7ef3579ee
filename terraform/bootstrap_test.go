package terraform

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/pgtest"
	"github.com/txfence/txfence/shared/postgres"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// bootstrapTemplate is the template of the db_bootstrap_sql output.
const bootstrapTemplate = "templates/db_bootstrap.sql.tftpl"

// renderBootstrap renders the bootstrap template as sql.tf's templatefile
// call does. The template uses plain ${name} interpolations only (no
// directives, no escapes), so replacing them is rendering it; the test
// checks that this stays so, and that sql.tf passes exactly these names.
func renderBootstrap(t *testing.T, dbName, migrator string, appUsers []string) string {
	t.Helper()
	b, err := os.ReadFile(bootstrapTemplate)
	require.NoError(t, err)
	tpl := string(b)
	require.NotContains(t, tpl, "%{", "the bootstrap template has no directives")
	require.NotContains(t, tpl, "$${", "the bootstrap template has no escapes")

	sqlTF, err := os.ReadFile("sql.tf")
	require.NoError(t, err)
	call := regexp.MustCompile(`(?s)templatefile\("\$\{path\.module\}/` + regexp.QuoteMeta(bootstrapTemplate) + `", \{(.*?)\n  \}\)`).FindSubmatch(sqlTF)
	require.NotNil(t, call, "sql.tf renders %s with templatefile", bootstrapTemplate)
	var passed []string
	for _, m := range regexp.MustCompile(`(?m)^\s*(\w+)\s*=`).FindAllSubmatch(call[1], -1) {
		passed = append(passed, string(m[1]))
	}
	assert.ElementsMatch(t, []string{"db_name", "migrator", "app_users"}, passed, "the variables sql.tf passes")

	// app_users as sql.tf joins them: quoted identifiers, comma separated.
	quoted := make([]string, len(appUsers))
	for i, u := range appUsers {
		quoted[i] = `"` + u + `"`
	}
	out := strings.NewReplacer("${db_name}", dbName, "${migrator}", migrator, "${app_users}", strings.Join(quoted, ", ")).Replace(tpl)
	require.NotContains(t, out, "${", "every interpolation of the template is one sql.tf passes")
	return out
}

// roleSeq names each scenario's roles apart (roles are per server).
var roleSeq atomic.Int64

// bootstrapCluster is one database with the roles of a deployment: the
// built-in postgres user of Cloud SQL (a CREATEROLE member of the
// database's owner, not a superuser), the migrate job's IAM user, and a
// function's.
type bootstrapCluster struct {
	url                  string
	admin                *pgxpool.Pool // superuser: creates the stand-ins
	postgres, mig, fn    string        // role names
	postgresPool, fnPool *pgxpool.Pool
}

func newBootstrapCluster(t *testing.T) *bootstrapCluster {
	t.Helper()
	ctx := context.Background()
	c := &bootstrapCluster{url: pgtest.NewDatabase(t, false)}
	c.admin = pgtest.Pool(t, c.url)
	n := roleSeq.Add(1)
	c.postgres = fmt.Sprintf("boot_pg_%d_%d", os.Getpid(), n)
	c.mig = fmt.Sprintf("txfence-migrate@p_%d_%d.iam", os.Getpid(), n)
	c.fn = fmt.Sprintf("txfence-api@p_%d_%d.iam", os.Getpid(), n)
	var db string
	require.NoError(t, c.admin.QueryRow(ctx, `SELECT current_database()`).Scan(&db))
	for _, stmt := range []string{
		fmt.Sprintf(`CREATE ROLE %q LOGIN CREATEROLE`, c.postgres),
		fmt.Sprintf(`CREATE ROLE %q LOGIN`, c.mig),
		fmt.Sprintf(`CREATE ROLE %q LOGIN`, c.fn),
		// Cloud SQL's databases belong to cloudsqlsuperuser, of which
		// postgres is a member: it owns schema public (pg_database_owner).
		fmt.Sprintf(`ALTER DATABASE %q OWNER TO %q`, db, c.postgres),
	} {
		_, err := c.admin.Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	t.Cleanup(func() {
		// Roles outlive the database: take back what they own and were
		// granted here, then drop them (txfence_app may be another
		// scenario's too).
		ctx := context.Background()
		_, _ = c.admin.Exec(ctx, fmt.Sprintf(`DROP OWNED BY %q, %q, %q CASCADE`, c.mig, c.fn, c.postgres))
		_, _ = c.admin.Exec(ctx, `DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'txfence_app') THEN EXECUTE 'DROP OWNED BY txfence_app CASCADE'; END IF; END $$`)
		_, _ = c.admin.Exec(ctx, fmt.Sprintf(`ALTER DATABASE %q OWNER TO CURRENT_USER`, db))
		for _, r := range []string{c.mig, c.fn, c.postgres} {
			_, _ = c.admin.Exec(ctx, fmt.Sprintf(`DROP ROLE IF EXISTS %q`, r))
		}
	})
	c.postgresPool = c.poolAs(t, c.postgres)
	c.fnPool = c.poolAs(t, c.fn)
	return c
}

// poolAs opens a pool on the database as role (the test server trusts
// local connections).
func (c *bootstrapCluster) poolAs(t *testing.T, role string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(c.url)
	require.NoError(t, err)
	cfg.ConnConfig.User = role
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// bootstrap runs the rendered bootstrap SQL as postgres.
func (c *bootstrapCluster) bootstrap(t *testing.T) {
	t.Helper()
	var db string
	require.NoError(t, c.admin.QueryRow(context.Background(), `SELECT current_database()`).Scan(&db))
	sql := renderBootstrap(t, db, c.mig, []string{c.fn})
	_, err := c.postgresPool.Exec(context.Background(), sql)
	require.NoError(t, err, "the bootstrap SQL runs as postgres (CREATEROLE, not superuser)")
}

// migrate applies every migration as the migrate job's user.
func (c *bootstrapCluster) migrate(t *testing.T) {
	t.Helper()
	m, err := postgres.NewMigrator(c.poolAs(t, c.mig))
	require.NoError(t, err)
	defer m.Close()
	require.NoError(t, m.Up(context.Background()), "migrations run as the migrate job's user")
}

// requireDenied checks that err is PostgreSQL's permission denied.
func requireDenied(t *testing.T, err error, what string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "%s: want permission denied, got %v", what, err)
	assert.Equal(t, "42501", pgErr.Code, "%s: %s", what, pgErr.Message)
}

// appendOnlyForApp checks what a member of txfence_app may do with the
// audit log: add and read rows, never change or remove one; and that the
// role still has its DML elsewhere.
func (c *bootstrapCluster) appendOnlyForApp(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	var member bool
	require.NoError(t, c.admin.QueryRow(ctx, `SELECT pg_has_role($1, 'txfence_app', 'MEMBER')`, c.fn).Scan(&member))
	require.True(t, member, "the function's user is a member of txfence_app")

	var id int64
	require.NoError(t, c.fnPool.QueryRow(ctx,
		`INSERT INTO audit_log (principal, action, target, outcome) VALUES ('ops@example.com', 'policy.put', 'p', 'ok') RETURNING id`).Scan(&id),
		"txfence_app may INSERT into audit_log")
	var n int
	require.NoError(t, c.fnPool.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE id = $1`, id).Scan(&n), "txfence_app may SELECT audit_log")
	assert.Equal(t, 1, n)

	_, err := c.fnPool.Exec(ctx, `UPDATE audit_log SET outcome = 'forged' WHERE id = $1`, id)
	requireDenied(t, err, "UPDATE audit_log")
	_, err = c.fnPool.Exec(ctx, `DELETE FROM audit_log WHERE id = $1`, id)
	requireDenied(t, err, "DELETE FROM audit_log")
	_, err = c.fnPool.Exec(ctx, `TRUNCATE audit_log`)
	requireDenied(t, err, "TRUNCATE audit_log")
	require.NoError(t, c.fnPool.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE id = $1 AND outcome = 'ok'`, id).Scan(&n))
	assert.Equal(t, 1, n, "the row is as written")

	// The other tables keep the DML the functions need, and no DDL.
	_, err = c.fnPool.Exec(ctx, `UPDATE outbox SET attempts = attempts WHERE false`)
	require.NoError(t, err, "txfence_app may UPDATE the other tables")
	_, err = c.fnPool.Exec(ctx, `DELETE FROM outbox WHERE false`)
	require.NoError(t, err, "txfence_app may DELETE from the other tables")
	_, err = c.fnPool.Exec(ctx, `CREATE TABLE not_allowed (id int)`)
	requireDenied(t, err, "CREATE TABLE")
}

// TestIssue45_AuditAppendOnly: the bootstrap SQL terraform outputs
// (db_bootstrap_sql, rendered from templates/db_bootstrap.sql.tftpl) run
// as Cloud SQL's postgres user, then the migrations as the migrate job's
// user: a member of txfence_app may INSERT into and SELECT from audit_log,
// and gets permission denied for UPDATE, DELETE and TRUNCATE. The same
// holds when the bootstrap runs after the migrations (a restored or an
// older database).
func TestIssue45_AuditAppendOnly(t *testing.T) {
	t.Run("bootstrap then migrations", func(t *testing.T) {
		c := newBootstrapCluster(t)
		c.bootstrap(t)
		c.migrate(t)
		c.appendOnlyForApp(t)
	})
	t.Run("migrations then bootstrap", func(t *testing.T) {
		c := newBootstrapCluster(t)
		ctx := context.Background()
		_, err := c.admin.Exec(ctx, fmt.Sprintf(`GRANT USAGE, CREATE ON SCHEMA public TO %q`, c.mig))
		require.NoError(t, err)
		c.migrate(t)
		c.bootstrap(t)
		c.bootstrap(t) // running it again changes nothing
		c.appendOnlyForApp(t)
	})
}
