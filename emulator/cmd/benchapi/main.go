// Command benchapi measures create throughput of the real API processes
// against one ephemeral PostgreSQL with durable commits (fsync and
// synchronous_commit on), for 1 and 3 API processes, a hot signer and many
// signers, batched allocation against the naive path (one database
// transaction per request, no batching) measured in the same run, and
// creates that are simulated against plain transfers (sim.go). It prints
// creates/s, p50/p95/p99 and the ratio to the naive baseline, and checks
// that every signer's nonces came out contiguous. Run it with `make bench-api`.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txfence/txfence/emulator/loadgen"
	"github.com/txfence/txfence/emulator/stack"
	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/pgtest"
	"github.com/txfence/txfence/shared/pubsub/pubsubtest"
)

func main() {
	n := flag.Int("n", 10000, "creates per batched scenario")
	naiveN := flag.Int("naive-n", 3000, "creates per naive scenario")
	conc := flag.Int("c", 64, "concurrent clients (closed loop)")
	rate := flag.Float64("rate", 5000, "offered creates/s of the latency scenario (hot signer, 3 processes)")
	rateFor := flag.Duration("rate-for", 10*time.Second, "how long the latency scenario offers -rate: its p99 is of rate × this many creates, so that one stall of tens of milliseconds, a few hundred creates, is not the whole of its worst 1%")
	profile := flag.String("profile", "", "a directory: save a 5s CPU profile of the first API process of each scenario there")
	statements := flag.Bool("pg-statements", false, "report each scenario's most expensive statements on PostgreSQL's side (pg_stat_statements: calls, mean and total time, lock waits included)")
	procs := flag.Int("gomaxprocs", 1, "each API process's GOMAXPROCS: 1 as on Cloud Run, where each instance has one CPU (terraform: cpu = \"1\") and Go sizes GOMAXPROCS from the container's CPU limit; 0 leaves Go's default, every core of this machine")
	warm := flag.Duration("warm", time.Second, "how long each scenario runs at its own load before it is measured, not counted (its figures are printed apart): new processes grow their heaps and database pools and the load generator opens its connections (kept for the measured run), which an instance under steady load has long done (bench-coldstart measures a cold start); 0 measures from the first request")
	ab := flag.String("ab", "", "KEY=VALUE[,KEY=VALUE...]: compare, in each scenario run, the API processes with these settings added (B) against the usual (A), both running at once and offered the load in turn, in slices A B B A ... (see ab.go); prints B/A ratios and no summary line")
	abSlices := flag.Int("ab-slices", 10, "with -ab: slices each side is offered the load")
	abSlice := flag.Duration("ab-slice", 2*time.Second, "with -ab: how long a slice lasts")
	abLead := flag.Duration("ab-lead", 500*time.Millisecond, "with -ab: how long each slice runs at the load before it is measured (the side was idle while the other ran)")
	relay := flag.Bool("relay", false, "publish each allocation call's submit prompts and delete their outbox rows, as a deployment does, through a Pub/Sub emulator run in this process (its CPU counts as the load generator's); without it no Pub/Sub is configured and the prompts stay in the outbox")
	capFrom := flag.Float64("capacity-from", 4000, "the capacity ladder's first step: creates/s offered (an open load) to each process set: a hot signer through 1 and through 3 API processes, 1,000 signers through 3")
	capStep := flag.Float64("capacity-step", 1000, "the capacity ladder's increase per step")
	capSteps := flag.Int("capacity-steps", 15, "the capacity ladder's steps at most")
	capHold := flag.Duration("capacity-hold", 3*time.Second, "how long each step of the capacity ladder offers its rate")
	capP99 := flag.Duration("capacity-p99", 50*time.Millisecond, "a step of the capacity ladder is carried when its p99 is at most this (and at least 97% of it is answered): beyond a process set's capacity its queue grows and its p99 with it, to hundreds of milliseconds within a step")
	capTight := flag.Duration("capacity-tight", 20*time.Millisecond, "the capacity ladder also reports the highest rate carried within this p99")
	simSlices := flag.Int("sim-slices", 6, "the simulation comparison (sim): slices each kind of create, plain and simulated, is offered the load")
	simSlice := flag.Duration("sim-slice", 3*time.Second, "the simulation comparison: how long a slice lasts")
	simDelay := flag.Duration("sim-delay", 0, "the simulation comparison: a delay added to each simulation request, standing for a node across a network (the simulated chain answers from this process)")
	only := flag.String("only", "", "a regular expression: run only the scenarios whose key (hot1, hot3, naive3, p99, signers1000, sim, capacity, ...) matches; the summary lines show 0 for the others")
	flag.Parse()
	filter, err := regexp.Compile(*only)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchapi: -only:", err)
		os.Exit(2)
	}
	abEnv, err := parseAB(*ab)
	if err == nil && (*simSlices < 1 || *simSlice <= 0 || *simDelay < 0) {
		err = fmt.Errorf("-sim-slices and -sim-slice must be positive, -sim-delay not negative")
	}
	if err != nil || *abSlices < 1 || *abSlice <= 0 {
		fmt.Fprintln(os.Stderr, "benchapi: -ab, -ab-slices, -ab-slice:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	relayPrompts = *relay
	if abEnv != nil {
		err = runABs(ctx, *conc, *procs, *rate, *warm, filter, abEnv, *abSlices, *abSlice, *abLead)
	} else {
		l := ladder{from: *capFrom, step: *capStep, steps: *capSteps, hold: *capHold, p99: *capP99, tight: *capTight}
		err = run(ctx, *n, *naiveN, *conc, *procs, *rate, *rateFor, *warm, *profile, *statements, filter, l,
			simOptions{slices: *simSlices, slice: *simSlice, delay: *simDelay})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchapi:", err)
		os.Exit(1)
	}
}

// relayPrompts is -relay; apiEnv is what every API process gets besides
// its own settings (the Pub/Sub emulator, with -relay).
var (
	relayPrompts bool
	apiEnv       []string
)

// benchProject is the Pub/Sub project of -relay's emulator.
const benchProject = "txfence-bench"

type scenario struct {
	mode     string  // "naive" or "batched"
	procs    int     // API processes
	signers  int     // 1: a hot signer
	rate     float64 // offered creates/s; 0: closed loop
	requests int
}

// key names the scenario for -only: the summary line's names where it has
// one (hot1, hot3, naive3, p99, signers1000), else signers, mode and
// processes (naive1, 64batched3, ...).
func (sc scenario) key() string {
	w := "hot"
	if sc.signers > 1 {
		w = fmt.Sprintf("signers%d", sc.signers)
	}
	switch {
	case sc.rate > 0:
		return "p99"
	case sc.signers == 1 && sc.mode == "batched":
		return fmt.Sprintf("hot%d", sc.procs)
	case sc.signers == 1:
		return fmt.Sprintf("naive%d", sc.procs)
	case sc.signers == 1000:
		return w
	}
	return fmt.Sprintf("%s%s%d", w, sc.mode, sc.procs)
}

func (sc scenario) name() string {
	w := "hot"
	if sc.signers > 1 {
		w = fmt.Sprintf("%d", sc.signers)
	}
	if sc.rate > 0 {
		return fmt.Sprintf("%-8s %-6d %-8s", w, sc.procs, fmt.Sprintf("@%.0f/s", sc.rate))
	}
	return fmt.Sprintf("%-8s %-6d %-8s", w, sc.procs, sc.mode)
}

// outcome is what one scenario measured.
type outcome struct {
	res       loadgen.Result
	warm      loadgen.Result // the warm-up before it, not counted
	rssMB     float64        // the highest peak RSS of its API processes
	perCommit float64        // creates per database transaction that wrote (an allocation call, a relay's delete, ...)
	cpu       stack.CPUTimes
}

// cpuPer is CPU time per successful create of the servers, PostgreSQL and
// the load generator, in µs.
func (o outcome) cpuPer() string {
	n := float64(max(len(o.res.Latencies), 1))
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) / n }
	return fmt.Sprintf("cpu/create: api %.0fµs pg %.0fµs load %.0fµs", us(o.cpu.Procs), us(o.cpu.Postgres), us(o.cpu.Self))
}

