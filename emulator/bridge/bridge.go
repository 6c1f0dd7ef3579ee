// Package bridge pushes Pub/Sub messages to HTTP function endpoints for the
// local emulator, the way Eventarc delivers Pub/Sub messages to Cloud Run
// functions in production.
//
// The Pub/Sub fake (pstest) only serves pull subscriptions, so the bridge
// receives from each routed subscription and POSTs every message as a
// CloudEvent in HTTP binary content mode (see push.go for the exact format).
// A 2xx response acknowledges the message; any other response or a transport
// error is retried with doubling backoff, each retry going to the route's
// next endpoint, up to MaxAttempts deliveries. A message that exhausts its
// attempts is published to the dead-letter topic, if one is configured, and
// acknowledged.
//
// The bridge pulls with unary Pull calls, as many messages as it has free
// delivery slots (Concurrency per route), and keeps each message's ack
// deadline extended while its delivery is retried, so the fake never
// redelivers a message that is still being retried and never hot-loops on
// nacks. On a subscription with message ordering, Pub/Sub hands over a key's
// next message only once the previous one is acknowledged, so retries keep
// the order. When Run stops, deliveries in flight are cut short and their
// messages nacked, to be redelivered at once (by the next Run).
//
// The client library's streaming pull (Subscriber.Receive) is not used:
// pstest answers a stream's keepalive ping while holding its server-wide
// lock, and once the library has stopped reading the stream (all its slots
// busy, e.g. retrying a function server that hangs) that answer blocks, and
// the whole fake with it, for good.
package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/txfence/txfence/shared/logging"
)

// Attributes the bridge adds to a message it publishes to the dead-letter
// topic, next to the original message's attributes.
const (
	// AttrDeadLetterReason is the error of the last failed delivery.
	AttrDeadLetterReason = "deadletter_reason"
	// AttrDeadLetterAttempts is the number of deliveries made, in decimal.
	AttrDeadLetterAttempts = "deadletter_attempts"
	// AttrDeadLetterSubscription is the id of the subscription the message
	// was received from.
	AttrDeadLetterSubscription = "deadletter_subscription"
)

// Defaults for the zero fields of Options.
const (
	DefaultMaxAttempts = 5
	DefaultMinBackoff  = 100 * time.Millisecond
	DefaultMaxBackoff  = 5 * time.Second
	DefaultConcurrency = 16
	DefaultTimeout     = 60 * time.Second
)

// maxAttributeLen bounds an attribute value, as Pub/Sub does (1024 bytes).
const maxAttributeLen = 1024

// Route delivers the messages of one subscription to a set of endpoints.
// The topic named in the CloudEvent source is read from the subscription's
// configuration when Run starts.
type Route struct {
	Subscription string   // subscription id in the bridge's project
	Endpoints    []string // function URLs, e.g. http://127.0.0.1:8081/Submit
	Concurrency  int      // messages in flight for this route; 0: Options.Concurrency
}

// Options tune deliveries. Zero fields take the Default* values.
type Options struct {
	MaxAttempts     int           // deliveries per message before dead-lettering
	MinBackoff      time.Duration // wait before the first retry; doubles per retry
	MaxBackoff      time.Duration // longest wait between retries
	DeadLetterTopic string        // topic id for exhausted messages; empty: log and ack them
	Concurrency     int           // messages in flight per route
	Timeout         time.Duration // per HTTP delivery
}

// withDefaults returns o with its zero fields set to the defaults.
func (o Options) withDefaults() Options {
	if o.MaxAttempts == 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.MinBackoff == 0 {
		o.MinBackoff = DefaultMinBackoff
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = max(DefaultMaxBackoff, o.MinBackoff)
	}
	if o.Concurrency == 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	return o
}

// validate reports the first invalid field of o, after defaults.
func (o Options) validate() error {
	switch {
	case o.MaxAttempts < 1:
		return fmt.Errorf("max attempts %d: must be positive", o.MaxAttempts)
	case o.MinBackoff < 0:
		return fmt.Errorf("min backoff %s: must not be negative", o.MinBackoff)
	case o.MaxBackoff < o.MinBackoff:
		return fmt.Errorf("max backoff %s: below min backoff %s", o.MaxBackoff, o.MinBackoff)
	case o.Concurrency < 1:
		return fmt.Errorf("concurrency %d: must be positive", o.Concurrency)
	case o.Timeout < 0:
		return fmt.Errorf("timeout %s: must not be negative", o.Timeout)
	}
	return nil
}

