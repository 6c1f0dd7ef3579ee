package auth_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/auth"
	"github.com/txfence/txfence/shared/auth/authtest"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/txm"
)

const (
	audience = "https://txfence.example/api"
	caller   = "caller@project.iam.gserviceaccount.com"
)

func newOIDC(t *testing.T) (txm.Authenticator, *authtest.Issuer) {
	t.Helper()
	iss := authtest.NewIssuer(t)
	a, err := auth.New(config.Auth{Methods: []string{"oidc"}, Audience: audience}, nil, auth.WithHTTPClient(iss.Client()))
	require.NoError(t, err)
	return a, iss
}

func TestIssue11_AuthOIDCValidTokenIsItsEmail(t *testing.T) {
	t.Parallel()
	a, iss := newOIDC(t)
	for _, h := range []string{"Bearer ", "bearer  "} {
		c, err := auth.ParseAuthorization(h + iss.Token(audience, caller))
		require.NoError(t, err)
		p, err := a.Authenticate(context.Background(), c)
		require.NoError(t, err)
		assert.Equal(t, txm.Principal{ID: caller, Via: "oidc"}, p)
	}
	// Google's other spelling of its issuer, and email_verified as a string.
	claims := iss.Claims(audience, caller)
	claims.Issuer, claims.EmailVerified = "accounts.google.com", "true"
	p, err := a.Authenticate(context.Background(), txm.Credential{Bearer: iss.Mint(claims)})
	require.NoError(t, err)
	assert.Equal(t, caller, p.ID)
}

func TestIssue11_AuthOIDCRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, iss := newOIDC(t)
	forger := authtest.NewIssuer(t) // same key id, another key
	stranger := authtest.NewIssuer(t)
	stranger.KeyID = "not-published"

	with := func(change func(*authtest.Claims)) string {
		c := iss.Claims(audience, caller)
		change(&c)
		return iss.Mint(c)
	}
	valid := iss.Token(audience, caller)
	parts := strings.Split(valid, ".")
	var payload map[string]any
	raw, _ := base64.RawURLEncoding.DecodeString(parts[1])
	require.NoError(t, json.Unmarshal(raw, &payload))
	payload["email"] = "admin@project.iam.gserviceaccount.com"
	forged, _ := json.Marshal(payload)
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString(forged) + "." + parts[2]

	for _, tc := range []struct {
		name, token, reason string
	}{
		{"no token", "", "no credential"},
		{"not a JWT", "abc", "not a JWT"},
		{"garbage parts", "a.b.c", "malformed"},
		{"bad signature", forger.Token(audience, caller), "bad signature"},
		{"tampered payload", tampered, "bad signature"},
		{"unpublished key", stranger.Token(audience, caller), "does not publish"},
		{"expired", with(func(c *authtest.Claims) { c.Expires = time.Now().Add(-time.Minute) }), "expired"},
		{"no expiry", with(func(c *authtest.Claims) { c.Expires = time.Time{} }), "expired"},
		{"another audience", iss.Token("https://other.example", caller), "another audience"},
		{"no audience", with(func(c *authtest.Claims) { c.Audience = "" }), "another audience"},
		{"audience list", with(func(c *authtest.Claims) { c.Audience, c.Extra = "", map[string]any{"aud": []string{audience}} }), "malformed"},
		{"unverified email", with(func(c *authtest.Claims) { c.EmailVerified = false }), "not verified"},
		{"email_verified absent", with(func(c *authtest.Claims) { c.EmailVerified = nil }), "not verified"},
		{"email_verified odd", with(func(c *authtest.Claims) { c.EmailVerified = "yes" }), "not verified"},
		{"no email", with(func(c *authtest.Claims) { c.Email = "" }), "no email"},
		{"wrong issuer", with(func(c *authtest.Claims) { c.Issuer = "https://evil.example" }), "not Google"},
		{"no issuer", with(func(c *authtest.Claims) { c.Issuer = "" }), "not Google"},
		{"HS256", iss.Sign(map[string]any{"alg": "HS256", "kid": iss.KeyID}, map[string]any{"aud": audience}), "not RS256"},
		{"none", iss.Sign(map[string]any{"alg": "none"}, map[string]any{"aud": audience}), "not RS256"},
		// idtoken's ES256 path (for IAP) slices the signature unchecked; it
		// is never reached.
		{"ES256 short signature", "eyJhbGciOiJFUzI1NiIsImtpZCI6IngifQ." + parts[1] + ".AAAA", "not RS256"},
		{"no key id", iss.Sign(map[string]any{"alg": "RS256"}, payload), "no signing key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := a.Authenticate(ctx, txm.Credential{Bearer: tc.token})
			require.ErrorIs(t, err, txm.ErrUnauthenticated)
			assert.Contains(t, err.Error(), tc.reason)
			noSecretIn(t, err, tc.token)
		})
	}
}

