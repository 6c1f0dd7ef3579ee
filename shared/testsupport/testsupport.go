// Package testsupport holds the test helpers that packages of every layer
// share: waiting on a condition instead of sleeping, a buffer a process
// writes while the test reads it, the module's root, a URL nothing listens
// on; and the check that no test sleeps in the hope that something is done.
// It imports no package of txfence, so that any test may use it.
package testsupport

import (
	"bytes"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// every is how often Eventually, Within and Never look at their condition.
const every = 10 * time.Millisecond

// Eventually calls cond until it holds, every 10 ms, and fails the test
// (naming what it waited for) if it does not hold within. cond runs on the
// test's goroutine, so it may use require.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	EventuallyEvery(t, within, every, what, cond)
}

// EventuallyEvery is Eventually with another interval between calls, for a
// condition that is costly to evaluate.
func EventuallyEvery(t testing.TB, within, interval time.Duration, what string, cond func() bool) {
	t.Helper()
	if !poll(within, interval, cond) {
		t.Fatalf("timed out after %s waiting for %s", within, what)
	}
}

// Within calls cond until it holds, every 10 ms, for at most within, and
// reports whether it held. It does not touch a testing.T, so a goroutine
// other than the test's may use it.
func Within(within time.Duration, cond func() bool) bool {
	return poll(within, every, cond)
}

// WithinEvery is Within with another interval between calls.
func WithinEvery(within, interval time.Duration, cond func() bool) bool {
	return poll(within, interval, cond)
}

// poll calls cond every interval until it holds (true) or within has
// passed (false).
func poll(within, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
	return true
}

// Never checks, every 10 ms for the whole of during, that cond does not
// hold, and fails the test (naming what must not happen) as soon as it
// does. It is for a negative check whose only evidence is that nothing
// happens in a window, where there is no later event to wait on.
func Never(t testing.TB, during time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(during)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		if cond() {
			t.Fatalf("%s happened within %s", what, during)
		}
		if !time.Now().Before(deadline) {
			return
		}
		<-tick.C
	}
}

// SyncBuffer is a buffer that a process or goroutines write while the test
// reads it.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String is everything written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// ModuleRoot is the directory of the module's go.mod.
func ModuleRoot(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == "/dev/null" {
		t.Fatalf("go env GOMOD: not inside a module")
	}
	return filepath.Dir(gomod)
}

// DeadURL is an http URL (no path) of a local port nothing listens on any
// more.
func DeadURL(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	return "http://" + addr
}
