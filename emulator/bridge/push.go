package bridge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"cloud.google.com/go/pubsub/v2"
)

// EventType is the CloudEvent type of a Pub/Sub message.
const EventType = "google.cloud.pubsub.topic.v1.messagePublished"

// maxErrorBody bounds the part of a failed response's body kept in the error.
const maxErrorBody = 512

// push is the HTTP request for one message, built once and sent on every
// attempt.
//
// It is a CloudEvent in HTTP binary content mode, as Eventarc sends Pub/Sub
// messages to Cloud Run functions: the context attributes travel as ce-*
// headers and the body is the JSON data of the event,
//
//	{"message": {"data": "<base64>", "attributes": {...}, "messageId": "...",
//	  "message_id": "...", "publishTime": "...", "publish_time": "...",
//	  "orderingKey": "..."},
//	 "subscription": "projects/<p>/subscriptions/<s>"}
//
// with the snake_case duplicates Pub/Sub push also sends.
type push struct {
	header http.Header
	body   []byte
}

// pushBody is the CloudEvent data of a Pub/Sub message.
type pushBody struct {
	Message      pushMessage `json:"message"`
	Subscription string      `json:"subscription"`
}

// pushMessage is a Pub/Sub message in push JSON.
type pushMessage struct {
	Data           []byte            `json:"data,omitempty"` // base64 in JSON
	Attributes     map[string]string `json:"attributes,omitempty"`
	MessageID      string            `json:"messageId"`
	MessageIDSnake string            `json:"message_id"`
	PublishTime    string            `json:"publishTime"`
	PublishSnake   string            `json:"publish_time"`
	OrderingKey    string            `json:"orderingKey,omitempty"`
}

// newPush builds the delivery of m, received from r's subscription of
// project.
func newPush(project string, r *route, m *pubsub.Message) (*push, error) {
	published := m.PublishTime.UTC()
	if published.IsZero() {
		published = time.Now().UTC()
	}
	ts := published.Format(time.RFC3339Nano)
	body, err := json.Marshal(pushBody{
		Message: pushMessage{
			Data:           m.Data,
			Attributes:     m.Attributes,
			MessageID:      m.ID,
			MessageIDSnake: m.ID,
			PublishTime:    ts,
			PublishSnake:   ts,
			OrderingKey:    m.OrderingKey,
		},
		Subscription: "projects/" + project + "/subscriptions/" + r.sub,
	})
	if err != nil {
		return nil, fmt.Errorf("encode push body: %w", err)
	}
	h := make(http.Header, 6)
	h.Set("Ce-Specversion", "1.0")
	h.Set("Ce-Id", m.ID)
	h.Set("Ce-Source", r.source)
	h.Set("Ce-Type", EventType)
	h.Set("Ce-Time", ts)
	h.Set("Content-Type", "application/json")
	return &push{header: h, body: body}, nil
}

// post sends p to endpoint once, bounded by the delivery timeout, and
// counts the answer's class on r. It returns nil for a 2xx response.
func (b *Bridge) post(ctx context.Context, r *route, endpoint string, p *push) error {
	ctx, cancel := context.WithTimeout(ctx, b.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(p.body))
	if err != nil {
		return fmt.Errorf("deliver to %s: %w", endpoint, err)
	}
	req.Header = p.header.Clone()
	resp, err := b.http.Do(req)
	if err != nil {
		r.answers[classNone].Add(1)
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("deliver to %s: %w", endpoint, err)
	}
	r.answers[classOf(resp.StatusCode)].Add(1)
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // let the connection be reused
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	return fmt.Errorf("deliver to %s: status %d: %s", endpoint, resp.StatusCode, bytes.TrimSpace(snippet))
}

// The classes of a push's answer, as Pub/Sub push tells them apart: 2xx
// acks, anything else (or no answer) is retried, and answers of 4xx and
// 5xx slow the subscription down.
const (
	class2xx = iota
	class4xx
	class5xx
	classOther // 1xx, 3xx
	classNone  // no answer: connection refused, reset, timed out
	classCount
)

// classNames name the classes in Stats.
var classNames = [classCount]string{"2xx", "4xx", "5xx", "other", "none"}

func classOf(status int) int {
	switch {
	case status >= 200 && status < 300:
		return class2xx
	case status >= 400 && status < 500:
		return class4xx
	case status >= 500 && status < 600:
		return class5xx
	}
	return classOther
}
