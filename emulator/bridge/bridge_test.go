package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/pubsub/pubsubtest"
	"github.com/txfence/txfence/shared/testsupport"
	"github.com/txfence/txfence/shared/txm"
)

const (
	project = "bridge-test"
	topic   = "submit"
	sub     = "submit-push"
)

// env is one test's Pub/Sub fake with topic and subscription sub on it.
type env struct {
	ps *pubsubtest.Server
}

func setup(t *testing.T) *env {
	t.Helper()
	ps := pubsubtest.MustStart(t, project)
	ctx := context.Background()
	require.NoError(t, ps.CreateTopic(ctx, topic))
	require.NoError(t, ps.CreateSubscription(ctx, sub, topic, false))
	return &env{ps: ps}
}

// fastOpts are Options with test-sized backoffs.
func fastOpts() Options {
	return Options{MinBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, Timeout: 5 * time.Second}
}

// newBridge builds a bridge for one route from sub to endpoints.
func (e *env) newBridge(t *testing.T, opts Options, endpoints ...string) *Bridge {
	t.Helper()
	b, err := New(e.ps.Client, project, []Route{{Subscription: sub, Endpoints: endpoints}}, opts, testLogger(t))
	require.NoError(t, err)
	return b
}

// run starts b and returns a function that stops it and waits for Run to
// return; the test's cleanup stops it too.
func run(t *testing.T, b *Bridge) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				err = errors.New("Run did not return within 10s of cancel")
			}
		})
		return err
	}
	t.Cleanup(func() { assert.NoError(t, stop()) })
	return stop
}

// publish publishes data with attrs to topic and returns the message id.
func (e *env) publish(t *testing.T, data string, attrs map[string]string) string {
	t.Helper()
	pub := e.ps.Client.Publisher(e.ps.TopicName(topic))
	defer pub.Stop()
	ctx := context.Background()
	id, err := pub.Publish(ctx, &pubsub.Message{Data: []byte(data), Attributes: attrs}).Get(ctx)
	require.NoError(t, err)
	return id
}

// waitAcked waits until Pub/Sub holds every one of ids acknowledged, after
// which it redelivers none of them: what a test that counts deliveries
// must wait for before it counts.
func (e *env) waitAcked(t *testing.T, ids ...string) {
	t.Helper()
	testsupport.Eventually(t, 20*time.Second, fmt.Sprintf("Pub/Sub to hold %d message(s) acknowledged", len(ids)), func() bool {
		for _, id := range ids {
			if m := e.ps.Fake.Message(id); m == nil || m.Acks == 0 {
				return false
			}
		}
		return true
	})
}

// publishN publishes n messages concurrently and returns their ids.
func (e *env) publishN(t *testing.T, n int) []string {
	t.Helper()
	pub := e.ps.Client.Publisher(e.ps.TopicName(topic))
	defer pub.Stop()
	ctx := context.Background()
	results := make([]*pubsub.PublishResult, n)
	for i := range n {
		results[i] = pub.Publish(ctx, &pubsub.Message{Data: fmt.Appendf(nil, `{"n":%d}`, i)})
	}
	ids := make([]string, n)
	for i, r := range results {
		id, err := r.Get(ctx)
		require.NoError(t, err)
		ids[i] = id
	}
	return ids
}

// recorder is an endpoint that counts deliveries by message id (ce-id) and
// answers with status(i) for the i-th (0-based) delivery of a message.
type recorder struct {
	status func(nth int) int
	delay  time.Duration

	mu       sync.Mutex
	byID     map[string]int
	total    int
	inFlight int
	maxIn    int
}

func newRecorder(t *testing.T, status func(nth int) int) (*recorder, string) {
	t.Helper()
	r := &recorder{status: status, byID: make(map[string]int)}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return r, srv.URL + "/Submit"
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	_, _ = io.Copy(io.Discard, req.Body)
	id := req.Header.Get("Ce-Id")
	r.mu.Lock()
	nth := r.byID[id]
	r.byID[id]++
	r.total++
	r.inFlight++
	r.maxIn = max(r.maxIn, r.inFlight)
	r.mu.Unlock()
	if r.delay > 0 {
		// sleep: a slow endpoint's answer, so that deliveries overlap
		time.Sleep(r.delay)
	}
	r.mu.Lock()
	r.inFlight--
	r.mu.Unlock()
	code := http.StatusNoContent
	if r.status != nil {
		code = r.status(nth)
	}
	w.WriteHeader(code)
}

