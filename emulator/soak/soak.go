// Package soak is txfence's fault soak (issue 10): it drives the local
// stack (several function servers, one simulated chain, PostgreSQL, Pub/Sub)
// with creates on several signers while it injects faults in turn (a
// funding dip, a fee spike, JSON-RPC error answers, timeouts and dropped
// connections, dropped broadcasts, a SIGKILL and a SIGSTOP of a server, a
// PostgreSQL restart, reorgs), then heals everything, waits for every
// transaction to settle and checks every row and the completions feed.
//
// `make soak` runs the command emulator/cmd/soak; TestIssue10_Soak runs a
// short version. Both end with one line,
//
//	soak: txs=N confirmed=N failed=N open=N violations=N faults=N
package soak

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/big"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txfence/txfence/emulator/stack"
)

// Config shapes a soak. Zero fields take the defaults noted.
type Config struct {
	ServerBinary string // the built functions/server binary (required)
	Txs          int    // creates to make (2000)
	Signers      int    // signers the creates are spread over (4)
	Servers      int    // function-server processes (3)
	Seed         uint64 // picks signers, values, the odd creates and the faults' victims (1)
	// Timeout bounds the wait, after the faults have healed, for every
	// transaction to settle (5m).
	Timeout time.Duration
	// Window is how long each fault lasts (8s); Gap the calm after it (4s).
	Window, Gap time.Duration
	BlockTime   time.Duration // simulated block interval (500ms)
	// Faults to inject, by name (all of FaultNames when empty).
	Faults []string
	// MaxFee1 is how many creates cap the fee at 1 wei, below any base fee:
	// 0 for one in 250 (at least 2), negative for none.
	MaxFee1 int
	// Env is extra environment for the servers, after the soak's own.
	Env []string

	Out          io.Writer // progress, violations and the last line (required)
	ServerOutput io.Writer // the servers' logs (discarded when nil)
	// MaxReported bounds the violation and open-transaction lines printed
	// (40); every one is counted.
	MaxReported int
}

