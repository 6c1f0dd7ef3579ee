package auth

import (
	"context"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"google.golang.org/api/idtoken"
	"google.golang.org/api/option"

	"github.com/txfence/txfence/shared/txm"
)

// GoogleIssuers are the issuers of Google-signed ID tokens.
var GoogleIssuers = []string{"accounts.google.com", "https://accounts.google.com"}

// certFetchTimeout bounds one fetch of Google's signing keys when no HTTP
// client is given.
const certFetchTimeout = 10 * time.Second

// OIDC authenticates Google-signed ID tokens: RS256 signed by one of
// Google's published keys, not expired, issued by Google, minted for the
// configured audience and carrying a verified email, which names the
// principal. Callers mint them with the idtoken package (format=full on
// Cloud Run and GCE, which includes the email) or, for a person, by
// impersonating a service account (a user's own ID token cannot carry a
// custom audience): `gcloud auth print-identity-token
// --impersonate-service-account=SA --audiences=AUD --include-email`.
type OIDC struct {
	audience string
	client   *http.Client

	mu        sync.Mutex
	validator *idtoken.Validator
}

var _ txm.Authenticator = (*OIDC)(nil)

// NewOIDC returns an authenticator for ID tokens minted for audience. The
// validator, and with it the cache of Google's keys (kept as long as
// Google's Cache-Control allows), is built on first use.
func NewOIDC(audience string, opts ...Option) (*OIDC, error) {
	if audience == "" {
		return nil, errors.New("new oidc: an audience is required")
	}
	o := collect(opts)
	client := o.httpClient
	if client == nil {
		client = &http.Client{Timeout: certFetchTimeout}
	}
	return &OIDC{audience: audience, client: client}, nil
}

func (a *OIDC) getValidator(ctx context.Context) (*idtoken.Validator, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.validator == nil {
		v, err := idtoken.NewValidator(ctx, option.WithHTTPClient(a.client))
		if err != nil {
			return nil, fmt.Errorf("oidc: new validator: %w", err)
		}
		a.validator = v
	}
	return a.validator, nil
}

// Authenticate accepts a valid ID token as the principal named by its
// verified email (Via "oidc"). A refusal wraps txm.ErrUnauthenticated with
// why, never with the token; Google's keys that cannot be fetched are
// txm.ErrUnavailable (the token may be good: retry), not a refusal.
func (a *OIDC) Authenticate(ctx context.Context, c txm.Credential) (txm.Principal, error) {
	token := c.Bearer
	// Only RS256 is Google's service-account signature. Checking it first
	// also keeps tokens away from idtoken's ES256 path, which is for IAP
	// and slices the signature without checking its length.
	if err := checkHeader(token); err != nil {
		return txm.Principal{}, err
	}
	claims, err := idtoken.ParsePayload(token) // not verified yet: only to say why a token is refused
	if err != nil {
		return txm.Principal{}, refuse("oidc: malformed token payload")
	}
	if claims.Audience != a.audience {
		return txm.Principal{}, refuse("oidc: token for another audience %q", clip(claims.Audience))
	}
	if time.Now().Unix() > claims.Expires {
		return txm.Principal{}, refuse("oidc: token expired at %s", time.Unix(claims.Expires, 0).UTC().Format(time.RFC3339))
	}
	v, err := a.getValidator(ctx)
	if err != nil {
		return txm.Principal{}, err
	}
	p, err := v.Validate(ctx, token, a.audience)
	if err != nil {
		return txm.Principal{}, classify(ctx, err)
	}
	if !isGoogleIssuer(p.Issuer) {
		return txm.Principal{}, refuse("oidc: issuer %q is not Google", clip(p.Issuer))
	}
	email, _ := p.Claims["email"].(string)
	if email == "" {
		return txm.Principal{}, refuse("oidc: token carries no email (mint it with format=full or --include-email)")
	}
	if !emailVerified(p.Claims["email_verified"]) {
		return txm.Principal{}, refuse("oidc: email %q is not verified", clip(email))
	}
	return txm.Principal{ID: email, Via: ViaOIDC}, nil
}

// checkHeader refuses anything but a three-part JWT whose header names
// RS256 and a key id.
func checkHeader(token string) error {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return refuse("oidc: not a JWT")
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return refuse("oidc: malformed token header")
	}
	var h struct {
		Alg string `json:"alg"`
		Kid string `json:"kid"`
	}
	if err := json.Unmarshal(raw, &h); err != nil {
		return refuse("oidc: malformed token header")
	}
	if h.Alg != "RS256" {
		return refuse("oidc: token signed with %q, not RS256", clip(h.Alg))
	}
	if h.Kid == "" {
		return refuse("oidc: token names no signing key")
	}
	return nil
}

// classify sorts idtoken's errors: Google's keys that could not be fetched
// or read are txm.ErrUnavailable; everything else (a bad signature, a key
// Google does not publish) refuses the token.
func classify(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("oidc: validate: %w", ctx.Err())
	}
	var urlErr *url.Error
	var syntaxErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	var b64Err base64.CorruptInputError
	switch {
	case errors.Is(err, rsa.ErrVerification):
		return refuse("oidc: bad signature")
	case errors.As(err, &urlErr), errors.As(err, &syntaxErr), errors.As(err, &typeErr), errors.As(err, &b64Err),
		strings.Contains(err.Error(), "unable to retrieve cert"):
		return fmt.Errorf("%w: oidc: fetch Google's signing keys: %w", txm.ErrUnavailable, err)
	case strings.Contains(err.Error(), "could not find matching cert"):
		return refuse("oidc: signed with a key Google does not publish")
	}
	// idtoken's own refusals ("idtoken: ...") name no part of the token.
	return refuse("oidc: %v", err)
}

func isGoogleIssuer(iss string) bool {
	for _, g := range GoogleIssuers {
		if iss == g {
			return true
		}
	}
	return false
}

// emailVerified accepts the claim as JSON true (or the string "true" that
// some Google tokens carry).
func emailVerified(v any) bool {
	switch v := v.(type) {
	case bool:
		return v
	case string:
		return v == "true"
	}
	return false
}

// clip bounds a claim quoted in a reason (claims are the caller's to
// choose).
func clip(s string) string {
	const n = 100
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
