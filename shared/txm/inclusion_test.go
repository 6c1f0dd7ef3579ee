package txm

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// An inclusion price admits fees whose max fee covers the next base fee and
// leave the block producer at least the recent inclusion tip.
func TestInclusionPrice_Admits(t *testing.T) {
	price := InclusionPrice{NextBaseFee: b(100), Tip: b(10), Blocks: 5}
	dyn := func(fee, tip int64) Fees { return Fees{MaxFeePerGas: b(fee), MaxPriorityFeePerGas: b(tip)} }
	for _, c := range []struct {
		name  string
		price InclusionPrice
		fees  Fees
		want  bool
	}{
		{"tip and room for it", price, dyn(200, 10), true},
		{"a tip above it", price, dyn(200, 50), true},
		{"a tip below it", price, dyn(200, 9), false},
		{"a max fee below the base fee", price, dyn(99, 10), false},
		{"a max fee that leaves less than the tip", price, dyn(109, 10), false},
		{"a max fee that leaves just the tip", price, dyn(110, 50), true},
		{"legacy: the gas price over the base fee", price, Fees{GasPrice: b(110)}, true},
		{"legacy: too little over it", price, Fees{GasPrice: b(109)}, false},
		{"no base fee (a legacy chain)", InclusionPrice{Tip: b(10)}, Fees{GasPrice: b(10)}, true},
		{"quiet blocks: a tip of 0", InclusionPrice{NextBaseFee: b(100), Tip: b(0)}, dyn(100, 0), true},
		{"no fees", price, Fees{}, false},
	} {
		assert.Equal(t, c.want, c.price.Admits(c.fees), c.name)
	}
}