func (c *Config) defaults() error {
	if c.ServerBinary == "" || c.Out == nil {
		return errors.New("soak: ServerBinary and Out are required")
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defd := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.Txs, 2000)
	def(&c.Signers, 4)
	def(&c.Servers, 3)
	def(&c.MaxReported, 40)
	if c.Servers < 2 {
		return errors.New("soak: at least 2 servers (one is killed, one paused)")
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	defd(&c.Timeout, 5*time.Minute)
	defd(&c.Window, 8*time.Second)
	defd(&c.Gap, 4*time.Second)
	defd(&c.BlockTime, 500*time.Millisecond)
	if len(c.Faults) == 0 {
		c.Faults = FaultNames
	}
	for _, f := range c.Faults {
		if !knownFault(f) {
			return fmt.Errorf("soak: unknown fault %q (known: %s)", f, strings.Join(FaultNames, ", "))
		}
	}
	return nil
}

// Result is what a soak found.
type Result struct {
	Txs, Confirmed, Failed, Open int
	Violations                   int
	Faults                       int // fault injections made
	Duration                     time.Duration
}

// Line is the soak's last line.
func (r Result) Line() string {
	return fmt.Sprintf("soak: txs=%d confirmed=%d failed=%d open=%d violations=%d faults=%d",
		r.Txs, r.Confirmed, r.Failed, r.Open, r.Violations, r.Faults)
}

// OK reports whether every transaction settled and no invariant broke.
func (r Result) OK() bool { return r.Open == 0 && r.Violations == 0 }

// Settings of the servers: fast timings so that a soak of minutes sees
// every path (bumps, backoff, STUCK and its resolution) many times.
var serverEnv = []string{
	"TXFENCE_BUMP_AFTER=2s",
	"TXFENCE_RETRY_BACKOFF_MIN=500ms",
	"TXFENCE_RETRY_BACKOFF_MAX=5s",
	"TXFENCE_STUCK_AFTER=20s",
	"TXFENCE_RESUBMIT_INTERVAL=3s",
	"TXFENCE_RESUBMIT_BUDGET=3s",
	"TXFENCE_RESUBMIT_PASS_INTERVAL=500ms",
	"TXFENCE_LEASE_DURATION=3s",
	"TXFENCE_LEASE_RENEW=1s",
	"TXFENCE_STALE_RECEIPT_TIMEOUT=5s",
	// A receipt check follows the head for less than the stale timeout,
	// as deployed (20s against 60s): checks end "not mined yet" while
	// their prompts are young, and Receipt must answer them 2xx.
	"TXFENCE_RECEIPT_WAIT=2s",
	// The chain's miner takes tips from 1 wei, so a first attempt offers
	// 2 x base fee + ~1 wei, which a fee spike can overtake in a few blocks.
	"TXFENCE_MIN_PRIORITY_FEE_WEI=1",
}

// Chain settings: blocks small enough for one burner call to fill past the
// target, tips from 1 wei.
const blockGasLimit = 10_000_000

// confirmations required by the servers: a reorg of confirmations+1 blocks
// reopens reported outcomes (newFork re-reports).
const confirmations = 2

// run is one soak in progress.
type run struct {
	cfg   Config
	s     *stack.Stack
	db    *pgxpool.Pool
	out   *printer
	start time.Time

	rngMu sync.Mutex
	rng   *rand.Rand

	phase   atomic.Value // string: the fault under way, for the creates' records
	faults  atomic.Int64
	windows []window // faults injected, in order
	winMu   sync.Mutex

	creates *creates
	viol    violations
}

// window is when a fault was under way.
type window struct {
	name       string
	start, end time.Time
	detail     string
}

// Run runs a soak and reports what it found. The error is for a soak that
// could not run (the stack did not start); what the soak finds is in the
// Result.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.defaults(); err != nil {
		return Result{}, err
	}
	r := &run{cfg: cfg, out: newPrinter(cfg.Out), start: time.Now(), rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5eed))}
	r.phase.Store("warmup")
	r.out.printf("soak: %d creates on %d signers, %d servers, faults %s, seed %d", cfg.Txs, cfg.Signers, cfg.Servers,
		strings.Join(cfg.Faults, ","), cfg.Seed)

	s, err := stack.Start(ctx, stack.Options{
		ServerBinary: cfg.ServerBinary, Servers: cfg.Servers, Signers: cfg.Signers, BlockTime: cfg.BlockTime,
		Confirmations: confirmations, ScheduleEvery: 2 * time.Second, FaultProxy: true,
		LaggingEndpoint: slices.Contains(cfg.Faults, faultLagging), BlockGasLimit: blockGasLimit, MinerTip: big.NewInt(1),
		Env: append(append([]string{}, serverEnv...), cfg.Env...), ServerOutput: cfg.ServerOutput,
	})
	if err != nil {
		return Result{}, fmt.Errorf("soak: start the stack: %w", err)
	}
	defer s.Close()
	r.s = s
	if r.db, err = pgxpool.New(ctx, s.DatabaseURL); err != nil {
		return Result{}, fmt.Errorf("soak: database: %w", err)
	}
	defer r.db.Close()
	r.out.printf("soak: stack up in %s", time.Since(r.start).Round(100*time.Millisecond))
	r.settleBaseFee(ctx)

	// The creates run for as long as the faults take, spread evenly.
	plan := r.plan()
	loadFor := time.Duration(len(plan)+1) * (cfg.Window + cfg.Gap)
	r.creates = newCreates(r, loadFor)
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var load sync.WaitGroup
	load.Go(func() { r.creates.run(loadCtx) })
	progress, stopProgress := context.WithCancel(ctx)
	defer stopProgress()
	go r.progress(progress)

	r.sleep(ctx, cfg.Gap) // some traffic before the first fault
	for _, f := range plan {
		if ctx.Err() != nil {
			break
		}
		r.inject(ctx, f)
		r.sleep(ctx, cfg.Gap)
	}
	r.phase.Store("after-faults")
	load.Wait()
	r.healAll(ctx)
	r.phase.Store("settling")
	r.out.printf("soak: %d creates made (%d retried, %d given up) in %s; every fault healed; waiting up to %s for every transaction to settle",
		r.creates.made(), r.creates.retries.Load(), r.creates.failed.Load(), time.Since(r.start).Round(time.Second), cfg.Timeout)

	settled := r.waitSettled(ctx, cfg.Timeout)
	stopProgress()
	if !settled {
		r.out.printf("soak: not every transaction settled within %s", cfg.Timeout)
	}
	res := r.check(ctx)
	res.Faults = int(r.faults.Load())
	res.Duration = time.Since(r.start)
	r.report()
	r.out.printf("soak: took %s", res.Duration.Round(time.Second))
	r.out.printf("%s", res.Line())
	return res, nil
}