// snapshot returns a copy of the per-id counts and the total.
func (r *recorder) snapshot() (map[string]int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := make(map[string]int, len(r.byID))
	for k, v := range r.byID {
		m[k] = v
	}
	return m, r.total
}

func (r *recorder) calls() int {
	_, n := r.snapshot()
	return n
}

// prompt mirrors event.Prompt in functions/internal/event, which this
// package may not import (Go's internal rule): it decodes the event data as
// the functions' MessagePublished and the message data as a prompt.
func prompt(e event.Event) (uint64, common.Address, error) {
	var m struct {
		Message struct {
			Data        []byte            `json:"data"`
			Attributes  map[string]string `json:"attributes"`
			MessageID   string            `json:"messageId"`
			OrderingKey string            `json:"orderingKey"`
		} `json:"message"`
		Subscription string `json:"subscription"`
	}
	if err := json.Unmarshal(e.Data(), &m); err != nil {
		return 0, common.Address{}, fmt.Errorf("event data: %w", err)
	}
	var p txm.PromptMessage
	if err := json.Unmarshal(m.Message.Data, &p); err != nil {
		return 0, common.Address{}, fmt.Errorf("message data: %w", err)
	}
	signer, err := txm.ParseAddress(p.Signer)
	if err != nil || p.ChainID == 0 {
		return 0, common.Address{}, fmt.Errorf("prompt %q: chain id and a valid signer are required", m.Message.Data)
	}
	return p.ChainID, signer, nil
}

// ceFunction serves fn the way functions-framework-go v1.9.2 serves a
// CloudEvent function (wrapCloudEventFunction: the sdk's HTTP protocol and
// receive handler, behind a check that skips its legacy-event conversion only
// for requests that carry ce-id or a cloudevents content type).
func ceFunction(t *testing.T, fn func(context.Context, event.Event) error) string {
	t.Helper()
	p, err := cloudevents.NewHTTP()
	require.NoError(t, err)
	h, err := cloudevents.NewHTTPReceiveHandler(context.Background(), p, fn)
	require.NoError(t, err)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Ce-Id") == "" && !strings.Contains(r.Header.Get("Content-Type"), "cloudevents") {
			http.Error(w, "framework would treat this as a legacy background event", http.StatusBadRequest)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/Submit"
}

func TestBridge_DeliversCloudEvent(t *testing.T) {
	t.Parallel()
	e := setup(t)

	var mu sync.Mutex
	var got []event.Event
	endpoint := ceFunction(t, func(_ context.Context, ev event.Event) error {
		mu.Lock()
		got = append(got, ev)
		mu.Unlock()
		return nil
	})
	b := e.newBridge(t, fastOpts(), endpoint)
	stop := run(t, b)

	before := time.Now()
	id := e.publish(t, `{"chainId":1337,"signer":"0x00000000000000000000000000000000000000a1"}`, map[string]string{"outbox_id": "7"})
	require.Eventually(t, func() bool { return b.Stats().Delivered == 1 }, 5*time.Second, 10*time.Millisecond)
	e.waitAcked(t, id)
	require.NoError(t, stop())

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, 1)
	ev := got[0]
	require.NoError(t, ev.Validate())
	assert.Equal(t, "1.0", ev.SpecVersion())
	assert.Equal(t, id, ev.ID())
	assert.Equal(t, "//pubsub.googleapis.com/projects/"+project+"/topics/"+topic, ev.Source())
	assert.Equal(t, "google.cloud.pubsub.topic.v1.messagePublished", ev.Type())
	assert.Equal(t, "application/json", ev.DataContentType())
	assert.WithinDuration(t, before, ev.Time(), 5*time.Second)

	chainID, signer, err := prompt(ev)
	require.NoError(t, err)
	assert.Equal(t, uint64(1337), chainID)
	assert.Equal(t, common.HexToAddress("0xa1"), signer)

	var data struct {
		Message struct {
			Attributes  map[string]string `json:"attributes"`
			MessageID   string            `json:"messageId"`
			PublishTime time.Time         `json:"publishTime"`
		} `json:"message"`
		Subscription string `json:"subscription"`
	}
	require.NoError(t, json.Unmarshal(ev.Data(), &data))
	assert.Equal(t, map[string]string{"outbox_id": "7"}, data.Message.Attributes)
	assert.Equal(t, id, data.Message.MessageID)
	assert.True(t, data.Message.PublishTime.Equal(ev.Time()), "publishTime %s, ce-time %s", data.Message.PublishTime, ev.Time())
	assert.Equal(t, "projects/"+project+"/subscriptions/"+sub, data.Subscription)

	assert.Equal(t, RouteStats{Delivered: 1, Answers: map[string]uint64{"2xx": 1}}, b.Stats().Routes[sub])
}

