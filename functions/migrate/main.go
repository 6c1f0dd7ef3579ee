// Command migrate applies txfence's embedded goose migrations. It runs as a
// Cloud Build step or a Cloud Run job, never from a function's init.
//
//	migrate            # up
//	migrate down-to N  # roll back to version N
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
	dbcfg := config.Defaults().Database
	dbcfg.URL = os.Getenv(config.EnvDatabaseURL)
	dbcfg.Instance = os.Getenv(config.EnvCloudSQLInstance)
	dbcfg.IAMAuth = os.Getenv(config.EnvCloudSQLIAMAuth) == "true"
	dbcfg.PrivateIP = os.Getenv(config.EnvCloudSQLPrivateIP) == "true"
	// Migrations may rewrite large tables: bounded by the command's own
	// 10 minutes, not the services' statement timeout.
	dbcfg.StatementTimeout = 0
	if dbcfg.URL == "" {
		return fmt.Errorf("%s is required", config.EnvDatabaseURL)
	}
	db, err := postgres.Open(ctx, dbcfg)
	if err != nil {
		return err
	}
	defer db.Close()
	m, err := postgres.NewMigrator(db.Pool)
	if err != nil {
		return err
	}
	defer m.Close()
	switch {
	case len(args) == 0 || args[0] == "up":
		err = m.Up(ctx)
	case args[0] == "down-to" && len(args) == 2:
		v, perr := strconv.ParseInt(args[1], 10, 64)
		if perr != nil {
			return fmt.Errorf("down-to needs a version number, got %q", args[1])
		}
		err = m.DownTo(ctx, v)
	default:
		return fmt.Errorf("usage: migrate [up | down-to N]")
	}
	if err != nil {
		return err
	}
	v, err := m.Version(ctx)
	if err != nil {
		return err
	}
	fmt.Println("schema version", v)
	return nil
}