// settleBaseFee seals empty blocks until the base fee stops falling (a new
// chain starts at 1 gwei and loses 12.5% per empty block, down to 7 wei), so
// that fees, and the fee spike needed to overtake them, are those of a quiet
// chain from the start rather than of its first minutes.
func (r *run) settleBaseFee(ctx context.Context) {
	from, err := r.s.BaseFee(ctx)
	if err != nil {
		return
	}
	prev := from
	for i := 0; i < 400 && ctx.Err() == nil; i++ {
		r.s.Chain.Commit()
		bf, err := r.s.BaseFee(ctx)
		if err != nil || bf.Cmp(prev) >= 0 {
			break
		}
		prev = bf
	}
	r.out.printf("soak: base fee settled from %s to %s wei", from, prev)
}

// sleep waits d or until ctx is done.
func (r *run) sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// intn is a seeded random number in [0, n).
func (r *run) intn(n int) int {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return r.rng.IntN(n)
}

// chance is true with probability p.
func (r *run) chance(p float64) bool {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return r.rng.Float64() < p
}

// progress prints a line every 10 seconds: the phase, the creates and the
// states of the rows.
func (r *run) progress(ctx context.Context) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		states, err := r.states(ctx)
		line := fmt.Sprintf("soak: t=%s phase=%s created=%d", time.Since(r.start).Round(time.Second), r.phase.Load(), r.creates.made())
		if err != nil {
			line += " states=? (" + err.Error() + ")"
		} else {
			line += " " + formatCounts(states)
		}
		if bf, err := r.s.BaseFee(ctx); err == nil {
			line += " baseFee=" + bf.String()
		}
		r.out.printf("%s", line)
	}
}

// states counts the rows by state.
func (r *run) states(ctx context.Context) (map[string]int, error) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rows, err := r.db.Query(qctx, `SELECT state, count(*) FROM managed_tx GROUP BY state`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var st string
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			return nil, err
		}
		out[st] = n
	}
	return out, rows.Err()
}

// waitSettled waits until no row is open (ALLOCATED, TRACKING, MINED or
// STUCK), the creates are all stored and every outcome is numbered, for at
// most limit.
func (r *run) waitSettled(ctx context.Context, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for {
		states, err := r.states(ctx)
		if err == nil {
			open := states["ALLOCATED"] + states["TRACKING"] + states["MINED"] + states["STUCK"]
			// A write commits its outcomes first and numbers them (into
			// the feed) right after, or the next finality pass does.
			var pending bool
			err = r.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM completion_pending)`).Scan(&pending)
			if err == nil && open == 0 && !pending {
				return true
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		r.sleep(ctx, time.Second)
	}
}

// formatCounts renders counts as k=v in key order.
func formatCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}

// printer serialises output lines.
type printer struct {
	mu sync.Mutex
	w  io.Writer
}

func newPrinter(w io.Writer) *printer { return &printer{w: w} }

func (p *printer) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, format+"\n", args...)
}
