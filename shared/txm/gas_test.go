package txm

import (
	"bytes"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core"
	"github.com/ethereum/go-ethereum/params"
	"github.com/stretchr/testify/require"
)

// TestIntrinsicGas checks IntrinsicGas against go-ethereum's own
// core.IntrinsicGas and core.FloorDataGas under mainnet's current rules:
// a node takes max(intrinsic, floor) as the least gas limit.
func TestIntrinsicGas(t *testing.T) {
	t.Parallel()
	cfg := params.MainnetChainConfig
	require.NotNil(t, cfg.OsakaTime)
	rules := cfg.Rules(big.NewInt(24_000_000), true, *cfg.OsakaTime)
	require.True(t, rules.IsPrague && rules.IsOsaka && rules.IsShanghai && rules.IsIstanbul, "mainnet's current rules")
	require.False(t, rules.IsAmsterdam, "not a future fork")

	mixed := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			if i%3 != 0 {
				b[i] = byte(i)
			}
		}
		return b
	}
	// ERC-20 transfer(0x…dEaD, 1): selector, padded address, padded amount.
	erc20 := append(common.FromHex("0xa9059cbb"), common.LeftPadBytes(common.HexToAddress("0xdEaD").Bytes(), 32)...)
	erc20 = append(erc20, common.LeftPadBytes([]byte{1}, 32)...)

	cases := []struct {
		name     string
		data     []byte
		creation bool
		want     uint64 // hand-computed, besides go-ethereum's answer
	}{
		{"empty", nil, false, 21000},
		{"one zero byte", []byte{0}, false, 21010},               // floor 21000+10×1 beats 21000+4
		{"one non-zero byte", []byte{1}, false, 21040},           // floor 21000+10×4 beats 21000+16
		{"selector", common.FromHex("0xa9059cbb"), false, 21160}, // floor 21000+10×16 beats 21000+64
		{"zero bytes", make([]byte, 100), false, 22000},          // floor 21000+10×100 beats 21000+400
		{"non-zero bytes", bytes.Repeat([]byte{0xff}, 100), false, 25000},
		{"erc20 transfer", erc20, false, 21000 + 10*(4*(4+2+1)+(68-7))},
		{"mixed", mixed(1000), false, 0},
		{"large zero", make([]byte, 128*1024), false, 0},
		{"large non-zero", bytes.Repeat([]byte{0x60}, 128*1024), false, 0},
		{"creation, empty", nil, true, 53000},
		{"creation, one byte", []byte{0x60}, true, 53000 + 16 + 2},
		{"creation, 32 bytes", bytes.Repeat([]byte{0x60}, 32), true, 53000 + 32*16 + 2},
		{"creation, 33 bytes", bytes.Repeat([]byte{0x60}, 33), true, 53000 + 33*16 + 4},
		{"creation, zero-heavy", make([]byte, 1000), true, 53000 + 4000 + 32*2},
		{"creation, mixed", mixed(5000), true, 0},
		{"creation, max init code", bytes.Repeat([]byte{0x5b}, params.MaxInitCodeSize), true, 0}, // floor wins
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var to *common.Address
			if !tc.creation {
				to = &common.Address{0xde, 0xad}
			}
			intrinsic, err := core.IntrinsicGas(tc.data, nil, nil, common.Address{}, to, nil, rules)
			require.NoError(t, err)
			floor, err := core.FloorDataGas(rules, common.Address{}, to, nil, tc.data, nil)
			require.NoError(t, err)
			geth := max(intrinsic, floor)

			got := IntrinsicGas(tc.data, tc.creation)
			require.Equal(t, geth, got, "go-ethereum: intrinsic %d, floor %d", intrinsic, floor)
			if tc.want != 0 {
				require.Equal(t, tc.want, got)
			}
		})
	}
}
