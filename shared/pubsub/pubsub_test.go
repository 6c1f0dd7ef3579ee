package pubsub

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/txfence/txfence/shared/pubsub/pubsubtest"
	"github.com/txfence/txfence/shared/txm"
)

const testProject = "txfence-test"

// setup starts a fake with one topic and one subscription per topic id and
// returns it with a Publisher over its client.
func setup(t *testing.T, ordered bool, topics ...string) (*pubsubtest.Server, *Publisher) {
	t.Helper()
	srv := pubsubtest.MustStart(t, testProject)
	ctx := context.Background()
	for _, id := range topics {
		require.NoError(t, srv.CreateTopic(ctx, id))
		require.NoError(t, srv.CreateSubscription(ctx, id+"-sub", id, ordered))
	}
	pub, err := NewPublisher(srv.Client, testProject)
	require.NoError(t, err)
	t.Cleanup(pub.Close)
	return srv, pub
}

// pullAll pulls from subID until want messages have arrived or timeout.
func pullAll(t *testing.T, srv *pubsubtest.Server, subID string, want int, timeout time.Duration) []pubsubtest.Received {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(timeout)
	var got []pubsubtest.Received
	for len(got) < want && time.Now().Before(deadline) {
		msgs, err := srv.Pull(ctx, subID, want-len(got), time.Second)
		require.NoError(t, err)
		got = append(got, msgs...)
	}
	// Anything beyond want is a duplicate or a stray; look briefly.
	extra, err := srv.Pull(ctx, subID, 1000, 200*time.Millisecond)
	require.NoError(t, err)
	return append(got, extra...)
}

func TestPublisher_RejectsMissingDeps(t *testing.T) {
	t.Parallel()
	srv := pubsubtest.MustStart(t, testProject)

	_, err := NewPublisher(nil, testProject)
	require.Error(t, err)
	_, err = NewPublisher(srv.Client, "")
	require.Error(t, err)

	pub, err := NewPublisher(srv.Client, testProject)
	require.NoError(t, err)
	defer pub.Close()
	require.Error(t, pub.Publish(context.Background(), txm.Message{Data: []byte("x")}))
}

func TestPublisher_PreservesPerKeyOrder(t *testing.T) {
	t.Parallel()
	srv, pub := setup(t, true, "submit")
	ctx := context.Background()

	const n = 100
	var id int64
	for i := range n {
		for _, key := range []string{"signer-A", "signer-B"} {
			id++
			err := pub.Publish(ctx, txm.Message{
				ID:          id,
				Topic:       "submit",
				OrderingKey: key,
				Data:        fmt.Appendf(nil, "%s/%03d", key, i),
			})
			require.NoError(t, err)
		}
	}

	got := pullAll(t, srv, "submit-sub", 2*n, 30*time.Second)
	require.Len(t, got, 2*n, "lost or duplicated messages")

	perKey := map[string][]string{}
	for _, m := range got {
		perKey[m.OrderingKey] = append(perKey[m.OrderingKey], string(m.Data))
	}
	for _, key := range []string{"signer-A", "signer-B"} {
		want := make([]string, n)
		for i := range n {
			want[i] = fmt.Sprintf("%s/%03d", key, i)
		}
		assert.Equal(t, want, perKey[key], "order of %s", key)
	}
}

func TestPublisher_SendsAttributes(t *testing.T) {
	t.Parallel()
	srv, pub := setup(t, false, "receipt")
	ctx := context.Background()

	attrs := map[string]string{"signer": "0xabc", "chain_id": "1"}
	require.NoError(t, pub.Publish(ctx, txm.Message{
		ID: 42, Topic: "receipt", OrderingKey: "0xabc", Data: []byte("with-id"), Attributes: attrs,
	}))
	require.NoError(t, pub.Publish(ctx, txm.Message{
		Topic: "receipt", Data: []byte("without-id"), Attributes: attrs,
	}))
	assert.Equal(t, map[string]string{"signer": "0xabc", "chain_id": "1"}, attrs, "caller's map was modified")

	got := pullAll(t, srv, "receipt-sub", 2, 10*time.Second)
	require.Len(t, got, 2)
	byData := map[string]pubsubtest.Received{}
	for _, m := range got {
		byData[string(m.Data)] = m
	}

	withID := byData["with-id"]
	assert.Equal(t, map[string]string{"signer": "0xabc", "chain_id": "1", AttrOutboxID: "42"}, withID.Attributes)
	assert.Equal(t, "0xabc", withID.OrderingKey)
	assert.NotEmpty(t, withID.ID)
	assert.False(t, withID.PublishTime.IsZero())

	assert.Equal(t, map[string]string{"signer": "0xabc", "chain_id": "1"}, byData["without-id"].Attributes)
}

