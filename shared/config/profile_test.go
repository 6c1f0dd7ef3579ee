package config

import (
	"math/big"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestIssue48_ChainProfiles: a chain TXFENCE_CHAIN_PROFILES does not name
// is generic (every field the global setting); a named one takes its
// kind's defaults, the global settings where the kind has none, and its
// own fields over both, field by field; and the use cases read the
// profile of the chain they work on.
func TestIssue48_ChainProfiles(t *testing.T) {
	e := validEnv()
	e[EnvChains] = "1337=http://127.0.0.1:8545,10=https://op.example,42161=https://arb.example,1=https://eth.example"
	e[EnvConfirmations] = "7"
	e[EnvMaxInFlight] = "32"
	e[EnvChainFees] = "42161:maxBumps=4"
	e[EnvChainProfiles] = `{"10":{"kind":"op-stack","confirmations":20,"minTip":"5000"},
		"42161":{"kind":"arbitrum","maxInFlight":8,"bumpAfter":"5s"},"1":{"kind":"l1"}}`
	c, err := Load(env(e))
	require.NoError(t, err)

	generic := c.Profile(1337)
	assert.Equal(t, KindGeneric, generic.Kind)
	assert.Equal(t, uint64(7), generic.Confirmations, "the global setting")
	assert.Equal(t, FinalityConfirmations, generic.FinalityMode)
	assert.Equal(t, 32, generic.MaxInFlight)
	assert.True(t, generic.PublicMempool)
	assert.Equal(t, DataFeeNone, generic.DataFee)
	assert.Equal(t, c.MinPriorityFee, generic.Fees.MinTip)

	op := c.Profile(10)
	assert.Equal(t, KindOPStack, op.Kind)
	assert.Equal(t, uint64(20), op.Confirmations, "the entry's own field")
	assert.Equal(t, 12*time.Second, op.BumpAfter, "the kind's default")
	assert.Equal(t, 2*time.Second, op.BlockTime)
	assert.Equal(t, DataFeeOPStack, op.DataFee)
	assert.Equal(t, 32, op.MaxInFlight, "the global setting where the kind has none")
	assert.Equal(t, big.NewInt(5000), op.Fees.MinTip)

	arb := c.Profile(42161)
	assert.False(t, arb.PublicMempool)
	assert.Equal(t, DataFeeArbitrum, arb.DataFee)
	assert.Equal(t, 0, arb.Fees.MinTip.Sign(), "arbitrum pays no tip")
	assert.Equal(t, 4, arb.Fees.MaxBumps, "TXFENCE_CHAIN_FEES still applies")
	assert.Equal(t, 8, arb.MaxInFlight)

	l1 := c.Profile(1)
	assert.Equal(t, FinalityFinalized, l1.FinalityMode)
	assert.Equal(t, uint64(3), l1.LagBlocks)

	fin := c.Finality()
	mode, depth := fin.For(10)
	assert.Equal(t, FinalityConfirmations, mode)
	assert.Equal(t, uint64(20), depth)
	mode, _ = fin.For(1)
	assert.Equal(t, FinalityFinalized, mode)
	mode, depth = fin.For(1337)
	assert.Equal(t, FinalityConfirmations, mode)
	assert.Equal(t, uint64(7), depth)
	assert.True(t, fin.WatchesReorgs())

	limit, delegated := c.Drain().InFlight(42161)
	assert.Equal(t, 8, limit)
	assert.Equal(t, 1, delegated)
	limit, _ = c.Drain().InFlight(1337)
	assert.Equal(t, 32, limit)

	rs := c.Resubmit()
	assert.Equal(t, 5*time.Second, rs.BumpAfterFor(42161))
	assert.Equal(t, c.BumpAfter, rs.BumpAfterFor(1337))
	assert.Equal(t, 5*time.Second, rs.ShortestBumpAfter())
}

// TestIssue48_ChainProfilesBadInput: every mistake in a profile stops the
// load with an error that names the variable and the chain.
func TestIssue48_ChainProfilesBadInput(t *testing.T) {
	cases := map[string]struct{ value, want string }{
		"not json":         {`{10:`, "JSON object"},
		"bad chain id":     {`{"op":{"kind":"op-stack"}}`, `key "op" must be a positive chain id`},
		"unknown kind":     {`{"1337":{"kind":"optimism"}}`, "kind must be one of generic, l1, op-stack, arbitrum"},
		"unknown field":    {`{"1337":{"kind":"l1","confirmation":3}}`, `unknown field "confirmation"`},
		"bad duration":     {`{"1337":{"blockTime":"fast"}}`, `"fast" is not a duration`},
		"bad wei":          {`{"1337":{"minTip":"-1"}}`, "not a decimal number of wei"},
		"wrong type":       {`{"1337":{"confirmations":"ten"}}`, `field "confirmations" must be a uint64`},
		"chain not listed": {`{"5":{"kind":"l1"}}`, "chain 5 is not in TXFENCE_CHAINS"},
		"bad finality":     {`{"1337":{"finality":"safe"}}`, `chain 1337: finality must be "confirmations" or "finalized"`},
		"zero depth":       {`{"1337":{"confirmations":0}}`, "chain 1337: confirmations must be at least 1"},
		"bad data fee":     {`{"1337":{"dataFee":"zk"}}`, "chain 1337: dataFee must be"},
		"bad bump":         {`{"1337":{"bumpPercent":5}}`, "chain 1337: bumpPercent must be between 10"},
		"bad percentile":   {`{"1337":{"feeHistoryPercentile":101}}`, "chain 1337: feeHistoryPercentile must be between 0 and 100"},
		"tip over cap":     {`{"1337":{"minTip":"20","maxTip":"10"}}`, "chain 1337: the tip floor 20 wei is above the tip cap 10"},
		"fee set twice":    {`{"1337":{"maxBumps":3}}`, "chain 1337: maxBumps set here and in TXFENCE_CHAIN_FEES"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := validEnv()
			e[EnvChainProfiles] = tc.value
			if name == "fee set twice" {
				e[EnvChainFees] = "1337:maxBumps=2"
			}
			_, err := Load(env(e))
			require.Error(t, err)
			assert.Contains(t, err.Error(), EnvChainProfiles)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestIssue48_ProfilesDocumented: docs/configuration.md has a row for
// every profile field, with each built-in kind's default (a column per
// kind), and a meaning for each; TestIssue46_ConfigurationDoc keeps the
// file current.
func TestIssue48_ProfilesDocumented(t *testing.T) {
	doc, err := os.ReadFile(referencePath)
	require.NoError(t, err)
	text := string(doc)
	require.Contains(t, text, "## Chain profiles")
	assert.Contains(t, text, "| field | generic | l1 | op-stack | arbitrum | what |")
	ty := reflect.TypeOf(ProfileSpec{})
	for i := range ty.NumField() {
		name := ty.Field(i).Tag.Get("json")
		if name == "kind" {
			continue
		}
		d, ok := profileDocs[name]
		require.True(t, ok, "%s has a meaning", name)
		assert.True(t, d.global != "" || d.def != "" || allKindsSet(i), "%s has a default for every kind", name)
		assert.Contains(t, text, "| `"+name+"` |", "%s has a row", name)
	}
	assert.Contains(t, text, "| `dataFee` | `none` | `none` | `op-stack` | `arbitrum` |")
	assert.Contains(t, text, "| `publicMempool` | `true` | `true` | `true` | `false` |")
}

func allKindsSet(field int) bool {
	for _, k := range ChainKinds {
		if reflect.ValueOf(builtinProfiles[k]).Field(field).IsNil() {
			return false
		}
	}
	return true
}