// noSecretIn checks that err quotes no part of token long enough to matter.
func noSecretIn(t *testing.T, err error, token string) {
	t.Helper()
	if token == "" {
		return
	}
	assert.NotContains(t, err.Error(), token)
	for _, part := range strings.Split(token, ".") {
		if len(part) >= 8 {
			assert.NotContains(t, err.Error(), part, "a token's part is in the error")
		}
	}
}

func TestIssue11_AuthOIDCKeysAreCachedButEveryTokenIsChecked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, iss := newOIDC(t)
	for range 5 {
		_, err := a.Authenticate(ctx, txm.Credential{Bearer: iss.Token(audience, caller)})
		require.NoError(t, err)
	}
	assert.Equal(t, 1, iss.Fetches(), "Google's keys are fetched once while Cache-Control allows")

	// With the keys cached, a refused token is still refused: idtoken caches
	// keys, never verdicts. A token accepted once is refused once it expires.
	_, err := a.Authenticate(ctx, txm.Credential{Bearer: iss.Token("https://other.example", caller)})
	require.ErrorIs(t, err, txm.ErrUnauthenticated)
	c := iss.Claims(audience, caller)
	c.Expires = time.Now().Add(time.Second)
	short := iss.Mint(c)
	_, err = a.Authenticate(ctx, txm.Credential{Bearer: short})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := a.Authenticate(ctx, txm.Credential{Bearer: short})
		return err != nil
	}, 5*time.Second, 100*time.Millisecond)
	_, err = a.Authenticate(ctx, txm.Credential{Bearer: short})
	require.ErrorIs(t, err, txm.ErrUnauthenticated)
	assert.Contains(t, err.Error(), "expired")
	assert.Equal(t, 1, iss.Fetches())
}

func TestIssue11_AuthOIDCGoogleUnreachableIsUnavailableNot401(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, iss := newOIDC(t)
	iss.SetDown(true)
	token := iss.Token(audience, caller)
	_, err := a.Authenticate(ctx, txm.Credential{Bearer: token})
	require.ErrorIs(t, err, txm.ErrUnavailable, "the token may be good: 503, retry")
	assert.NotErrorIs(t, err, txm.ErrUnauthenticated)
	noSecretIn(t, err, token)
	// A token refused on its own claims is refused without asking Google.
	_, err = a.Authenticate(ctx, txm.Credential{Bearer: iss.Token("https://other.example", caller)})
	require.ErrorIs(t, err, txm.ErrUnauthenticated)

	iss.SetDown(false)
	p, err := a.Authenticate(ctx, txm.Credential{Bearer: token})
	require.NoError(t, err)
	assert.Equal(t, caller, p.ID)
}

func FuzzOIDCAuthenticate(f *testing.F) {
	iss := authtest.NewIssuer(f)
	a, err := auth.NewOIDC(audience, auth.WithHTTPClient(iss.Client()))
	require.NoError(f, err)
	valid := iss.Token(audience, caller)
	f.Add(valid)
	parts := strings.Split(valid, ".")
	f.Add("eyJhbGciOiJFUzI1NiIsImtpZCI6IngifQ." + parts[1] + ".AAAA")
	f.Add(parts[0] + "." + parts[1] + ".")
	f.Fuzz(func(t *testing.T, token string) {
		p, err := a.Authenticate(context.Background(), txm.Credential{Bearer: token})
		if err == nil {
			if token != valid || p.ID != caller {
				t.Fatalf("accepted %q as %v", token, p)
			}
			return
		}
		if !strings.HasPrefix(err.Error(), "unauthenticated: oidc: ") {
			t.Fatalf("not a refusal: %v", err)
		}
		if len(token) >= 8 && strings.Contains(err.Error(), token) {
			t.Fatalf("error quotes the token: %v", err)
		}
	})
}
