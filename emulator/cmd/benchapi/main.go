// Command benchapi measures create throughput of the real API processes
// against one ephemeral PostgreSQL with durable commits (fsync and
// synchronous_commit on), for 1 and 3 API processes, a hot signer and many
// signers, batched allocation against the naive path (one database
// transaction per request, no batching) measured in the same run. It prints
// creates/s, p50/p95/p99 and the ratio to the naive baseline, and checks
// that every signer's nonces came out contiguous. Run it with `make bench-api`.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/ethereum/go-ethereum/common"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txfence/txfence/emulator/loadgen"
	"github.com/txfence/txfence/emulator/stack"
	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/pgtest"
	"github.com/txfence/txfence/shared/postgres"
)

func main() {
	n := flag.Int("n", 3000, "creates per scenario")
	conc := flag.Int("c", 64, "concurrent clients")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *n, *conc); err != nil {
		fmt.Fprintln(os.Stderr, "benchapi:", err)
		os.Exit(1)
	}
}

type scenario struct {
	mode     string // "naive" or "batched"
	procs    int
	workload string // "hot" (one signer) or "many" (64 signers)
}

func run(ctx context.Context, n, conc int) error {
	tmp, err := os.MkdirTemp("", "txfence-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	server := filepath.Join(tmp, "server")
	fmt.Println("building the function server ...")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", server, "./functions/server").CombinedOutput(); err != nil {
		return fmt.Errorf("build server: %v\n%s", err, out)
	}
	fmt.Println("starting PostgreSQL (durable: fsync on, synchronous_commit on) and a simulated chain ...")
	pg, err := pgtest.Start(ctx, pgtest.Options{Durable: true})
	if err != nil {
		return err
	}
	defer pg.Stop()
	admin, err := pgxpool.New(ctx, pg.URL("postgres"))
	if err != nil {
		return err
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE txfence"); err != nil {
		return err
	}
	admin.Close()
	dbURL := pg.URL("txfence")
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := postgres.MigrateUp(ctx, pool); err != nil {
		return err
	}
	chain, err := evmtest.New(nil)
	if err != nil {
		return err
	}
	defer chain.Close()

	signers := make([]string, 64)
	for i := range signers {
		signers[i] = common.BigToAddress(new(big.Int).Lsh(big.NewInt(1), uint(64+i))).Hex()
	}

	var scenarios []scenario
	for _, w := range []string{"hot", "many"} {
		for _, p := range []int{1, 3} {
			for _, m := range []string{"naive", "batched"} {
				scenarios = append(scenarios, scenario{mode: m, procs: p, workload: w})
			}
		}
	}
	fmt.Printf("%d creates per scenario, %d concurrent clients\n\n", n, conc)
	fmt.Printf("%-8s %-6s %-8s %s\n", "signers", "procs", "mode", "result")
	baseline := map[string]float64{}
	for _, sc := range scenarios {
		if _, err := pool.Exec(ctx, `TRUNCATE managed_tx, tx_attempt, tx_history, outbox, tx_completion, signer_nonce_cursor, signer_lease`); err != nil {
			return err
		}
		res, err := runScenario(ctx, sc, server, dbURL, chain.URL, signers, n, conc)
		if err != nil {
			return fmt.Errorf("%+v: %w", sc, err)
		}
		ratio := ""
		key := fmt.Sprintf("%s/%d", sc.workload, sc.procs)
		if sc.mode == "naive" {
			baseline[key] = res.PerSecond()
		} else if b := baseline[key]; b > 0 {
			ratio = fmt.Sprintf("  ×%.1f vs naive", res.PerSecond()/b)
		}
		fmt.Printf("%-8s %-6d %-8s %s%s\n", sc.workload, sc.procs, sc.mode, res, ratio)
		if err := checkContiguous(ctx, pool); err != nil {
			return err
		}
	}
	fmt.Println("\nnonces contiguous for every signer in every scenario")
	return nil
}

func runScenario(ctx context.Context, sc scenario, server, dbURL, rpcURL string, signers []string, n, conc int) (loadgen.Result, error) {
	var urls []string
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			_ = p.Process.Signal(syscall.SIGTERM)
			_ = p.Wait()
		}
	}()
	for i := 0; i < sc.procs; i++ {
		port, err := stack.FreePort()
		if err != nil {
			return loadgen.Result{}, err
		}
		cmd := exec.CommandContext(ctx, server)
		cmd.Env = append(os.Environ(),
			"FUNCTION_TARGET=Api", "HOST=127.0.0.1", fmt.Sprintf("PORT=%d", port),
			"TXFENCE_DATABASE_URL="+dbURL,
			"TXFENCE_CHAINS=1337="+rpcURL,
			"TXFENCE_SIGNERS="+strings.Join(signers, ","),
			fmt.Sprintf("TXFENCE_INSTANCE_ID=bench-%s-%d", sc.mode, i),
			"TXFENCE_DB_MAX_CONNS=20",
			"TXFENCE_LOG_LEVEL=error",
			// The bench measures creates, not the per-instance rate limits.
			"TXFENCE_AUTH=dev",
			"TXFENCE_RATE_PER_SECOND=1000000", "TXFENCE_RATE_BURST=1000000",
			"TXFENCE_SIGNER_RATE_PER_SECOND=1000000",
		)
		if sc.mode == "naive" {
			cmd.Env = append(cmd.Env, "TXFENCE_BATCH_SIZE=1", "TXFENCE_BATCH_WAIT=0s")
		}
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return loadgen.Result{}, err
		}
		procs = append(procs, cmd)
		url := fmt.Sprintf("http://127.0.0.1:%d", port)
		if err := stack.WaitReady(ctx, url+"/healthz"); err != nil {
			return loadgen.Result{}, err
		}
		urls = append(urls, url)
	}
	use := signers[:1]
	if sc.workload == "many" {
		use = signers
	}
	// Warm up: each process builds its clients and syncs nonces once.
	if _, err := loadgen.Run(ctx, loadgen.Config{URLs: urls, ChainID: 1337, Signers: use, Concurrency: len(urls) * len(use), Requests: len(urls) * len(use)}); err != nil {
		return loadgen.Result{}, err
	}
	return loadgen.Run(ctx, loadgen.Config{URLs: urls, ChainID: 1337, Signers: use, Concurrency: conc, Requests: n})
}

func checkContiguous(ctx context.Context, pool *pgxpool.Pool) error {
	var bad int
	err := pool.QueryRow(ctx, `
SELECT count(*) FROM (
    SELECT signer, count(*) AS n, min(nonce) AS lo, max(nonce) AS hi, count(DISTINCT nonce) AS d
    FROM managed_tx GROUP BY signer
) s WHERE hi - lo + 1 <> n OR d <> n`).Scan(&bad)
	if err != nil {
		return err
	}
	if bad > 0 {
		return fmt.Errorf("%d signers have gaps or duplicate nonces", bad)
	}
	return nil
}