// bench is what the scenarios run against.
type bench struct {
	server, dbURL, rpcURL string
	pool                  *pgxpool.Pool
	chain                 *evmtest.Chain
	deployer              evmtest.DevKey // funded: deploys the token the simulated creates call
	signers               []string
	scenarios             []scenario
	latency, many         scenario // the p99 and signers1000 scenarios
}

// setUp builds the server, starts PostgreSQL (with pg_stat_statements when
// statements) and a simulated chain, and lists the scenarios; the returned
// function stops what it started.
func setUp(ctx context.Context, n, naiveN int, rate float64, rateFor time.Duration, statements bool) (*bench, func(), error) {
	var stops []func()
	cleanup := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	server, rm, err := stack.BuildTempServer(ctx)
	if err != nil {
		return nil, nil, err
	}
	stops = append(stops, rm)
	fmt.Println("starting PostgreSQL (durable: fsync on, synchronous_commit on) and a simulated chain ...")
	opts := pgtest.Options{Durable: true}
	if statements {
		opts.Preload = []string{"pg_stat_statements"}
	}
	dbURL, pool, stopDB, err := stack.BenchDatabase(ctx, opts)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	stops = append(stops, stopDB)
	deployer := evmtest.DevKeys(1)[0]
	chain, err := evmtest.New(evmtest.FundedAlloc([]evmtest.DevKey{deployer}, evmtest.DevBalance()))
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	stops = append(stops, func() { chain.Close() })
	b := &bench{server: server, dbURL: dbURL, rpcURL: chain.URL, pool: pool, chain: chain, deployer: deployer}
	if relayPrompts {
		ps, err := pubsubtest.Start(ctx, benchProject)
		if err != nil {
			cleanup()
			return nil, nil, err
		}
		stops = append(stops, func() { _ = ps.Close() })
		if err := ps.CreateTopic(ctx, stack.TopicSubmit); err != nil {
			cleanup()
			return nil, nil, err
		}
		apiEnv = []string{"PUBSUB_EMULATOR_HOST=" + ps.Addr, "TXFENCE_PROJECT=" + benchProject, "TXFENCE_TOPIC_SUBMIT=" + stack.TopicSubmit}
		fmt.Println("submit prompts are published through a Pub/Sub emulator in this process and deleted from the outbox, as deployed")
	}

	b.signers = make([]string, 1000)
	for i := range b.signers {
		b.signers[i] = common.BigToAddress(new(big.Int).Add(new(big.Int).Lsh(big.NewInt(1), 64), big.NewInt(int64(i)))).Hex()
	}
	for _, w := range []int{1, 64} {
		for _, p := range []int{1, 3} {
			b.scenarios = append(b.scenarios, scenario{mode: "naive", procs: p, signers: w, requests: naiveN},
				scenario{mode: "batched", procs: p, signers: w, requests: n})
		}
	}
	b.latency = scenario{mode: "batched", procs: 3, signers: 1, rate: rate, requests: int(rate * rateFor.Seconds())}
	b.many = scenario{mode: "batched", procs: 3, signers: 1000, requests: n}
	b.scenarios = append(b.scenarios, b.latency, b.many)
	return b, cleanup, nil
}

