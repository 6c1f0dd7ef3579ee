package client

import (
	"context"
	"fmt"

	"golang.org/x/oauth2"
	"google.golang.org/api/idtoken"
)

// IDTokenSource is a TokenSource of Google ID tokens for audience (the
// deployment's TXFENCE_OIDC_AUDIENCE) from the application default
// credentials or opts; a token is reused until shortly before it expires,
// then minted again.
func IDTokenSource(ctx context.Context, audience string, opts ...idtoken.ClientOption) (TokenSource, error) {
	ts, err := idtoken.NewTokenSource(ctx, audience, opts...)
	if err != nil {
		return nil, fmt.Errorf("txfence: id token source for %s: %w", audience, err)
	}
	return OAuth2TokenSource(ts), nil
}

// OAuth2TokenSource sends ts's access tokens (an ID token source's ID
// tokens) as bearer tokens.
func OAuth2TokenSource(ts oauth2.TokenSource) TokenSource { return oauth2Tokens{ts} }

type oauth2Tokens struct{ ts oauth2.TokenSource }

func (o oauth2Tokens) Token(context.Context) (string, error) {
	t, err := o.ts.Token()
	if err != nil {
		return "", err
	}
	return t.AccessToken, nil
}
