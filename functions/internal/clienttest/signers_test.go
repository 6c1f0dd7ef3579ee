package clienttest_test

import (
	"context"
	"math/big"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/client"
	"github.com/txfence/txfence/functions/internal/stacktest"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/txm"
)

// TestClient_Signers lists the configured signers a page at a time and all
// at once: every one, in address order, with its lane (the open
// transactions a create left); a filter by prefix keeps one; a key
// without the reader role is refused (ErrForbidden) and a bad prefix is
// invalid, neither retried.
func TestClient_Signers(t *testing.T) {
	w := stacktest.NewWorld(t, 3, func(c *config.Config) { c.Auth.Methods = []string{"dev", "apikey"} })
	nd := w.Node(t, "a")
	ctx := context.Background()
	c, err := client.New(nd.APIURL, client.WithRetryPolicy(fastRetries))
	require.NoError(t, err)
	first := txm.CanonicalAddress(w.Keys[0].Address)
	for i := range 2 {
		_, err := c.Create(ctx, client.CreateRequest{From: first, To: stacktest.Dead.Hex(), Value: big.NewInt(int64(i + 1)), GasLimit: 21000})
		require.NoError(t, err)
	}

	var want []string
	for _, k := range w.Keys {
		want = append(want, txm.CanonicalAddress(k.Address))
	}
	sort.Strings(want)

	// One at a time: three full pages, then an empty one ends the list.
	var paged []string
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 5, "the pages do not end")
		p, err := c.SignersPage(ctx, client.SignerOptions{Limit: 1, Cursor: cursor})
		require.NoError(t, err)
		require.Equal(t, 3, p.Total)
		for _, s := range p.Items {
			paged = append(paged, s.Address)
		}
		if p.NextCursor == "" {
			break
		}
		cursor = p.NextCursor
	}
	require.Equal(t, want, paged)

	all, err := c.Signers(ctx, client.SignerOptions{Limit: 2})
	require.NoError(t, err)
	require.Len(t, all, 3)
	for i, s := range all {
		require.Equal(t, want[i], s.Address)
		require.True(t, s.Configured)
		require.EqualValues(t, evmtest.ChainID, s.ChainID)
		if s.Address != first {
			continue
		}
		require.NotNil(t, s.NextNonce)
		require.EqualValues(t, 2, *s.NextNonce)
		require.Equal(t, 2, s.Counts.Allocated)
		require.Len(t, s.Lane, 2)
		require.EqualValues(t, 0, s.Lane[0].Nonce)
		require.Equal(t, client.StateAllocated, s.Lane[0].State)
	}

	one, err := c.Signers(ctx, client.SignerOptions{Prefix: strings.TrimPrefix(first, "0x")[:8], ChainID: evmtest.ChainID})
	require.NoError(t, err)
	require.Len(t, one, 1)
	require.Equal(t, first, one[0].Address)

	_, err = c.Signers(ctx, client.SignerOptions{Prefix: "0xzz"})
	require.ErrorIs(t, err, client.ErrInvalid)

	key := w.APIKey(t, txm.Policy{Principal: "payouts@example.com", Roles: []txm.Role{txm.RoleSender}, AllSigners: true})
	sender, err := client.New(nd.APIURL, client.WithAPIKey(key), client.WithRetryPolicy(fastRetries))
	require.NoError(t, err)
	_, err = sender.Signers(ctx, client.SignerOptions{})
	require.ErrorIs(t, err, client.ErrForbidden)
	require.Empty(t, c.Stats())
	require.Empty(t, sender.Stats())
}