// Stats counts what the bridge did since it was built.
type Stats struct {
	RouteStats                       // totals over all routes
	Routes     map[string]RouteStats // by subscription id
}

// RouteStats counts the outcomes of one route's messages.
type RouteStats struct {
	Delivered    uint64 // messages acknowledged after a 2xx response
	Retried      uint64 // deliveries made after a failed one
	DeadLettered uint64 // messages that exhausted MaxAttempts (published to the dead-letter topic, or dropped without one)
	// Answers counts every delivery's answer by class: "2xx", "4xx",
	// "5xx", "other", and "none" for no answer.
	Answers map[string]uint64
}

// Bridge pushes the messages of its routes' subscriptions to their
// endpoints. Build it with New and start it with Run.
type Bridge struct {
	client  *pubsub.Client
	project string
	routes  []*route
	opts    Options
	log     *slog.Logger
	http    *http.Client
	running atomic.Bool
}

// route is a Route and its counters.
type route struct {
	sub         string // subscription id
	name        string // full subscription name
	endpoints   []string
	concurrency int           // messages in flight at most
	source      string        // CloudEvent source; set by Run before receiving
	next        atomic.Uint64 // first endpoint of the next message, round-robin
	paused      atomic.Bool   // Pause: pull nothing until Resume
	inFlight    atomic.Int64  // messages pulled and not yet settled

	delivered, retried, deadLettered atomic.Uint64
	answers                          [classCount]atomic.Uint64 // by class of answer
}

