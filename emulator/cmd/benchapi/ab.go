package main

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txfence/txfence/emulator/loadgen"
	"github.com/txfence/txfence/emulator/stack"
)

// An A/B comparison (-ab) runs a scenario on two sets of API processes at
// once, A with the usual settings and B with some changed, and offers the
// load to one set at a time, in short slices, A B B A A B ...: each pair
// of slices sees the machine in about the same state. On this shared
// machine, whose speed moves by half within minutes, runs of A and B one
// after the other differ more by when they ran than by what they run; the
// ratio of slices next to each other does not.

// abSide is one side of a comparison and what its slices measured.
type abSide struct {
	name    string
	api     *apiProcs
	conns   *loadgen.Conns
	res     loadgen.Result // all its slices
	cpu     stack.CPUTimes
	commits float64   // transactions that wrote
	rates   []float64 // creates/s of each slice
	cpus    []float64 // CPU µs a create of each slice, every part
	p99s    []float64 // p99 of each slice
}

// parseAB reads -ab: KEY=VALUE settings separated by commas.
func parseAB(s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	var env []string
	for _, kv := range strings.Split(s, ",") {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return nil, fmt.Errorf("-ab: %q is not KEY=VALUE", kv)
		}
		env = append(env, kv)
	}
	return env, nil
}

// runAB compares sc on A (the usual settings) and B (env added), each
// offered the load for n slices of length slice, after warm each; each
// slice is measured after lead at the load.
func runAB(ctx context.Context, sc scenario, server, dbURL, rpcURL string, signers []string, conc, gomaxprocs int,
	warm time.Duration, pool *pgxpool.Pool, env []string, n int, slice, lead time.Duration) (*abSide, *abSide, error) {
	a, b := &abSide{name: "A"}, &abSide{name: "B"}
	sides := []*abSide{a, b}
	var err error
	for _, s := range sides {
		var e []string
		if s == b {
			e = env
		}
		s.api, err = startAPI(ctx, sc, server, dbURL, rpcURL, signers, gomaxprocs, e, strings.ToLower(s.name), false)
		defer s.api.stop()
		if err != nil {
			return nil, nil, err
		}
		s.conns = loadgen.NewConns()
		defer s.conns.Close()
	}
	use := signers[:sc.signers]
	cfg := func(s *abSide, d time.Duration) loadgen.Config {
		c := loadgen.Config{URLs: s.api.urls, ChainID: 1337, Signers: use, Concurrency: conc, Duration: d, Rate: sc.rate, Conns: s.conns}
		if sc.rate > 0 {
			c.Concurrency = 1024
		}
		return c
	}
	for _, s := range sides {
		// Each process syncs each signer's nonce once, then runs at its load.
		if _, err := loadgen.Run(ctx, loadgen.Config{URLs: s.api.urls, ChainID: 1337, Signers: use,
			Concurrency: min(len(s.api.urls)*len(use), 256), Requests: len(s.api.urls) * len(use)}); err != nil {
			return nil, nil, err
		}
		if warm > 0 {
			if _, err := loadgen.Run(ctx, cfg(s, warm)); err != nil {
				return nil, nil, err
			}
		}
	}
	// The first pair is not counted either: the first slice after both
	// warm-ups was often its side's worst (its p99 a third above the
	// rest's), which favoured B.
	for i := -1; i < n; i++ {
		order := sides
		if i%2 != 0 {
			order = []*abSide{b, a}
		}
		for _, s := range order {
			if i < 0 {
				if _, err := loadgen.Run(ctx, cfg(s, slice)); err != nil {
					return nil, nil, err
				}
				continue
			}
			// The side was idle while the other ran: its first moments at
			// the load (caches, pools, the Go runtime waking) are not
			// counted, which would otherwise decide each slice's p99 and
			// favour the side whose slices more often follow its own.
			if lead > 0 {
				if _, err := loadgen.Run(ctx, cfg(s, lead)); err != nil {
					return nil, nil, err
				}
			}
			var pids []int
			for _, p := range s.api.procs {
				pids = append(pids, p.Process.Pid)
			}
			x := xids(ctx, pool)
			before := stack.SampleCPU(pids)
			r, err := loadgen.Run(ctx, cfg(s, slice))
			if err != nil {
				return nil, nil, err
			}
			cpu := stack.SampleCPU(pids).Sub(before)
			s.commits += xids(ctx, pool) - x
			s.cpu = s.cpu.Add(cpu)
			s.rates = append(s.rates, r.PerSecond())
			s.cpus = append(s.cpus, float64((cpu.Procs+cpu.Postgres+cpu.Self).Microseconds())/float64(max(len(r.Latencies), 1)))
			s.p99s = append(s.p99s, float64(r.Quantile(0.99)))
			s.res.Latencies = append(s.res.Latencies, r.Latencies...)
			s.res.Elapsed += r.Elapsed
			s.res.Errors += r.Errors
			s.res.Requests += r.Requests
			if r.Errors > 0 {
				return nil, nil, fmt.Errorf("side %s: %d creates failed: %v", s.name, r.Errors, r.Statuses)
			}
		}
	}
	for _, s := range sides {
		sort.Slice(s.res.Latencies, func(i, j int) bool { return s.res.Latencies[i] < s.res.Latencies[j] })
	}
	return a, b, nil
}