func TestBridge_SendsBinaryModeHeaders(t *testing.T) {
	t.Parallel()
	e := setup(t)

	reqs := make(chan *http.Request, 1)
	bodies := make(chan []byte, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		select {
		case reqs <- r:
			bodies <- body
		default: // a redelivery; the test fails on its own if one matters
		}
	}))
	t.Cleanup(srv.Close)
	b := e.newBridge(t, fastOpts(), srv.URL+"/Receipt")
	run(t, b)

	id := e.publish(t, "hi", nil)
	var r *http.Request
	select {
	case r = <-reqs:
	case <-time.After(5 * time.Second):
		t.Fatal("no delivery")
	}
	body := <-bodies
	assert.Equal(t, http.MethodPost, r.Method)
	assert.Equal(t, "/Receipt", r.URL.Path)
	assert.Equal(t, "1.0", r.Header.Get("ce-specversion"))
	assert.Equal(t, id, r.Header.Get("ce-id"))
	assert.Equal(t, "//pubsub.googleapis.com/projects/"+project+"/topics/"+topic, r.Header.Get("ce-source"))
	assert.Equal(t, EventType, r.Header.Get("ce-type"))
	_, err := time.Parse(time.RFC3339, r.Header.Get("ce-time"))
	assert.NoError(t, err)
	assert.Equal(t, "application/json", r.Header.Get("Content-Type"))

	var m map[string]any
	require.NoError(t, json.Unmarshal(body, &m))
	msg := m["message"].(map[string]any)
	assert.Equal(t, "aGk=", msg["data"]) // base64("hi")
	assert.Equal(t, id, msg["messageId"])
	assert.Equal(t, r.Header.Get("ce-time"), msg["publishTime"])
	assert.Equal(t, "projects/"+project+"/subscriptions/"+sub, m["subscription"])
}

