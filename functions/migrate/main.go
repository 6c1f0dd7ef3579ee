// Command migrate applies txfence's embedded goose migrations. It runs as a
// Cloud Build step or a Cloud Run job, never from a function's init.
//
//	migrate            # up
//	migrate down-to N  # roll back to version N
//
// It migrates the one database (TXFENCE_DATABASE_URL) or every shard of
// TXFENCE_DATABASES, in order, each to the same version; a failure stops
// it and names the shard (a rerun converges: migrations are applied once).
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/postgres"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "migrate:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var down *int64
	switch {
	case len(args) == 0 || args[0] == "up":
	case args[0] == "down-to" && len(args) == 2:
		v, err := strconv.ParseInt(args[1], 10, 64)
		if err != nil {
			return fmt.Errorf("down-to needs a version number, got %q", args[1])
		}
		down = &v
	default:
		return fmt.Errorf("usage: migrate [up | down-to N]")
	}
	dbs, err := config.LoadDatabases(os.LookupEnv)
	if err != nil {
		return err
	}
	for _, d := range dbs {
		v, err := migrate(ctx, d.Database, down)
		switch {
		case err != nil && d.Name != "":
			return fmt.Errorf("shard %s: %w", d.Name, err)
		case err != nil:
			return err
		case d.Name != "":
			fmt.Printf("shard %s: schema version %d\n", d.Name, v)
		default:
			fmt.Println("schema version", v)
		}
	}
	return nil
}

// migrate brings one database up (or down to *down) and returns its
// schema version.
func migrate(ctx context.Context, dbcfg config.Database, down *int64) (int64, error) {
	// Migrations may rewrite large tables: bounded by the command's own
	// 10 minutes, not the services' statement timeout.
	dbcfg.StatementTimeout = 0
	db, err := postgres.Open(ctx, dbcfg)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	m, err := postgres.NewMigrator(db.Pool)
	if err != nil {
		return 0, err
	}
	defer m.Close()
	if down != nil {
		err = m.DownTo(ctx, *down)
	} else {
		err = m.Up(ctx)
	}
	if err != nil {
		return 0, err
	}
	return m.Version(ctx)
}
