package testsupport_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/testsupport"
)

// TestIssue46_NoSleeps: no test of the module (nor a test-support package)
// sleeps in the hope that something is done. A time.Sleep stays only where
// the time passing is the thing under test, and a "// sleep:" comment on
// its line or the line above says why; everything else waits on the
// condition it needs.
func TestIssue46_NoSleeps(t *testing.T) {
	t.Parallel()
	root := testsupport.ModuleRoot(t)
	files, err := testsupport.SleepScope(root)
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var bare []string
	for _, f := range files {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		rel, err := filepath.Rel(root, f)
		require.NoError(t, err)
		found, err := testsupport.UnjustifiedSleeps(rel, src)
		require.NoError(t, err)
		bare = append(bare, found...)
	}
	assert.Empty(t, bare, "time.Sleep without a %q comment saying why no condition can be awaited; wait on the condition instead (testsupport.Eventually)", "// "+testsupport.SleepMarker)
}

// TestUnjustifiedSleeps: the check finds a bare sleep under any name of
// the time package, also one passed as a value, and accepts one whose
// line or the line above says why.
func TestUnjustifiedSleeps(t *testing.T) {
	t.Parallel()
	src := `package x

import (
	"time"
	tm "time"
)

func f() {
	time.Sleep(1)
	tm.Sleep(2)
	g := time.Sleep
	// sleep: the lease must run out
	time.Sleep(3)
	time.Sleep(4) // sleep: a fault held for a period
	// sleep:
	time.Sleep(5)
	_ = g
}
`
	got, err := testsupport.UnjustifiedSleeps("x_test.go", []byte(src))
	require.NoError(t, err)
	assert.Equal(t, []string{"x_test.go:9", "x_test.go:10", "x_test.go:11", "x_test.go:16"}, got)

	none, err := testsupport.UnjustifiedSleeps("y_test.go", []byte("package y\n\nfunc Sleep() {}\n\nfunc f() { Sleep() }\n"))
	require.NoError(t, err)
	assert.Empty(t, none)
}

// TestSleepScope: tests and test-support packages are in scope, other
// production code is not.
func TestSleepScope(t *testing.T) {
	t.Parallel()
	assert.True(t, testsupport.IsTestSupport("shared/pgtest"))
	assert.True(t, testsupport.IsTestSupport("functions/internal/stacktest"))
	assert.True(t, testsupport.IsTestSupport("shared/testsupport"))
	assert.False(t, testsupport.IsTestSupport("emulator/cmd/benchpipe"))
	assert.False(t, testsupport.IsTestSupport("shared/app"))
}

// TestWithin: a condition that comes to hold is met in time; one that
// never does is given up on once the time is out, not before.
func TestWithin(t *testing.T) {
	t.Parallel()
	calls := 0
	assert.True(t, testsupport.Within(time.Second, func() bool { calls++; return calls == 3 }))
	assert.Equal(t, 3, calls)
	start := time.Now()
	assert.False(t, testsupport.WithinEvery(50*time.Millisecond, time.Millisecond, func() bool { return false }))
	assert.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)
}
