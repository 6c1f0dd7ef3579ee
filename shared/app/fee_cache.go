package app

import (
	"context"
	"math/big"
	"sync"
	"time"

	"github.com/txfence/txfence/shared/txm"
)

// feeReuse is how long this process's drains sign new transactions with a
// fee suggestion another drain asked for. Every drain asked the node
// (the latest header, then the tip: two round trips) before its first
// signature; with many signers each drain sends one or two transactions,
// and under load the suggestion is the slowest step of a small drain. A
// suggestion half a second old is still good: the max fee allows for the
// base fee to double (BaseFeeMultiplier 2), six full blocks of its
// largest rise, and an attempt found underpriced is replaced with fresh
// fees. Replacements, bumps and operators' actions ask afresh.
const feeReuse = 500 * time.Millisecond

// feeCache shares fee suggestions between a process's drains, per chain:
// one is reused for feeReuse after it was asked for, and while one is
// being asked for the other drains wait for it rather than ask too. A
// failed ask is not kept: the next drain asks again.
type feeCache struct {
	reuse time.Duration
	now   func() time.Time

	mu     sync.Mutex
	chains map[uint64]*feeEntry
}

type feeEntry struct {
	fees   txm.Fees
	asked  time.Time     // when the kept suggestion was asked for; zero: none kept
	flight chan struct{} // closed when the ask in flight ends; nil: none
}

func newFeeCache(reuse time.Duration) *feeCache {
	return &feeCache{reuse: reuse, now: time.Now, chains: map[uint64]*feeEntry{}}
}

// suggest returns chain id's suggestion: the kept one while it is younger
// than reuse, otherwise one asked of chain now (by this caller, or by the
// caller already asking, whose answer it waits for).
func (c *feeCache) suggest(ctx context.Context, id uint64, chain txm.FeeOracle) (txm.Fees, error) {
	for {
		c.mu.Lock()
		e := c.chains[id]
		if e == nil {
			e = &feeEntry{}
			c.chains[id] = e
		}
		if !e.asked.IsZero() && c.now().Sub(e.asked) < c.reuse {
			f := copyFees(e.fees)
			c.mu.Unlock()
			return f, nil
		}
		if flight := e.flight; flight != nil {
			c.mu.Unlock()
			select {
			case <-flight:
				continue // its answer, or the ask is ours if it failed
			case <-ctx.Done():
				return txm.Fees{}, ctx.Err()
			}
		}
		flight := make(chan struct{})
		e.flight = flight
		c.mu.Unlock()

		asked := c.now()
		f, err := chain.SuggestFees(ctx)
		c.mu.Lock()
		if err == nil {
			e.fees, e.asked = copyFees(f), asked
		}
		e.flight = nil
		close(flight)
		c.mu.Unlock()
		return f, err
	}
}

// copyFees copies f's numbers, so that a caller may change what it got.
func copyFees(f txm.Fees) txm.Fees {
	cp := func(v *big.Int) *big.Int {
		if v == nil {
			return nil
		}
		return new(big.Int).Set(v)
	}
	return txm.Fees{MaxFeePerGas: cp(f.MaxFeePerGas), MaxPriorityFeePerGas: cp(f.MaxPriorityFeePerGas), GasPrice: cp(f.GasPrice),
		BaseFee: cp(f.BaseFee)}
}
