package app

import (
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// Calls that arrive while one runs do not run themselves; the running one
// goes round once more for all of them, and not at all when it handed its
// work on or failed (its own prompt is then retried).
func TestCoalescer_OneRunsAndGoesRoundForTheRest(t *testing.T) {
	t.Parallel()
	var c coalescer[string]
	inside, release := make(chan struct{}), make(chan struct{})
	runs := 0
	var wg sync.WaitGroup
	wg.Go(func() {
		ran, err := c.do("a", func() (bool, error) {
			runs++
			if runs == 1 {
				close(inside)
				<-release
			}
			return false, nil
		})
		require.True(t, ran)
		require.NoError(t, err)
	})
	<-inside
	for range 5 {
		ran, err := c.do("a", func() (bool, error) { t.Error("ran beside the running call"); return false, nil })
		require.False(t, ran)
		require.NoError(t, err)
	}
	other := false
	ran, _ := c.do("b", func() (bool, error) { other = true; return false, nil })
	require.True(t, ran && other, "another key runs at once")
	close(release)
	wg.Wait()
	require.Equal(t, 2, runs, "one more round for the five that came meanwhile")

	for _, tc := range []struct {
		name     string
		handedOn bool
		err      error
	}{{"handed on", true, nil}, {"failed", false, errors.New("rpc down")}} {
		inside, release := make(chan struct{}), make(chan struct{})
		runs := 0
		done := make(chan error)
		go func() {
			_, err := c.do("c", func() (bool, error) {
				runs++
				close(inside)
				<-release
				return tc.handedOn, tc.err
			})
			done <- err
		}()
		<-inside
		ran, _ := c.do("c", func() (bool, error) { return false, nil })
		require.False(t, ran, tc.name)
		close(release)
		require.Equal(t, tc.err, <-done, tc.name)
		require.Equal(t, 1, runs, tc.name)
	}
}
