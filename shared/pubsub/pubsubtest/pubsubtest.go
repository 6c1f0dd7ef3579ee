// Package pubsubtest runs an in-process Pub/Sub fake (pstest) for tests and
// the local emulator, with small helpers to create topics and subscriptions
// and to pull messages.
//
// The fake listens on a localhost TCP port, so other processes can reach it
// with PUBSUB_EMULATOR_HOST set to Server.Addr.
package pubsubtest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// Server is a running Pub/Sub fake and a client connected to it.
type Server struct {
	Addr    string         // host:port the fake listens on; a PUBSUB_EMULATOR_HOST value
	Project string         // project the helpers create resources in
	Client  *pubsub.Client // client connected to the fake
	Fake    *pstest.Server // the fake itself, for inspection and fault injection
}

// Received is a message pulled from a subscription.
type Received struct {
	ID          string // Pub/Sub message id
	Data        []byte
	Attributes  map[string]string
	OrderingKey string
	PublishTime time.Time
}

// Start runs a Pub/Sub fake on a random localhost TCP port and connects a
// client to it for project.
func Start(ctx context.Context, project string) (*Server, error) {
	if project == "" {
		return nil, errors.New("start pubsub fake: empty project")
	}
	fake, err := newFake()
	if err != nil {
		return nil, fmt.Errorf("start pubsub fake: %w", err)
	}
	client, err := pubsub.NewClient(ctx, project,
		option.WithEndpoint(fake.Addr),
		option.WithoutAuthentication(),
		option.WithTelemetryDisabled(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
	)
	if err != nil {
		_ = fake.Close()
		return nil, fmt.Errorf("connect to pubsub fake: %w", err)
	}
	return &Server{Addr: fake.Addr, Project: project, Client: client, Fake: fake}, nil
}

// newFake starts a pstest server, turning its panic on a failed listen into
// an error.
func newFake() (fake *pstest.Server, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	return pstest.NewServerWithAddress("127.0.0.1:0"), nil
}

// MustStart is Start for tests: it fails t on error and closes the server
// when the test ends.
func MustStart(t testing.TB, project string) *Server {
	t.Helper()
	s, err := Start(context.Background(), project)
	if err != nil {
		t.Fatalf("pubsubtest: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("pubsubtest: %v", err)
		}
	})
	return s
}

// TopicName returns the full resource name of topic id in the server's
// project.
func (s *Server) TopicName(id string) string {
	return "projects/" + s.Project + "/topics/" + id
}

// SubscriptionName returns the full resource name of subscription id in the
// server's project.
func (s *Server) SubscriptionName(id string) string {
	return "projects/" + s.Project + "/subscriptions/" + id
}

// CreateTopic creates topic id.
func (s *Server) CreateTopic(ctx context.Context, id string) error {
	_, err := s.Client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: s.TopicName(id)})
	if err != nil {
		return fmt.Errorf("create topic %s: %w", id, err)
	}
	return nil
}

// CreateSubscription creates pull subscription subID on topic topicID. With
// ordered, messages that share an ordering key are delivered in order, one at
// a time until acknowledged.
func (s *Server) CreateSubscription(ctx context.Context, subID, topicID string, ordered bool) error {
	_, err := s.Client.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name:                  s.SubscriptionName(subID),
		Topic:                 s.TopicName(topicID),
		AckDeadlineSeconds:    10,
		EnableMessageOrdering: ordered,
	})
	if err != nil {
		return fmt.Errorf("create subscription %s: %w", subID, err)
	}
	return nil
}

// Pull pulls up to max messages from subscription subID and acknowledges
// them. It waits at most wait for the first message; once one has arrived it
// keeps pulling only what is available at once. It returns no messages and no
// error when nothing arrives within wait.
//
// On an ordered subscription the next message for a key becomes available
// only after the previous one is acknowledged, so Pull acknowledges each
// batch before pulling the next.
func (s *Server) Pull(ctx context.Context, subID string, max int, wait time.Duration) ([]Received, error) {
	if max <= 0 {
		return nil, nil
	}
	sub := s.SubscriptionName(subID)
	deadline := time.Now().Add(wait)
	var out []Received
	for len(out) < max {
		waiting := len(out) == 0
		if waiting && !time.Now().Before(deadline) {
			break
		}
		msgs, err := s.pullOnce(ctx, sub, max-len(out), waiting, deadline)
		if err != nil {
			return out, fmt.Errorf("pull %s: %w", subID, err)
		}
		if len(msgs) == 0 {
			if waiting {
				continue
			}
			break
		}
		ackIDs := make([]string, 0, len(msgs))
		for _, rm := range msgs {
			ackIDs = append(ackIDs, rm.GetAckId())
			m := rm.GetMessage()
			out = append(out, Received{
				ID:          m.GetMessageId(),
				Data:        m.GetData(),
				Attributes:  m.GetAttributes(),
				OrderingKey: m.GetOrderingKey(),
				PublishTime: m.GetPublishTime().AsTime(),
			})
		}
		err = s.Client.SubscriptionAdminClient.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{
			Subscription: sub,
			AckIds:       ackIDs,
		})
		if err != nil {
			return out, fmt.Errorf("ack %s: %w", subID, err)
		}
	}
	return out, nil
}

// maxPullBatch bounds the messages asked for in one Pull call.
const maxPullBatch = 1000

// pullOnce makes one Pull call. While waiting for the first message it lets
// the server hold the call, bounded by deadline; a call cut short by deadline
// returns no messages and no error.
func (s *Server) pullOnce(ctx context.Context, sub string, max int, waiting bool, deadline time.Time) ([]*pubsubpb.ReceivedMessage, error) {
	callCtx := ctx
	if waiting {
		var cancel context.CancelFunc
		callCtx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	resp, err := s.Client.SubscriptionAdminClient.Pull(callCtx, &pubsubpb.PullRequest{
		Subscription:      sub,
		MaxMessages:       int32(min(max, maxPullBatch)),
		ReturnImmediately: !waiting, //nolint:staticcheck // deprecated, but the way to ask for only what is ready
	})
	if err != nil {
		// The server may report the expired deadline before the client's
		// own timer fires, so look at the status code too.
		timedOut := callCtx.Err() != nil || status.Code(err) == codes.DeadlineExceeded
		if waiting && ctx.Err() == nil && timedOut {
			return nil, nil
		}
		return nil, err
	}
	return resp.GetReceivedMessages(), nil
}

// Close closes the client and stops the fake.
func (s *Server) Close() error {
	return errors.Join(s.Client.Close(), s.Fake.Close())
}