// printAB prints both sides of a comparison and B's figures over A's: for
// creates/s and CPU a create, the ratio of the totals and the spread of the
// ratios of the slices next to each other (A B, B A, ...); for the p99,
// the spread of those ratios first: one slice's stall (90 ms once, against
// 12-20 ms for the others) decides the p99 of all slices together, so
// their median is what tells a change (A against itself: 1.01, all
// slices together 1.27).
func printAB(sc scenario, a, b *abSide) {
	for _, s := range []*abSide{a, b} {
		o := outcome{res: s.res, cpu: s.cpu}
		fmt.Printf("%s %s %s  %.1f creates/commit  %s\n", sc.name(), s.name, s.res, float64(len(s.res.Latencies))/max(s.commits, 1), o.cpuPer())
	}
	var rate, cpu, p99 []float64
	for i := range a.rates {
		rate = append(rate, b.rates[i]/a.rates[i])
		cpu = append(cpu, b.cpus[i]/a.cpus[i])
		p99 = append(p99, b.p99s[i]/a.p99s[i])
	}
	per := func(s *abSide, d time.Duration) float64 {
		return float64(d) / float64(max(len(s.res.Latencies), 1))
	}
	fmt.Printf("%-26s B/A: creates/s %.2f (pairs %s), CPU a create %.2f (pairs %s; api %.2f pg %.2f load %.2f), p50 %.2f, p99 pairs %s (all slices together %.2f)\n", "",
		b.res.PerSecond()/a.res.PerSecond(), spread(rate),
		per(b, b.cpu.Procs+b.cpu.Postgres+b.cpu.Self)/per(a, a.cpu.Procs+a.cpu.Postgres+a.cpu.Self), spread(cpu),
		per(b, b.cpu.Procs)/per(a, a.cpu.Procs), per(b, b.cpu.Postgres)/per(a, a.cpu.Postgres), per(b, b.cpu.Self)/per(a, a.cpu.Self),
		float64(b.res.Quantile(0.5))/float64(a.res.Quantile(0.5)), spread(p99), float64(b.res.Quantile(0.99))/float64(a.res.Quantile(0.99)))
}

// spread is the minimum, median and maximum of xs.
func spread(xs []float64) string {
	if len(xs) == 0 {
		return "none"
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return fmt.Sprintf("min %.2f median %.2f max %.2f", s[0], s[len(s)/2], s[len(s)-1])
}

// xids is the next transaction id to be handed out: the transactions that
// wrote, counted (pg_stat_database's xact_commit lags: since PostgreSQL 15
// an idle backend reports its counts up to 10 s late).
func xids(ctx context.Context, pool *pgxpool.Pool) float64 {
	var n float64
	_ = pool.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::float8`).Scan(&n)
	return n
}
