package eventschema_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/txfence/txfence/schemas"
	"github.com/txfence/txfence/shared/testsupport/eventschema"
)

// doc is a parsed JSON Schema with its $defs, for reading its structure.
type doc struct {
	root map[string]any
	defs map[string]any
}

func newDoc(root map[string]any) doc {
	defs, _ := root["$defs"].(map[string]any)
	return doc{root: root, defs: defs}
}

// resolve follows a local "#/$defs/NAME" reference of node, if any, and
// returns the node's keywords merged over its target's (the node's own win:
// a property's description and const refine its $ref's).
func (d doc) resolve(node any) map[string]any {
	m, _ := node.(map[string]any)
	ref, ok := m["$ref"].(string)
	if !ok {
		return m
	}
	target := d.resolve(d.defs[strings.TrimPrefix(ref, "#/$defs/")])
	out := maps.Clone(target)
	for k, v := range m {
		if k != "$ref" {
			out[k] = v
		}
	}
	return out
}

// branches are the oneOf alternatives of the top level, by their type const.
func (d doc) branches() map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, b := range d.root["oneOf"].([]any) {
		br := d.resolve(b)
		props, _ := br["properties"].(map[string]any)
		typ, _ := d.resolve(props["type"])["const"].(string)
		out[typ] = br
	}
	return out
}

// strs converts a JSON array of strings.
func strs(v any) []string {
	var out []string
	for _, s := range v.([]any) {
		out = append(out, s.(string))
	}
	sort.Strings(out)
	return out
}

// enumNames lists an enum's value names but its zero (the UNSPECIFIED one).
func enumNames(e protoreflect.EnumDescriptor) []string {
	var out []string
	for i := 0; i < e.Values().Len(); i++ {
		if v := e.Values().Get(i); v.Number() != 0 {
			out = append(out, string(v.Name()))
		}
	}
	sort.Strings(out)
	return out
}

// kindMatches reports whether a JSON Schema property (resolved) and a proto
// field carry the same kind of value.
func kindMatches(d doc, prop map[string]any, f protoreflect.FieldDescriptor) error {
	typ, _ := prop["type"].(string)
	if typ == "" && prop["oneOf"] != nil {
		typ = "object"
	}
	switch f.Kind() {
	case protoreflect.Int32Kind, protoreflect.Int64Kind, protoreflect.Uint32Kind, protoreflect.Uint64Kind:
		if typ != "integer" {
			return fmt.Errorf("an integer in the proto, %q in the JSON Schema", typ)
		}
	case protoreflect.StringKind, protoreflect.EnumKind:
		if typ != "string" {
			return fmt.Errorf("a string in the proto, %q in the JSON Schema", typ)
		}
	case protoreflect.BoolKind:
		if typ != "boolean" {
			return fmt.Errorf("a bool in the proto, %q in the JSON Schema", typ)
		}
	case protoreflect.MessageKind:
		if typ != "object" {
			return fmt.Errorf("a message in the proto, %q in the JSON Schema", typ)
		}
		// The object's properties, over all its alternatives, are the
		// message's fields.
		var names []string
		alts, _ := prop["oneOf"].([]any)
		if len(alts) == 0 {
			alts = []any{prop}
		}
		for _, a := range alts {
			for name := range d.resolve(a)["properties"].(map[string]any) {
				if !slices.Contains(names, name) {
					names = append(names, name)
				}
			}
		}
		sort.Strings(names)
		if fields := fieldNames(f.Message()); !slices.Equal(names, fields) {
			return fmt.Errorf("properties %v in the JSON Schema, fields %v in the proto", names, fields)
		}
	default:
		return fmt.Errorf("proto kind %s has no JSON Schema counterpart here", f.Kind())
	}
	return nil
}

// fieldNames lists a message's fields by JSON name.
func fieldNames(m protoreflect.MessageDescriptor) []string {
	var out []string
	for i := 0; i < m.Fields().Len(); i++ {
		out = append(out, m.Fields().Get(i).JSONName())
	}
	sort.Strings(out)
	return out
}

