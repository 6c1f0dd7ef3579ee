package api

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/txfence/txfence/shared/app"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/txm"
)

// fuzzConfig is the configuration the create fuzzer decodes against: the
// test chain (and a second one when twoChains, so that chainId is required),
// the first test signers, a small data limit so that the limit is reachable.
func fuzzConfig(twoChains bool) config.Config {
	cfg := config.Defaults()
	cfg.Chains = []config.Chain{{ID: testChain, RPCURLs: []string{"http://127.0.0.1:1"}}}
	if twoChains {
		cfg.Chains = append(cfg.Chains, config.Chain{ID: 1, RPCURLs: []string{"http://127.0.0.1:1"}})
	}
	for _, a := range signers(3) {
		cfg.Signers = append(cfg.Signers, config.Signer{Address: a})
	}
	cfg.MaxDataBytes = 256
	return cfg
}

// validHeaderValue reports whether net/http lets v through as a header value
// (no control characters but tab); the fuzzer only sends Idempotency-Key
// values a real request can carry.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// FuzzDecodeCreate: decoding and validating any create body never panics;
// a refusal is a 400 or a 422 problem; an accepted request is one PostgreSQL
// can store, and it encodes back to a body that decodes to the same
// fingerprint and request id.
func FuzzDecodeCreate(f *testing.F) {
	f.Fuzz(func(t *testing.T, body []byte, idemKey string, twoChains bool) {
		if !validHeaderValue(idemKey) {
			return
		}
		idemKey = strings.TrimSpace(idemKey) // as the handler reads the header
		cfg := fuzzConfig(twoChains)
		r, p := decodeCreate(body, idemKey, cfg)
		if p != nil {
			if p.Status != http.StatusBadRequest && p.Status != http.StatusUnprocessableEntity {
				t.Fatalf("a refused body answers %d, want 400 or 422: %+v", p.Status, p)
			}
			return
		}
		if err := app.ValidateRequest(r, cfg.Create()); err != nil {
			var v *txm.ValidationError
			if !errors.As(err, &v) {
				t.Fatalf("validation failed with %T, want a *txm.ValidationError: %v", err, err)
			}
			return
		}
		if why := unstorable(r); why != "" {
			t.Fatalf("an accepted request cannot be stored: %s", why)
		}
		again, p := decodeCreate(encodeCreate(t, r), "", cfg)
		if p != nil {
			t.Fatalf("the re-encoded request is refused: %+v", p)
		}
		if err := app.ValidateRequest(again, cfg.Create()); err != nil {
			t.Fatalf("the re-encoded request is invalid: %v", err)
		}
		if again.Fingerprint() != r.Fingerprint() {
			t.Fatalf("the re-encoded request has another fingerprint:\n%+v\n%+v", r, again)
		}
		if again.RequestID != r.RequestID {
			t.Fatalf("the re-encoded request id is %q, want %q", again.RequestID, r.RequestID)
		}
	})
}

// unstorable says why PostgreSQL would refuse r (a text column holds valid
// UTF-8 without NUL; jsonb refuses the \u0000 escape), "" when it would not.
func unstorable(r *txm.Request) string {
	if strings.ContainsRune(r.RequestID, 0) || !utf8.ValidString(r.RequestID) {
		return "the request id " + strconv.Quote(r.RequestID) + " is not valid UTF-8 text"
	}
	if len(r.Metadata) > 0 {
		var v any
		if err := json.Unmarshal(r.Metadata, &v); err != nil {
			return "the metadata does not decode: " + err.Error()
		}
		if holdsNUL(v) {
			return "the metadata holds a NUL character"
		}
	}
	return ""
}

func holdsNUL(v any) bool {
	switch v := v.(type) {
	case string:
		return strings.ContainsRune(v, 0)
	case []any:
		for _, e := range v {
			if holdsNUL(e) {
				return true
			}
		}
	case map[string]any:
		for k, e := range v {
			if strings.ContainsRune(k, 0) || holdsNUL(e) {
				return true
			}
		}
	}
	return false
}

// encodeCreate writes r as a create body, every member explicit.
func encodeCreate(t *testing.T, r *txm.Request) []byte {
	t.Helper()
	m := map[string]any{
		"chainId": r.ChainID,
		"from":    r.From.Hex(),
		"value":   r.Value.String(),
		"data":    "0x" + hex.EncodeToString(r.Data),
	}
	if r.To != nil {
		m["to"] = r.To.Hex()
	}
	if r.GasLimit != 0 {
		m["gasLimit"] = r.GasLimit
	}
	if r.MaxFeePerGas != nil {
		m["maxFeePerGas"] = r.MaxFeePerGas.String()
	}
	if r.MaxPriorityFeePerGas != nil {
		m["maxPriorityFeePerGas"] = "0x" + r.MaxPriorityFeePerGas.Text(16)
	}
	if r.GasPrice != nil {
		m["gasPrice"] = r.GasPrice.String()
	}
	if r.RequestID != "" {
		m["requestId"] = r.RequestID
	}
	if r.Metadata != nil {
		m["metadata"] = r.Metadata
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatalf("encode an accepted request: %v", err)
	}
	return b
}
