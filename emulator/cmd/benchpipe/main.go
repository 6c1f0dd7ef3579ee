// Command benchpipe measures the whole pipeline after the create, on the
// local stack (emulator/stack: function-server processes, pstest and the push
// bridge, the simulated chain mining a block every second, a durable
// PostgreSQL, the scheduler stand-ins), all sharing this machine:
//
//  1. Sustained load: closed-loop clients create transfers on a hot signer
//     and, at the same time, on 100 other signers, for a while (or, with
//     -rate, an offered rate on each: runs of different code then carry
//     the same load, which closed loops do not); then every
//     transaction is followed to CONFIRMED. It reports the rate of each stage
//     (created, TRACKING, MINED, CONFIRMED) and the finality lag: from the
//     moment the block that completes the required depth was sealed to the
//     moment CONFIRMED was written.
//  2. Broadcast: with the submit subscription paused, a backlog of creates
//     on the hot signer; then the subscription is resumed and the time until
//     all are TRACKING is compared with the node's own ingestion rate
//     (sequential eth_sendRawTransaction of pre-signed transfers from another
//     key, same transport), measured in the same process on the settled
//     stack before and after each of several rounds (-rounds): the ratio is
//     the median of the rounds' ratios.
//
// It fails loudly if any signer's nonces are not contiguous or any
// transaction does not end CONFIRMED. Run it with `make bench-pipeline`; the
// last line is
//
//	bench-pipeline: created=<tx/s> confirmed=<tx/s> broadcast_ratio=<r> lag_p50ms=<> lag_p99ms=<> cpu_ms_per_tx=<>
//
// cpu_ms_per_tx is the CPU the function servers and PostgreSQL spent from
// the start of the sustained load until its last transaction was
// CONFIRMED, in milliseconds per transaction; the report above it gives
// each function's share and PostgreSQL's (cpu.go).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/big"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/rpc"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txfence/txfence/emulator/bridge"
	"github.com/txfence/txfence/emulator/loadgen"
	"github.com/txfence/txfence/emulator/stack"
	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/pubsub"
	"github.com/txfence/txfence/shared/txm"
)

type options struct {
	duration      time.Duration
	hotClients    int
	spreadClients int
	rate          float64
	signers       int
	servers       int
	confirmations uint64
	blockTime     time.Duration
	burst         int
	rounds        int
	serverLog     string
	logLevel      string
	pprof         string
	statements    bool
	cpuProfile    string
}

func main() {
	var o options
	flag.DurationVar(&o.duration, "duration", 20*time.Second, "how long the sustained load runs")
	flag.IntVar(&o.hotClients, "hot-c", 16, "closed-loop clients on the hot signer")
	flag.IntVar(&o.spreadClients, "spread-c", 16, "closed-loop clients spread over the other signers")
	flag.Float64Var(&o.rate, "rate", 0, "when positive, offer this many creates/s on the hot signer and as many over the other signers (open loop, at most -hot-c and -spread-c in flight each) instead of the closed loops; runs of different code then carry the same load")
	flag.IntVar(&o.signers, "signers", 100, "signers besides the hot one")
	flag.IntVar(&o.servers, "servers", 2, "function-server processes")
	flag.Uint64Var(&o.confirmations, "confirmations", 3, "confirmations required")
	flag.DurationVar(&o.blockTime, "block-time", time.Second, "simulated block interval")
	flag.IntVar(&o.burst, "burst", 2000, "creates in the broadcast backlog")
	flag.IntVar(&o.rounds, "rounds", 5, "broadcast rounds: each drains a backlog between two measures of the node's own rate, and the ratio is the median of the rounds'")
	flag.StringVar(&o.serverLog, "server-log", "", "append the function servers' logs to this file")
	flag.StringVar(&o.logLevel, "log-level", "warn", "the function servers' TXFENCE_LOG_LEVEL")
	flag.BoolVar(&o.statements, "pg-statements", false, "report the sustained load's most expensive statements on PostgreSQL's side (pg_stat_statements: calls, mean and total time, rows)")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of this process (the chain, Pub/Sub fake, push bridge and load clients) during the sustained load to this file")
	flag.StringVar(&o.pprof, "pprof", "", "serve the function server's pprof on this loopback host:port (with -servers 1)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "benchpipe:", err)
		os.Exit(1)
	}
}

