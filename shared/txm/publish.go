package txm

import "context"

// Message is one outbox row to publish.
type Message struct {
	ID          int64 // outbox id
	Topic       string
	OrderingKey string
	Data        []byte
	Attributes  map[string]string
}

// Publisher is the port to the messaging system (Pub/Sub). Publish returns
// once the message is durably accepted; publishing is at-least-once, so
// consumers deduplicate.
type Publisher interface {
	Publish(ctx context.Context, m Message) error
	// PublishAll sends msgs at once, in order (messages that share an
	// ordering key keep it), and returns once each is accepted or failed:
	// errs[i] is msgs[i]'s outcome.
	PublishAll(ctx context.Context, msgs []Message) (errs []error)
}

// PromptMessage is the body of a `submit` or `receipt` message: a signer on
// a chain has work. It only prompts; the database decides what the work is.
type PromptMessage struct {
	ChainID uint64 `json:"chainId"`
	Signer  string `json:"signer"`
}
