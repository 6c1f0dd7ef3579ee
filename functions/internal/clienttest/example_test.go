package clienttest_test

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/examples/go/sendmany/sendmany"
	"github.com/txfence/txfence/functions/internal/stacktest"
	"github.com/txfence/txfence/shared/txm"
)

// TestClient_ExampleSendMany runs the sendmany example's logic against the
// running stack: with no signers given it reads the two configured ones,
// sends 100 transactions over them, follows the feed until every one is
// final and prints a summary saying all were confirmed; the database holds
// exactly the transactions it says it sent, half on each signer.
func TestClient_ExampleSendMany(t *testing.T) {
	w := stacktest.NewWorld(t, 2, stacktest.Lively)
	nd := w.Node(t, "a")
	stop := w.Run(t, []*stacktest.Node{nd}, stacktest.RunOptions{})
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const n = 100
	var out bytes.Buffer
	err := sendmany.Run(ctx, sendmany.Config{API: nd.APIURL, N: n, Concurrency: 8, Progress: 500 * time.Millisecond, Retry: fastRetries}, &out)
	t.Log(out.String())
	require.NoError(t, err)
	summary := regexp.MustCompile(`(?m)^sendmany: sent=(\d+) confirmed=(\d+) failed=(\d+) stuck=\d+ retries=\d+ seconds=[0-9.]+$`).FindStringSubmatch(out.String())
	require.NotNil(t, summary, "no summary line")
	want := fmt.Sprint(n)
	require.Equal(t, []string{want, want, "0"}, summary[1:], "sent, confirmed, failed")

	var rows, confirmed int
	require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state = 'CONFIRMED') FROM managed_tx`).Scan(&rows, &confirmed))
	require.Equal(t, n, rows)
	require.Equal(t, n, confirmed)
	for _, k := range w.Keys[:2] {
		var count int
		require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM managed_tx WHERE signer = $1`, txm.CanonicalAddress(k.Address)).Scan(&count))
		require.Equal(t, n/2, count)
	}
}
