package submit

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/functions/internal/deps"
	"github.com/txfence/txfence/functions/internal/stacktest"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/txm"
)

// errPermissionDenied is what Pub/Sub answers a publish to a topic the
// publisher's identity has no roles/pubsub.publisher on.
var errPermissionDenied = errors.New("rpc error: code = PermissionDenied desc = User not authorized to perform this action")

// iamPublisher publishes, as Pub/Sub does for an identity granted the
// topics in granted, and refuses the others; it counts both by topic.
type iamPublisher struct {
	txm.Publisher
	granted map[string]bool

	mu                 sync.Mutex
	published, refused map[string]int
}

func (p *iamPublisher) Publish(ctx context.Context, m txm.Message) error {
	return p.PublishAll(ctx, []txm.Message{m})[0]
}

func (p *iamPublisher) PublishAll(ctx context.Context, msgs []txm.Message) []error {
	errs := make([]error, len(msgs))
	var allowed []txm.Message
	var at []int
	p.mu.Lock()
	for i, m := range msgs {
		if !p.granted[m.Topic] {
			p.refused[m.Topic]++
			errs[i] = errPermissionDenied
			continue
		}
		p.published[m.Topic]++
		allowed, at = append(allowed, m), append(at, i)
	}
	p.mu.Unlock()
	if len(allowed) > 0 {
		for k, err := range p.Publisher.PublishAll(ctx, allowed) {
			errs[at[k]] = err
		}
	}
	return errs
}

// TestIssue45_SubmitHandOffPublishes: Submit publishes to the submit topic
// when it hands a signer's drain on (here at the end of its budget). With
// the topics the code says it publishes to (deps.Publishes, which
// terraform's grants must match: TestIssue45_PublisherGrants), the
// re-prompt is published. With the grants terraform gave Submit before
// (receipt and completion), Pub/Sub refuses it and the row waits for the
// outbox sweep, the failure only logged: what the grant check now catches
// before a deploy.
func TestIssue45_SubmitHandOffPublishes(t *testing.T) {
	t.Parallel()
	topics := func(cfg config.Config, kinds []string) map[string]bool {
		names := map[string]string{deps.TopicSubmit: cfg.TopicSubmit, deps.TopicReceipt: cfg.TopicReceipt,
			deps.TopicCompletion: cfg.TopicCompletion}
		out := map[string]bool{}
		for _, k := range kinds {
			require.Contains(t, names, k)
			out[names[k]] = true
		}
		return out
	}
	for _, c := range []struct {
		name    string
		granted []string
	}{
		{"the code's list", deps.Publishes["Submit"]},
		{"terraform's grants before", []string{deps.TopicReceipt, deps.TopicCompletion}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w := stacktest.NewWorld(t, 1, func(cfg *config.Config) { cfg.SubmitBudget = time.Nanosecond }).WithPubSub(t)
			pub := &iamPublisher{granted: topics(w.Cfg, c.granted), published: map[string]int{}, refused: map[string]int{}}
			w.WrapPublisher = func(p txm.Publisher) txm.Publisher { pub.Publisher = p; return pub }
			n := w.Node(t, "n")
			signer := w.Keys[0].Address
			n.Allocate(t, signer, 3) // the creates' own prompts are Api's; count Submit's alone
			pub.mu.Lock()
			clear(pub.published)
			clear(pub.refused)
			pub.mu.Unlock()
			res, err := n.Drain.Execute(context.Background(), stacktest.ChainID().Uint64(), signer)
			require.NoError(t, err)
			require.True(t, res.Yielded, "the drain handed on at the end of its budget")

			pub.mu.Lock()
			defer pub.mu.Unlock()
			if c.granted[0] == deps.TopicSubmit {
				assert.Empty(t, pub.refused, "nothing refused")
				assert.Equal(t, 1, pub.published[w.Cfg.TopicSubmit], "the re-prompt is published")
				return
			}
			assert.Equal(t, 1, pub.refused[w.Cfg.TopicSubmit], "Pub/Sub refuses the re-prompt")
			var unsent int
			require.NoError(t, w.DB.Pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE topic = $1`,
				w.Cfg.TopicSubmit).Scan(&unsent))
			assert.Positive(t, unsent, "the row waits for the outbox sweep")
			assert.True(t, slices.Contains(deps.Publishes["Submit"], deps.TopicSubmit),
				"the code's list names the topic, so the grant check fails on such grants")
		})
	}
}
