package txm

import (
	"errors"
	"fmt"
	"math/big"
)

// MinBumpPercent is the smallest fee increase a node accepts for a
// replacement at the same nonce (geth's and most clients' price bump).
const MinBumpPercent = 10

// FeeCaps bound the automatic replacements of one chain's transactions.
type FeeCaps struct {
	MaxFee   *big.Int // max fee per gas (EIP-1559) or gas price (legacy); nil: no cap
	MaxTip   *big.Int // max priority fee per gas; nil: no cap
	MaxBumps int      // replacements per transaction; 0: none
	// TxFeeCap caps a whole attempt's fee, gas limit × max fee per gas, as
	// the nodes do (geth's --rpc.txfeecap); nil: no cap.
	TxFeeCap *big.Int
}

// For is the caps of one attempt of gas units of a transaction whose fee
// ceiling is ceiling (nil: none) and whose payload has payloadGas: the
// chain's cap on the fee per gas, held to the transaction's fee budget (its
// payload's gas at its ceiling, what the caps on the principal counted)
// spread over the attempt's gas, and to the nodes' cap on a whole
// attempt's fee. A cancel or placeholder (21,000 gas) of a large payload
// may so pay more per gas than the payload, but never more in all.
func (c FeeCaps) For(ceiling *big.Int, payloadGas, gas uint64) FeeCaps {
	if gas == 0 {
		return c
	}
	out := c
	perGas := func(total *big.Int) *big.Int { return new(big.Int).Quo(total, new(big.Int).SetUint64(gas)) }
	if ceiling != nil && payloadGas > 0 {
		out.MaxFee = minCap(out.MaxFee, perGas(new(big.Int).Mul(ceiling, new(big.Int).SetUint64(payloadGas))))
	}
	if c.TxFeeCap != nil {
		out.MaxFee = minCap(out.MaxFee, perGas(c.TxFeeCap))
	}
	out.MaxTip = minCap(out.MaxTip, out.MaxFee)
	return out
}

// Clamp holds f to the caps' fee per gas and tip (the tip never above the
// fee).
func (c FeeCaps) Clamp(f Fees) Fees {
	if f.IsLegacy() {
		return Fees{GasPrice: clampMax(f.GasPrice, c.MaxFee)}
	}
	out := Fees{MaxFeePerGas: f.MaxFeePerGas, MaxPriorityFeePerGas: f.MaxPriorityFeePerGas}
	if out.MaxFeePerGas != nil {
		out.MaxFeePerGas = clampMax(out.MaxFeePerGas, c.MaxFee)
	}
	if out.MaxPriorityFeePerGas != nil {
		out.MaxPriorityFeePerGas = clampMax(out.MaxPriorityFeePerGas, c.MaxTip)
		if out.MaxFeePerGas != nil {
			out.MaxPriorityFeePerGas = clampMax(out.MaxPriorityFeePerGas, out.MaxFeePerGas)
		}
	}
	return out
}

// Within reports whether every fee of f is at or below the caps.
func (c FeeCaps) Within(f Fees) bool {
	le := func(v, max *big.Int) bool { return v == nil || max == nil || v.Cmp(max) <= 0 }
	return le(f.GasPrice, c.MaxFee) && le(f.MaxFeePerGas, c.MaxFee) && le(f.MaxPriorityFeePerGas, c.MaxTip)
}

// minCap is the lower of two caps, nil being none.
func minCap(a, b *big.Int) *big.Int {
	switch {
	case a == nil:
		return b
	case b == nil || a.Cmp(b) <= 0:
		return a
	}
	return b
}

// AllowBump returns ErrFeeCapReached when done replacements already reach
// MaxBumps.
func (c FeeCaps) AllowBump(done int) error {
	if done >= c.MaxBumps {
		return fmt.Errorf("%w: replaced %d times, the limit is %d", ErrFeeCapReached, done, c.MaxBumps)
	}
	return nil
}

// IsLegacy reports whether f are legacy (gas price) fees.
func (f Fees) IsLegacy() bool { return f.GasPrice != nil && f.MaxFeePerGas == nil }

