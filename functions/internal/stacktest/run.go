package stacktest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/txfence/txfence/shared/app"
	"github.com/txfence/txfence/shared/txm"
)

// RunOptions shape World.Run.
type RunOptions struct {
	// BlockEvery is the block time (default 100ms).
	BlockEvery time.Duration
	// Tick is how often each node works every signer (default 50ms).
	Tick time.Duration
	// BeforeBlock runs before each block is sealed (other users'
	// transactions, say).
	BeforeBlock func()
}

// Run drives nodes as a deployment does, without Pub/Sub: a block every
// BlockEvery, and every Tick each node in turn drains and checks receipts
// for every signer (the prompts' work) and runs a finality pass and a
// resubmit pass (the schedulers' work). Expected refusals (a lease held
// elsewhere, not mined yet, fenced) are ignored; other errors are logged once
// each when Run stops (and written to LogTo as they happen, when set). stop waits for everything to end; it also runs when
// the test ends.
func (w *World) Run(t testing.TB, nodes []*Node, o RunOptions) (stop func()) {
	t.Helper()
	if o.BlockEvery == 0 {
		o.BlockEvery = 100 * time.Millisecond
	}
	if o.Tick == 0 {
		o.Tick = 50 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[string]int{}
	note := func(err error) {
		if err == nil || ctx.Err() != nil || errors.Is(err, app.ErrNoLease) || errors.Is(err, app.ErrNotMined) ||
			errors.Is(err, txm.ErrFenced) || errors.Is(err, context.Canceled) {
			return
		}
		mu.Lock()
		seen[err.Error()]++
		mu.Unlock()
		if w.LogTo != nil {
			_, _ = fmt.Fprintf(w.LogTo, "run error: %v\n", err)
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(o.BlockEvery)
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
			}
			if o.BeforeBlock != nil {
				o.BeforeBlock()
			}
			w.Chain.Commit()
		}
	}()
	for _, n := range nodes {
		wg.Add(1)
		go func(n *Node) {
			defer wg.Done()
			tk := time.NewTicker(o.Tick)
			defer tk.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tk.C:
				}
				for _, k := range w.Keys {
					_, err := n.Drain.Execute(ctx, w.Cfg.Chains[0].ID, k.Address)
					note(err)
					_, err = n.Receipts.Execute(ctx, w.Cfg.Chains[0].ID, k.Address)
					note(err)
				}
				_, err := n.Finality.Pass(ctx)
				note(err)
				_, err = n.Resubmit.Pass(ctx)
				note(err)
			}
		}(n)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			mu.Lock()
			defer mu.Unlock()
			var errs []string
			for e := range seen {
				errs = append(errs, e)
			}
			sort.Strings(errs)
			for _, e := range errs {
				t.Logf("run: %dx %s", seen[e], e)
			}
		})
	}
	t.Cleanup(stop) // before the world's own cleanups close the chain
	return stop
}