// New returns a Bridge that receives through client from subscriptions of
// project. The caller keeps ownership of client.
func New(client *pubsub.Client, project string, routes []Route, opts Options, log *slog.Logger) (*Bridge, error) {
	if client == nil {
		return nil, errors.New("new bridge: nil client")
	}
	if project == "" {
		return nil, errors.New("new bridge: empty project")
	}
	if log == nil {
		return nil, errors.New("new bridge: nil logger")
	}
	if len(routes) == 0 {
		return nil, errors.New("new bridge: no routes")
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("new bridge: %w", err)
	}
	b := &Bridge{client: client, project: project, opts: opts, log: log}
	seen := make(map[string]bool, len(routes))
	idle := 0 // connections kept per endpoint host: every route's slots
	for _, r := range routes {
		if err := validateRoute(r); err != nil {
			return nil, fmt.Errorf("new bridge: %w", err)
		}
		if seen[r.Subscription] {
			return nil, fmt.Errorf("new bridge: subscription %s routed twice", r.Subscription)
		}
		seen[r.Subscription] = true
		concurrency := r.Concurrency
		if concurrency == 0 {
			concurrency = opts.Concurrency
		}
		b.routes = append(b.routes, &route{
			sub:         r.Subscription,
			name:        "projects/" + project + "/subscriptions/" + r.Subscription,
			endpoints:   append([]string(nil), r.Endpoints...),
			concurrency: concurrency,
		})
		idle += concurrency
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = idle
	b.http = &http.Client{Transport: transport}
	return b, nil
}

// validateRoute checks that r names a subscription id and absolute HTTP
// endpoints.
func validateRoute(r Route) error {
	if r.Subscription == "" {
		return errors.New("route: empty subscription")
	}
	if strings.Contains(r.Subscription, "/") {
		return fmt.Errorf("route %s: subscription must be an id, not a resource name", r.Subscription)
	}
	if len(r.Endpoints) == 0 {
		return fmt.Errorf("route %s: no endpoints", r.Subscription)
	}
	if r.Concurrency < 0 {
		return fmt.Errorf("route %s: concurrency %d: must not be negative", r.Subscription, r.Concurrency)
	}
	for _, e := range r.Endpoints {
		u, err := url.Parse(e)
		if err != nil {
			return fmt.Errorf("route %s: parse endpoint: %w", r.Subscription, err)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("route %s: endpoint %q: want an absolute http(s) URL", r.Subscription, e)
		}
	}
	return nil
}

// Run receives from every route's subscription and delivers the messages
// until ctx is done. It first reads each subscription's topic, failing if a
// subscription does not exist. It returns nil once ctx is done and in-flight
// deliveries have stopped (a delivery cut short is nacked, so Pub/Sub
// redelivers it), or the first fatal receive error, after stopping the other
// routes. A Bridge runs at most once at a time.
func (b *Bridge) Run(ctx context.Context) error {
	if !b.running.CompareAndSwap(false, true) {
		return errors.New("run bridge: already running")
	}
	defer b.running.Store(false)
	defer b.http.CloseIdleConnections()

	for _, r := range b.routes {
		sub, err := b.client.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: r.name})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("run bridge: get subscription %s: %w", r.sub, err)
		}
		r.source = "//pubsub.googleapis.com/" + sub.GetTopic()
	}

	var dlq *pubsub.Publisher
	if b.opts.DeadLetterTopic != "" {
		dlq = b.client.Publisher("projects/" + b.project + "/topics/" + b.opts.DeadLetterTopic)
		dlq.EnableMessageOrdering = true
		defer dlq.Stop()
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(b.routes))
	var wg sync.WaitGroup
	for i, r := range b.routes {
		wg.Go(func() {
			if err := b.receive(ctx, r, dlq); err != nil {
				errs[i] = fmt.Errorf("run bridge: receive %s: %w", r.sub, err)
				cancel()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Pull settings: how long the bridge waits before asking again when a
// subscription had nothing, and the ack deadline it keeps a message under
// while delivering it (extended at a third of it).
const (
	idlePoll    = 25 * time.Millisecond
	ackDeadline = 60 * time.Second
)

// receive delivers r's messages until ctx is done, then waits for the
// deliveries in flight, which ctx's end cuts short and nacks.
//
// It pulls with unary Pull calls, as many messages as it has free delivery
// slots, rather than the client library's streaming pull: pstest answers a
// stream's keepalive ping while holding its server-wide lock, so once the
// library stops reading the stream (every slot busy, say retrying a server
// that hangs) the ping's answer blocks, the whole fake with it, for good.
func (b *Bridge) receive(ctx context.Context, r *route, dlq *pubsub.Publisher) error {
	slots := make(chan struct{}, r.concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select { // wait for a free slot, then take every free one
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		for r.paused.Load() && ctx.Err() == nil {
			sleep(ctx, idlePoll)
		}
		n := 1
	more:
		for n < r.concurrency {
			select {
			case slots <- struct{}{}:
				n++
			default:
				break more
			}
		}
		resp, err := b.client.SubscriptionAdminClient.Pull(ctx, &pubsubpb.PullRequest{
			Subscription:      r.name,
			MaxMessages:       int32(n),
			ReturnImmediately: true, //nolint:staticcheck // deprecated; the bridge polls itself
		})
		msgs := resp.GetReceivedMessages()
		for range n - len(msgs) {
			<-slots
		}
		switch {
		case ctx.Err() != nil:
			b.settle(context.WithoutCancel(ctx), r, msgs, false) // pulled as Run stopped: back at once
			return nil
		case err != nil:
			if status.Code(err) == codes.NotFound {
				return fmt.Errorf("pull: %w", err)
			}
			b.log.WarnContext(ctx, "pull failed", slog.String("subscription", r.sub), slog.Any("error", err))
		}
		if len(msgs) == 0 {
			sleep(ctx, idlePoll)
			continue
		}
		for _, rm := range msgs {
			wg.Go(func() {
				defer func() { <-slots }()
				b.handle(ctx, r, rm, dlq)
			})
		}
	}
}

// handle delivers one pulled message, keeping its ack deadline extended
// meanwhile, and acks or nacks it.
func (b *Bridge) handle(ctx context.Context, r *route, rm *pubsubpb.ReceivedMessage, dlq *pubsub.Publisher) {
	r.inFlight.Add(1)
	defer r.inFlight.Add(-1)
	pm := rm.GetMessage()
	m := &pubsub.Message{ID: pm.GetMessageId(), Data: pm.GetData(), Attributes: pm.GetAttributes(),
		PublishTime: pm.GetPublishTime().AsTime(), OrderingKey: pm.GetOrderingKey()}
	done := make(chan struct{})
	var lease sync.WaitGroup
	lease.Go(func() { b.extend(ctx, r, rm.GetAckId(), done) })
	ack := b.deliver(ctx, r, m, dlq)
	close(done)
	lease.Wait()
	b.settle(context.WithoutCancel(ctx), r, []*pubsubpb.ReceivedMessage{rm}, ack)
}

// extend keeps a message's ack deadline ahead until done is closed, for at
// most as long as every attempt could take, with a minute to spare for the
// dead-letter publish.
func (b *Bridge) extend(ctx context.Context, r *route, ackID string, done chan struct{}) {
	limit := time.Now().Add(time.Duration(b.opts.MaxAttempts)*(b.opts.Timeout+b.opts.MaxBackoff) + time.Minute)
	t := time.NewTicker(ackDeadline / 3)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if time.Now().After(limit) {
			return
		}
		err := b.client.SubscriptionAdminClient.ModifyAckDeadline(ctx, &pubsubpb.ModifyAckDeadlineRequest{
			Subscription: r.name, AckIds: []string{ackID}, AckDeadlineSeconds: int32(ackDeadline / time.Second)})
		if err != nil && ctx.Err() == nil {
			b.log.WarnContext(ctx, "extend ack deadline failed", slog.String("subscription", r.sub), slog.Any("error", err))
		}
	}
}

// settle acks msgs, or nacks them (deadline 0: redelivered at once).
func (b *Bridge) settle(ctx context.Context, r *route, msgs []*pubsubpb.ReceivedMessage, ack bool) {
	if len(msgs) == 0 {
		return
	}
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.GetAckId()
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var err error
	if ack {
		err = b.client.SubscriptionAdminClient.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: r.name, AckIds: ids})
	} else {
		err = b.client.SubscriptionAdminClient.ModifyAckDeadline(ctx, &pubsubpb.ModifyAckDeadlineRequest{
			Subscription: r.name, AckIds: ids, AckDeadlineSeconds: 0})
	}
	if err != nil {
		// The message comes back when its ack deadline passes.
		b.log.WarnContext(ctx, "settle failed", slog.String("subscription", r.sub), slog.Bool("ack", ack), slog.Any("error", err))
	}
}

// deliver delivers m, retrying with backoff on the route's next endpoints,
// and reports whether to ack it (delivered, or dead-lettered) rather than
// nack it (cut short by ctx, or the dead-letter publish failed).
func (b *Bridge) deliver(ctx context.Context, r *route, m *pubsub.Message, dlq *pubsub.Publisher) bool {
	log := b.log.With(slog.String("subscription", r.sub), slog.String(logging.KeyEventID, m.ID))
	p, err := newPush(b.project, r, m)
	if err != nil {
		// Cannot happen for a message the client library decoded; ack so a
		// poison message does not cycle forever.
		log.ErrorContext(ctx, "dropping message that cannot be encoded", slog.Any("error", err))
		return true
	}
	first := r.next.Add(1) - 1
	var lastErr error
	for attempt := 1; attempt <= b.opts.MaxAttempts; attempt++ {
		if attempt > 1 {
			if !sleep(ctx, b.backoff(attempt-1)) {
				return false
			}
			r.retried.Add(1)
		}
		endpoint := r.endpoints[(first+uint64(attempt-1))%uint64(len(r.endpoints))]
		err := b.post(ctx, r, endpoint, p)
		if err == nil {
			r.delivered.Add(1)
			log.DebugContext(ctx, "delivered", slog.String("endpoint", endpoint), slog.Int("attempt", attempt))
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		lastErr = err
		log.DebugContext(ctx, "delivery failed, will retry", slog.String("endpoint", endpoint), slog.Int("attempt", attempt), slog.Any("error", err))
	}

	if dlq == nil {
		r.deadLettered.Add(1)
		log.ErrorContext(ctx, "dropping message after max attempts", slog.Int("attempts", b.opts.MaxAttempts), slog.Any("error", lastErr))
		return true
	}
	if err := b.deadLetter(ctx, dlq, r, m, lastErr); err != nil {
		log.ErrorContext(ctx, "dead-letter failed; nacking", slog.Any("error", err))
		return false
	}
	r.deadLettered.Add(1)
	log.ErrorContext(ctx, "dead-lettered message after max attempts", slog.String("topic", b.opts.DeadLetterTopic),
		slog.Int("attempts", b.opts.MaxAttempts), slog.Any("error", lastErr))
	return true
}

// backoff returns the wait before retry n (1-based): MinBackoff doubled
// n-1 times, capped at MaxBackoff.
func (b *Bridge) backoff(n int) time.Duration {
	d := b.opts.MinBackoff
	for i := 1; i < n && d < b.opts.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, b.opts.MaxBackoff)
}

// sleep waits d or until ctx is done, reporting whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// deadLetter publishes m to the dead-letter topic with the attributes that
// say why, and waits for the result.
func (b *Bridge) deadLetter(ctx context.Context, dlq *pubsub.Publisher, r *route, m *pubsub.Message, cause error) error {
	attrs := make(map[string]string, len(m.Attributes)+3)
	maps.Copy(attrs, m.Attributes)
	reason := "unknown"
	if cause != nil {
		reason = cause.Error()
	}
	attrs[AttrDeadLetterReason] = truncate(reason, maxAttributeLen)
	attrs[AttrDeadLetterAttempts] = strconv.Itoa(b.opts.MaxAttempts)
	attrs[AttrDeadLetterSubscription] = r.sub
	res := dlq.Publish(ctx, &pubsub.Message{Data: m.Data, Attributes: attrs, OrderingKey: m.OrderingKey})
	if _, err := res.Get(ctx); err != nil {
		if m.OrderingKey != "" {
			dlq.ResumePublish(m.OrderingKey)
		}
		return fmt.Errorf("publish to %s: %w", b.opts.DeadLetterTopic, err)
	}
	return nil
}

// truncate shortens s to at most n bytes without splitting a UTF-8 sequence.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 { // continuation byte
		n--
	}
	return s[:n]
}