// compare lists every way the JSON Schema and the proto disagree: event
// types, states, fields (by JSON name) and their kinds, and what Pub/Sub
// requires of a proto schema. Empty when they describe the same message.
func compare(s *eventschema.Schemas) []string {
	var bad []string
	d := newDoc(s.Doc)
	m := s.Message
	branches := d.branches()

	// Pub/Sub takes one top-level type and no imports.
	if s.File.Messages().Len() != 1 || s.File.Enums().Len() != 0 || s.File.Services().Len() != 0 || s.File.Extensions().Len() != 0 {
		bad = append(bad, "the proto must define exactly one top-level type (Pub/Sub), and nothing else at the top level")
	}
	if s.File.Imports().Len() != 0 {
		bad = append(bad, "the proto must not import (Pub/Sub)")
	}
	if s.File.Syntax() != protoreflect.Proto3 {
		bad = append(bad, "the proto must be proto3")
	}

	// Event types: the oneOf's consts, the top-level enum, the proto enum.
	types := slices.Sorted(maps.Keys(branches))
	topTypes := strs(d.resolve(d.root["properties"].(map[string]any)["type"])["enum"])
	if !slices.Equal(types, topTypes) {
		bad = append(bad, fmt.Sprintf("the oneOf has types %v, the top-level type enum %v", types, topTypes))
	}
	typeField := m.Fields().ByJSONName("type")
	if typeField == nil || typeField.Enum() == nil {
		bad = append(bad, "the proto's type is not an enum")
	} else if protoTypes := enumNames(typeField.Enum()); !slices.Equal(types, protoTypes) {
		bad = append(bad, fmt.Sprintf("the JSON Schema has types %v, the proto %v", types, protoTypes))
	}

	// States.
	states := strs(d.resolve(d.defs["state"])["enum"])
	stateField := m.Fields().ByJSONName("state")
	if stateField == nil || stateField.Enum() == nil {
		bad = append(bad, "the proto's state is not an enum")
	} else if protoStates := enumNames(stateField.Enum()); !slices.Equal(states, protoStates) {
		bad = append(bad, fmt.Sprintf("the JSON Schema has states %v, the proto %v", states, protoStates))
	}

	// Fields: the union of every type's properties is the proto's fields,
	// each its JSON name (no alias the parser would also accept), and of
	// the same kind.
	props := map[string]map[string]any{}
	for _, typ := range types {
		br := branches[typ]
		if br["additionalProperties"] != false {
			bad = append(bad, typ+": additionalProperties must be false")
		}
		if desc, _ := br["description"].(string); desc == "" {
			bad = append(bad, typ+": no description")
		}
		for name, p := range br["properties"].(map[string]any) {
			rp := d.resolve(p)
			if desc, _ := rp["description"].(string); desc == "" {
				bad = append(bad, fmt.Sprintf("%s.%s: no description", typ, name))
			}
			if _, ok := props[name]; !ok {
				props[name] = rp
			}
			f := m.Fields().ByJSONName(name)
			if f == nil {
				bad = append(bad, fmt.Sprintf("%s.%s: no such field in the proto", typ, name))
				continue
			}
			if err := kindMatches(d, rp, f); err != nil {
				bad = append(bad, fmt.Sprintf("%s.%s: %v", typ, name, err))
			}
		}
		for _, r := range strs(br["required"]) {
			if _, ok := br["properties"].(map[string]any)[r]; !ok {
				bad = append(bad, fmt.Sprintf("%s: required %s is not a property", typ, r))
			}
		}
	}
	for i := 0; i < m.Fields().Len(); i++ {
		f := m.Fields().Get(i)
		if _, ok := props[f.JSONName()]; !ok {
			bad = append(bad, fmt.Sprintf("proto field %s is in no event type of the JSON Schema", f.JSONName()))
		}
		if string(f.Name()) != f.JSONName() {
			bad = append(bad, fmt.Sprintf("proto field %s: its name must be its JSON name %s (the parser accepts both)", f.Name(), f.JSONName()))
		}
	}
	sort.Strings(bad)
	return bad
}

