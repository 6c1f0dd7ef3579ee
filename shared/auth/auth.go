// Package auth authenticates callers: it turns the credential of a call (the
// bearer token of its Authorization header) into a txm.Principal, or
// refuses it with txm.ErrUnauthenticated.
//
// Three methods, each enabled by configuration (config.Auth.Methods):
//
//   - oidc: Google-signed ID tokens (callers are services with service
//     accounts), validated with google.golang.org/api/idtoken for the
//     configured audience; the principal is the token's verified email.
//   - apikey: keys "txfk_<id>_<secret>" made by the admin command, for
//     callers outside Google Cloud; only a hash of each key is stored.
//   - dev: a call with no credential is the principal "dev" (development
//     only; the configuration refuses it on Cloud Run).
//
// Nothing here logs: a refusal's error says why, for the caller to log, and
// never carries the token or the key. The caller answers every refusal with
// 401 and nothing more.
package auth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/txm"
)

// How a principal was authenticated (txm.Principal.Via).
const (
	ViaOIDC   = "oidc"
	ViaAPIKey = "apikey"
	ViaDev    = "dev"
)

// DevPrincipal is the principal of every call without a credential in
// development mode.
const DevPrincipal = "dev"

// Option configures New and NewOIDC.
type Option func(*options)

type options struct {
	httpClient *http.Client
}

// WithHTTPClient makes the OIDC validator fetch Google's signing keys with
// c (tests serve them from a fake; production uses a client with a
// timeout).
func WithHTTPClient(c *http.Client) Option {
	return func(o *options) { o.httpClient = c }
}

func collect(opts []Option) options {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}

// chain dispatches a credential to the method that reads it.
type chain struct {
	dev    bool
	apiKey txm.Authenticator // nil when not enabled
	oidc   txm.Authenticator // nil when not enabled
}

// New builds the authenticator cfg asks for: no credential is the dev
// principal if dev is enabled, a bearer token starting with "txfk_" is an
// API key (looked up in keys), any other bearer token an OIDC ID token for
// cfg.Audience. A credential whose method is not enabled is refused. keys
// may be nil unless apikey is enabled. New logs nothing: the caller should
// say loudly at start-up when dev is enabled (cfg.Has("dev")).
func New(cfg config.Auth, keys txm.APIKeyStore, opts ...Option) (txm.Authenticator, error) {
	if len(cfg.Methods) == 0 {
		return nil, errors.New("new authenticator: no authentication method is configured")
	}
	c := &chain{}
	for _, m := range cfg.Methods {
		switch m {
		case ViaDev:
			c.dev = true
		case ViaAPIKey:
			a, err := NewAPIKeys(keys)
			if err != nil {
				return nil, fmt.Errorf("new authenticator: %w", err)
			}
			c.apiKey = a
		case ViaOIDC:
			a, err := NewOIDC(cfg.Audience, opts...)
			if err != nil {
				return nil, fmt.Errorf("new authenticator: %w", err)
			}
			c.oidc = a
		default:
			return nil, fmt.Errorf("new authenticator: unknown method %q (oidc, apikey, dev)", m)
		}
	}
	return c, nil
}

// Authenticate implements txm.Authenticator.
func (c *chain) Authenticate(ctx context.Context, cred txm.Credential) (txm.Principal, error) {
	switch {
	case cred.Bearer == "":
		if c.dev {
			return txm.Principal{ID: DevPrincipal, Via: ViaDev}, nil
		}
		return txm.Principal{}, refuse("no credential")
	case len(cred.Bearer) > MaxTokenLen:
		return txm.Principal{}, refuse("bearer token is longer than %d bytes", MaxTokenLen)
	case strings.HasPrefix(cred.Bearer, APIKeyPrefix):
		if c.apiKey == nil {
			return txm.Principal{}, refuse("apikey: API keys are not enabled")
		}
		return c.apiKey.Authenticate(ctx, cred)
	default:
		if c.oidc == nil {
			return txm.Principal{}, refuse("oidc: ID tokens are not enabled")
		}
		return c.oidc.Authenticate(ctx, cred)
	}
}
