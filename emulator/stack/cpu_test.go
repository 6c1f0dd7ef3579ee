package stack

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/testsupport"
)

// TestSampleCPU_OnlyOwnPostgres: the benchmarks' PostgreSQL CPU is that of
// the servers this process started (a "postgres" child and its children),
// not of every postgres process on a shared machine.
func TestSampleCPU_OnlyOwnPostgres(t *testing.T) {
	sh, err := exec.LookPath("sh")
	require.NoError(t, err)
	b, err := os.ReadFile(sh)
	require.NoError(t, err)
	pg := filepath.Join(t.TempDir(), "postgres") // a shell that calls itself postgres
	require.NoError(t, os.WriteFile(pg, b, 0o755))
	const burn = `i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done; sleep 30`

	busy := func(cmd *exec.Cmd) {
		t.Helper()
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	// Not ours: a postgres whose parent is a plain shell.
	other := exec.Command(sh, "-c", pg+" -c '"+burn+"'; true")
	busy(other)
	before := SampleCPU(nil)
	// Ours: a postgres this process started.
	own := exec.Command(pg, "-c", burn)
	busy(own)

	testsupport.Eventually(t, 30*time.Second, "our postgres to burn its loop and sleep", func() bool {
		st := procStatFields(own.Process.Pid)
		return len(st) > 0 && st[0] == "S" && procCPU(own.Process.Pid) > 100*time.Millisecond
	})
	spent := SampleCPU(nil).Sub(before).Postgres
	ownCPU := procCPU(own.Process.Pid)
	require.Greater(t, ownCPU, 100*time.Millisecond)
	assert.InDelta(t, ownCPU.Seconds(), spent.Seconds(), 0.05, "only this process's postgres: %s against its %s", spent, ownCPU)
}
