package config

import (
	"math/big"
	"reflect"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestIssue46_UseCaseSlices: each use case's part of the configuration
// carries every field it declares, with Config's value. A field added to a
// part and not filled in by Config's method stays zero and fails here.
func TestIssue46_UseCaseSlices(t *testing.T) {
	var c Config
	fill(reflect.ValueOf(&c).Elem())
	c = c.indexed()

	parts := map[string]any{
		"Fees": c.Fees(), "Attempts": c.Attempts(), "Create": c.Create(), "Drain": c.Drain(),
		"Receipts": c.Receipts(), "Finality": c.Finality(), "Resubmit": c.Resubmit(),
	}
	for name, p := range parts {
		assertFilled(t, name, reflect.ValueOf(p))
	}

	create := c.Create()
	assert.Equal(t, []uint64{c.Chains[0].ID}, create.ChainIDs)
	assert.True(t, create.HasChain(c.Chains[0].ID))
	assert.False(t, create.HasChain(c.Chains[0].ID+1))
	s, ok := create.Signer(c.Signers[0].Address)
	require.True(t, ok)
	assert.Equal(t, c.Signers[0], s)
	assert.Equal(t, c.Lease.RenewEvery, c.Drain().RenewEvery)
	assert.Equal(t, c.FeesFor(1), create.Fees.For(1))
	assert.Equal(t, c.FeeCaps(1), c.Drain().Attempts.Fees.Caps(1))
}

// fill sets every exported field of v to a value that is not zero.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint64:
		v.SetUint(7)
	case reflect.Float64:
		v.SetFloat(0.5)
	case reflect.Pointer:
		if v.Type() == reflect.TypeOf(&big.Int{}) {
			v.Set(reflect.ValueOf(big.NewInt(7)))
		}
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0))
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k)
		fill(e)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Array:
		if v.Type() == reflect.TypeOf(common.Address{}) {
			v.Set(reflect.ValueOf(common.HexToAddress("0xa1")))
		}
	}
}

// assertFilled fails for each exported field of v (nested parts included)
// that is zero.
func assertFilled(t *testing.T, path string, v reflect.Value) {
	t.Helper()
	for i := 0; i < v.NumField(); i++ {
		f, name := v.Field(i), path+"."+v.Type().Field(i).Name
		switch {
		case !v.Type().Field(i).IsExported():
		case f.Kind() == reflect.Struct && f.Type().PkgPath() == v.Type().PkgPath():
			assertFilled(t, name, f)
		default:
			assert.False(t, f.IsZero(), "%s is not filled in from Config", name)
		}
	}
}
