// Package eventschema validates completion-topic messages against the two
// schemas of schemas/: the JSON Schema (completion-event.schema.json, the
// consumer's documentation) and the protocol buffer schema
// (completion_event.proto) the way Pub/Sub does with JSON encoding: the
// proto3 JSON mapping, unknown fields refused. Tests use it to check that
// what the stack publishes is what the schemas describe.
package eventschema

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/bufbuild/protocompile"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/txfence/txfence/schemas"
)

// MessageName is the proto message a completion-topic message is.
const MessageName = "CompletionEvent"

// schemaURL names the JSON Schema resource for the compiler (its $id).
const schemaURL = "https://github.com/txfence/txfence/schemas/completion-event.schema.json"

// Schemas are both schemas, compiled.
type Schemas struct {
	// JSON is the compiled JSON Schema.
	JSON *jsonschema.Schema
	// Doc is the JSON Schema as parsed JSON, for tests that read its
	// structure.
	Doc map[string]any
	// File is the compiled proto file.
	File protoreflect.FileDescriptor
	// Message is its CompletionEvent message.
	Message protoreflect.MessageDescriptor
}

var (
	once     sync.Once
	compiled *Schemas
	errLoad  error
)

// Load compiles the embedded schema files once.
func Load() (*Schemas, error) {
	once.Do(func() { compiled, errLoad = Compile(schemas.CompletionEventJSONSchema, schemas.CompletionEventProto) })
	return compiled, errLoad
}

// Compile compiles a JSON Schema and a proto file of the completion message
// (tests compile altered copies to see that a check fails).
func Compile(jsonSchema, proto []byte) (*Schemas, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(jsonSchema))
	if err != nil {
		return nil, fmt.Errorf("json schema: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, fmt.Errorf("json schema: %w", err)
	}
	js, err := c.Compile(schemaURL)
	if err != nil {
		return nil, fmt.Errorf("json schema: %w", err)
	}
	m, ok := doc.(map[string]any)
	if !ok {
		return nil, errors.New("json schema: not an object")
	}

	pc := protocompile.Compiler{Resolver: &protocompile.SourceResolver{
		Accessor: protocompile.SourceAccessorFromMap(map[string]string{schemas.CompletionEventProtoFile: string(proto)}),
	}}
	files, err := pc.Compile(context.Background(), schemas.CompletionEventProtoFile)
	if err != nil {
		return nil, fmt.Errorf("proto: %w", err)
	}
	fd := files[0]
	md := fd.Messages().ByName(MessageName)
	if md == nil {
		return nil, fmt.Errorf("proto: no message %s", MessageName)
	}
	return &Schemas{JSON: js, Doc: m, File: fd, Message: md}, nil
}

// ValidateJSON checks data, a message's JSON bytes, against the JSON Schema.
func (s *Schemas) ValidateJSON(data []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return s.JSON.Validate(v)
}

// ValidateProto checks data as Pub/Sub does for a topic whose schema is the
// proto with JSON encoding: the proto3 JSON mapping into CompletionEvent,
// an unknown field an error.
func (s *Schemas) ValidateProto(data []byte) error {
	msg := dynamicpb.NewMessage(s.Message)
	return protojson.UnmarshalOptions{DiscardUnknown: false}.Unmarshal(data, msg)
}

// Validate checks data against both schemas.
func (s *Schemas) Validate(data []byte) error {
	return errors.Join(wrap("json schema", s.ValidateJSON(data)), wrap("proto", s.ValidateProto(data)))
}

func wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}

// ValidateJSON checks data against the embedded JSON Schema.
func ValidateJSON(data []byte) error {
	s, err := Load()
	if err != nil {
		return err
	}
	return s.ValidateJSON(data)
}

// ValidateProto checks data against the embedded proto as Pub/Sub does.
func ValidateProto(data []byte) error {
	s, err := Load()
	if err != nil {
		return err
	}
	return s.ValidateProto(data)
}

// Validate checks data against both embedded schemas.
func Validate(data []byte) error {
	s, err := Load()
	if err != nil {
		return err
	}
	return s.Validate(data)
}

// Type reads a message's type field ("" when it has none), for messages
// that report which types they saw.
func Type(data []byte) string {
	var m struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(data, &m)
	return m.Type
}
