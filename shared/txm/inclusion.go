package txm

import (
	"context"
	"math/big"

	"github.com/ethereum/go-ethereum/common"
)

// PoolStatus is what a node says of one transaction's whereabouts.
type PoolStatus int

const (
	// PoolAbsent: the node does not know the transaction: it never
	// reached the node, or the node's pool dropped it.
	PoolAbsent PoolStatus = iota
	// PoolPending: the transaction waits in the node's pool.
	PoolPending
	// PoolMined: the transaction is in a block of the node's chain.
	PoolMined
)

// InclusionPrice is what the chain's recent blocks included: a transaction
// whose max fee covers NextBaseFee and whose tip above it reaches Tip would
// have been among them.
type InclusionPrice struct {
	// NextBaseFee is the base fee of the next block (0 on a chain without
	// one).
	NextBaseFee *big.Int
	// Tip is a low percentile of the priority fees the recent blocks
	// included (on a chain without a base fee, of the gas prices).
	Tip *big.Int
	// Blocks is how many blocks the price was read from.
	Blocks int
}

// Admits reports whether fees f would have been included in the recent
// blocks: the max fee (or gas price) covers the next base fee, and what it
// leaves for the block producer, the tip capped by the max fee less the
// base fee, reaches the recent inclusion tip.
func (p InclusionPrice) Admits(f Fees) bool {
	base := p.NextBaseFee
	if base == nil {
		base = new(big.Int)
	}
	var feeCap, tip *big.Int
	switch {
	case f.IsLegacy():
		feeCap, tip = f.GasPrice, f.GasPrice
	case f.MaxFeePerGas != nil && f.MaxPriorityFeePerGas != nil:
		feeCap, tip = f.MaxFeePerGas, f.MaxPriorityFeePerGas
	default:
		return false
	}
	if feeCap.Cmp(base) < 0 {
		return false
	}
	effective := new(big.Int).Sub(feeCap, base)
	if tip.Cmp(effective) < 0 {
		effective = tip
	}
	return p.Tip == nil || effective.Cmp(p.Tip) >= 0
}

// Inclusion is one node's answer, read in one round trip, to whether a
// transaction waits in its pool and what recent blocks included.
type Inclusion struct {
	Pool PoolStatus
	// Price is nil when the node could not say (it does not serve
	// eth_feeHistory, or has no blocks to read it from).
	Price *InclusionPrice
}

// InclusionReader tells the resubmit sweep, before it pays more for a
// transaction, whether paying more would help.
type InclusionReader interface {
	// PublicMempool reports whether the chain's transactions wait in a
	// public pool that block producers pick from by price. Without one
	// (a sequencer ordering what reaches it, as on Arbitrum) a higher fee
	// does not get a transaction included sooner: it is sent again
	// instead.
	PublicMempool() bool
	// Inclusion reads whether the node holds the transaction hash in its
	// pool, and the recent inclusion price.
	Inclusion(ctx context.Context, hash common.Hash) (Inclusion, error)
}