func TestBridge_RetriesThenAcks(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rec, endpoint := newRecorder(t, func(nth int) int {
		if nth < 2 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	b := e.newBridge(t, fastOpts(), endpoint)
	stop := run(t, b)

	id := e.publish(t, "x", nil)
	require.Eventually(t, func() bool { return b.Stats().Delivered == 1 }, 5*time.Second, 10*time.Millisecond)
	e.waitAcked(t, id)
	require.NoError(t, stop())

	got, total := rec.snapshot()
	assert.Equal(t, map[string]int{id: 3}, got)
	assert.Equal(t, 3, total)
	assert.Equal(t, RouteStats{Delivered: 1, Retried: 2, Answers: map[string]uint64{"5xx": 2, "2xx": 1}}, b.Stats().RouteStats,
		"the answers by class")

	left, err := e.ps.Pull(context.Background(), sub, 10, 200*time.Millisecond)
	require.NoError(t, err)
	assert.Empty(t, left, "message was not acknowledged")
}

func TestBridge_FailsOverDeadEndpoint(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rec, live := newRecorder(t, nil)
	b := e.newBridge(t, fastOpts(), testsupport.DeadURL(t)+"/Submit", live)
	stop := run(t, b)

	const n = 20
	ids := e.publishN(t, n)
	require.Eventually(t, func() bool { return b.Stats().Delivered == n }, 10*time.Second, 10*time.Millisecond)
	e.waitAcked(t, ids...)
	require.NoError(t, stop())

	got, total := rec.snapshot()
	assert.Equal(t, n, total)
	for _, id := range ids {
		assert.Equal(t, 1, got[id], "message %s", id)
	}
	s := b.Stats()
	// Round-robin starts half the messages on the dead endpoint; each of
	// those is retried once, on the live one.
	assert.Equal(t, uint64(n/2), s.Retried)
	assert.Zero(t, s.DeadLettered)
	assert.Equal(t, map[string]uint64{"none": n / 2, "2xx": n}, s.Answers, "a dead endpoint gives no answer")
}

func TestBridge_SpreadsRoundRobin(t *testing.T) {
	t.Parallel()
	e := setup(t)
	recA, a := newRecorder(t, nil)
	recB, bURL := newRecorder(t, nil)
	b := e.newBridge(t, fastOpts(), a, bURL)
	stop := run(t, b)

	const n = 10
	e.publishN(t, n)
	require.Eventually(t, func() bool { return b.Stats().Delivered == n }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, stop())
	assert.Equal(t, n/2, recA.calls())
	assert.Equal(t, n/2, recB.calls())
}

func TestBridge_DeadLetters(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	require.NoError(t, e.ps.CreateTopic(ctx, "dead"))
	require.NoError(t, e.ps.CreateSubscription(ctx, "dead-sub", "dead", false))

	rec, endpoint := newRecorder(t, func(int) int { return http.StatusInternalServerError })
	opts := fastOpts()
	opts.MaxAttempts = 3
	opts.DeadLetterTopic = "dead"
	b := e.newBridge(t, opts, endpoint)
	stop := run(t, b)

	id := e.publish(t, "poison", map[string]string{"outbox_id": "42"})
	dead, err := e.ps.Pull(ctx, "dead-sub", 10, 5*time.Second)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	e.waitAcked(t, id)
	require.NoError(t, stop())

	assert.Equal(t, "poison", string(dead[0].Data))
	attrs := dead[0].Attributes
	assert.Equal(t, "42", attrs["outbox_id"])
	assert.Equal(t, "3", attrs[AttrDeadLetterAttempts])
	assert.Equal(t, sub, attrs[AttrDeadLetterSubscription])
	assert.Contains(t, attrs[AttrDeadLetterReason], "status 500")

	got, _ := rec.snapshot()
	assert.Equal(t, map[string]int{id: 3}, got)
	assert.Equal(t, RouteStats{Retried: 2, DeadLettered: 1, Answers: map[string]uint64{"5xx": 3}}, b.Stats().RouteStats)

	left, err := e.ps.Pull(ctx, sub, 10, 200*time.Millisecond)
	require.NoError(t, err)
	assert.Empty(t, left, "dead-lettered message was not acknowledged")
}

func TestBridge_DropsWithoutDeadLetterTopic(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rec, endpoint := newRecorder(t, func(int) int { return http.StatusBadRequest })
	opts := fastOpts()
	opts.MaxAttempts = 2
	b := e.newBridge(t, opts, endpoint)
	stop := run(t, b)

	id := e.publish(t, "poison", nil)
	require.Eventually(t, func() bool { return b.Stats().DeadLettered == 1 }, 5*time.Second, 10*time.Millisecond)
	e.waitAcked(t, id)
	require.NoError(t, stop())
	assert.Equal(t, 2, rec.calls())

	left, err := e.ps.Pull(context.Background(), sub, 10, 200*time.Millisecond)
	require.NoError(t, err)
	assert.Empty(t, left)
}

func TestBridge_DeliversManyExactlyOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rec, endpoint := newRecorder(t, nil)
	rec.delay = 5 * time.Millisecond
	opts := fastOpts()
	opts.Concurrency = 8
	b := e.newBridge(t, opts, endpoint)
	stop := run(t, b)

	const n = 100
	ids := e.publishN(t, n)
	require.Eventually(t, func() bool { return b.Stats().Delivered == n }, 20*time.Second, 10*time.Millisecond)
	e.waitAcked(t, ids...)
	require.NoError(t, stop())

	got, total := rec.snapshot()
	assert.Equal(t, n, total)
	require.Len(t, got, n)
	for _, id := range ids {
		assert.Equal(t, 1, got[id], "message %s", id)
	}
	rec.mu.Lock()
	maxIn := rec.maxIn
	rec.mu.Unlock()
	assert.LessOrEqual(t, maxIn, 8, "deliveries in flight")
	assert.Greater(t, maxIn, 1, "deliveries were not concurrent")
}

func TestBridge_RunReturnsOnCancel(t *testing.T) {
	t.Parallel()
	e := setup(t)
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Reading the body to EOF lets the server notice the client going
		// away and cancel r's context.
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case entered <- struct{}{}:
		default:
		}
		select { // hang until the bridge gives up
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	b := e.newBridge(t, fastOpts(), srv.URL)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	id := e.publish(t, "stuck", nil)
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("no delivery")
	}
	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	assert.Zero(t, b.Stats().Delivered)

	// The cut-short delivery was nacked (a modack to deadline 0), never
	// acked.
	m := e.ps.Fake.Message(id)
	require.NotNil(t, m)
	assert.Zero(t, m.Acks, "the message was acknowledged")
	nacked := false
	for _, ma := range m.Modacks {
		nacked = nacked || ma.AckDeadline == 0
	}
	assert.True(t, nacked, "the message was not nacked: %+v", m.Modacks)

	// Nacked, it is available again. The fake may still hand it to the
	// bridge's closing stream first, which holds it for one ack deadline
	// (10s), so wait past that: the point is that it was not lost.
	left, err := e.ps.Pull(context.Background(), sub, 10, 15*time.Second)
	require.NoError(t, err)
	require.Len(t, left, 1)
	assert.Equal(t, id, left[0].ID)
}

