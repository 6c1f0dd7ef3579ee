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
	TxFeeCap    *big.Int
	BumpPercent int // each replacement pays at least this much more
}

// FeeOverride is TXFENCE_CHAIN_FEES's entry for one chain (or the fee part
// of a chain profile); nil fields, a negative MaxBumps and a zero
// BumpPercent keep what is under them.
type FeeOverride struct {
	MaxFee, MaxTip, MinTip, TxFeeCap *big.Int
	MaxBumps                         int
	BumpPercent                      int
}

// Fees is the fee policy: the global caps, tip floor and replacement
// limit, and their per-chain overrides (TXFENCE_CHAIN_FEES).
type Fees struct {
	MaxFeeCap      *big.Int
	MaxTipCap      *big.Int
	MinPriorityFee *big.Int
	MaxBumps       int
	TxFeeCap       *big.Int
	BumpPercent    int
	ChainFees      map[uint64]FeeOverride
	// profiles are TXFENCE_CHAIN_PROFILES's entries: their kinds' fees and
	// their own lie over the rest.
	profiles map[uint64]ProfileSpec
}

// Fees is c's fee policy.
func (c Config) Fees() Fees {
	return Fees{MaxFeeCap: c.MaxFeeCap, MaxTipCap: c.MaxTipCap, MinPriorityFee: c.MinPriorityFee, MaxBumps: c.MaxBumps,
		TxFeeCap: c.TxFeeCap, BumpPercent: c.BumpPercent, ChainFees: c.ChainFees, profiles: c.ChainProfiles}
}

// For is the fee policy of chain id: the global settings, under its
// profile kind's fees, under its TXFENCE_CHAIN_FEES entry and its profile's
// own fees (validate keeps those two apart).
func (f Fees) For(id uint64) ChainFees {
	o := FeeOverride{MaxFee: f.MaxFeeCap, MaxTip: f.MaxTipCap, MinTip: f.MinPriorityFee, MaxBumps: f.MaxBumps,
		TxFeeCap: f.TxFeeCap, BumpPercent: f.BumpPercent}
	spec, named := f.profiles[id]
	if named {
		o = builtinProfiles[spec.Kind].feeOverride().over(o)
	}
	if chain, ok := f.ChainFees[id]; ok {
		o = chain.over(o)
	}
	if named {
		o = spec.feeOverride().over(o)
	}
	out := ChainFees{MaxFee: o.MaxFee, MaxTip: o.MaxTip, MinTip: o.MinTip, MaxBumps: o.MaxBumps, TxFeeCap: o.TxFeeCap,
		BumpPercent: o.BumpPercent}
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
