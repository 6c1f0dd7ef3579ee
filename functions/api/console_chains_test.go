package api_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/functions/internal/browsertest"
	"github.com/txfence/txfence/functions/internal/stacktest"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/evm/rpcproxy"
	"github.com/txfence/txfence/shared/txm"
)

// TestIssue48_ConsoleShowsEndpointHealth: the console's chains page shows
// the chain's profile kind and each endpoint of the chain as the API's
// client sees it, healthy, lagging or dead, by name, with the send-only
// endpoint marked, and never the key in a URL's path; the signers list
// shows each signer's chain kind.
func TestIssue48_ConsoleShowsEndpointHealth(t *testing.T) {
	const key = "SECRETKEY0123456789"
	w := stacktest.NewWorld(t, 1, keyed)
	lagging := rpcproxy.Start(t, w.Chain.URL)
	dead := rpcproxy.Start(t, w.Chain.URL)
	dead.FailAll(rpcproxy.Fault{HTTPStatus: 502})
	w.Cfg.Chains[0].RPCURLs = []string{w.Proxy.URL, lagging.URL + "/v3/" + key, dead.URL}
	w.Cfg.SendOnly = []config.SendOnly{{ChainID: stacktest.ChainID().Uint64(), Name: "protect", URL: w.Proxy.URL + "/" + key,
		PublicFallback: true}}
	w.Cfg.ChainProfiles = map[uint64]config.ProfileSpec{stacktest.ChainID().Uint64(): {Kind: config.KindL1,
		BlockTime: ptrTo(config.Duration(20 * time.Millisecond)), LagBlocks: ptrTo[uint64](5)}}
	w.Mine(20)
	a := w.Node(t, "a")
	lagging.Lag(10)
	stacktest.WaitFor(t, "the client to see the endpoint lagging", func() bool {
		_, _ = a.Client.Head(context.Background())
		return a.Client.EndpointHealth()[1].State == txm.EndpointLagging
	})
	reader := w.APIKey(t, txm.Policy{Principal: "ops@example.com", Roles: []txm.Role{txm.RoleReader}, AllSigners: true})

	ctx := browsertest.New(t)
	signIn(t, ctx, a.APIURL, reader)
	browsertest.Run(t, ctx, 5*time.Second, chromedp.Evaluate(`location.hash = '#/chains'`, nil))
	browsertest.Poll(t, ctx, "the chains page to show the endpoints",
		`document.querySelectorAll('table.endpoints[data-chain="1337"] tbody tr').length === 4`, 15*time.Second)
	states := browsertest.Eval[[]string](t, ctx, `Array.from(document.querySelectorAll('table.endpoints tbody tr'), (r) => r.dataset.state)`)
	assert.Equal(t, []string{"healthy", "lagging", "dead", "healthy"}, states)
	text := browsertest.Eval[string](t, ctx, `document.getElementById('chains-body').textContent`)
	assert.Contains(t, text, "endpoint 1 (http://127.0.0.1:")
	assert.Contains(t, text, "protect send-only, with fallback")
	assert.Contains(t, text, "http_502")
	assert.NotContains(t, text, key)
	html := browsertest.Eval[string](t, ctx, `document.documentElement.outerHTML`)
	require.False(t, strings.Contains(html, key), "the page holds no key")
	kind := browsertest.Eval[string](t, ctx, `document.querySelector('h3[data-chain-kind] .badge.kind').textContent`)
	assert.Equal(t, "l1", kind, "the chain's profile kind")

	browsertest.Run(t, ctx, 5*time.Second, chromedp.Evaluate(`location.hash = '#/signers'`, nil))
	browsertest.Poll(t, ctx, "the signers list", `document.querySelectorAll('#signer-rows tr[data-signer]').length === 1`, 15*time.Second)
	kind = browsertest.Eval[string](t, ctx, `document.querySelector('#signer-rows tr[data-signer] .badge.kind').dataset.kind`)
	assert.Equal(t, "l1", kind, "the signer's chain kind")
}

func ptrTo[T any](v T) *T { return &v }