func TestBridge_RunFailsOnMissingSubscription(t *testing.T) {
	t.Parallel()
	e := setup(t)
	b, err := New(e.ps.Client, project, []Route{{Subscription: "nope", Endpoints: []string{"http://127.0.0.1:1/"}}}, fastOpts(), testLogger(t))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = b.Run(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nope")
}

func TestBridge_NewRejectsBadInput(t *testing.T) {
	t.Parallel()
	ps := pubsubtest.MustStart(t, project)
	ok := []Route{{Subscription: sub, Endpoints: []string{"http://127.0.0.1:8081/Submit"}}}
	log := testLogger(t)
	tests := []struct {
		name    string
		client  *pubsub.Client
		project string
		routes  []Route
		opts    Options
		log     *slog.Logger
	}{
		{"nil client", nil, project, ok, Options{}, log},
		{"empty project", ps.Client, "", ok, Options{}, log},
		{"nil logger", ps.Client, project, ok, Options{}, nil},
		{"no routes", ps.Client, project, nil, Options{}, log},
		{"empty subscription", ps.Client, project, []Route{{Endpoints: []string{"http://h/"}}}, Options{}, log},
		{"full subscription name", ps.Client, project, []Route{{Subscription: "projects/p/subscriptions/s", Endpoints: []string{"http://h/"}}}, Options{}, log},
		{"no endpoints", ps.Client, project, []Route{{Subscription: sub}}, Options{}, log},
		{"relative endpoint", ps.Client, project, []Route{{Subscription: sub, Endpoints: []string{"/Submit"}}}, Options{}, log},
		{"duplicate route", ps.Client, project, append(append([]Route{}, ok...), ok...), Options{}, log},
		{"negative attempts", ps.Client, project, ok, Options{MaxAttempts: -1}, log},
		{"max below min backoff", ps.Client, project, ok, Options{MinBackoff: time.Second, MaxBackoff: time.Millisecond}, log},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.client, tt.project, tt.routes, tt.opts, tt.log)
			assert.Error(t, err)
		})
	}
}

func TestBridge_Backoff(t *testing.T) {
	t.Parallel()
	b := &Bridge{opts: Options{MinBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second}
	for i, w := range want {
		assert.Equal(t, w, b.backoff(i+1), "retry %d", i+1)
	}
}

// testLogger logs through t, so that output shows only for failing tests.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

var logMu sync.Mutex

func (w tWriter) Write(p []byte) (int, error) {
	logMu.Lock()
	defer logMu.Unlock()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
