package config

import (
	"math/big"

	"github.com/txfence/txfence/shared/txm"
)

// ChainFees is the fee policy of one chain: caps on what automatic attempts
// (first signings and replacements) may pay, the tip floor, and how many
// replacements a transaction may get.
type ChainFees struct {
	MaxFee   *big.Int // max fee per gas (EIP-1559) or gas price (legacy), in wei
	MaxTip   *big.Int // max priority fee per gas, in wei
	MinTip   *big.Int // no suggested tip is below this, in wei
	MaxBumps int      // replacements per transaction before fee_cap_reached
	// TxFeeCap is the most a whole transaction's fee (gas limit × max fee
	// per gas) may be, as the chain's nodes refuse above it (geth's
	// --rpc.txfeecap, 1 ether by default); nil: no cap.
	TxFeeCap *big.Int
}

// FeeOverride is TXFENCE_CHAIN_FEES's entry for one chain; nil fields (and
// a negative MaxBumps) keep the global setting.
type FeeOverride struct {
	MaxFee, MaxTip, MinTip, TxFeeCap *big.Int
	MaxBumps                         int
}

// Fees is the fee policy: the global caps, tip floor and replacement
// limit, and their per-chain overrides (TXFENCE_CHAIN_FEES).
type Fees struct {
	MaxFeeCap      *big.Int
	MaxTipCap      *big.Int
	MinPriorityFee *big.Int
	MaxBumps       int
	TxFeeCap       *big.Int
	ChainFees      map[uint64]FeeOverride
}

// Fees is c's fee policy.
func (c Config) Fees() Fees {
	return Fees{MaxFeeCap: c.MaxFeeCap, MaxTipCap: c.MaxTipCap, MinPriorityFee: c.MinPriorityFee, MaxBumps: c.MaxBumps,
		TxFeeCap: c.TxFeeCap, ChainFees: c.ChainFees}
}

// For is the fee policy of chain id: the global settings with the
// chain's TXFENCE_CHAIN_FEES entry over them.
func (f Fees) For(id uint64) ChainFees {
	out := ChainFees{MaxFee: f.MaxFeeCap, MaxTip: f.MaxTipCap, MinTip: f.MinPriorityFee, MaxBumps: f.MaxBumps, TxFeeCap: f.TxFeeCap}
	if o, ok := f.ChainFees[id]; ok {
		if o.TxFeeCap != nil {
			out.TxFeeCap = o.TxFeeCap
		}
		if o.MaxFee != nil {
			out.MaxFee = o.MaxFee
		}
		if o.MaxTip != nil {
			out.MaxTip = o.MaxTip
		}
		if o.MinTip != nil {
			out.MinTip = o.MinTip
		}
		if o.MaxBumps >= 0 {
			out.MaxBumps = o.MaxBumps
		}
	}
	if out.MaxTip == nil {
		out.MaxTip = out.MaxFee
	}
	if out.TxFeeCap != nil && out.TxFeeCap.Sign() == 0 {
		out.TxFeeCap = nil
	}
	return out
}

// Caps is chain id's bound on automatic replacements.
func (f Fees) Caps(id uint64) txm.FeeCaps {
	c := f.For(id)
	return txm.FeeCaps{MaxFee: c.MaxFee, MaxTip: c.MaxTip, MaxBumps: c.MaxBumps, TxFeeCap: c.TxFeeCap}
}

// FeesFor is the fee policy of chain id (Fees().For).
func (c Config) FeesFor(id uint64) ChainFees { return c.Fees().For(id) }

// FeeCaps is chain id's bound on automatic replacements (Fees().Caps).
func (c Config) FeeCaps(id uint64) txm.FeeCaps { return c.Fees().Caps(id) }
