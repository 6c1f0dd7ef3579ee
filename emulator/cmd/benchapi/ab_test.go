package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestParseAB: -ab takes KEY=VALUE settings separated by commas, values
// may hold '=', and anything else is refused by name.
func TestParseAB(t *testing.T) {
	t.Parallel()
	env, err := parseAB("")
	require.NoError(t, err)
	assert.Nil(t, env, "no -ab: no comparison")
	env, err = parseAB("TXFENCE_CONTENDED_WAIT=3ms,GOGC=400,X=a=b")
	require.NoError(t, err)
	assert.Equal(t, []string{"TXFENCE_CONTENDED_WAIT=3ms", "GOGC=400", "X=a=b"}, env)
	for _, bad := range []string{"GOGC", "=400", "GOGC=400,", "A=1,,B=2"} {
		_, err := parseAB(bad)
		assert.ErrorContains(t, err, "is not KEY=VALUE", bad)
	}
}

// TestSpread: the minimum, median and maximum of the pairs' ratios, in
// whatever order they came.
func TestSpread(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "none", spread(nil))
	assert.Equal(t, "min 0.90 median 1.05 max 1.30", spread([]float64{1.30, 0.90, 1.05}))
	xs := []float64{2, 1}
	spread(xs)
	assert.Equal(t, []float64{2, 1}, xs, "the ratios are left in their order")
}
