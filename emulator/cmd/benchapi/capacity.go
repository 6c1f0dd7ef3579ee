package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txfence/txfence/emulator/loadgen"
	"github.com/txfence/txfence/emulator/stack"
)

// The capacity ladder: how many creates/s a set of API processes carries
// under an open load, the load a service behind a load balancer gets
// (requests come when their callers send them, not when an earlier one is
// answered). The closed-loop scenarios (hot1, hot3) measure something
// else: 64 clients that each wait for their answer, so that throughput is
// 64 ÷ latency. There, each of three processes batches a third of the
// clients, and one signer's calls go one at a time through its lease row,
// so that three processes take about three calls a round (every client
// answered once) where one takes about two: while a call has a fixed cost,
// hot3 stays below hot1. Under an open load a process's batch is whatever
// arrived during the calls before it, and more processes add CPU (each API
// process has one, GOMAXPROCS 1, as a Cloud Run instance does).
type ladder struct {
	from, step float64       // offered creates/s of the first step, and the increase
	steps      int           // at most
	hold       time.Duration // each step's length
	p99        time.Duration // a step is carried when its p99 is at most this
	tight      time.Duration // a second, tighter bound, whose highest rate is reported too
}

// carried says whether a step kept up: it carried nearly all that it was
// offered (a process that falls behind carries less than offered and its
// queue grows) within the latency bound.
func (l ladder) carried(offered float64, res loadgen.Result, p99 time.Duration) bool {
	return res.Errors == 0 && res.PerSecond() >= 0.97*offered && res.Quantile(0.99) <= p99
}

// climber is one process set on the ladder.
type climber struct {
	sc         scenario
	cfg        loadgen.Config
	stop       func()
	best, most float64 // the highest rate carried; the most answered in a try
	tight      float64 // the highest rate carried within the ladder's tight bound
	done       bool    // a step was not carried twice
}

// startClimber starts sc's API processes and warms them at the ladder's
// first rate for warm.
func startClimber(ctx context.Context, b *bench, sc scenario, gomaxprocs int, warm time.Duration, l ladder) (*climber, error) {
	api, err := startAPI(ctx, sc, b.server, b.dbURL, b.rpcURL, b.signers, gomaxprocs, nil, fmt.Sprintf("cap%d", sc.procs), false)
	c := &climber{sc: sc, stop: api.stop}
	if err != nil {
		return c, err
	}
	c.cfg = loadgen.Config{URLs: api.urls, ChainID: 1337, Signers: b.signers[:sc.signers], Concurrency: 1024, Rate: l.from,
		Duration: warm, Conns: loadgen.NewConns()}
	stop := c.stop
	c.stop = func() { stop(); c.cfg.Conns.Close() }
	if warm > 0 {
		res, err := loadgen.Run(ctx, c.cfg)
		if err != nil {
			return c, err
		}
		if res.Errors > 0 {
			return c, fmt.Errorf("warm-up: %d creates failed: %v", res.Errors, res.Statuses)
		}
	}
	return c, nil
}

// step offers rate, once more if it is not carried (one stall of the
// shared machine, tens of milliseconds, can decide a few seconds' p99),
// prints each try and ends the climb when neither carried it.
func (c *climber) step(ctx context.Context, rate float64, l ladder) error {
	for range 2 {
		c.cfg.Rate, c.cfg.Duration = rate, l.hold
		res, err := loadgen.Run(ctx, c.cfg)
		if err != nil {
			return err
		}
		ok := l.carried(rate, res, l.p99)
		if l.carried(rate, res, l.tight) {
			c.tight = max(c.tight, rate)
		}
		mark := "carried"
		if !ok {
			mark = "not carried"
		}
		at := c.sc
		at.rate = rate
		fmt.Printf("%s %s  %s\n", at.name(), res, mark)
		c.most = max(c.most, res.PerSecond())
		if ok {
			c.best = rate
			return nil
		}
	}
	c.done = true
	return nil
}

// climb runs the ladder for the process sets together: each step is
// offered to every set still climbing in turn (the order alternating from
// step to step), so that the sets meet the shared machine's slow and fast
// stretches alike, as -ab's slices do.
func climb(ctx context.Context, b *bench, sets []scenario, gomaxprocs int, warm time.Duration, l ladder) ([]*climber, error) {
	cs := make([]*climber, 0, len(sets))
	defer func() {
		for _, c := range cs {
			c.stop()
		}
	}()
	for _, sc := range sets {
		c, err := startClimber(ctx, b, sc, gomaxprocs, warm, l)
		cs = append(cs, c)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sc.name(), err)
		}
	}
	for i := range l.steps {
		rate := l.from + float64(i)*l.step
		climbing := false
		for k := range cs {
			if i%2 == 1 {
				k = len(cs) - 1 - k
			}
			c := cs[k]
			if c.done {
				continue
			}
			climbing = true
			if err := c.step(ctx, rate, l); err != nil {
				return nil, fmt.Errorf("%s: %w", c.sc.name(), err)
			}
		}
		if !climbing {
			break
		}
	}
	return cs, nil
}

// runCapacity climbs the ladder with a hot signer through one and through
// three processes together, then with 1,000 signers through three, checks
// the nonces after each, and prints the line that compares them.
func runCapacity(ctx context.Context, b *bench, pool *pgxpool.Pool, gomaxprocs int, warm time.Duration, l ladder) error {
	fmt.Printf("\ncapacity: an open load from %.0f creates/s up in steps of %.0f, %s each (1,024 in flight at most); a step is carried with at least 97%% of it answered and p99 <= %s, in one of two tries\n",
		l.from, l.step, l.hold, l.p99)
	var got []*climber
	for _, sets := range [][]scenario{
		{{mode: "batched", procs: 1, signers: 1}, {mode: "batched", procs: 3, signers: 1}},
		{{mode: "batched", procs: 3, signers: 1000}},
	} {
		if err := b.clean(ctx); err != nil {
			return err
		}
		cs, err := climb(ctx, b, sets, gomaxprocs, warm, l)
		if err != nil {
			return fmt.Errorf("capacity: %w", err)
		}
		if err := stack.CheckContiguous(ctx, pool); err != nil {
			return fmt.Errorf("capacity: %w", err)
		}
		got = append(got, cs...)
	}
	fmt.Printf("within p99 <= %s: hot1=%.0f hot3=%.0f signers1000=%.0f; the most answered in a try: hot1=%.0f hot3=%.0f signers1000=%.0f creates/s\n",
		l.tight, got[0].tight, got[1].tight, got[2].tight, got[0].most, got[1].most, got[2].most)
	fmt.Printf("capacity: hot1=%.0f hot3=%.0f ratio=%.2f signers1000=%.0f\n",
		got[0].best, got[1].best, got[1].best/max(got[0].best, 1), got[2].best)
	return nil
}