// valid is a hand-written message of every event type, as the contract
// describes them.
var valid = map[string]string{
	"TxAccepted": `{"type":"TxAccepted","seq":41,"txId":"0b7e1d2c-4a5f-4e6a-9b8c-1d2e3f405162","chainId":1337,
		"signer":"0x1111111111111111111111111111111111111111","state":"ALLOCATED","version":1,"newFork":false,"nonce":7}`,
	"TxPendingApproval": `{"type":"TxPendingApproval","seq":42,"shard":"b","txId":"0b7e1d2c-4a5f-4e6a-9b8c-1d2e3f405163","chainId":1337,
		"signer":"0x1111111111111111111111111111111111111111","state":"PENDING_APPROVAL","version":1,"newFork":false}`,
	"TxBroadcast": `{"type":"TxBroadcast","seq":43,"txId":"0b7e1d2c-4a5f-4e6a-9b8c-1d2e3f405162","chainId":1337,
		"signer":"0x1111111111111111111111111111111111111111","state":"TRACKING","version":2,"newFork":false,"nonce":7,
		"hash":"0xaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","attempt":1,
		"fees":{"maxFeePerGas":"30000000000","maxPriorityFeePerGas":"1500000000"},"endpoint":"primary"}`,
	"TxReplaced": `{"type":"TxReplaced","seq":44,"txId":"0b7e1d2c-4a5f-4e6a-9b8c-1d2e3f405162","chainId":1337,
		"signer":"0x1111111111111111111111111111111111111111","state":"TRACKING","version":3,"newFork":false,"nonce":7,
		"hash":"0xbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","fees":{"gasPrice":"33000000000"},
		"previousHash":"0xaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","previousFees":{"gasPrice":"30000000000"},
		"attempt":2,"reason":"bump"}`,
	"TxMined": `{"type":"TxMined","seq":45,"txId":"0b7e1d2c-4a5f-4e6a-9b8c-1d2e3f405162","chainId":1337,
		"signer":"0x1111111111111111111111111111111111111111","state":"MINED","version":4,"newFork":false,"nonce":7,
		"hash":"0xbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","block":120,
		"blockHash":"0xcccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"}`,
	"TxReorged": `{"type":"TxReorged","seq":46,"txId":"0b7e1d2c-4a5f-4e6a-9b8c-1d2e3f405162","chainId":1337,
		"signer":"0x1111111111111111111111111111111111111111","state":"TRACKING","version":5,"newFork":false,"nonce":7,
		"hash":"0xbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","block":120,
		"blockHash":"0xcccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"}`,
	"TxStuck": `{"type":"TxStuck","seq":47,"txId":"0b7e1d2c-4a5f-4e6a-9b8c-1d2e3f405164","chainId":1337,
		"signer":"0x1111111111111111111111111111111111111111","state":"STUCK","version":3,"newFork":false,"nonce":8,
		"subState":"insufficient_funds"}`,
	"TxConfirmed": `{"type":"TxConfirmed","seq":48,"txId":"0b7e1d2c-4a5f-4e6a-9b8c-1d2e3f405162","chainId":1337,
		"signer":"0x1111111111111111111111111111111111111111","state":"CONFIRMED","version":7,"newFork":true,"nonce":7,
		"hash":"0xbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","block":121,
		"blockHash":"0xdddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd"}`,
	"TxFailed": `{"type":"TxFailed","seq":49,"txId":"0b7e1d2c-4a5f-4e6a-9b8c-1d2e3f405163","chainId":1337,
		"signer":"0x1111111111111111111111111111111111111111","state":"FAILED_FINAL","version":2,"newFork":false,
		"subState":"rejected"}`,
}

// edit returns the message of type typ with its top-level fields changed:
// a nil value removes the field (null is json.RawMessage("null")).
func edit(t *testing.T, typ string, set map[string]any) []byte {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(valid[typ]))
	dec.UseNumber()
	var m map[string]any
	require.NoError(t, dec.Decode(&m))
	for k, v := range set {
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return b
}

