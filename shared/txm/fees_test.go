package txm

import (
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func b(n int64) *big.Int { return big.NewInt(n) }

// TestIssue10_BumpFees: a replacement pays the larger of the fresh
// suggestion and the previous fees raised by the bump percentage (rounded
// up), held to the caps; when the caps leave less than the bump, no
// replacement is possible.
func TestIssue10_BumpFees(t *testing.T) {
	none := FeeCaps{MaxBumps: 10}
	cases := []struct {
		name    string
		prev    Fees
		fresh   Fees
		percent int
		caps    FeeCaps
		want    Fees
		capErr  bool
	}{
		{"fresh below the bump: +20%", Fees{MaxFeePerGas: b(100), MaxPriorityFeePerGas: b(10)},
			Fees{MaxFeePerGas: b(90), MaxPriorityFeePerGas: b(5)}, 20, none,
			Fees{MaxFeePerGas: b(120), MaxPriorityFeePerGas: b(12)}, false},
		{"fresh above the bump wins", Fees{MaxFeePerGas: b(100), MaxPriorityFeePerGas: b(10)},
			Fees{MaxFeePerGas: b(500), MaxPriorityFeePerGas: b(50)}, 20, none,
			Fees{MaxFeePerGas: b(500), MaxPriorityFeePerGas: b(50)}, false},
		{"rounded up", Fees{MaxFeePerGas: b(101), MaxPriorityFeePerGas: b(1)},
			Fees{MaxFeePerGas: b(1), MaxPriorityFeePerGas: b(1)}, 10, none,
			Fees{MaxFeePerGas: b(112), MaxPriorityFeePerGas: b(2)}, false},
		{"caller's 1 wei: the market", Fees{MaxFeePerGas: b(1), MaxPriorityFeePerGas: b(1)},
			Fees{MaxFeePerGas: b(2_000_000_000), MaxPriorityFeePerGas: b(1_000_000)}, 20, none,
			Fees{MaxFeePerGas: b(2_000_000_000), MaxPriorityFeePerGas: b(1_000_000)}, false},
		{"a percent under 10 is raised to the nodes' rule", Fees{MaxFeePerGas: b(100), MaxPriorityFeePerGas: b(10)},
			Fees{}, 5, none, Fees{MaxFeePerGas: b(110), MaxPriorityFeePerGas: b(11)}, false},
		{"fee never below tip", Fees{MaxFeePerGas: b(10), MaxPriorityFeePerGas: b(10)},
			Fees{MaxFeePerGas: b(5), MaxPriorityFeePerGas: b(40)}, 20, none,
			Fees{MaxFeePerGas: b(40), MaxPriorityFeePerGas: b(40)}, false},
		{"fresh above the cap: held to the cap", Fees{MaxFeePerGas: b(100), MaxPriorityFeePerGas: b(10)},
			Fees{MaxFeePerGas: b(1000), MaxPriorityFeePerGas: b(15)}, 20, FeeCaps{MaxFee: b(150), MaxTip: b(100), MaxBumps: 10},
			Fees{MaxFeePerGas: b(150), MaxPriorityFeePerGas: b(15)}, false},
		{"cap below the bump", Fees{MaxFeePerGas: b(100), MaxPriorityFeePerGas: b(10)},
			Fees{MaxFeePerGas: b(1000), MaxPriorityFeePerGas: b(10)}, 20, FeeCaps{MaxFee: b(119), MaxTip: b(100), MaxBumps: 10},
			Fees{}, true},
		{"tip cap below the bump", Fees{MaxFeePerGas: b(100), MaxPriorityFeePerGas: b(10)},
			Fees{}, 20, FeeCaps{MaxFee: b(1000), MaxTip: b(11), MaxBumps: 10}, Fees{}, true},
		{"legacy +20%", Fees{GasPrice: b(100)}, Fees{GasPrice: b(50)}, 20, none, Fees{GasPrice: b(120)}, false},
		{"legacy fresh wins", Fees{GasPrice: b(100)}, Fees{GasPrice: b(300)}, 20, none, Fees{GasPrice: b(300)}, false},
		{"legacy at the cap", Fees{GasPrice: b(100)}, Fees{GasPrice: b(300)}, 20, FeeCaps{MaxFee: b(110), MaxBumps: 10}, Fees{}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := BumpFees(tc.prev, tc.fresh, tc.percent, tc.caps)
			if tc.capErr {
				require.ErrorIs(t, err, ErrFeeCapReached)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			// Whatever the inputs, a replacement beats the previous attempt by
			// at least the percentage nodes require and stays within the caps.
			p := max(tc.percent, MinBumpPercent)
			for _, pair := range [][2]*big.Int{{tc.prev.MaxFeePerGas, got.MaxFeePerGas}, {tc.prev.MaxPriorityFeePerGas, got.MaxPriorityFeePerGas},
				{tc.prev.GasPrice, got.GasPrice}} {
				if pair[0] == nil {
					assert.Nil(t, pair[1])
					continue
				}
				assert.True(t, new(big.Int).Mul(pair[1], b(100)).Cmp(new(big.Int).Mul(pair[0], b(int64(100+p)))) >= 0)
			}
			if tc.caps.MaxFee != nil {
				assert.LessOrEqual(t, suggested(got.MaxFeePerGas, got.GasPrice).Cmp(tc.caps.MaxFee), 0)
			}
		})
	}
	assert.ErrorIs(t, FeeCaps{MaxBumps: 2}.AllowBump(2), ErrFeeCapReached)
	assert.NoError(t, FeeCaps{MaxBumps: 2}.AllowBump(1))
	_, err := BumpFees(Fees{}, Fees{MaxFeePerGas: b(1)}, 20, none)
	assert.Error(t, err)
	assert.False(t, errors.Is(err, ErrFeeCapReached), "no previous fees is a bug, not a cap")
}

func TestDue(t *testing.T) {
	now := time.Now()
	later := now.Add(time.Second)
	assert.True(t, (&Tx{}).Due(now))
	assert.False(t, (&Tx{NextAttemptAt: &later}).Due(now))
	assert.True(t, (&Tx{NextAttemptAt: &now}).Due(now))
}

func TestCanMine(t *testing.T) {
	assert.True(t, Fees{MaxFeePerGas: b(10)}.CanMine(b(10)))
	assert.False(t, Fees{MaxFeePerGas: b(9)}.CanMine(b(10)))
	assert.False(t, Fees{GasPrice: b(9)}.CanMine(b(10)))
	assert.True(t, Fees{GasPrice: b(9)}.CanMine(nil))
}

func TestActionAllowedIn(t *testing.T) {
	for _, s := range States {
		open := s == StateAllocated || s == StateTracking || s == StateStuck
		assert.Equal(t, open, ActionCancelTx.AllowedIn(s), "cancel in %s", s)
		assert.Equal(t, open, ActionResubmit.AllowedIn(s), "resubmit in %s", s)
		assert.Equal(t, s == StateTracking || s == StateStuck, ActionReplace.AllowedIn(s), "replace in %s", s)
	}
}

// TestFeeCaps_For: an attempt's cap per gas is the chain's, held to the
// transaction's fee budget (its payload's gas at its ceiling) over the
// attempt's gas and to the nodes' cap on a whole transaction's fee; a
// 21,000-gas placeholder of a large payload may pay more per gas, never
// more in all.
func TestFeeCaps_For(t *testing.T) {
	t.Parallel()
	gwei := func(n int64) *big.Int { return new(big.Int).Mul(big.NewInt(n), big.NewInt(1_000_000_000)) }
	chain := FeeCaps{MaxFee: gwei(10_000), MaxTip: gwei(10_000), MaxBumps: 3, TxFeeCap: gwei(1_000_000_000)} // 1 ether
	cases := []struct {
		name        string
		ceiling     *big.Int
		payload     uint64
		gas         uint64
		maxFee, tip *big.Int
	}{
		{"no ceiling, small payload: the chain's cap", nil, 21000, 21000, gwei(10_000), gwei(10_000)},
		{"the ceiling, on the payload", gwei(50), 100_000, 100_000, gwei(50), gwei(50)},
		{"the ceiling's budget over a placeholder's gas", gwei(50), 100_000, 21000, new(big.Int).Quo(gwei(5_000_000), big.NewInt(21000)),
			new(big.Int).Quo(gwei(5_000_000), big.NewInt(21000))},
		{"the nodes' cap on a large payload", nil, 30_000_000, 30_000_000, new(big.Int).Quo(gwei(1_000_000_000), big.NewInt(30_000_000)),
			new(big.Int).Quo(gwei(1_000_000_000), big.NewInt(30_000_000))},
		{"a placeholder of a large payload: the chain's cap", gwei(100), 30_000_000, 21000, gwei(10_000), gwei(10_000)},
	}
	for _, c := range cases {
		got := chain.For(c.ceiling, c.payload, c.gas)
		assert.Equal(t, c.maxFee, got.MaxFee, c.name)
		assert.Equal(t, c.tip, got.MaxTip, c.name)
		assert.Equal(t, 3, got.MaxBumps, c.name)
		total := new(big.Int).Mul(got.MaxFee, new(big.Int).SetUint64(c.gas))
		assert.LessOrEqual(t, total.Cmp(chain.TxFeeCap), 0, "%s: within the nodes' cap", c.name)
		if c.ceiling != nil {
			budget := new(big.Int).Mul(c.ceiling, new(big.Int).SetUint64(c.payload))
			assert.LessOrEqual(t, total.Cmp(budget), 0, "%s: within the budget counted", c.name)
		}
	}
	assert.Equal(t, FeeCaps{}, FeeCaps{}.For(nil, 21000, 21000), "no caps: none")
}

// TestFeeCaps_ClampAndWithin: fees are held to the caps, the tip never
// above the fee; Within says whether fees need holding.
func TestFeeCaps_ClampAndWithin(t *testing.T) {
	t.Parallel()
	caps := FeeCaps{MaxFee: big.NewInt(100), MaxTip: big.NewInt(10)}
	for _, c := range []struct {
		in, want Fees
		within   bool
	}{
		{Fees{MaxFeePerGas: big.NewInt(50), MaxPriorityFeePerGas: big.NewInt(5)}, Fees{MaxFeePerGas: big.NewInt(50), MaxPriorityFeePerGas: big.NewInt(5)}, true},
		{Fees{MaxFeePerGas: big.NewInt(500), MaxPriorityFeePerGas: big.NewInt(50)}, Fees{MaxFeePerGas: big.NewInt(100), MaxPriorityFeePerGas: big.NewInt(10)}, false},
		{Fees{MaxFeePerGas: big.NewInt(100), MaxPriorityFeePerGas: big.NewInt(11)}, Fees{MaxFeePerGas: big.NewInt(100), MaxPriorityFeePerGas: big.NewInt(10)}, false},
		{Fees{GasPrice: big.NewInt(101)}, Fees{GasPrice: big.NewInt(100)}, false},
		{Fees{GasPrice: big.NewInt(100)}, Fees{GasPrice: big.NewInt(100)}, true},
	} {
		assert.Equal(t, c.want, caps.Clamp(c.in))
		assert.Equal(t, c.within, caps.Within(c.in), "%+v", c.in)
		assert.True(t, caps.Within(caps.Clamp(c.in)))
	}
	low := FeeCaps{MaxFee: big.NewInt(5), MaxTip: big.NewInt(10)}
	assert.Equal(t, Fees{MaxFeePerGas: big.NewInt(5), MaxPriorityFeePerGas: big.NewInt(5)},
		low.Clamp(Fees{MaxFeePerGas: big.NewInt(50), MaxPriorityFeePerGas: big.NewInt(8)}), "the tip held to the fee")
}
