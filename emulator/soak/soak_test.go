package soak

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestIssue10_Soak is the short soak CI runs: a few hundred creates on 4
// signers and 3 servers while every fault is injected once, then every row
// and the feed are checked. `make soak` is the full one.
func TestIssue10_Soak(t *testing.T) {
	if testing.Short() {
		t.Skip("fault soak")
	}
	bin := buildServer(t)
	out := &lineLogger{t: t}
	res, err := Run(context.Background(), Config{
		ServerBinary: bin, Txs: 300, Signers: 4, Servers: 3, Seed: 10,
		Window: 3 * time.Second, Gap: 2 * time.Second, Timeout: time.Minute,
		Out: out,
	})
	require.NoError(t, err)
	t.Logf("took %s", res.Duration.Round(time.Second))
	assert.Equal(t, len(FaultNames)+4, res.Faults, "every fault injected (rpc-errors on 3 methods, timeouts and drops, 2 reorgs)")
	assert.GreaterOrEqual(t, res.Txs, 300)
	assert.Zero(t, res.Open, "transactions left open")
	assert.Zero(t, res.Violations, "invariants broken")
	assert.True(t, strings.HasPrefix(out.last(), "soak: txs="), "the last line: %q", out.last())
}

// buildServer compiles functions/server (without -race: it runs as
// separate processes) into the test's temporary directory.
func buildServer(t *testing.T) string {
	t.Helper()
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	require.NoError(t, err)
	out := filepath.Join(t.TempDir(), "server")
	cmd := exec.Command("go", "build", "-o", out, "./functions/server")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build: %s", b)
	return out
}

// lineLogger logs each line written to it through t and remembers the last.
type lineLogger struct {
	t    *testing.T
	mu   sync.Mutex
	buf  bytes.Buffer
	prev string
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	for {
		line, err := l.buf.ReadString('\n')
		if err != nil {
			l.buf.WriteString(line) // incomplete: keep it for the next write
			return len(p), nil
		}
		line = strings.TrimRight(line, "\n")
		l.prev = line
		l.t.Log(line)
	}
}

func (l *lineLogger) last() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.prev
}
