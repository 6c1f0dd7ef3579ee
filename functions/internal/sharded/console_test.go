package sharded

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"

	"github.com/txfence/txfence/functions/internal/browsertest"
)

// watchFeed is run in the page before its own script: it records the
// status of every call of the completions feed, the transaction ids the
// feed delivered, and every text the live indicator showed.
const watchFeed = `window.__feed = { statuses: [], items: [], live: [] };
(() => {
  const orig = window.fetch;
  window.fetch = async (...args) => {
    const resp = await orig(...args);
    if (String(args[0]).includes('/v1/completions')) {
      window.__feed.statuses.push(resp.status);
      resp.clone().json().then((d) => { for (const it of (d && d.items) || []) window.__feed.items.push(it.txId); }).catch(() => {});
    }
    return resp;
  };
  document.addEventListener('DOMContentLoaded', () => {
    const live = document.getElementById('live');
    new MutationObserver(() => window.__feed.live.push(live.textContent))
      .observe(live, { childList: true, characterData: true, subtree: true });
  });
})();`

// TestIssue46_LiveViewTwoShards: the operator console's live view in
// headless Chromium against two shards. The page of a transaction of the
// second shard is open when its outcome is written: the console's long
// poll of the feed (after=latest) delivers it, the page shows it CONFIRMED
// without a reload, and the live indicator never says the feed paused.
func TestIssue46_LiveViewTwoShards(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a second PostgreSQL server")
	}
	browsertest.Chromium(t) // skips without it, before any server starts
	w := newWorld(t, 2)
	inB := w.Keys[1].Address
	_, url := w.apiServer(t, "api0")
	wk := w.worker(t, "worker")
	id := createOK(t, url, inB, "live")
	bctx := browsertest.New(t) // after the servers: closed before them, ending its long poll

	browsertest.Run(t, bctx, 20*time.Second,
		chromedp.ActionFunc(func(ctx context.Context) error {
			_, err := page.AddScriptToEvaluateOnNewDocument(watchFeed).Do(ctx)
			return err
		}),
		chromedp.Navigate(url+"/console/#/tx/"+id), // development mode: no token needed
	)
	browsertest.Poll(t, bctx, "the transaction's page", `document.querySelector('#tx-state')?.dataset.state === 'ALLOCATED'`, 15*time.Second)
	browsertest.Run(t, bctx, 5*time.Second, chromedp.Evaluate(`window.__loadedOnce = 'yes'`, nil))
	t.Cleanup(func() {
		if t.Failed() {
			var seen any
			_ = chromedp.Run(bctx, chromedp.Evaluate(`window.__feed`, &seen))
			t.Logf("what the page saw of the feed: %v", seen)
		}
	})
	listening(t, w.pools["a"], w.pools["b"]) // the console's long poll waits from now on, in both shards

	w.confirm(t, wk, map[common.Address]uint64{inB: 1}, []string{id}, w.pools["a"], w.pools["b"])
	browsertest.Poll(t, bctx, "the feed to deliver the outcome to the page", `window.__feed.items.includes('`+id+`')`, 15*time.Second)
	browsertest.Poll(t, bctx, "the page to show it CONFIRMED", `document.querySelector('#tx-state')?.dataset.state === 'CONFIRMED'`, 10*time.Second)
	assert.Equal(t, "yes", browsertest.Eval[string](t, bctx, `window.__loadedOnce`), "the page was not reloaded")
	live := browsertest.Eval[[]string](t, bctx, `window.__feed.live`)
	for _, text := range live {
		assert.NotContains(t, text, "paused", "the live indicator said: %v", live)
	}
	statuses := browsertest.Eval[[]int](t, bctx, `window.__feed.statuses`)
	assert.NotEmpty(t, statuses)
	for _, s := range statuses {
		assert.Equal(t, 200, s, "every call of the feed answered: %v", statuses)
	}
}