// TestIssue49_EventSchemas: the JSON Schema and the proto describe the same
// event types, states and fields (and the proto is one Pub/Sub accepts); a
// message of every type passes both; messages that break the contract fail
// the JSON Schema, and those Pub/Sub can tell from the proto fail it too.
func TestIssue49_EventSchemas(t *testing.T) {
	s, err := eventschema.Load()
	require.NoError(t, err)

	t.Run("same types and fields", func(t *testing.T) {
		assert.Empty(t, compare(s), "the JSON Schema and the proto disagree")
		assert.Len(t, newDoc(s.Doc).branches(), 9, "nine event types")
	})

	// The comparison catches drift: each altered copy of one file makes it
	// report the difference.
	t.Run("drift is caught", func(t *testing.T) {
		for _, c := range []struct {
			name        string
			json, proto func(string) string
			want        string
		}{
			{name: "a proto field missing", proto: func(p string) string {
				return strings.Replace(p, "  string endpoint = 15; // TxBroadcast\n", "", 1)
			}, want: "TxBroadcast.endpoint: no such field in the proto"},
			{name: "a proto field not in the JSON Schema", proto: func(p string) string {
				return strings.Replace(p, "  string revertReason = 21; // TxFailed\n", "  string revertReason = 21;\n  string gasUsed = 22;\n", 1)
			}, want: "proto field gasUsed is in no event type"},
			{name: "a snake_case proto field", proto: func(p string) string {
				return strings.Replace(p, "string blockHash = 20;", "string block_hash = 20;", 1)
			}, want: "its name must be its JSON name"},
			{name: "an event type only in the JSON Schema", proto: func(p string) string {
				return strings.Replace(p, "    TxFailed = 9;\n", "", 1)
			}, want: "the JSON Schema has types"},
			{name: "a state only in the proto", proto: func(p string) string {
				return strings.Replace(p, "    STUCK = 7;\n", "    STUCK = 7;\n    DROPPED = 8;\n", 1)
			}, want: "the JSON Schema has states"},
			{name: "a second top-level type", proto: func(p string) string {
				return p + "\nmessage Extra {}\n"
			}, want: "exactly one top-level type"},
			{name: "a kind that differs", proto: func(p string) string {
				return strings.Replace(p, "uint32 attempt = 13;", "string attempt = 13;", 1)
			}, want: "TxBroadcast.attempt: a string in the proto"},
			{name: "a fees field missing", proto: func(p string) string {
				return strings.Replace(p, "    string gasPrice = 3;\n", "", 1)
			}, want: "TxBroadcast.fees: properties"},
			{name: "a field without a description", json: func(j string) string {
				return strings.Replace(j, `"description": "The name of the RPC endpoint or private route that accepted the attempt, when known (a configured name, never a URL)."`, `"description": ""`, 1)
			}, want: "TxBroadcast.endpoint: no description"},
		} {
			t.Run(c.name, func(t *testing.T) {
				js, proto := string(schemas.CompletionEventJSONSchema), string(schemas.CompletionEventProto)
				if c.json != nil {
					altered := c.json(js)
					require.NotEqual(t, js, altered, "the edit applies to the JSON Schema")
					js = altered
				}
				if c.proto != nil {
					altered := c.proto(proto)
					require.NotEqual(t, proto, altered, "the edit applies to the proto")
					proto = altered
				}
				alt, err := eventschema.Compile([]byte(js), []byte(proto))
				require.NoError(t, err)
				assert.Contains(t, strings.Join(compare(alt), "\n"), c.want)
			})
		}
	})

	t.Run("a valid message of every type", func(t *testing.T) {
		require.ElementsMatch(t, slices.Collect(maps.Keys(newDoc(s.Doc).branches())), slices.Collect(maps.Keys(valid)), "one message per type")
		for typ, msg := range valid {
			assert.NoError(t, s.ValidateJSON([]byte(msg)), "%s against the JSON Schema", typ)
			assert.NoError(t, s.ValidateProto([]byte(msg)), "%s against the proto", typ)
		}
		// Today's outcome messages (no version, no block) stay valid.
		assert.NoError(t, s.Validate(edit(t, "TxConfirmed", map[string]any{"version": nil, "block": nil, "blockHash": nil})))
		assert.NoError(t, s.Validate(edit(t, "TxStuck", map[string]any{"version": nil})))
	})

	t.Run("invalid messages", func(t *testing.T) {
		for _, c := range []struct {
			name  string
			msg   []byte
			proto bool // the proto refuses it too (Pub/Sub would)
		}{
			{"an unknown type", edit(t, "TxMined", map[string]any{"type": "TxExploded"}), true},
			{"the type of another event", edit(t, "TxMined", map[string]any{"type": "TxBroadcast"}), false},
			{"no type", edit(t, "TxMined", map[string]any{"type": nil}), false},
			{"a required field missing", edit(t, "TxMined", map[string]any{"blockHash": nil}), false},
			{"no seq", edit(t, "TxConfirmed", map[string]any{"seq": nil}), false},
			{"no version on a lifecycle event", edit(t, "TxBroadcast", map[string]any{"version": nil}), false},
			{"an unknown field", edit(t, "TxConfirmed", map[string]any{"gasUsed": 21000}), true},
			{"a snake_case field", edit(t, "TxConfirmed", map[string]any{"tx_id": "x"}), true},
			{"a field of another type", edit(t, "TxAccepted", map[string]any{"blockHash": "0xcccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"}), false},
			{"a malformed hash", edit(t, "TxConfirmed", map[string]any{"hash": "0xbbbb"}), false},
			{"an uppercase hash", edit(t, "TxConfirmed", map[string]any{"hash": "0xBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB"}), false},
			{"a malformed signer", edit(t, "TxConfirmed", map[string]any{"signer": "0x11"}), false},
			{"a malformed tx id", edit(t, "TxConfirmed", map[string]any{"txId": "42"}), false},
			{"an unknown state", edit(t, "TxConfirmed", map[string]any{"state": "DROPPED"}), true},
			{"the wrong state for the type", edit(t, "TxConfirmed", map[string]any{"state": "TRACKING"}), false},
			{"newFork on a lifecycle event", edit(t, "TxMined", map[string]any{"newFork": true}), false},
			{"a wei amount as a number", edit(t, "TxBroadcast", map[string]any{"fees": map[string]any{"maxFeePerGas": 3e10, "maxPriorityFeePerGas": "1"}}), true},
			{"a wei amount in hex", edit(t, "TxBroadcast", map[string]any{"fees": map[string]any{"maxFeePerGas": "0x6fc23ac00", "maxPriorityFeePerGas": "1"}}), false},
			{"both kinds of fees", edit(t, "TxBroadcast", map[string]any{"fees": map[string]any{"maxFeePerGas": "1", "maxPriorityFeePerGas": "1", "gasPrice": "1"}}), false},
			{"an unknown fees field", edit(t, "TxBroadcast", map[string]any{"fees": map[string]any{"gasPrice": "1", "blobFee": "1"}}), true},
			{"an unknown replacement reason", edit(t, "TxReplaced", map[string]any{"reason": "whim"}), false},
			{"a null", edit(t, "TxConfirmed", map[string]any{"shard": json.RawMessage("null")}), false},
			{"a negative nonce", edit(t, "TxConfirmed", map[string]any{"nonce": -1}), true},
			{"a string seq", edit(t, "TxConfirmed", map[string]any{"seq": "48"}), false},
		} {
			t.Run(c.name, func(t *testing.T) {
				msg := c.msg
				assert.Error(t, s.ValidateJSON(msg), "the JSON Schema refuses %s", msg)
				if c.proto {
					assert.Error(t, s.ValidateProto(msg), "the proto refuses %s", msg)
				}
			})
		}
	})
}