// clean empties the tables a scenario writes.
func (b *bench) clean(ctx context.Context) error {
	_, err := b.pool.Exec(ctx, `TRUNCATE managed_tx, tx_attempt, tx_history, outbox, tx_completion, completion_pending, signer_nonce_cursor, signer_lease CASCADE`)
	return err
}

// runABs runs the selected batched scenarios as A/B comparisons (see
// ab.go), and checks nonces after each.
func runABs(ctx context.Context, conc, gomaxprocs int, rate float64, warm time.Duration, only *regexp.Regexp,
	env []string, slices int, slice, lead time.Duration) error {
	b, cleanup, err := setUp(ctx, 0, 0, rate, 0, false)
	if err != nil {
		return err
	}
	defer cleanup()
	fmt.Printf("A/B: B adds %s; %d slices of %s each, A B B A ..., each after %s at the load not counted; %d concurrent clients (closed loop), each side after %s at its own load not counted\n\n",
		strings.Join(env, " "), slices, slice, lead, conc, warm)
	for _, sc := range b.scenarios {
		if sc.mode != "batched" || !only.MatchString(sc.key()) {
			continue
		}
		if err := b.clean(ctx); err != nil {
			return err
		}
		x, y, err := runAB(ctx, sc, b.server, b.dbURL, b.rpcURL, b.signers, conc, gomaxprocs, warm, b.pool, env, slices, slice, lead)
		if err != nil {
			return fmt.Errorf("%s: %w", sc.name(), err)
		}
		printAB(sc, x, y)
		if err := stack.CheckContiguous(ctx, b.pool); err != nil {
			return fmt.Errorf("%s: %w", sc.name(), err)
		}
	}
	fmt.Println("\nnonces contiguous for every signer in every scenario")
	return nil
}

