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

// FeesFor is the fee policy of chain id: the global settings with the
// chain's TXFENCE_CHAIN_FEES entry over them.
func (c Config) FeesFor(id uint64) ChainFees {
	f := ChainFees{MaxFee: c.MaxFeeCap, MaxTip: c.MaxTipCap, MinTip: c.MinPriorityFee, MaxBumps: c.MaxBumps, TxFeeCap: c.TxFeeCap}
	if o, ok := c.ChainFees[id]; ok {
		if o.TxFeeCap != nil {
			f.TxFeeCap = o.TxFeeCap
		}
		if o.MaxFee != nil {
			f.MaxFee = o.MaxFee
		}
		if o.MaxTip != nil {
			f.MaxTip = o.MaxTip
		}
		if o.MinTip != nil {
			f.MinTip = o.MinTip
		}
		if o.MaxBumps >= 0 {
			f.MaxBumps = o.MaxBumps
		}
	}
	if f.MaxTip == nil {
		f.MaxTip = f.MaxFee
	}
	if f.TxFeeCap != nil && f.TxFeeCap.Sign() == 0 {
		f.TxFeeCap = nil
	}
	return f
}

// FeeCaps is chain id's bound on automatic replacements.
func (c Config) FeeCaps(id uint64) txm.FeeCaps {
	f := c.FeesFor(id)
	return txm.FeeCaps{MaxFee: f.MaxFee, MaxTip: f.MaxTip, MaxBumps: f.MaxBumps, TxFeeCap: f.TxFeeCap}
}
