package event

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
)

// MessagePublishedType is the CloudEvent type of a Pub/Sub message.
const MessagePublishedType = "google.cloud.pubsub.topic.v1.messagePublished"

// maxBody bounds a push's body: Pub/Sub messages are at most 10 MB, and
// txfence's prompts are tiny.
const maxBody = 10 << 20

// Handler serves fn as a Pub/Sub-triggered function: each request is
// decoded and handled in its own goroutine with its own context, and
// answered 200 (ack) when fn returns nil, 500 (Pub/Sub redelivers) when it
// fails, 400 when the request is no Pub/Sub message.
//
// It takes what Pub/Sub and Eventarc send: a CloudEvent in binary or
// structured content mode (Eventarc, the emulator's bridge), or a plain
// Pub/Sub push (terraform's push subscriptions: {"message": {...},
// "subscription": "..."} posted to /projects/<p>/topics/<t>), which becomes
// the messagePublished CloudEvent the Functions Framework would make of it:
// the body as data, the message id as id, its publish time as time.
//
// The Functions Framework's CloudEvent functions are served by the
// CloudEvents SDK's receive handler, which hands every request over one
// unbuffered channel shared by the process to a consumer goroutine that
// waits on its own request's context (cloudevents/sdk-go#1224, #1332). A
// request cancelled during the hand-off (a push deadline, a client gone)
// leaves another request's message without a consumer: that request hangs
// until its deadline, and from then on requests are handled under each
// other's contexts, so a Submit push can hang with no handler running.
func Handler(fn func(context.Context, event.Event) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "a Pub/Sub message is POSTed", http.StatusMethodNotAllowed)
			return
		}
		e, err := decode(w, r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := fn(r.Context(), e); err != nil {
			// The error is logged by fn; the answer names nothing of it.
			http.Error(w, "not handled; redeliver", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	}
}

// decode reads r's CloudEvent, or makes one of a plain Pub/Sub push.
func decode(w http.ResponseWriter, r *http.Request) (event.Event, error) {
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	if r.Header.Get("Ce-Id") != "" || strings.Contains(r.Header.Get("Content-Type"), "cloudevents") {
		e, err := binding.ToEvent(r.Context(), cehttp.NewMessageFromHttpRequest(r))
		if err != nil {
			return event.Event{}, fmt.Errorf("cloudevent: %w", err)
		}
		return *e, nil
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return event.Event{}, fmt.Errorf("read body: %w", err)
	}
	var push struct {
		Message *struct {
			MessageID   string    `json:"messageId"`
			PublishTime time.Time `json:"publishTime"`
		} `json:"message"`
		Subscription string `json:"subscription"`
	}
	if err := json.Unmarshal(body, &push); err != nil || push.Message == nil || push.Message.MessageID == "" {
		return event.Event{}, fmt.Errorf("neither a CloudEvent nor a Pub/Sub push message")
	}
	e := event.New()
	e.SetID(push.Message.MessageID)
	e.SetType(MessagePublishedType)
	source := "//pubsub.googleapis.com/" + push.Subscription
	if i := strings.Index(r.URL.Path, "projects/"); i >= 0 && strings.Contains(r.URL.Path[i:], "/topics/") {
		source = "//pubsub.googleapis.com/" + r.URL.Path[i:]
	}
	e.SetSource(source)
	e.SetTime(push.Message.PublishTime)
	if err := e.SetData(event.ApplicationJSON, body); err != nil {
		return event.Event{}, fmt.Errorf("push body: %w", err)
	}
	return e, nil
}