// FeesOf returns the fees an attempt was signed with.
func FeesOf(a Attempt) Fees {
	return Fees{MaxFeePerGas: a.MaxFeePerGas, MaxPriorityFeePerGas: a.MaxPriorityFeePerGas, GasPrice: a.GasPrice}
}

// BumpFees returns the fees of a replacement for an attempt that paid prev:
// each fee is the larger of the fresh suggestion and prev raised by percent
// (at least MinBumpPercent, rounded up, as nodes require), then held to the
// caps. When a capped fee no longer beats prev by percent, no replacement
// can be accepted: ErrFeeCapReached. Legacy and EIP-1559 alike; the kind of
// prev decides.
func BumpFees(prev, fresh Fees, percent int, caps FeeCaps) (Fees, error) {
	if percent < MinBumpPercent {
		percent = MinBumpPercent
	}
	if prev.IsLegacy() {
		min := raise(prev.GasPrice, percent)
		price := maxBig(min, suggested(fresh.GasPrice, fresh.MaxFeePerGas))
		price = clampMax(price, caps.MaxFee)
		if price.Cmp(min) < 0 {
			return Fees{}, fmt.Errorf("%w: a replacement needs a gas price of %s wei, the cap is %s wei", ErrFeeCapReached, min, caps.MaxFee)
		}
		return Fees{GasPrice: price}, nil
	}
	if prev.MaxFeePerGas == nil || prev.MaxPriorityFeePerGas == nil {
		return Fees{}, errors.New("bump fees: the previous attempt has no fees")
	}
	minFee, minTip := raise(prev.MaxFeePerGas, percent), raise(prev.MaxPriorityFeePerGas, percent)
	tip := clampMax(maxBig(minTip, suggested(fresh.MaxPriorityFeePerGas, fresh.GasPrice)), caps.MaxTip)
	fee := maxBig(maxBig(minFee, suggested(fresh.MaxFeePerGas, fresh.GasPrice)), tip)
	fee = clampMax(fee, caps.MaxFee)
	tip = clampMax(tip, fee)
	if fee.Cmp(minFee) < 0 || tip.Cmp(minTip) < 0 {
		return Fees{}, fmt.Errorf("%w: a replacement needs a max fee of %s wei and a tip of %s wei, the caps are %s and %s wei",
			ErrFeeCapReached, minFee, minTip, orNone(caps.MaxFee), orNone(caps.MaxTip))
	}
	return Fees{MaxFeePerGas: fee, MaxPriorityFeePerGas: tip}, nil
}

// CanMine reports whether fees can be included in a block whose base fee
// is baseFee (nil: unknown, assumed yes).
func (f Fees) CanMine(baseFee *big.Int) bool {
	if baseFee == nil {
		return true
	}
	if f.IsLegacy() {
		return f.GasPrice.Cmp(baseFee) >= 0
	}
	return f.MaxFeePerGas != nil && f.MaxFeePerGas.Cmp(baseFee) >= 0
}

// raise returns ceil(v × (100 + percent) / 100).
func raise(v *big.Int, percent int) *big.Int {
	out := new(big.Int).Mul(v, big.NewInt(int64(100+percent)))
	out.Add(out, big.NewInt(99))
	return out.Quo(out, big.NewInt(100))
}

// suggested is the first non-nil of vs, or zero.
func suggested(vs ...*big.Int) *big.Int {
	for _, v := range vs {
		if v != nil {
			return v
		}
	}
	return new(big.Int)
}

func maxBig(a, b *big.Int) *big.Int {
	if a.Cmp(b) >= 0 {
		return new(big.Int).Set(a)
	}
	return new(big.Int).Set(b)
}

func clampMax(v, max *big.Int) *big.Int {
	if max != nil && v.Cmp(max) > 0 {
		return new(big.Int).Set(max)
	}
	return v
}

func orNone(v *big.Int) string {
	if v == nil {
		return "none"
	}
	return v.String()
}
