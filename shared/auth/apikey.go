package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/txfence/txfence/shared/txm"
)

// An API key is "txfk_" + id + "_" + secret: the id ("k_" and 16 lowercase
// hex digits) names the stored row, the secret is 32 random bytes in
// unpadded base64url. Only sha256 of the whole key is stored, so the key is
// shown once, when it is created, and never again.
const (
	// APIKeyPrefix starts every API key; it is how a bearer token is told
	// to be an API key rather than an ID token.
	APIKeyPrefix = "txfk_"
	apiKeyIDLen  = len("k_") + 16
	secretBytes  = 32
)

var (
	secretTextLen = base64.RawURLEncoding.EncodedLen(secretBytes)
	apiKeyLen     = len(APIKeyPrefix) + apiKeyIDLen + 1 + secretTextLen
	secretCodec   = base64.RawURLEncoding.Strict()
)

// NewAPIKey makes a new API key from the system's random source. It returns
// the key (to show once), its id (public, stored) and its hash (stored).
func NewAPIKey() (key, id string, hash []byte) {
	var idBytes [8]byte
	var secret [secretBytes]byte
	// crypto/rand.Read never fails (it crashes the program rather than
	// return predictable bytes).
	_, _ = rand.Read(idBytes[:])
	_, _ = rand.Read(secret[:])
	id = "k_" + hex.EncodeToString(idBytes[:])
	key = APIKeyPrefix + id + "_" + base64.RawURLEncoding.EncodeToString(secret[:])
	return key, id, HashAPIKey(key)
}

// HashAPIKey is what is stored of key: sha256 of the whole key.
func HashAPIKey(key string) []byte {
	h := sha256.Sum256([]byte(key))
	return h[:]
}

// ParseAPIKey returns the id of a well-formed API key. It checks the form
// only: whether the key is known is the store's to say.
func ParseAPIKey(key string) (id string, ok bool) {
	if len(key) != apiKeyLen || !strings.HasPrefix(key, APIKeyPrefix) {
		return "", false
	}
	id = key[len(APIKeyPrefix) : len(APIKeyPrefix)+apiKeyIDLen]
	if !ValidAPIKeyID(id) || key[len(APIKeyPrefix)+apiKeyIDLen] != '_' {
		return "", false
	}
	secret := key[len(APIKeyPrefix)+apiKeyIDLen+1:]
	if b, err := secretCodec.DecodeString(secret); err != nil || len(b) != secretBytes {
		return "", false
	}
	return id, true
}

// ValidAPIKeyID reports whether id has the form of an API key id:
// "k_" and 16 lowercase hex digits (what the api_key table accepts).
func ValidAPIKeyID(id string) bool {
	if len(id) != apiKeyIDLen || !strings.HasPrefix(id, "k_") {
		return false
	}
	for _, c := range id[2:] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// APIKeys authenticates API keys against their stored hashes.
type APIKeys struct {
	store txm.APIKeyStore
}

var _ txm.Authenticator = (*APIKeys)(nil)

// NewAPIKeys returns an authenticator over store.
func NewAPIKeys(store txm.APIKeyStore) (*APIKeys, error) {
	if store == nil {
		return nil, errors.New("new api keys: a key store is required")
	}
	return &APIKeys{store: store}, nil
}

// Authenticate accepts a well-formed, known, unrevoked key whose hash
// matches, as the principal it was created for (Via "apikey"). A refusal
// wraps txm.ErrUnauthenticated and names at most the key's id, never the
// key; a store that cannot answer is an error of its own (txm.ErrUnavailable
// from PostgreSQL), not a refusal.
func (a *APIKeys) Authenticate(ctx context.Context, c txm.Credential) (txm.Principal, error) {
	id, ok := ParseAPIKey(c.Bearer)
	if !ok {
		return txm.Principal{}, refuse("apikey: malformed key")
	}
	hash := HashAPIKey(c.Bearer)
	k, err := a.store.APIKey(ctx, id)
	switch {
	case errors.Is(err, txm.ErrNotFound):
		return txm.Principal{}, refuse("apikey: unknown key id %s", id)
	case err != nil:
		return txm.Principal{}, fmt.Errorf("apikey: look up key id %s: %w", id, err)
	}
	if subtle.ConstantTimeCompare(hash, k.Hash) != 1 {
		return txm.Principal{}, refuse("apikey: wrong secret for key id %s", id)
	}
	if k.RevokedAt != nil {
		return txm.Principal{}, refuse("apikey: key id %s was revoked", id)
	}
	if k.Principal == "" {
		return txm.Principal{}, refuse("apikey: key id %s names no principal", id)
	}
	return txm.Principal{ID: k.Principal, Via: ViaAPIKey}, nil
}