func run(ctx context.Context, n, naiveN, conc, gomaxprocs int, rate float64, rateFor, warm time.Duration, profile string, statements bool,
	only *regexp.Regexp, l ladder, simOpts simOptions) error {
	b, cleanup, err := setUp(ctx, n, naiveN, rate, rateFor, statements)
	if err != nil {
		return err
	}
	defer cleanup()
	server, dbURL, pool, signers, scenarios, latency, many := b.server, b.dbURL, b.pool, b.signers, b.scenarios, b.latency, b.many
	chainURL := b.rpcURL

	fmt.Printf("%d creates per batched scenario, %d per naive one, %d concurrent clients (closed loop), each after %s at its own load not counted\n\n",
		n, naiveN, conc, warm)
	fmt.Printf("%-8s %-6s %-8s %s\n", "signers", "procs", "mode", "result")
	got := map[scenario]outcome{}
	baseline := map[string]float64{}
	for _, sc := range scenarios {
		if !only.MatchString(sc.key()) {
			continue
		}
		if err := b.clean(ctx); err != nil {
			return err
		}
		if statements {
			if err := stack.ResetStatements(ctx, pool); err != nil {
				return err
			}
		}
		o, err := runScenario(ctx, sc, server, dbURL, chainURL, signers, conc, gomaxprocs, warm, pool, profile)
		if err != nil {
			return fmt.Errorf("%s: %w", sc.name(), err)
		}
		got[sc] = o
		ratio := ""
		key := fmt.Sprintf("%d/%d", sc.signers, sc.procs)
		if sc.mode == "naive" {
			baseline[key] = o.res.PerSecond()
		} else if b := baseline[key]; b > 0 && sc.rate == 0 {
			ratio = fmt.Sprintf("  ×%.1f vs naive", o.res.PerSecond()/b)
		}
		fmt.Printf("%s %s%s  rss %.0f MB  %.1f creates/commit  %s\n", sc.name(), o.res, ratio, o.rssMB, o.perCommit, o.cpuPer())
		if warm > 0 {
			fmt.Printf("%-24s warm-up, not counted: %s\n", "", o.warm)
		}
		if statements {
			if err := stack.PrintStatements(ctx, pool, 8); err != nil {
				return err
			}
		}
		if err := stack.CheckContiguous(ctx, pool); err != nil {
			return fmt.Errorf("%s: %w", sc.name(), err)
		}
		if o.res.Errors > 0 {
			return fmt.Errorf("%s: %d creates failed: %v", sc.name(), o.res.Errors, o.res.Statuses)
		}
	}
	var sim simOutcome
	if only.MatchString("sim") {
		if sim, err = runSim(ctx, b, conc, gomaxprocs, warm, profile, simOpts); err != nil {
			return err
		}
	}
	if only.MatchString("capacity") {
		if err := runCapacity(ctx, b, pool, gomaxprocs, warm, l); err != nil {
			return err
		}
	}
	fmt.Println("\nnonces contiguous for every signer in every scenario")
	hot1 := got[scenario{mode: "batched", procs: 1, signers: 1, requests: n}]
	hot3 := got[scenario{mode: "batched", procs: 3, signers: 1, requests: n}]
	naive3 := got[scenario{mode: "naive", procs: 3, signers: 1, requests: naiveN}]
	rss := 0.0
	for sc, o := range got {
		if sc.signers == 1 && sc.mode == "batched" {
			rss = max(rss, o.rssMB)
		}
	}
	fmt.Printf("bench-api-sim: plain=%.0f sim=%.0f ratio=%.2f sim_p50ms=%.2f sim_p99ms=%.2f\n",
		sim.plain.PerSecond(), sim.sim.PerSecond(), sim.sim.PerSecond()/max(sim.plain.PerSecond(), 1),
		float64(sim.callQuantile(0.5).Microseconds())/1000, float64(sim.callQuantile(0.99).Microseconds())/1000)
	fmt.Printf("bench-api: hot1=%.0f hot3=%.0f naive3=%.0f ratio=%.1f p99ms=%.1f signers1000=%.0f rssmb=%.0f\n",
		hot1.res.PerSecond(), hot3.res.PerSecond(), naive3.res.PerSecond(), hot3.res.PerSecond()/naive3.res.PerSecond(),
		float64(got[latency].res.Quantile(0.99).Microseconds())/1000, got[many].res.PerSecond(), rss)
	return nil
}

