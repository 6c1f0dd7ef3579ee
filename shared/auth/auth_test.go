package auth_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/auth"
	"github.com/txfence/txfence/shared/auth/authtest"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/txm"
)

func TestIssue11_AuthDevOnlyWhenEnabled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	iss := authtest.NewIssuer(t)
	opt := auth.WithHTTPClient(iss.Client())

	dev, err := auth.New(config.Auth{Methods: []string{"dev"}}, nil)
	require.NoError(t, err)
	p, err := dev.Authenticate(ctx, txm.Credential{})
	require.NoError(t, err)
	assert.Equal(t, txm.Principal{ID: "dev", Via: "dev"}, p)
	// Development mode does not turn credentials into anything.
	_, err = dev.Authenticate(ctx, txm.Credential{Bearer: iss.Token(audience, caller)})
	require.ErrorIs(t, err, txm.ErrUnauthenticated)

	prod, err := auth.New(config.Auth{Methods: []string{"oidc"}, Audience: audience}, nil, opt)
	require.NoError(t, err)
	_, err = prod.Authenticate(ctx, txm.Credential{})
	require.ErrorIs(t, err, txm.ErrUnauthenticated, "no credential without dev is 401")

	both, err := auth.New(config.Auth{Methods: []string{"oidc", "dev"}, Audience: audience}, nil, opt)
	require.NoError(t, err)
	p, err = both.Authenticate(ctx, txm.Credential{})
	require.NoError(t, err)
	assert.Equal(t, "dev", p.ID)
	p, err = both.Authenticate(ctx, txm.Credential{Bearer: iss.Token(audience, caller)})
	require.NoError(t, err)
	assert.Equal(t, txm.Principal{ID: caller, Via: "oidc"}, p, "a credential is still checked in dev mode")
	_, err = both.Authenticate(ctx, txm.Credential{Bearer: iss.Token("https://other.example", caller)})
	require.ErrorIs(t, err, txm.ErrUnauthenticated, "a bad credential is not downgraded to dev")
}

func TestIssue11_AuthChainDispatchesByCredential(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newKeyFixture(t, "apikey")
	iss := authtest.NewIssuer(t)
	a, err := auth.New(config.Auth{Methods: []string{"oidc", "apikey"}, Audience: audience}, f.store, auth.WithHTTPClient(iss.Client()))
	require.NoError(t, err)
	before := snapshot(t, f.db)

	p, err := a.Authenticate(ctx, txm.Credential{Bearer: f.valid})
	require.NoError(t, err)
	assert.Equal(t, txm.Principal{ID: "partner@example.com", Via: "apikey"}, p)
	p, err = a.Authenticate(ctx, txm.Credential{Bearer: iss.Token(audience, caller)})
	require.NoError(t, err)
	assert.Equal(t, txm.Principal{ID: caller, Via: "oidc"}, p)

	for _, bad := range []string{"", f.revoked, f.new, iss.Token("https://other.example", caller), "txfk_", "x"} {
		_, err := a.Authenticate(ctx, txm.Credential{Bearer: bad})
		require.ErrorIs(t, err, txm.ErrUnauthenticated)
		if bad != "" {
			assert.NotContains(t, err.Error(), bad)
		}
	}
	long := make([]byte, auth.MaxTokenLen+1)
	for i := range long {
		long[i] = 'a'
	}
	_, err = a.Authenticate(ctx, txm.Credential{Bearer: string(long)})
	require.ErrorIs(t, err, txm.ErrUnauthenticated)
	assert.Equal(t, before, snapshot(t, f.db), "authentication writes nothing")
}

func TestNewRefusesAnIncompleteConfiguration(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  config.Auth
	}{
		{"no method", config.Auth{}},
		{"oidc without audience", config.Auth{Methods: []string{"oidc"}}},
		{"apikey without store", config.Auth{Methods: []string{"apikey"}}},
		{"unknown method", config.Auth{Methods: []string{"basic"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := auth.New(tc.cfg, nil)
			require.Error(t, err)
		})
	}
}
