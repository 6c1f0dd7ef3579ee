package api

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/txfence/txfence/shared/config"
)

// BenchmarkDecodeCreate decodes the body the load generator sends (a
// checksummed signer, a mixed-case recipient, a value and a gas limit),
// with a request id.
func BenchmarkDecodeCreate(b *testing.B) {
	cfg := config.Defaults()
	cfg.Chains = []config.Chain{{ID: 1337}}
	body := []byte(`{"chainId":1337,"from":"0x0000000000000000000000010000000000000000","gasLimit":21000,"requestId":"order-1234567","to":"0x000000000000000000000000000000000000dEaD","value":"1"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, p := decodeCreate(body, "", cfg); p != nil {
			b.Fatal(p.Detail)
		}
	}
}

// TestJSONString_AsEncodingJSON: the fast path reads what encoding/json
// reads, and refuses what it refuses.
func TestJSONString_AsEncodingJSON(t *testing.T) {
	for _, v := range []string{`""`, `"0xdEaD"`, `"order 1"`, `"a\"b"`, `"a\\b"`, `"\u00e9t\u00e9"`, `"été"`, "\"tab\there\"",
		`"\ud800"`, "\"\xff\"", `"unterminated`, `'x'`, `12`, `null`, `{"a":1}`, `"a"x`, `"`} {
		got, err := jsonString(json.RawMessage(v))
		var want string
		wantErr := json.Unmarshal([]byte(v), &want)
		if (err == nil) != (wantErr == nil) || got != want {
			t.Errorf("jsonString(%s) = %q, %v; encoding/json: %q, %v", v, got, err, want, wantErr)
		}
	}
}

// TestDecodeAction_OneObject: an action body is one JSON object, or
// nothing; anything after the object is refused, a stray closing brace
// too.
func TestDecodeAction_OneObject(t *testing.T) {
	for body, ok := range map[string]bool{
		``:                                  true,
		`{"actionId":"a1","reason":"r"}`:    true,
		` {"actionId":"a1","reason":"r"} `:  true,
		`{"actionId":"a1","reason":"r"}}`:   false,
		`{"actionId":"a1","reason":"r"} {}`: false,
		`{"actionId":"a1","reason":"r"} x`:  false,
		`[{"actionId":"a1","reason":"r"}]`:  false,
		`{"actionId":"a1","reason":"r"`:     false,
	} {
		_, p := decodeAction([]byte(body), "")
		if ok {
			assert.Nil(t, p, "%q", body)
		} else if assert.NotNil(t, p, "%q", body) {
			assert.Equal(t, 400, p.Status, "%q", body)
		}
	}
}