func runScenario(ctx context.Context, sc scenario, server, dbURL, rpcURL string, signers []string, conc, gomaxprocs int,
	warm time.Duration, pool *pgxpool.Pool, profile string) (outcome, error) {
	api, err := startAPI(ctx, sc, server, dbURL, rpcURL, signers, gomaxprocs, nil, "", profile != "")
	defer api.stop()
	if err != nil {
		return outcome{}, err
	}
	urls, procs, profileFrom := api.urls, api.procs, api.pprof
	use := signers[:sc.signers]
	// Warm up: each process builds its clients and syncs each signer's nonce once.
	if _, err := loadgen.Run(ctx, loadgen.Config{URLs: urls, ChainID: 1337, Signers: use, Concurrency: min(len(urls)*len(use), 256),
		Requests: len(urls) * len(use)}); err != nil {
		return outcome{}, err
	}
	cfg := loadgen.Config{URLs: urls, ChainID: 1337, Signers: use, Concurrency: conc, Requests: sc.requests, Rate: sc.rate}
	if sc.rate > 0 {
		cfg.Concurrency = 1024 // in flight at most; the offered rate sets the pace
	}
	// The warm-up's connections carry over to the measured run.
	cfg.Conns = loadgen.NewConns()
	defer cfg.Conns.Close()
	var warmRes loadgen.Result
	if warm > 0 {
		w := cfg
		w.Requests, w.Duration = 0, warm
		var err error
		if warmRes, err = loadgen.Run(ctx, w); err != nil {
			return outcome{}, err
		}
		if warmRes.Errors > 0 {
			return outcome{}, fmt.Errorf("warm-up: %d creates failed: %v", warmRes.Errors, warmRes.Statuses)
		}
	}
	// Transactions that wrote, counted by the transaction ids handed out
	// (the next one to be assigned, which reading does not consume):
	// pg_stat_database's xact_commit lags, since PostgreSQL 15 an idle
	// backend reports its counts up to 10 s late, which made a one-second
	// scenario's figure meaningless.
	commits := func() float64 { return xids(ctx, pool) }
	before := commits()
	var pids []int
	for _, p := range procs {
		pids = append(pids, p.Process.Pid)
	}
	cpuBefore := stack.SampleCPU(pids)
	var prof chan error
	if profileFrom != "" {
		prof = make(chan error, 1)
		go func() {
			prof <- cpuProfile(ctx, profileFrom, filepath.Join(profile, strings.ReplaceAll(strings.Join(strings.Fields(sc.name()), "-"), "/", "")+".pprof"))
		}()
	}
	res, err := loadgen.Run(ctx, cfg)
	if err != nil {
		return outcome{}, err
	}
	cpu := stack.SampleCPU(pids).Sub(cpuBefore)
	if prof != nil {
		if err := <-prof; err != nil {
			return outcome{}, err
		}
	}
	o := outcome{res: res, warm: warmRes, perCommit: float64(len(res.Latencies)) / max(commits()-before, 1), cpu: cpu}
	for _, p := range procs {
		o.rssMB = max(o.rssMB, peakRSS(p.Process.Pid))
	}
	return o, nil
}

