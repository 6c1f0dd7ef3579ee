package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/txfence/txfence/emulator/loadgen"
)

// TestLadder_Carried: a step is carried only when it answered at least 97%
// of its offered rate, with no errors, within the p99 bound.
func TestLadder_Carried(t *testing.T) {
	t.Parallel()
	l := ladder{p99: 50 * time.Millisecond}
	run := func(ok int, errs int, p99 time.Duration) loadgen.Result {
		lat := make([]time.Duration, ok)
		for i := range lat {
			lat[i] = time.Millisecond
		}
		for i := max(ok-2, 0); i < ok; i++ {
			lat[i] = p99 // the slowest two: the 99th percentile of 50
		}
		return loadgen.Result{Latencies: lat, Errors: errs, Elapsed: time.Second}
	}
	assert.True(t, l.carried(50, run(50, 0, 50*time.Millisecond), l.p99), "all answered, p99 at the bound")
	assert.True(t, l.carried(50, run(49, 0, time.Millisecond), l.p99), "98% answered")
	assert.False(t, l.carried(50, run(48, 0, time.Millisecond), l.p99), "96% answered: behind")
	assert.False(t, l.carried(50, run(50, 0, 51*time.Millisecond), l.p99), "p99 over the bound")
	assert.False(t, l.carried(50, run(50, 1, time.Millisecond), l.p99), "an error")
	assert.False(t, l.carried(50, run(0, 0, 0), l.p99), "nothing answered")
}