// Pause stops pulling from subscription sub: its messages wait in Pub/Sub,
// as when a push endpoint is down, until Resume. Deliveries in flight
// finish. The benchmarks use it to build a backlog.
func (b *Bridge) Pause(sub string) error { return b.setPaused(sub, true) }

// Idle reports whether sub has no delivery in progress: after Pause, the
// deliveries pulled before it have finished once it is true.
func (b *Bridge) Idle(sub string) bool {
	for _, r := range b.routes {
		if r.sub == sub {
			return r.inFlight.Load() == 0
		}
	}
	return true
}

// Resume pulls from sub again.
func (b *Bridge) Resume(sub string) error { return b.setPaused(sub, false) }

func (b *Bridge) setPaused(sub string, paused bool) error {
	for _, r := range b.routes {
		if r.sub == sub {
			r.paused.Store(paused)
			return nil
		}
	}
	return fmt.Errorf("bridge: no route for subscription %q", sub)
}

// Stats returns the counters so far. It is safe to call while Run runs.
func (b *Bridge) Stats() Stats {
	s := Stats{Routes: make(map[string]RouteStats, len(b.routes))}
	for _, r := range b.routes {
		rs := RouteStats{
			Delivered:    r.delivered.Load(),
			Retried:      r.retried.Load(),
			DeadLettered: r.deadLettered.Load(),
			Answers:      map[string]uint64{},
		}
		if s.Answers == nil {
			s.Answers = map[string]uint64{}
		}
		for c := range r.answers {
			if n := r.answers[c].Load(); n > 0 {
				rs.Answers[classNames[c]] = n
				s.Answers[classNames[c]] += n
			}
		}
		s.Routes[r.sub] = rs
		s.Delivered += rs.Delivered
		s.Retried += rs.Retried
		s.DeadLettered += rs.DeadLettered
	}
	return s
}