func TestPublisher_MissingTopicFails(t *testing.T) {
	t.Parallel()
	_, pub := setup(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	err := pub.Publish(ctx, txm.Message{ID: 1, Topic: "nope", Data: []byte("x")})
	require.Error(t, err)
	assert.False(t, errors.Is(err, context.DeadlineExceeded), "hung until the deadline: %v", err)
	assert.Equal(t, codes.NotFound, status.Code(err), "error: %v", err)
}

func TestPublisher_ResumesOrderingKeyAfterError(t *testing.T) {
	t.Parallel()
	srv, pub := setup(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	msg := txm.Message{ID: 7, Topic: "late", OrderingKey: "signer-A", Data: []byte("x")}
	require.Error(t, pub.Publish(ctx, msg), "topic does not exist yet")

	require.NoError(t, srv.CreateTopic(ctx, "late"))
	require.NoError(t, srv.CreateSubscription(ctx, "late-sub", "late", true))

	// Without ResumePublish the key would stay paused and this would fail
	// with ErrPublishingPaused.
	require.NoError(t, pub.Publish(ctx, msg))
	got := pullAll(t, srv, "late-sub", 1, 10*time.Second)
	require.Len(t, got, 1)
	assert.Equal(t, "7", got[0].Attributes[AttrOutboxID])
}

func TestPublisher_ConcurrentTopics(t *testing.T) {
	t.Parallel()
	topics := []string{"submit", "receipt", "finality"}
	srv, pub := setup(t, false, topics...)
	ctx := context.Background()

	const workers, perWorker = 16, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers*perWorker)
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				id := int64(w*perWorker + i + 1)
				err := pub.Publish(ctx, txm.Message{
					ID:          id,
					Topic:       topics[int(id)%len(topics)],
					OrderingKey: "signer-" + strconv.Itoa(w%4),
					Data:        []byte(strconv.FormatInt(id, 10)),
				})
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	seen := map[string]bool{}
	for _, topic := range topics {
		want := 0
		for id := 1; id <= workers*perWorker; id++ {
			if id%len(topics) == topicIndex(topics, topic) {
				want++
			}
		}
		got := pullAll(t, srv, topic+"-sub", want, 10*time.Second)
		require.Len(t, got, want, "topic %s", topic)
		for _, m := range got {
			id := m.Attributes[AttrOutboxID]
			require.Equal(t, string(m.Data), id)
			require.False(t, seen[id], "duplicate outbox id %s", id)
			seen[id] = true
		}
	}
	assert.Len(t, seen, workers*perWorker)
}

func TestPublisher_PublishAfterCloseFails(t *testing.T) {
	t.Parallel()
	_, pub := setup(t, false, "submit")
	ctx := context.Background()

	require.NoError(t, pub.Publish(ctx, txm.Message{Topic: "submit", Data: []byte("x")}))
	pub.Close()
	err := pub.Publish(ctx, txm.Message{Topic: "submit", Data: []byte("y")})
	require.ErrorIs(t, err, ErrClosed)
	pub.Close() // idempotent
}

func topicIndex(topics []string, topic string) int {
	for i, t := range topics {
		if t == topic {
			return i
		}
	}
	return -1
}

// Not parallel: it sets PUBSUB_EMULATOR_HOST, as a separate process would.
func TestPublisher_DialHonoursEmulatorHost(t *testing.T) {
	srv := pubsubtest.MustStart(t, testProject)
	ctx := context.Background()
	require.NoError(t, srv.CreateTopic(ctx, "submit"))
	require.NoError(t, srv.CreateSubscription(ctx, "submit-sub", "submit", true))

	t.Setenv("PUBSUB_EMULATOR_HOST", srv.Addr)
	client, err := Dial(ctx, testProject)
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	pub, err := NewPublisher(client, testProject)
	require.NoError(t, err)
	t.Cleanup(pub.Close)

	require.NoError(t, pub.Publish(ctx, txm.Message{ID: 1, Topic: "submit", OrderingKey: "k", Data: []byte("x")}))
	got := pullAll(t, srv, "submit-sub", 1, 10*time.Second)
	require.Len(t, got, 1)
	assert.Equal(t, "x", string(got[0].Data))

	_, err = Dial(ctx, "")
	require.Error(t, err)
}

// TestPublisher_PublishAll: many messages handed over in one call keep
// each ordering key's order and report each outcome on its own: a message
// for a missing topic fails alone, and the rest arrive.
func TestPublisher_PublishAll(t *testing.T) {
	t.Parallel()
	srv, pub := setup(t, true, "submit")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const n = 200
	var msgs []txm.Message
	for i := range n {
		key := []string{"signer-A", "signer-B"}[i%2]
		msgs = append(msgs, txm.Message{ID: int64(i + 1), Topic: "submit", OrderingKey: key, Data: fmt.Appendf(nil, "%s/%03d", key, i)})
	}
	msgs[n/2].Topic, msgs[n/2].OrderingKey = "nope", "signer-C" // no such topic
	errs := pub.PublishAll(ctx, msgs)
	require.Len(t, errs, n)
	for i, err := range errs {
		if i == n/2 {
			assert.Equal(t, codes.NotFound, status.Code(err), "message %d: %v", i, err)
			continue
		}
		assert.NoError(t, err, "message %d", i)
	}

	got := pullAll(t, srv, "submit-sub", n-1, 30*time.Second)
	require.Len(t, got, n-1, "lost or duplicated messages")
	perKey := map[string][]string{}
	for _, m := range got {
		perKey[m.OrderingKey] = append(perKey[m.OrderingKey], string(m.Data))
	}
	for k, key := range []string{"signer-A", "signer-B"} {
		var want []string
		for i := k; i < n; i += 2 {
			if i != n/2 {
				want = append(want, fmt.Sprintf("%s/%03d", key, i))
			}
		}
		assert.Equal(t, want, perKey[key], "order of %s", key)
	}
}

// TestPublisher_UnorderedTopicsShareRequests: messages to a topic declared
// Unordered go without their ordering keys, so that messages of many keys
// share the client library's bundles and requests; other topics keep each
// message's key, one key's bundle a request.
func TestPublisher_UnorderedTopicsShareRequests(t *testing.T) {
	t.Parallel()
	srv := pubsubtest.MustStart(t, testProject)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, id := range []string{"submit", "completion"} {
		require.NoError(t, srv.CreateTopic(ctx, id))
		require.NoError(t, srv.CreateSubscription(ctx, id+"-sub", id, true))
	}
	var mu sync.Mutex
	requests := map[string]int{} // Publish requests by topic name
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if r, ok := req.(*pubsubpb.PublishRequest); ok {
			mu.Lock()
			requests[r.GetTopic()]++
			mu.Unlock()
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	client, err := Dial(ctx, testProject,
		option.WithEndpoint(srv.Addr),
		option.WithoutAuthentication(),
		option.WithTelemetryDisabled(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
		option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(count)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	pub, err := NewPublisher(client, testProject)
	require.NoError(t, err)
	t.Cleanup(pub.Close)
	pub.Unordered("submit")

	const n = 20
	var msgs []txm.Message
	for _, topic := range []string{"submit", "completion"} {
		for i := range n {
			key := fmt.Sprintf("signer-%02d", i)
			msgs = append(msgs, txm.Message{ID: int64(len(msgs) + 1), Topic: topic, OrderingKey: key, Data: []byte(topic + "/" + key)})
		}
	}
	for i, err := range pub.PublishAll(ctx, msgs) {
		require.NoError(t, err, "message %d", i)
	}

	for _, topic := range []string{"submit", "completion"} {
		got := pullAll(t, srv, topic+"-sub", n, 10*time.Second)
		require.Len(t, got, n, topic)
		for _, m := range got {
			key := strings.TrimPrefix(string(m.Data), topic+"/")
			if topic == "submit" {
				assert.Empty(t, m.OrderingKey, "an unordered topic's message keeps no key")
			} else {
				assert.Equal(t, key, m.OrderingKey, "an ordered topic's message keeps its key")
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, n, requests[srv.TopicName("completion")], "one request a key on an ordered topic")
	assert.LessOrEqual(t, requests[srv.TopicName("submit")], n/4, "the unordered topic's messages share requests")
	assert.Positive(t, requests[srv.TopicName("submit")])
}