// cpuProfile saves a 5s CPU profile of the process serving pprof at addr.
func cpuProfile(ctx context.Context, addr, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/pprof/profile?seconds=5", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	fmt.Printf("  cpu profile: %s\n", file)
	return os.WriteFile(file, b, 0o644)
}

// peakRSS is a process's peak resident set (VmHWM) in MB, 0 if unknown.
func peakRSS(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// apiProcs is a set of running API processes.
type apiProcs struct {
	urls  []string
	procs []*exec.Cmd
	pprof string // the first process's pprof address, when profiling
}

// stop ends the processes.
func (a *apiProcs) stop() {
	for _, p := range a.procs {
		_ = p.Process.Signal(syscall.SIGTERM)
		_ = p.Wait()
	}
}

// startAPI starts sc's API processes, with env added to their environment
// and tag in their instance ids, and waits until each is ready. The caller
// stops them, also after an error.
func startAPI(ctx context.Context, sc scenario, server, dbURL, rpcURL string, signers []string, gomaxprocs int,
	env []string, tag string, profile bool) (*apiProcs, error) {
	a := &apiProcs{}
	for i := 0; i < sc.procs; i++ {
		port, err := stack.FreePort()
		if err != nil {
			return a, err
		}
		cmd := exec.CommandContext(ctx, server)
		cmd.Env = append(os.Environ(),
			"FUNCTION_TARGET=Api", "HOST=127.0.0.1", fmt.Sprintf("PORT=%d", port),
			"TXFENCE_DATABASE_URL="+dbURL,
			"TXFENCE_CHAINS=1337="+rpcURL,
			"TXFENCE_SIGNERS="+strings.Join(signers, ","),
			fmt.Sprintf("TXFENCE_INSTANCE_ID=bench-%s%s-%d", sc.mode, tag, i),
			"TXFENCE_DB_MAX_CONNS=20",
			"TXFENCE_LOG_LEVEL=error",
			// The bench measures creates, not the per-instance rate limits.
			"TXFENCE_AUTH=dev",
			"TXFENCE_RATE_PER_SECOND=1000000", "TXFENCE_RATE_BURST=1000000",
			"TXFENCE_SIGNER_RATE_PER_SECOND=1000000",
		)
		if profile && i == 0 {
			pp, err := stack.FreePort()
			if err != nil {
				return a, err
			}
			a.pprof = fmt.Sprintf("127.0.0.1:%d", pp)
			cmd.Env = append(cmd.Env, "TXFENCE_PPROF_ADDR="+a.pprof)
		}
		if gomaxprocs > 0 {
			cmd.Env = append(cmd.Env, fmt.Sprintf("GOMAXPROCS=%d", gomaxprocs))
		}
		if sc.mode == "naive" {
			cmd.Env = append(cmd.Env, "TXFENCE_BATCH_SIZE=1", "TXFENCE_BATCH_WAIT=0s")
		}
		cmd.Env = append(cmd.Env, apiEnv...)
		cmd.Env = append(cmd.Env, env...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return a, err
		}
		a.procs = append(a.procs, cmd)
		url := fmt.Sprintf("http://127.0.0.1:%d", port)
		if err := stack.WaitReady(ctx, url+"/healthz"); err != nil {
			return a, err
		}
		a.urls = append(a.urls, url)
	}
	return a, nil
}
