// Package pubsub is the Google Cloud Pub/Sub adapter: it implements
// txm.Publisher over the v2 client library.
//
// Publishing is synchronous per call: Publish returns once Pub/Sub has
// accepted the message (or failed to). Messages that share an ordering key
// are delivered in the order of the Publish calls that carried them, provided
// the subscription has message ordering enabled.
package pubsub

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"google.golang.org/api/option"

	"github.com/txfence/txfence/shared/txm"
)

// AttrOutboxID is the attribute that carries the outbox id of a message, so
// that consumers can deduplicate redeliveries and republished rows.
const AttrOutboxID = "outbox_id"

// ErrClosed is returned by Publish after Close.
var ErrClosed = errors.New("pubsub: publisher closed")

// Publisher publishes outbox messages to Pub/Sub topics. It keeps one
// client-library publisher per topic, created on first use, each with message
// ordering enabled unless the topic was declared Unordered. It is safe for
// concurrent use.
type Publisher struct {
	client  *pubsub.Client
	project string

	mu        sync.Mutex
	topics    map[string]*pubsub.Publisher // by full topic name
	unordered map[string]bool              // full topic names published without ordering keys
	closed    bool
}

var _ txm.Publisher = (*Publisher)(nil)

// NewPublisher returns a Publisher that publishes to topics of project
// through client. The caller keeps ownership of client: Close does not close
// it.
func NewPublisher(client *pubsub.Client, project string) (*Publisher, error) {
	if client == nil {
		return nil, errors.New("new publisher: nil client")
	}
	if project == "" {
		return nil, errors.New("new publisher: empty project")
	}
	return &Publisher{
		client:    client,
		project:   project,
		topics:    make(map[string]*pubsub.Publisher),
		unordered: make(map[string]bool),
	}, nil
}

// Unordered declares topics (ids within the publisher's project, or full
// names) whose messages are published without their ordering key, and
// their publishers without message ordering. It is for topics whose
// subscriptions do not order delivery, as the Submit and Receipt prompts'
// push subscriptions do not (terraform/pubsub.tf): a key orders nothing
// there, and it costs. The client library bundles each key's messages
// apart and publishes one key's bundles one at a time, so an allocation
// call that prompted ten signers would send ten requests instead of one.
// Call it before the first Publish to those topics.
func (p *Publisher) Unordered(topics ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, t := range topics {
		p.unordered[p.topicName(t)] = true
	}
}

// Publish sends m to the topic m.Topic (a topic id within the publisher's
// project, or a full "projects/<p>/topics/<id>" name) and waits until Pub/Sub
// has accepted it or ctx is done. When m.ID > 0 the message carries the
// attribute outbox_id.
//
// If publishing a message with an ordering key fails, the client library
// pauses that key; Publish resumes it before returning the error so that the
// caller's retry can go through. The caller is expected to retry the failed
// message before publishing later ones with the same key.
//
// A context that ends before the result is known does not withdraw the
// message: it may still be published (delivery is at least once).
func (p *Publisher) Publish(ctx context.Context, m txm.Message) error {
	return p.PublishAll(ctx, []txm.Message{m})[0]
}

// PublishAll hands every message to the client library before it waits for
// any result, so that they share its batches, and returns each one's
// outcome. A failure pauses its ordering key, which fails the key's later
// messages too; the key is resumed before returning.
func (p *Publisher) PublishAll(ctx context.Context, msgs []txm.Message) []error {
	errs := make([]error, len(msgs))
	results := make([]*pubsub.PublishResult, len(msgs))
	pubs := make([]*pubsub.Publisher, len(msgs))
	keys := make([]string, len(msgs)) // the ordering key each was published with
	for i, m := range msgs {
		if m.Topic == "" {
			errs[i] = errors.New("publish: empty topic")
			continue
		}
		pub, ordered, err := p.publisher(m.Topic)
		if err != nil {
			errs[i] = fmt.Errorf("publish to %s: %w", m.Topic, err)
			continue
		}
		attrs := m.Attributes
		if m.ID > 0 {
			attrs = make(map[string]string, len(m.Attributes)+1)
			maps.Copy(attrs, m.Attributes)
			attrs[AttrOutboxID] = strconv.FormatInt(m.ID, 10)
		}
		pubs[i] = pub
		if ordered {
			keys[i] = m.OrderingKey
		}
		results[i] = pub.Publish(ctx, &pubsub.Message{Data: m.Data, Attributes: attrs, OrderingKey: keys[i]})
	}
	for i, res := range results {
		if res == nil {
			continue
		}
		if _, err := res.Get(ctx); err != nil {
			errs[i] = fmt.Errorf("publish to %s: %w", msgs[i].Topic, err)
		}
	}
	for i, err := range errs {
		if err != nil && pubs[i] != nil && keys[i] != "" {
			pubs[i].ResumePublish(keys[i])
		}
	}
	return errs
}

// Close flushes and stops every topic publisher. Publish calls after Close
// return ErrClosed. Close does not close the client.
func (p *Publisher) Close() {
	p.mu.Lock()
	p.closed = true
	topics := p.topics
	p.topics = make(map[string]*pubsub.Publisher)
	p.mu.Unlock()

	var wg sync.WaitGroup
	for _, pub := range topics {
		wg.Go(pub.Stop)
	}
	wg.Wait()
}

// publisher returns the client-library publisher for topic, creating it on
// first use, and whether its messages keep their ordering keys.
func (p *Publisher) publisher(topic string) (*pubsub.Publisher, bool, error) {
	name := p.topicName(topic)

	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, false, ErrClosed
	}
	ordered := !p.unordered[name]
	pub, ok := p.topics[name]
	if !ok {
		pub = p.client.Publisher(name)
		pub.EnableMessageOrdering = ordered
		// The outbox relay publishes a few messages and waits for each: the
		// default 10ms batching delay would only add latency.
		pub.PublishSettings.DelayThreshold = time.Millisecond
		p.topics[name] = pub
	}
	return pub, ordered, nil
}

// topicName returns the full resource name of topic.
func (p *Publisher) topicName(topic string) string {
	if strings.HasPrefix(topic, "projects/") {
		return topic
	}
	return "projects/" + p.project + "/topics/" + topic
}

// Dial connects a Pub/Sub client for project. The client library itself
// honours PUBSUB_EMULATOR_HOST, so the same call reaches the emulator when
// that variable is set.
func Dial(ctx context.Context, project string, opts ...option.ClientOption) (*pubsub.Client, error) {
	if project == "" {
		return nil, errors.New("dial pubsub: empty project")
	}
	c, err := pubsub.NewClient(ctx, project, opts...)
	if err != nil {
		return nil, fmt.Errorf("dial pubsub: %w", err)
	}
	return c, nil
}