// inFlight is the hot signer's broadcast-but-unmined bound
// (TXFENCE_MAX_IN_FLIGHT) and the simulated node's queue an account.
const inFlight = 4096

func run(ctx context.Context, o options) error {
	if o.rounds < 1 || o.burst < 1 {
		return fmt.Errorf("-rounds %d and -burst %d: each must be at least 1", o.rounds, o.burst)
	}
	server, cleanup, err := stack.BuildTempServer(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	opts := stack.Options{
		ServerBinary: server, Servers: o.servers, Signers: 1 + o.signers, Durable: true,
		BlockTime: o.blockTime, Confirmations: o.confirmations,
		// As the README asks of a node serving a signer with more than 64 in
		// flight: geth's pool queues 64 an account by default and drops the
		// highest of those waiting when a block lands among them, which
		// stops the hot signer until the resubmit sweep's recheck
		// (TXFENCE_RECHECK_AFTER) and would make the bench measure that.
		TxPoolQueue: inFlight,
		Env: []string{
			"TXFENCE_LOG_LEVEL=" + o.logLevel,
			// A hot signer's broadcast rate is bounded by how many transactions
			// may be in flight (default 64, for public nodes' per-account pool
			// limits): the simulated node holds 5,120 pending.
			fmt.Sprintf("TXFENCE_MAX_IN_FLIGHT=%d", inFlight),
			// A finality pass sweeps its signers TXFENCE_RECEIPT_WORKERS at a
			// time (default 10): with 101 signers with work, 10 make a pass
			// take seconds under this load.
			"TXFENCE_RECEIPT_WORKERS=32",
			// The bench measures the pipeline, not the per-instance rate limits.
			"TXFENCE_RATE_PER_SECOND=1000000", "TXFENCE_RATE_BURST=1000000", "TXFENCE_SIGNER_RATE_PER_SECOND=1000000",
		},
	}
	if o.statements {
		opts.Preload = []string{"pg_stat_statements"}
	}
	if o.pprof != "" {
		if o.servers != 1 {
			return errors.New("-pprof needs -servers 1: the servers would share the address")
		}
		opts.Env = append(opts.Env, "TXFENCE_PPROF_ADDR="+o.pprof)
	}
	// Each server serves its CPU profiles on a port of its own, for telling
	// the functions' CPU apart (-pprof serves one instead, to a person).
	var profileAddrs []string
	if o.pprof == "" {
		for range o.servers {
			port, err := stack.FreePort()
			if err != nil {
				return err
			}
			profileAddrs = append(profileAddrs, fmt.Sprintf("127.0.0.1:%d", port))
		}
		opts.ServerEnv = func(i int) []string { return []string{"TXFENCE_PPROF_ADDR=" + profileAddrs[i]} }
	}
	if o.serverLog != "" {
		f, err := os.OpenFile(o.serverLog, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		opts.ServerOutput = f
	}
	fmt.Printf("starting the stack: %d function servers, %d signers, durable PostgreSQL, a block every %s, %d confirmations ...\n",
		o.servers, 1+o.signers, o.blockTime, o.confirmations)
	s, err := stack.Start(ctx, opts)
	if err != nil {
		return err
	}
	defer s.Close()
	pool, err := benchPool(ctx, s.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	cctx, stopConsuming := context.WithCancel(ctx)
	defer stopConsuming()
	consumed, err := consume(cctx, s)
	if err != nil {
		return err
	}

	var urls []string
	for _, u := range s.ServerURLs {
		urls = append(urls, u+"/Api")
	}
	hot := s.Signers[0].Hex()
	var spread []string
	for _, a := range s.Signers[1:] {
		spread = append(spread, a.Hex())
	}
	all := append([]string{hot}, spread...)
	// Warm up: every process syncs each signer's nonce once.
	if _, err := loadgen.Run(ctx, loadgen.Config{URLs: urls, ChainID: evmtest.ChainID, Signers: all,
		Concurrency: 32, Requests: len(urls) * len(all)}); err != nil {
		return err
	}
	if err := waitFinal(ctx, pool, 3*time.Minute); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}

	if o.statements {
		if err := stack.ResetStatements(ctx, pool); err != nil {
			return err
		}
	}
	if o.rate > 0 {
		fmt.Printf("\nsustained load for %s: %.0f creates/s offered on the hot signer, as many over %d signers\n", o.duration, o.rate, o.signers)
	} else {
		fmt.Printf("\nsustained load for %s: %d clients on the hot signer, %d over %d signers\n", o.duration, o.hotClients, o.spreadClients, o.signers)
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	pushed := s.Bridge.Stats()
	window, err := startCPUWindow(ctx, s, pool, profileAddrs)
	if err != nil {
		return err
	}
	start := time.Now()
	results := make(chan loadgen.Result, 2)
	errs := make(chan error, 2)
	for _, l := range []struct {
		signers []string
		c       int
	}{{[]string{hot}, o.hotClients}, {spread, o.spreadClients}} {
		go func() {
			r, err := loadgen.Run(ctx, loadgen.Config{URLs: urls, ChainID: evmtest.ChainID, Signers: l.signers, Concurrency: l.c, Duration: o.duration,
				Rate: o.rate})
			results <- r
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			return err
		}
		if r := <-results; r.Errors > 0 {
			return fmt.Errorf("%d creates failed: %v", r.Errors, r.Statuses)
		}
	}
	pprof.StopCPUProfile()
	if err := waitFinal(ctx, pool, 5*time.Minute); err != nil {
		return err
	}
	spentCPU, err := window.end(ctx, pool)
	if err != nil {
		return err
	}
	printPushes(pushed, s.Bridge.Stats())
	if o.statements {
		if err := stack.PrintStatements(ctx, pool, 25); err != nil {
			return err
		}
	}
	st, err := stages(ctx, pool, start, s.Signers[0])
	if err != nil {
		return err
	}
	lags, err := finalityLags(ctx, s, st, o.confirmations)
	if err != nil {
		return err
	}
	created, confirmed := st.print(lags)
	cpuPerTx := spentCPU.print(len(st), time.Since(start))
	if err := printResends(ctx, pool, start, s.Signers[0]); err != nil {
		return err
	}

	fmt.Printf("\nbroadcast: %d rounds of %d creates on the hot signer while the submit subscription is paused, then resumed\n",
		o.rounds, o.burst)
	ratio, err := broadcast(ctx, s, pool, urls, hot, o.burst, o.rounds)
	if err != nil {
		return err
	}
	if err := stack.CheckContiguous(ctx, pool); err != nil {
		return err
	}
	// Each acquisition of a chain lease advances its token: the count is
	// what the functions' coordination cost, per transaction.
	var acquired, txs int64
	if err := pool.QueryRow(ctx, `SELECT (SELECT coalesce(sum(fencing_token), 0) FROM signer_lease WHERE scope = 'chain'),
       (SELECT count(*) FROM managed_tx)`).Scan(&acquired, &txs); err != nil {
		return err
	}
	fmt.Printf("chain lease acquisitions: %d, %.2f per transaction\n", acquired, float64(acquired)/float64(max(txs, 1)))
	fmt.Printf("completion messages consumed: %d for %d transactions\n", consumed(), txs)
	fmt.Println("\nevery transaction CONFIRMED; nonces contiguous for every signer")
	fmt.Printf("bench-pipeline: created=%.0f confirmed=%.0f broadcast_ratio=%.2f lag_p50ms=%.0f lag_p99ms=%.0f cpu_ms_per_tx=%.2f\n",
		created, confirmed, ratio, ms(quantile(lags, 0.5)), ms(quantile(lags, 0.99)), cpuPerTx)
	return nil
}

// waitFinal waits until no transaction is open, and fails if any ended
// other than CONFIRMED.
func waitFinal(ctx context.Context, pool *pgxpool.Pool, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		var open, other int
		err := pool.QueryRow(ctx, `
SELECT count(*) FILTER (WHERE state IN ('ALLOCATED', 'TRACKING', 'MINED', 'STUCK')),
       count(*) FILTER (WHERE state = 'FAILED_FINAL')
FROM managed_tx`).Scan(&open, &other)
		if err != nil {
			return err
		}
		if other > 0 {
			return fmt.Errorf("%d transactions FAILED_FINAL", other)
		}
		if open == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d transactions still open after %s", open, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// txTimes is when one transaction reached each stage (database time).
type txTimes struct {
	hot                                 bool
	created, tracking, mined, confirmed time.Time
	inFeed                              time.Time // the outcome numbered into the completion feed
	block                               uint64
	blockHash                           common.Hash
}

type stageTimes []txTimes

// stages reads the stage times of every transaction created since start.
func stages(ctx context.Context, pool *pgxpool.Pool, start time.Time, hot common.Address) (stageTimes, error) {
	rows, err := pool.Query(ctx, `
SELECT t.signer = $2, t.created_at, t.receipt_block_number, t.receipt_block_hash,
       min(h.created_at) FILTER (WHERE h.to_state = 'TRACKING'),
       min(h.created_at) FILTER (WHERE h.to_state = 'MINED'),
       max(h.created_at) FILTER (WHERE h.to_state = 'CONFIRMED'),
       (SELECT min(c.created_at) FROM tx_completion c WHERE c.tx_id = t.id AND c.state = 'CONFIRMED')
FROM managed_tx t JOIN tx_history h ON h.tx_id = t.id
WHERE t.created_at >= $1
GROUP BY t.id`, start, txm.CanonicalAddress(hot))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var st stageTimes
	for rows.Next() {
		var t txTimes
		var block int64
		var hash string
		var inFeed *time.Time
		if err := rows.Scan(&t.hot, &t.created, &block, &hash, &t.tracking, &t.mined, &t.confirmed, &inFeed); err != nil {
			return nil, err
		}
		t.block, t.blockHash = uint64(block), common.HexToHash(hash)
		if inFeed != nil {
			t.inFeed = *inFeed
		}
		st = append(st, t)
	}
	return st, rows.Err()
}

// printResends shows, per part, how many of the sustained load's
// transactions the node had to be sent more than once: rebroadcast by the
// resubmit sweep (the node had dropped or held them back) or replaced with
// higher fees. A hot signer whose MINED rate falls behind its TRACKING rate
// shows it here.
func printResends(ctx context.Context, pool *pgxpool.Pool, start time.Time, hot common.Address) error {
	rows, err := pool.Query(ctx, `
SELECT t.signer = $2,
       count(*) FILTER (WHERE t.broadcast_count > 1),
       count(*) FILTER (WHERE (SELECT count(*) FROM tx_attempt a WHERE a.tx_id = t.id) > 1),
       count(*)
FROM managed_tx t WHERE t.created_at >= $1 GROUP BY 1 ORDER BY 1 DESC`, start, txm.CanonicalAddress(hot))
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var hot bool
		var resent, replaced, n int64
		if err := rows.Scan(&hot, &resent, &replaced, &n); err != nil {
			return err
		}
		fmt.Printf("  %-6s sent more than once: %d rebroadcast, %d replaced, of %d\n", map[bool]string{true: "hot", false: "others"}[hot], resent, replaced, n)
	}
	return rows.Err()
}

// rate is n over the span of the times: a stage's sustained throughput.
func rate(ts []time.Time) float64 {
	if len(ts) < 2 {
		return 0
	}
	lo, hi := slices.MinFunc(ts, time.Time.Compare), slices.MaxFunc(ts, time.Time.Compare)
	return float64(len(ts)) / hi.Sub(lo).Seconds()
}

// print shows each stage's rate for the hot signer, the others and all, and
// returns the overall created and confirmed rates.
func (st stageTimes) print(lags []time.Duration) (created, confirmed float64) {
	fmt.Printf("  %-10s %8s %10s %10s %10s %10s\n", "signers", "txs", "created/s", "TRACKING/s", "MINED/s", "CONFIRMED/s")
	for _, part := range []struct {
		name string
		keep func(txTimes) bool
	}{{"hot", func(t txTimes) bool { return t.hot }}, {"others", func(t txTimes) bool { return !t.hot }}, {"all", func(txTimes) bool { return true }}} {
		var c, tr, mi, co []time.Time
		for _, t := range st {
			if part.keep(t) {
				c, tr, mi, co = append(c, t.created), append(tr, t.tracking), append(mi, t.mined), append(co, t.confirmed)
			}
		}
		fmt.Printf("  %-10s %8d %10.0f %10.0f %10.0f %10.0f\n", part.name, len(c), rate(c), rate(tr), rate(mi), rate(co))
		created, confirmed = rate(c), rate(co)
	}
	for _, hot := range []bool{true, false} {
		var toTracking, toConfirmed []time.Duration
		for _, t := range st {
			if t.hot == hot {
				toTracking = append(toTracking, t.tracking.Sub(t.created))
				toConfirmed = append(toConfirmed, t.confirmed.Sub(t.created))
			}
		}
		slices.Sort(toTracking)
		slices.Sort(toConfirmed)
		name := map[bool]string{true: "hot", false: "others"}[hot]
		fmt.Printf("  %-6s created → TRACKING   p50 %6.0f ms  p99 %6.0f ms\n", name, ms(quantile(toTracking, 0.5)), ms(quantile(toTracking, 0.99)))
		fmt.Printf("  %-6s created → CONFIRMED  p50 %6.0f ms  p99 %6.0f ms\n", name, ms(quantile(toConfirmed, 0.5)), ms(quantile(toConfirmed, 0.99)))
	}
	fmt.Printf("  finality lag (block at depth sealed → CONFIRMED written)  p50 %4.0f ms  p99 %4.0f ms  max %4.0f ms\n",
		ms(quantile(lags, 0.5)), ms(quantile(lags, 0.99)), ms(quantile(lags, 1)))
	return created, confirmed
}

// finalityLags is, for each confirmed transaction, the time from the moment
// the block that completed its depth (mined block + confirmations - 1) was
// sealed to the moment CONFIRMED was written, sorted.
func finalityLags(ctx context.Context, s *stack.Stack, st stageTimes, confirmations uint64) ([]time.Duration, error) {
	sealed := map[uint64]time.Time{}
	var lags, feed []time.Duration
	parts := map[bool][]time.Duration{} // hot or not
	late, lateMined := 0, 0             // lags over a second; of those, MINED written after the depth was reached
	type lateKey struct {
		block uint64
		hot   bool
	}
	lateBy := map[lateKey][]time.Duration{} // lags over a second by the block at depth, hot or not
	for _, t := range st {
		n := t.block + confirmations - 1
		at, ok := sealed[n]
		if !ok {
			h, err := s.Chain.Backend.Client().HeaderByNumber(ctx, new(big.Int).SetUint64(n))
			if err != nil {
				return nil, fmt.Errorf("header %d: %w", n, err)
			}
			if at, ok = s.Chain.SealedAt(h.Hash()); !ok {
				return nil, fmt.Errorf("block %d was not sealed by this chain", n)
			}
			sealed[n] = at
		}
		lags = append(lags, max(t.confirmed.Sub(at), 0))
		if !t.inFeed.IsZero() {
			feed = append(feed, max(t.inFeed.Sub(at), 0))
		}
		parts[t.hot] = append(parts[t.hot], lags[len(lags)-1])
		if t.confirmed.Sub(at) > time.Second {
			late++
			k := lateKey{n, t.hot}
			lateBy[k] = append(lateBy[k], t.confirmed.Sub(at))
			if t.mined.After(at) {
				lateMined++
			}
		}
	}
	slices.Sort(lags)
	slices.Sort(feed)
	fmt.Printf("  feed lag (block at depth sealed → outcome in the completion feed)  p50 %4.0f ms  p99 %4.0f ms  (%d of %d in the feed)\n",
		ms(quantile(feed, 0.5)), ms(quantile(feed, 0.99)), len(feed), len(lags))
	for _, hot := range []bool{true, false} {
		slices.Sort(parts[hot])
		fmt.Printf("  %-6s finality lag  p50 %4.0f ms  p99 %4.0f ms\n", map[bool]string{true: "hot", false: "others"}[hot],
			ms(quantile(parts[hot], 0.5)), ms(quantile(parts[hot], 0.99)))
	}
	var mined []time.Duration
	for _, t := range st {
		if at, ok := s.Chain.SealedAt(t.blockHash); ok {
			mined = append(mined, max(t.mined.Sub(at), 0))
		}
	}
	slices.Sort(mined)
	fmt.Printf("  receipt lag (block sealed → MINED written)  p50 %4.0f ms  p99 %4.0f ms\n", ms(quantile(mined, 0.5)), ms(quantile(mined, 0.99)))
	fmt.Printf("  finality lags over 1s: %d of %d; %d of them were MINED only after the depth was reached\n", late, len(lags), lateMined)
	if len(lateBy) > 0 {
		keys := slices.SortedFunc(maps.Keys(lateBy), func(a, b lateKey) int { return len(lateBy[b]) - len(lateBy[a]) })
		fmt.Printf("  late by the block at depth (largest first):")
		for i, k := range keys {
			if i == 8 {
				fmt.Printf(" ... %d blocks more", len(keys)-i)
				break
			}
			d := lateBy[k]
			slices.Sort(d)
			fmt.Printf(" #%d %s %d (%.0f-%.0f ms)", k.block, map[bool]string{true: "hot", false: "others"}[k.hot], len(d), ms(d[0]), ms(d[len(d)-1]))
		}
		fmt.Println()
	}
	return lags, nil
}

// drain builds a backlog of n creates on the hot signer with the submit
// subscription paused, resumes it, and returns the ALLOCATED → TRACKING
// rate from the resume to the last TRACKING (database time).
func drain(ctx context.Context, s *stack.Stack, pool *pgxpool.Pool, urls []string, hot string, n int) (float64, error) {
	if err := s.Bridge.Pause(stack.SubSubmit); err != nil {
		return 0, err
	}
	paused := true
	defer func() {
		if paused {
			_ = s.Bridge.Resume(stack.SubSubmit)
		}
	}()
	// A drain already under way goes on until the signer has nothing left.
	time.Sleep(100 * time.Millisecond) // a pull that began before the pause
	for !s.Bridge.Idle(stack.SubSubmit) {
		time.Sleep(20 * time.Millisecond)
	}
	var mark time.Time
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&mark); err != nil {
		return 0, err
	}
	r, err := loadgen.Run(ctx, loadgen.Config{URLs: urls, ChainID: evmtest.ChainID, Signers: []string{hot}, Concurrency: 32, Requests: n})
	if err != nil {
		return 0, err
	}
	if r.Errors > 0 {
		return 0, fmt.Errorf("%d creates failed: %v", r.Errors, r.Statuses)
	}
	var allocated int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM managed_tx WHERE created_at >= $1 AND state = 'ALLOCATED'`, mark).Scan(&allocated); err != nil {
		return 0, err
	}
	if allocated != n {
		return 0, fmt.Errorf("%d of the backlog's %d creates are ALLOCATED before the resume: something broadcast while paused", allocated, n)
	}
	var resumed time.Time
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&resumed); err != nil {
		return 0, err
	}
	paused = false
	if err := s.Bridge.Resume(stack.SubSubmit); err != nil {
		return 0, err
	}
	// The poll reads the signer's ALLOCATED rows through their index: a
	// scan of the tables would take PostgreSQL's CPU from the drain it times.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var left int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM managed_tx WHERE chain_id = $1 AND signer = $2 AND state = 'ALLOCATED'`,
			evmtest.ChainID, strings.ToLower(hot)).Scan(&left)
		if err != nil {
			return 0, err
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%d of the backlog still ALLOCATED 2 minutes after the resume", left)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var last *time.Time
	err = pool.QueryRow(ctx, `
SELECT max(h.created_at) FROM tx_history h JOIN managed_tx x ON x.id = h.tx_id
WHERE x.created_at >= $1 AND h.to_state = 'TRACKING'`, mark).Scan(&last)
	if err != nil {
		return 0, err
	}
	if last == nil {
		return 0, errors.New("the backlog left ALLOCATED without reaching TRACKING")
	}
	return float64(n) / last.Sub(resumed).Seconds(), nil
}

// broadcast measures rounds drains of a backlog of n creates on the hot
// signer (drain), each between two measures of the node's own rate
// (ingestion); it prints the rates and returns the median of the rounds'
// ratios (each drain against the mean of the node's rates just before and
// after it): on a shared machine either rate moves by half with what else
// runs, so each round compares measures taken seconds apart, and the
// median leaves out a round that such a moment spoiled.
func broadcast(ctx context.Context, s *stack.Stack, pool *pgxpool.Pool, urls []string, hot string, n, rounds int) (float64, error) {
	var drains, ingests, ratios []float64
	node := func() error {
		r, err := ingestion(ctx, s, n)
		ingests = append(ingests, r)
		return err
	}
	if err := node(); err != nil {
		return 0, err
	}
	for range rounds {
		r, err := drain(ctx, s, pool, urls, hot, n)
		if err != nil {
			return 0, err
		}
		drains = append(drains, r)
		if err := waitFinal(ctx, pool, 5*time.Minute); err != nil {
			return 0, err
		}
		if err := node(); err != nil {
			return 0, err
		}
		k := len(ingests)
		ratios = append(ratios, r/((ingests[k-2]+ingests[k-1])/2))
	}
	ratio := median(ratios)
	fmt.Printf("  ALLOCATED → TRACKING  %6.0f tx/s (median of %s)\n", median(drains), join(drains, "%.0f"))
	fmt.Printf("  node sendRawTransaction ingestion  %6.0f tx/s (median of %s)\n", median(ingests), join(ingests, "%.0f"))
	fmt.Printf("  ratio of each round  %s, median %.2f\n", join(ratios, "%.2f"), ratio)
	return ratio, nil
}

// median is the middle of xs (the mean of the middle two for an even count).
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// join prints xs in format, separated by spaces.
func join(xs []float64, format string) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf(format, x)
	}
	return strings.Join(parts, " ")
}

