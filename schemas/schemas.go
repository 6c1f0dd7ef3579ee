// Package schemas holds the completion topic's message schemas, embedded so
// that tests validate against the very files terraform publishes:
// completion-event.schema.json (the JSON Schema, the consumer's
// documentation) and completion_event.proto (what Pub/Sub validates).
package schemas

import _ "embed"

// CompletionEventJSONSchema is completion-event.schema.json.
//
//go:embed completion-event.schema.json
var CompletionEventJSONSchema []byte

// CompletionEventProto is completion_event.proto.
//
//go:embed completion_event.proto
var CompletionEventProto []byte

// CompletionEventProtoFile is the proto file's name, as compilers resolve it.
const CompletionEventProtoFile = "completion_event.proto"
