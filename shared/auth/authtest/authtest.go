// Package authtest stands in for Google in tests: an Issuer holds an RSA
// key, mints RS256 ID tokens with it the way Google does for service
// accounts, and serves its public key as the JWKS that
// google.golang.org/api/idtoken fetches, through an *http.Client whose
// transport answers Google's certificate URL (nothing leaves the process).
//
//	iss := authtest.NewIssuer(t)
//	a, _ := auth.New(cfg, keys, auth.WithHTTPClient(iss.Client()))
//	token := iss.Token("https://api.example", "caller@project.iam.gserviceaccount.com")
package authtest

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// CertsURL is where idtoken fetches the keys of Google-signed (RS256) ID
// tokens (google.golang.org/api/idtoken, validate.go: googleSACertsURL).
const CertsURL = "https://www.googleapis.com/oauth2/v3/certs"

// GoogleIssuer is the iss claim of Google's ID tokens.
const GoogleIssuer = "https://accounts.google.com"

// Issuer is a fake Google: one signing key, its JWKS, and the tokens it
// mints.
type Issuer struct {
	// KeyID is the kid of minted tokens and of the published key.
	KeyID string
	// MaxAge is the Cache-Control max-age, in seconds, of the JWKS answer
	// (idtoken caches the keys that long).
	MaxAge int

	key     *rsa.PrivateKey
	fetches atomic.Int64
	mu      sync.Mutex
	down    bool
}

// NewIssuer makes an issuer with a fresh 2048-bit RSA key and key id
// "authtest-1". Two issuers share the key id but not the key: a token from
// one fails the other's signature check.
func NewIssuer(t testing.TB) *Issuer {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatalf("authtest: generate key: %v", err)
	}
	return &Issuer{KeyID: "authtest-1", MaxAge: 3600, key: k}
}

// Claims are the claims of a minted token. Zero fields are left out, except
// as Token fills them.
type Claims struct {
	Issuer        string
	Audience      string
	Subject       string
	Email         string
	EmailVerified any // true, false, "true"; nil leaves the claim out
	IssuedAt      time.Time
	Expires       time.Time
	// Extra claims, written over the ones above.
	Extra map[string]any
}

// Token mints a valid token: Google's issuer, audience, email verified,
// issued now and expiring in an hour.
func (i *Issuer) Token(audience, email string) string {
	return i.Mint(i.Claims(audience, email))
}

// Claims are the claims Token mints, to change before Mint.
func (i *Issuer) Claims(audience, email string) Claims {
	now := time.Now()
	return Claims{Issuer: GoogleIssuer, Audience: audience, Subject: "1000000000000000000001", Email: email,
		EmailVerified: true, IssuedAt: now, Expires: now.Add(time.Hour)}
}

// Mint signs c with RS256 under the issuer's key and key id.
func (i *Issuer) Mint(c Claims) string {
	header := map[string]any{"alg": "RS256", "kid": i.KeyID, "typ": "JWT"}
	payload := map[string]any{}
	set := func(k string, v any, ok bool) {
		if ok {
			payload[k] = v
		}
	}
	set("iss", c.Issuer, c.Issuer != "")
	set("aud", c.Audience, c.Audience != "")
	set("sub", c.Subject, c.Subject != "")
	set("email", c.Email, c.Email != "")
	set("email_verified", c.EmailVerified, c.EmailVerified != nil)
	set("iat", c.IssuedAt.Unix(), !c.IssuedAt.IsZero())
	set("exp", c.Expires.Unix(), !c.Expires.IsZero())
	for k, v := range c.Extra {
		payload[k] = v
	}
	return i.Sign(header, payload)
}

// Sign signs any header and payload with RS256 under the issuer's key,
// whatever alg the header names.
func (i *Issuer) Sign(header, payload map[string]any) string {
	signed := segment(header) + "." + segment(payload)
	sum := sha256.Sum256([]byte(signed))
	sig, err := rsa.SignPKCS1v15(rand.Reader, i.key, crypto.SHA256, sum[:])
	if err != nil {
		panic(fmt.Sprintf("authtest: sign: %v", err))
	}
	return signed + "." + base64.RawURLEncoding.EncodeToString(sig)
}

func segment(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("authtest: marshal: %v", err))
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// JWKS is the issuer's public key as Google publishes its keys.
func (i *Issuer) JWKS() []byte {
	pub := i.key.PublicKey
	b, _ := json.Marshal(map[string]any{"keys": []map[string]string{{
		"kty": "RSA", "alg": "RS256", "use": "sig", "kid": i.KeyID,
		"n": base64.RawURLEncoding.EncodeToString(pub.N.Bytes()),
		"e": base64.RawURLEncoding.EncodeToString(big.NewInt(int64(pub.E)).Bytes()),
	}}})
	return b
}

// Client is an HTTP client that answers CertsURL with JWKS and refuses
// every other URL.
func (i *Issuer) Client() *http.Client { return &http.Client{Transport: transport{i}} }

// Fetches counts the JWKS answers served.
func (i *Issuer) Fetches() int { return int(i.fetches.Load()) }

// SetDown makes the certificate URL answer 503 (down) or the keys again.
func (i *Issuer) SetDown(down bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.down = down
}

type transport struct{ i *Issuer }

func (t transport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_ = r.Body.Close()
	}
	if r.Method != http.MethodGet || r.URL.String() != CertsURL {
		return nil, fmt.Errorf("authtest: no route to %s %s", r.Method, r.URL)
	}
	t.i.mu.Lock()
	down := t.i.down
	t.i.mu.Unlock()
	resp := &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{}, Request: r}
	if down {
		resp.StatusCode, resp.Status = http.StatusServiceUnavailable, "503 Service Unavailable"
		resp.Body = io.NopCloser(bytes.NewReader(nil))
		return resp, nil
	}
	t.i.fetches.Add(1)
	body := t.i.JWKS()
	resp.Header.Set("Content-Type", "application/json; charset=UTF-8")
	resp.Header.Set("Cache-Control", "public, max-age="+strconv.Itoa(t.i.MaxAge)+", must-revalidate, no-transform")
	resp.ContentLength = int64(len(body))
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}
