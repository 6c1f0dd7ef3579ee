// Package browsertest drives a real headless Chromium (Debian's chromium
// package, installed by make chromium; never a download) with chromedp, for
// the tests of the operator console.
package browsertest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// Chromium is the browser the tests drive: $TXFENCE_CHROMIUM, else
// /usr/bin/chromium. Without it the test is skipped, except under CI,
// where a missing browser is a broken machine, not a pass.
func Chromium(t *testing.T) string {
	t.Helper()
	p := os.Getenv("TXFENCE_CHROMIUM")
	if p == "" {
		p = "/usr/bin/chromium"
	}
	if _, err := os.Stat(p); err != nil {
		msg := fmt.Sprintf("headless Chromium not found at %s: install Debian's chromium package (make chromium) or set TXFENCE_CHROMIUM", p)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}

// New starts a headless Chromium for the test and returns its tab, closed
// at the end of the test. Page exceptions and console errors go to the
// test log.
func New(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(Chromium(t)), chromedp.WindowSize(1440, 900))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	var done atomic.Bool
	ctx, cancelTab := chromedp.NewContext(alloc, chromedp.WithErrorf(func(format string, args ...any) {
		// This chromedp does not know every event of Debian's newer
		// Chromium; those are noise, anything else is worth seeing.
		if msg := fmt.Sprintf(format, args...); !done.Load() && !strings.Contains(msg, "unhandled node event") {
			t.Logf("chromedp: %s", msg)
		}
	}))
	t.Cleanup(func() {
		done.Store(true)
		cancelTab()
		cancelAlloc()
	})
	chromedp.ListenTarget(ctx, func(ev any) {
		if done.Load() {
			return
		}
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			t.Logf("page exception: %s", e.ExceptionDetails.Error())
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.APITypeError {
				var parts []string
				for _, a := range e.Args {
					parts = append(parts, string(a.Value))
				}
				t.Logf("page console error: %s", strings.Join(parts, " "))
			}
		}
	})
	start := time.Now()
	require.NoError(t, chromedp.Run(ctx), "start Chromium")
	t.Logf("Chromium started in %s", time.Since(start).Round(time.Millisecond))
	return ctx
}

// Run runs browser actions with a bound, failing the test on error.
func Run(t *testing.T, ctx context.Context, within time.Duration, actions ...chromedp.Action) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	require.NoError(t, chromedp.Run(c, actions...))
}

// Poll evaluates expr until it is true.
func Poll(t *testing.T, ctx context.Context, what, expr string, within time.Duration) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	require.NoError(t, chromedp.Run(c, chromedp.Poll(expr, nil, chromedp.WithPollingInterval(50*time.Millisecond))), "waiting for %s", what)
}

// Eval evaluates expr and returns its value.
func Eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	var out T
	Run(t, ctx, 10*time.Second, chromedp.Evaluate(expr, &out))
	return out
}