// ingestion is the node's own sendRawTransaction rate: n transfers from a
// key txfence does not manage, signed beforehand, sent one after another
// over HTTP JSON-RPC as the servers reach the node. It returns once they
// are mined, so that sealing them does not weigh on what is measured next.
func ingestion(ctx context.Context, s *stack.Stack, n int) (float64, error) {
	rc, err := rpc.DialContext(ctx, s.RPCURL)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	key := evmtest.NamedDevKey("spammer")
	var nonce hexutil.Uint64
	if err := rc.CallContext(ctx, &nonce, "eth_getTransactionCount", key.Address, "pending"); err != nil {
		return 0, err
	}
	var baseFee *hexutil.Big
	if err := rc.CallContext(ctx, &baseFee, "eth_gasPrice"); err != nil {
		return 0, err
	}
	tip := big.NewInt(evmtest.MinerTip)
	feeCap := new(big.Int).Add(new(big.Int).Mul(baseFee.ToInt(), big.NewInt(4)), tip)
	to := common.HexToAddress("0xdead")
	signer := types.LatestSignerForChainID(big.NewInt(evmtest.ChainID))
	raws := make([]hexutil.Bytes, n)
	for i := range raws {
		tx, err := types.SignNewTx(key.Key, signer, &types.DynamicFeeTx{ChainID: big.NewInt(evmtest.ChainID),
			Nonce: uint64(nonce) + uint64(i), GasTipCap: tip, GasFeeCap: feeCap, Gas: 21000, To: &to, Value: big.NewInt(1)})
		if err != nil {
			return 0, err
		}
		if raws[i], err = tx.MarshalBinary(); err != nil {
			return 0, err
		}
	}
	start := time.Now()
	for _, raw := range raws {
		var h common.Hash
		if err := rc.CallContext(ctx, &h, "eth_sendRawTransaction", raw); err != nil {
			return 0, fmt.Errorf("send: %w", err)
		}
	}
	rate := float64(n) / time.Since(start).Seconds()
	for deadline := time.Now().Add(time.Minute); ; {
		var mined hexutil.Uint64
		if err := rc.CallContext(ctx, &mined, "eth_getTransactionCount", key.Address, "latest"); err != nil {
			return 0, err
		}
		if uint64(mined) >= uint64(nonce)+uint64(n) {
			return rate, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("the ingestion's transfers not mined after a minute")
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(q*float64(len(sorted)-1))]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// consume reads and acknowledges, until ctx ends, what reaches the
// completion topic's pull subscription, as a user's consumer would, and
// returns a count of it: left unread, the backlog would be scanned whole by
// the Pub/Sub fake under its one lock, slowing every publish and delivery
// more the longer the run.
func consume(ctx context.Context, s *stack.Stack) (func() int64, error) {
	os.Setenv("PUBSUB_EMULATOR_HOST", s.PubSubHost)
	client, err := pubsub.Dial(ctx, stack.Project)
	if err != nil {
		return nil, err
	}
	sub := "projects/" + stack.Project + "/subscriptions/" + stack.SubCompletion
	var n atomic.Int64
	go func() {
		defer client.Close()
		for ctx.Err() == nil {
			resp, err := client.SubscriptionAdminClient.Pull(ctx, &pubsubpb.PullRequest{Subscription: sub, MaxMessages: 1000,
				ReturnImmediately: true}) //nolint:staticcheck // deprecated; polled here
			var ids []string
			for _, m := range resp.GetReceivedMessages() {
				ids = append(ids, m.GetAckId())
			}
			if len(ids) > 0 {
				if err := client.SubscriptionAdminClient.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: sub, AckIds: ids}); err == nil {
					n.Add(int64(len(ids)))
				}
			}
			if err != nil || len(ids) == 0 {
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
		}
	}()
	return n.Load, nil
}

// printPushes prints, per subscription, the push deliveries between two of
// the bridge's counts and how many of them were retries (a delivery the
// function refused, such as a Submit prompt whose signer's lease stayed
// busy): a retried prompt waits a doubling backoff, and on an ordered
// subscription its signer's later prompts wait behind it.
func printPushes(before, after bridge.Stats) {
	subs := slices.Sorted(maps.Keys(after.Routes))
	fmt.Print("push deliveries (retried):")
	for _, sub := range subs {
		b, a := before.Routes[sub], after.Routes[sub]
		fmt.Printf(" %s %d (%d)", sub, a.Delivered-b.Delivered+a.Retried-b.Retried, a.Retried-b.Retried)
	}
	fmt.Println()
}
